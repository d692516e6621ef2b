# Written by amc-eval; run `gnuplot <this file>` in this directory to redraw.
png_terminal = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'
if (!exists("output_suffix")) output_suffix = ''
set encoding utf8
set grid
set key outside right top

# Median teacher-forced perplexity change (bars: min to max over prefixes)
eval 'set terminal ' . png_terminal . ' size 900,560 noenhanced'
set output "ppl_change.png" . output_suffix
set logscale x 2
set xlabel 'support size (positions)'
set xtics (97, 193, 385, 769)
set ylabel 'PPL change (%), teacher-forced on the dense continuation'
set title 'Perplexity change vs support'
plot "ppl_change.dat" index 0 using 1:2:3:4 with yerrorlines title "context 3968"
unset multiplot
set output
set terminal svg size 900,560 noenhanced
set output "ppl_change.svg" . output_suffix
set logscale x 2
set xlabel 'support size (positions)'
set xtics (97, 193, 385, 769)
set ylabel 'PPL change (%), teacher-forced on the dense continuation'
set title 'Perplexity change vs support'
plot "ppl_change.dat" index 0 using 1:2:3:4 with yerrorlines title "context 3968"
unset multiplot
set output

# Median first divergence step
eval 'set terminal ' . png_terminal . ' size 900,560 noenhanced'
set output "first_divergence.png" . output_suffix
set logscale x 2
set xlabel 'support size (positions)'
set xtics (97, 193, 385, 769)
set ylabel 'first divergence (step)'
set title 'First divergence vs support'
plot "first_divergence.dat" index 0 using 1:2 with linespoints title "context 3968"
unset multiplot
set output
set terminal svg size 900,560 noenhanced
set output "first_divergence.svg" . output_suffix
set logscale x 2
set xlabel 'support size (positions)'
set xtics (97, 193, 385, 769)
set ylabel 'first divergence (step)'
set title 'First divergence vs support'
plot "first_divergence.dat" index 0 using 1:2 with linespoints title "context 3968"
unset multiplot
set output

# Retained mass per layer
set key outside right top
eval 'set terminal ' . png_terminal . ' size 900,560 noenhanced'
set output "retained_mass_by_layer.png" . output_suffix
set multiplot layout 1,1 title 'Retained mass per layer (mean over runs, heads and steps)'
unset logscale x
set xtics 1
set xlabel 'layer'
set ylabel 'retained mass'
set key inside bottom right
set title 'context 3968'
plot 'retained_mass_by_layer.dat' index 0 using 1:2 with linespoints title "support 97", \
     'retained_mass_by_layer.dat' index 1 using 1:2 with linespoints title "support 193", \
     'retained_mass_by_layer.dat' index 2 using 1:2 with linespoints title "support 385", \
     'retained_mass_by_layer.dat' index 3 using 1:2 with linespoints title "support 769"

unset multiplot
set output
set terminal svg size 900,560 noenhanced
set output "retained_mass_by_layer.svg" . output_suffix
set multiplot layout 1,1 title 'Retained mass per layer (mean over runs, heads and steps)'
unset logscale x
set xtics 1
set xlabel 'layer'
set ylabel 'retained mass'
set key inside bottom right
set title 'context 3968'
plot 'retained_mass_by_layer.dat' index 0 using 1:2 with linespoints title "support 97", \
     'retained_mass_by_layer.dat' index 1 using 1:2 with linespoints title "support 193", \
     'retained_mass_by_layer.dat' index 2 using 1:2 with linespoints title "support 385", \
     'retained_mass_by_layer.dat' index 3 using 1:2 with linespoints title "support 769"

unset multiplot
set output

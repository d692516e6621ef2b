# Written by amc-eval; run `gnuplot <this file>` in this directory to redraw.
png_terminal = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'
if (!exists("output_suffix")) output_suffix = ''
set encoding utf8
set grid
set key outside right top
eval 'set terminal ' . png_terminal . ' size 960,600 noenhanced'
set output "mass_vs_support.png" . output_suffix
set multiplot layout 1,2 title 'Retained mass vs support, per layer (mean over heads and decode steps)'
set logscale x 2
set xlabel 'support size (positions)'
set ylabel 'retained mass'
set key inside bottom right
set xtics (97, 193, 385, 769)
set title 'context 2048'
plot for [l=0:3] 'mass_vs_support.dat' index (0 + l) using 1:2 with linespoints title sprintf('layer %d', l)
set title 'context 3968'
plot for [l=0:3] 'mass_vs_support.dat' index (4 + l) using 1:2 with linespoints title sprintf('layer %d', l)

unset multiplot
set output
set terminal svg size 960,600 noenhanced
set output "mass_vs_support.svg" . output_suffix
set multiplot layout 1,2 title 'Retained mass vs support, per layer (mean over heads and decode steps)'
set logscale x 2
set xlabel 'support size (positions)'
set ylabel 'retained mass'
set key inside bottom right
set xtics (97, 193, 385, 769)
set title 'context 2048'
plot for [l=0:3] 'mass_vs_support.dat' index (0 + l) using 1:2 with linespoints title sprintf('layer %d', l)
set title 'context 3968'
plot for [l=0:3] 'mass_vs_support.dat' index (4 + l) using 1:2 with linespoints title sprintf('layer %d', l)

unset multiplot
set output

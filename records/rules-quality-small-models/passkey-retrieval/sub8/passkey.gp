# Passkey accuracy vs depth, a panel per context and a line per run, from
# passkey_plot.dat.
# Written by amc-eval; run `gnuplot <this file>` in this directory to redraw.
png_terminal = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'
if (!exists("output_suffix")) output_suffix = ''
set encoding utf8
set grid
set key outside right top
set xrange [0:1]
set yrange [-0.05:1.05]
set xlabel 'depth of the record'
set ylabel 'accuracy'
set key outside right top font ',8'
eval 'set terminal ' . png_terminal . ' size 1160,400 noenhanced font ",10"'
set output "passkey.png" . output_suffix
set multiplot layout 1,2 title 'Passkey retrieval: accuracy vs depth'
set title 'context 1024'
plot 'passkey_plot.dat' index 0 using 1:2 with linespoints dt 2 lw 3 lc rgb 'black' pt 6 title "dense", \
     'passkey_plot.dat' index 1 using 1:2 with linespoints lw 2 lc 1 pt 7 title "submean 193", \
     'passkey_plot.dat' index 2 using 1:2 with linespoints lw 2 lc 1 pt 5 title "submean 385", \
     'passkey_plot.dat' index 3 using 1:2 with linespoints lw 2 lc 2 pt 7 title "twostage 193", \
     'passkey_plot.dat' index 4 using 1:2 with linespoints lw 2 lc 2 pt 5 title "twostage 385"
set title 'context 4092'
plot 'passkey_plot.dat' index 5 using 1:2 with linespoints dt 2 lw 3 lc rgb 'black' pt 6 title "dense", \
     'passkey_plot.dat' index 6 using 1:2 with linespoints lw 2 lc 1 pt 7 title "submean 193", \
     'passkey_plot.dat' index 7 using 1:2 with linespoints lw 2 lc 1 pt 5 title "submean 385", \
     'passkey_plot.dat' index 8 using 1:2 with linespoints lw 2 lc 2 pt 7 title "twostage 193", \
     'passkey_plot.dat' index 9 using 1:2 with linespoints lw 2 lc 2 pt 5 title "twostage 385"

unset multiplot
set output
set terminal svg size 1160,400 noenhanced font ",10"
set output "passkey.svg" . output_suffix
set multiplot layout 1,2 title 'Passkey retrieval: accuracy vs depth'
set title 'context 1024'
plot 'passkey_plot.dat' index 0 using 1:2 with linespoints dt 2 lw 3 lc rgb 'black' pt 6 title "dense", \
     'passkey_plot.dat' index 1 using 1:2 with linespoints lw 2 lc 1 pt 7 title "submean 193", \
     'passkey_plot.dat' index 2 using 1:2 with linespoints lw 2 lc 1 pt 5 title "submean 385", \
     'passkey_plot.dat' index 3 using 1:2 with linespoints lw 2 lc 2 pt 7 title "twostage 193", \
     'passkey_plot.dat' index 4 using 1:2 with linespoints lw 2 lc 2 pt 5 title "twostage 385"
set title 'context 4092'
plot 'passkey_plot.dat' index 5 using 1:2 with linespoints dt 2 lw 3 lc rgb 'black' pt 6 title "dense", \
     'passkey_plot.dat' index 6 using 1:2 with linespoints lw 2 lc 1 pt 7 title "submean 193", \
     'passkey_plot.dat' index 7 using 1:2 with linespoints lw 2 lc 1 pt 5 title "submean 385", \
     'passkey_plot.dat' index 8 using 1:2 with linespoints lw 2 lc 2 pt 7 title "twostage 193", \
     'passkey_plot.dat' index 9 using 1:2 with linespoints lw 2 lc 2 pt 5 title "twostage 385"

unset multiplot
set output

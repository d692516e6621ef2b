# Hit rate vs block size per selector, one panel per (context, k), from
# retrieval_plot.dat.
# Written by amc-eval; run `gnuplot <this file>` in this directory to redraw.
png_terminal = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'
if (!exists("output_suffix")) output_suffix = ''
set encoding utf8
set grid
set key outside right top
set logscale x 2
set xrange [6.4:80]
set xtics (8, 16, 32, 64)
set yrange [0:1.05]
set xlabel 'block size B'
set ylabel 'hit rate'
set key inside bottom left font ',8'
eval 'set terminal ' . png_terminal . ' size 1180,660 noenhanced font ",10"'
set output "retrieval.png" . output_suffix
set multiplot layout 2,3 title 'Retrieval probe: needle in the support (mean over depths)'
set title 'context 2048, k = 2'
plot 'retrieval_plot.dat' index 0 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 1 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 2 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 3 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 2048, k = 8'
plot 'retrieval_plot.dat' index 4 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 5 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 6 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 7 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 2048, k = 20'
plot 'retrieval_plot.dat' index 8 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 9 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 10 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 11 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 8192, k = 2'
plot 'retrieval_plot.dat' index 12 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 13 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 14 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 15 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 8192, k = 8'
plot 'retrieval_plot.dat' index 16 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 17 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 18 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 19 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 8192, k = 20'
plot 'retrieval_plot.dat' index 20 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 21 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 22 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 23 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'

unset multiplot
set output
set terminal svg size 1180,660 noenhanced font ",10"
set output "retrieval.svg" . output_suffix
set multiplot layout 2,3 title 'Retrieval probe: needle in the support (mean over depths)'
set title 'context 2048, k = 2'
plot 'retrieval_plot.dat' index 0 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 1 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 2 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 3 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 2048, k = 8'
plot 'retrieval_plot.dat' index 4 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 5 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 6 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 7 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 2048, k = 20'
plot 'retrieval_plot.dat' index 8 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 9 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 10 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 11 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 8192, k = 2'
plot 'retrieval_plot.dat' index 12 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 13 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 14 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 15 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 8192, k = 8'
plot 'retrieval_plot.dat' index 16 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 17 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 18 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 19 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'
set title 'context 8192, k = 20'
plot 'retrieval_plot.dat' index 20 using 1:2 with linespoints lw 2 pt 7 title 'mean', \
     'retrieval_plot.dat' index 21 using 1:2 with linespoints lw 2 pt 5 title 'bound', \
     'retrieval_plot.dat' index 22 using 1:2 with linespoints lw 2 pt 9 title 'oracle', \
     'retrieval_plot.dat' index 23 using 1:2 with linespoints dt 2 lw 1 lc rgb 'gray40' pt 0 title 'chance'

unset multiplot
set output

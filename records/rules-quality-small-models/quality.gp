# gnuplot quality.gp: quality.png from quality.dat
set terminal pngcairo size 1100,420 font ",10"
set output "quality.png"
set multiplot layout 1,2
titles = "mean oracle bound twostage/mean,c=4 twostage/bound,c=4 twostage/submean,c=4 submean,S=4"
set logscale x 2
set xtics (97, 193, 385, 769)
set xlabel "support (positions)"
set key top right
set ylabel "largest perplexity change over 10 prefixes (%)"
set title "max PPL change (lower is better)"
plot for [i=0:6] "quality.dat" index i using 1:2 with linespoints title word(titles, i + 1)
set logscale y
set ylabel "median omitted mass (1 - retained)"
set title "median omitted mass (lower is better)"
plot for [i=0:6] "quality.dat" index i using 1:($3 > 0 ? $3 : 1e-5) with linespoints title word(titles, i + 1)
unset multiplot

# The training loss curve of data/qwen2-tiny (tools/train_tiny/train.py writes loss_curve.csv):
#   gnuplot -e "csv='data/qwen2-tiny/loss_curve.csv'; out='records/tiny-quality/loss_curve'" \
#           tools/train_tiny/loss_curve.gp
# writes out.png and out.svg. Train loss per step (thin), its exponential moving mean, and the
# validation loss on held-out files (points), in nats per byte.
set datafile separator ","
set key top right
set xlabel "step (4096 byte tokens each)"
set ylabel "loss (nats per byte)"
set grid
set yrange [0:*]
# An exponential moving mean of the train loss (weight 0.1 on each new step).
ema = NaN
smooth_loss(x) = (ema = (ema == ema ? 0.9 * ema + 0.1 * x : x))
set terminal pngcairo size 800,480
set output out.".png"
plot csv using 1:3 every ::1 with lines lw 1 lc rgb "#c0c0ff" title "train (per step)", \
     csv using 1:(smooth_loss($3)) every ::1 with lines lw 2 lc rgb "#2040c0" title "train (moving mean)", \
     csv using 1:($6 == $6 ? $6 : NaN) every ::1 with points pt 7 ps 1.2 lc rgb "#c03020" title "validation (held-out files)"
ema = NaN
set terminal svg size 800,480
set output out.".svg"
replot

# The training curves of data/qwen2-retrieval (train.py --export writes loss_curve.csv):
#   gnuplot -e "csv='data/qwen2-retrieval/loss_curve.csv'; out='records/retrieval-quality/curves'" \
#           tools/train_retrieval/curves.gp
# writes out.png and out.svg, two panels over the training steps:
# - losses in nats per byte: the train loss (exponential moving mean; its data change with the
#   curriculum's phases, so it is not comparable across them), the held-out loss of the probes,
#   and the copy loss (a random 100-byte string the second time, up to 1000 bytes after the
#   first; at 1000 bytes only once the context reaches 1024);
# - the passkey probe's accuracy (5 digits planted in held-out code at the training context, at
#   least 1024) and the largest attention logit of layers 0 and 1 (right axis), which is where
#   the first run diverged.
# Columns are found by name: rows without a probe leave those columns empty.
set datafile separator ","
set datafile columnheaders
set grid
set autoscale xfix
set key top right
set xlabel "step"
ema = NaN
smooth_loss(x) = (ema = (ema == ema ? 0.9 * ema + 0.1 * x : x))
probe(name) = column(name)  # an empty field reads as missing (NaN)

do for [format in "png svg"] {
  if (format eq "png") { set terminal pngcairo size 900,760 } else { set terminal svg size 900,760 }
  set output out.".".format
  ema = NaN
  set multiplot layout 2,1
  set ylabel "nats per byte"
  set yrange [0:*]
  unset y2tics
  unset y2label
  plot csv using "step":(smooth_loss(column("train_loss"))) with lines lw 2 lc rgb "#2040c0" title "train (moving mean)", \
       "" using "step":(probe("valid_loss")) with linespoints pt 7 ps 0.6 lc rgb "#c03020" title "held-out code", \
       "" using "step":(probe("copy_loss")) with linespoints pt 5 ps 0.6 lc rgb "#209040" title "copy, second occurrence"
  set ylabel "passkey accuracy"
  set yrange [0:1.05]
  set y2label "largest attention logit"
  set y2tics
  set y2range [0:*]
  set ytics nomirror
  plot csv using "step":(probe("passkey")) with linespoints pt 7 ps 0.6 lc rgb "#8030a0" title "passkey", \
       "" using "step":(probe("max_logit_0")) axes x1y2 with linespoints pt 6 ps 0.5 lc rgb "#c08000" title "max logit, layer 0", \
       "" using "step":(probe("max_logit_1")) axes x1y2 with linespoints pt 4 ps 0.5 lc rgb "#808080" title "max logit, layer 1"
  unset multiplot
}

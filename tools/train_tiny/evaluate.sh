#!/usr/bin/env bash
# Runs the evaluation harness on data/qwen2-tiny and writes what docs/results-tiny.md reports:
#
#   tools/train_tiny/evaluate.sh [OUT_DIR]      (default records/tiny-quality)
#
# - amc-eval sweep: contexts 1024 and 2048 (the training context), supports 97..769, 10
#   prefixes, 128 tokens, the study's selector (blocks of 16, 1 sink, window 64, mean, per head),
#   and the same with the channel-bound and oracle rules;
# - amc-eval mass: retained mass vs support per layer and head;
# - amc-eval retrieval: the synthetic needle probe (no model);
# - tools/train_tiny/analyze.py: sinks, concentration and copying of the model's attention;
# - the training loss curve (gnuplot).
# Documents: the corpus's held-out files (every 32nd standard-library file, as train.py splits
# them), so the prefixes are code the model never trained on. Needs build/release built
# (amc-eval), Debian's python3-torch and gnuplot.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-records/tiny-quality}
model=data/qwen2-tiny
eval=build/release/tools/eval/amc-eval
mkdir -p "$out"

# The held-out files, in the order train.py uses (sorted by path under /usr/lib/python3.11).
mapfile -t documents < <(/usr/bin/python3 tools/train_tiny/heldout_files.py)

common=(--model "$model" --text "${documents[@]}" --contexts 1024,2048
        --supports 97,193,385,769 --prefixes 10)
for rule in mean bound oracle; do
  rm -rf "$out/sweep-$rule"
  "$eval" sweep "${common[@]}" --tokens 128 --rule "$rule" --out "$out/sweep-$rule"
done
rm -rf "$out/mass"
"$eval" mass "${common[@]}" --tokens 32 --out "$out/mass"
rm -rf "$out/retrieval"
"$eval" retrieval --out "$out/retrieval"
/usr/bin/python3 tools/train_tiny/analyze.py --model "$model" --out "$out/attention.json" \
  > "$out/attention.md"
gnuplot -e "csv='$model/loss_curve.csv'; out='$out/loss_curve'" tools/train_tiny/loss_curve.gp
# What the repository keeps: runs.jsonl compressed (1 MB each as text), no gnuplot logs.
find "$out" -name runs.jsonl -exec gzip -9 -n -f {} \;
find "$out" -name 'gnuplot*.log' -delete
echo "evaluate.sh: results in $out"

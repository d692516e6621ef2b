#!/usr/bin/env bash
# Measures data/qwen2-retrieval with the repository's own probes and writes what its README and
# docs/results-retrieval.md report:
#
#   tools/train_retrieval/evaluate.sh [OUT_DIR]      (default records/retrieval-quality)
#
# - tools/train_tiny/analyze.py: copying (50 random 100-byte strings, the second time after
#   1000 bytes of code), held-out loss over every held-out byte, sinks and concentration;
# - amc-eval passkey: 5 digits planted at depths 0.1-0.85 of held-out code, 10 windows per
#   depth and context (50 trials per context) at 1024, 2048 and 4092 tokens (4092 + 4 answer
#   positions = the 4096 the model was trained at), dense and mean, bound, oracle and twostage
#   selection at supports 97, 193, 385;
# - amc-eval sweep: contexts 2048 and 3968 (3968 + 128 scored tokens = 4096 positions),
#   supports 97..769, 10 prefixes, 128 tokens, the study's selector (blocks of 16, 1 sink,
#   window 64, mean, per head), and the same with the channel-bound and oracle rules;
# - amc-eval mass: retained mass vs support per layer and head at the same contexts;
# - the training curves (gnuplot).
# Documents: the corpus's held-out files (every 32nd standard-library file, as
# tools/train_tiny/train.py splits them), code the model never trained on. Needs build/release
# built (amc-eval), Debian's python3-torch and gnuplot.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-records/retrieval-quality}
model=data/qwen2-retrieval
eval=build/release/tools/eval/amc-eval
mkdir -p "$out"

# The held-out files, in the order train.py uses (sorted by path under /usr/lib/python3.11).
mapfile -t documents < <(/usr/bin/python3 tools/train_tiny/heldout_files.py)

/usr/bin/python3 tools/train_tiny/analyze.py --model "$model" --out "$out/attention.json" \
  > "$out/attention.md"

rm -rf "$out/passkey"
"$eval" passkey --model "$model" --text "${documents[@]}" --contexts 1024,2048,4092 \
  --depths 0.1,0.3,0.5,0.7,0.85 --trials 10 --supports 97,193,385 \
  --rules mean,bound,oracle,twostage --out "$out/passkey"

common=(--model "$model" --text "${documents[@]}" --contexts 2048,3968
        --supports 97,193,385,769 --prefixes 10)
for rule in mean bound oracle; do
  rm -rf "$out/sweep-$rule"
  "$eval" sweep "${common[@]}" --tokens 128 --rule "$rule" --out "$out/sweep-$rule"
done
rm -rf "$out/mass"
"$eval" mass "${common[@]}" --tokens 32 --out "$out/mass"

gnuplot -e "csv='$model/loss_curve.csv'; out='$out/curves'" tools/train_retrieval/curves.gp
# What the repository keeps: runs.jsonl compressed (1 MB each as text), no gnuplot logs.
find "$out" -name runs.jsonl -exec gzip -9 -n -f {} \;
find "$out" -name 'gnuplot*.log' -delete
echo "evaluate.sh: results in $out"

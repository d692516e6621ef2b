#!/usr/bin/env bash
# A/B of issue 34 part 1 (the layer written once, decode attention through amc::LayerDecode):
# amc-bench-qwen2 of the build before it (e942a9f, BEFORE) and after it (AFTER), alternated
# three times in one run on the synthetic Qwen2-0.5B-shaped bf16 checkpoint, 2 threads,
# short context, prefill and 16K (no 64K/128K). Raw outputs beside this script.
#   records/layer-once-2026-12-05/run.sh BEFORE AFTER
set -euo pipefail
before=$1 after=$2
here=$(dirname "$0")
model=build/bench-qwen2-0.5b
for round in 1 2 3; do
  for side in before after; do
    bin=$before
    [[ $side == after ]] && bin=$after
    echo "== round $round $side ($(date -u +%H:%M:%S))"
    "$bin" --model "$model" --threads 2 --rounds 3 --skip-long
  done
done > "$here/raw.txt" 2>&1

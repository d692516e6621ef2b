#!/usr/bin/env bash
# The rule comparison of docs/rules.md on data/qwen2-retrieval at its training context
# (issue 16's second model): the sweeps, then the gap-closed tables.
#
#   records/rules-quality-small-models/sweeps_retrieval.sh [OUT_DIR]     (default records/rules-quality-small-models/sweeps-retrieval)
#
# Context 3968 (+ 128 scored tokens = the 4096 positions the model was trained at), supports
# 97..769, 10 prefixes of held-out code (every 32nd standard-library file, as the model's
# training split holds them out), the study's selector settings otherwise (blocks of 16, 1 sink,
# window 64). Per query head (sw-) and per GQA group (g-; the model's 4 query heads share one
# KV head). Needs build/release (amc-eval) and data/qwen2-retrieval.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-records/rules-quality-small-models/sweeps-retrieval}
eval=build/release/tools/eval/amc-eval
mkdir -p "$out"
mapfile -t documents < <(/usr/bin/python3 tools/train_tiny/heldout_files.py)
common=(--model data/qwen2-retrieval --text "${documents[@]}" --contexts 3968
        --supports 97,193,385,769 --prefixes 10 --tokens 128)

sweep() {  # NAME FLAGS...: one sweep into $out/NAME, skipped when its summary exists
  local name=$1
  shift
  [[ -f $out/$name/summary.csv ]] && return 0
  rm -rf "${out:?}/$name"
  "$eval" sweep "${common[@]}" "$@" --out "$out/$name"
}
for scope in head group; do
  p=$([[ $scope == head ]] && echo sw || echo g)
  sweep "$p-mean" --scope "$scope" --rule mean
  sweep "$p-oracle" --scope "$scope" --rule oracle
  sweep "$p-bound" --scope "$scope" --rule bound
  sweep "$p-two4" --scope "$scope" --rule twostage --shortlist 4
  sweep "$p-two4-bound" --scope "$scope" --rule twostage --shortlist 4 --shortlist-rule bound
  sweep "$p-sub8" --scope "$scope" --rule submean --sub-blocks 8
  sweep "$p-two4-sub8" --scope "$scope" --rule twostage --shortlist 4 \
    --shortlist-rule submean --sub-blocks 8
done
find "$out" -name runs.jsonl -exec gzip -9 -n -f {} \;
find "$out" -name 'gnuplot*.log' -delete
for p in sw g; do
  echo "## ${p}: gap closed to the oracle"
  python3 records/rules-quality-small-models/gap_closed.py "$out/$p-mean" "$out/$p-oracle" "$out/$p-bound" \
    "$out/$p-two4" "$out/$p-two4-bound" "$out/$p-sub8" "$out/$p-two4-sub8"
done > "$out/gap_closed.md"
echo "sweeps_retrieval.sh: tables in $out/gap_closed.md"

#!/usr/bin/env bash
# Every rule at both summary precisions (f32, the default, and bf16), one binary: the rules'
# sparse steps (BM_RuleSparseDecode, cold, one GQA group of 7 heads, head_dim 64, bf16 KV, blocks
# of 32, top-k 16, 4 sinks, window 64, one support per group), dense decode, the default sparse
# step, the touched-bytes floor, at 16384 and 131072, each size a process of its own; then the
# summaries' append cost and the certified bounds. Three rounds; nothing else running.
#   records/summary-precision-2026-12-07/run.sh   (after cmake --build --preset release)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/summary-precision-2026-12-07
bench=build/release/bench/amc-bench
git rev-parse HEAD >"$out/commit.txt"
lscpu >"$out/lscpu.txt"
rules='0|1|2|3|4|5|11|12|13|14|15'  # kComparedRules in bench/bench_decode.cpp
for round in 1 2 3; do
  for n in 16384 131072; do
    json=$out/rules-$n-$round.json
    [[ -f $json ]] && continue
    "$bench" --benchmark_filter="^(BM_RuleSparseDecode/$n/rule:($rules)/|BM_(DenseDecode|SparseDecode|StreamRead|SupportRead)/$n/)" \
      --benchmark_out="$json" --benchmark_out_format=json >/dev/null
  done
  json=$out/append-bounds-$round.json
  [[ -f $json ]] || "$bench" --benchmark_filter='^(BM_SummaryAppend|BM_CertifiedBounds)' \
    --benchmark_out="$json" --benchmark_out_format=json >/dev/null
done
python3 "$out/summarize.py" >"$out/summary.md"

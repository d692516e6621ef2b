#!/usr/bin/env bash
# The code at 580cc5f (score_rows_bf16_words with an AheadLines of its own per path, after
# ../final/ found the bound's scan 12% slower at 131072 with a8ff102) against words (5841b42).
# The same benchmarks as ../run.sh, and dense bf16 decode at 131072 with its stream read in the
# 131072 processes; two binaries alternated three times, each size a process of its own,
# nothing else running.
#   build/bench-restruct/amc-bench is build/release/bench/amc-bench at 580cc5f
#   records/rules-cost-ahead-2026-12-06/restructured/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."
out=records/rules-cost-ahead-2026-12-06/restructured
declare -A binary=([words]=build/bench-words256/amc-bench [final]=build/bench-restruct/amc-bench)
declare -A extra=([16384]='BM_DenseDecode/16384/' [131072]='BM_(SparseDecode|StreamRead|DenseDecode)/131072/')
sha256sum "${binary[@]}" >"$out/binaries.txt"
for round in 1 2 3; do
  for side in words final; do
    for n in 16384 131072; do
      json=$out/rules-$n-$side-$round.json
      [[ -f $json ]] && continue
      date -u +"%H:%M:%S $side $n $round" >>"$out/times.txt"
      "${binary[$side]}" \
        --benchmark_filter="^(BM_Rule(SparseDecode|Select)/$n/rule:(0|1|2|3|4|5)/|${extra[$n]})" \
        --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
date -u +"%H:%M:%S done" >>"$out/times.txt"
python3 records/rules-cost-ahead-2026-12-06/summarize.py restructured

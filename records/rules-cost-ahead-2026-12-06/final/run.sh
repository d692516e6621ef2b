#!/usr/bin/env bash
# The session's final code (a8ff102: the levers, attention's ask for the next range in an
# instantiation of its own (505641e) and the selectors' bf16 scans in a unit of their own)
# against words (5841b42, the last column of ../summary.md), after dense bf16 decode and
# twostage/bound's step were found to move by 4-10% and about 6% between these binaries (code
# placement: records/dense-2026-12-06/). The same benchmarks as ../run.sh, two binaries
# alternated three times, each size a process of its own, nothing else running.
#   build/bench-scans/amc-bench is build/release/bench/amc-bench at a8ff102
#   records/rules-cost-ahead-2026-12-06/final/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."
out=records/rules-cost-ahead-2026-12-06/final
declare -A binary=([words]=build/bench-words256/amc-bench [final]=build/bench-scans/amc-bench)
declare -A extra=([16384]='BM_DenseDecode/16384/' [131072]='BM_(SparseDecode|StreamRead)/131072/')
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
python3 records/rules-cost-ahead-2026-12-06/summarize.py final

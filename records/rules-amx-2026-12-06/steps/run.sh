#!/usr/bin/env bash
# The whole step with the amx table (../amx-table.patch on c15b787) against the avx512 table, in
# one binary: AMC_KERNELS picks the table. BM_RuleSparseDecode (cold, one GQA group of 7 heads,
# bf16 KV, blocks of 32, k 16) for mean, bound, twostage/bound and the oracle at 16384 and
# 131072, the two tables alternated three times, each size a process of its own, nothing else
# running.
#   build/bench-amx/amc-bench is build/release/bench/amc-bench with ../amx-table.patch applied
#   records/rules-amx-2026-12-06/steps/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."
out=records/rules-amx-2026-12-06/steps
binary=build/bench-amx/amc-bench
sha256sum "$binary" >"$out/binary.txt"
for round in 1 2 3; do
  for table in avx512 amx; do
    for n in 16384 131072; do
      json=$out/rules-$n-$table-$round.json
      [[ -f $json ]] && continue
      date -u +"%H:%M:%S $table $n $round" >>"$out/times.txt"
      AMC_KERNELS=$table "$binary" \
        --benchmark_filter="^BM_RuleSparseDecode/$n/rule:(0|1|3|5)/" \
        --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
date -u +"%H:%M:%S done" >>"$out/times.txt"

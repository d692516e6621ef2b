#!/usr/bin/env bash
# A/B of commit 355ecff: amc-bench built from 548ce55 (before: score_rows widened bf16 rows once
# per head) and from the commit that widens each group of 16 narrow rows to f32 once for all heads
# (after; src/kernels_simd.hpp), side by side in this folder's parent, alternated 3 times.
set -euo pipefail
cd "$(dirname "$0")"
for i in 1 2 3; do
  for side in before after; do
    binary=../amc-bench-after
    [[ $side == after ]] && binary=../amc-bench-widen
    "$binary" --benchmark_filter='BM_Rule(SparseDecode|Select)/(16384|131072)/rule:(0|1|3|9|10)/' \
      --benchmark_out=$side-$i.json --benchmark_out_format=json >/dev/null
  done
done

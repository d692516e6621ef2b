#!/usr/bin/env bash
# selectors.md's cost table: every compared rule's sparse step and selection, dense decode and the
# stream bandwidth at 16384 and 131072 positions, 3 repetitions, in one run of amc-bench (bf16
# KV, one GQA group of 7 heads, blocks of 32, k 16, cold).
#   records/rules-cost-2026-12-04/run.sh [AMC_BENCH]   (default build/release/bench/amc-bench)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=${1:-$here/../../../build/release/bench/amc-bench}
"$bench" --benchmark_filter='^(BM_Rule(SparseDecode|Select)/(16384|131072)/|BM_(DenseDecode|StreamRead)/(16384|131072)/)' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="$here/cost.json" --benchmark_out_format=json

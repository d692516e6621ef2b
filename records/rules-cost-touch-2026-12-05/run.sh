#!/usr/bin/env bash
# Reading ahead in the two-stage rule's second stage, A/B/C: the build without it (0e3b6c2),
# plain loads of the next shortlisted block's key lines before scoring each block ("touch"), and
# the same lines asked for with prefetcht0 instead ("prefetch"). The three alternated twice,
# each a process of its own, 3 repetitions; mean pooling beside them for the ratio. bf16 KV, one
# GQA group of 7 heads, blocks of 32, k 16, cold; the background sweeps stopped (SIGSTOP).
#   records/rules-cost-touch-2026-12-05/run.sh BEFORE TOUCH PREFETCH   (amc-bench binaries)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
declare -A bench=([before]=$1 [touch]=$2 [prefetch]=$3)
filter='^BM_Rule(SparseDecode|Select)/(16384|131072)/rule:(0|2|3|9)/'
for round in 1 2; do
  for build in before touch prefetch; do
    "${bench[$build]}" --benchmark_filter="$filter" --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true \
      --benchmark_out="$here/$build-$round.json" --benchmark_out_format=json >/dev/null 2>&1
    echo "$build $round done $(date -u +%H:%M:%S)"
  done
done

#!/usr/bin/env bash
# The sub-block means' pooling loop without its per-sub-block size and log (complete blocks:
# max of the sub-block scores plus one log), A/B: the build before (0328649) against the build
# after, alternated twice, each a process of its own, 3 repetitions; mean pooling beside them
# for the ratio. bf16 KV, one GQA group of 7 heads, blocks of 32, k 16, cold; the background
# sweeps stopped (SIGSTOP) for the run.
#   records/rules-cost-submean-2026-12-05/run.sh BEFORE_AMC_BENCH AFTER_AMC_BENCH
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2
filter='^BM_RuleSparseDecode/(16384|131072)/rule:(0|4|6|7)/'
for round in 1 2; do
  for build in before after; do
    bench=$before
    [[ $build == after ]] && bench=$after
    "$bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true \
      --benchmark_out="$here/$build-$round.json" --benchmark_out_format=json >/dev/null 2>&1
    echo "$build $round done $(date -u +%H:%M:%S)"
  done
done

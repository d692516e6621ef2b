#!/usr/bin/env bash
# Issue 32's cost A/B of 2026-12-05: the block log-mass in one kernel call (commit 0328649)
# against the build before it (c022c75: the same selection code as e5ef92c). Every compared
# rule's sparse step and selection at 16384 and 131072 positions (bf16 KV, one GQA group of 7
# heads, blocks of 32, k 16, cold), 3 repetitions, the two builds alternated twice, each in a
# process of its own; the background sweeps stopped (SIGSTOP) for the run.
#   records/rules-cost-2026-12-05/run.sh BEFORE_AMC_BENCH AFTER_AMC_BENCH
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2
filter='^BM_Rule(SparseDecode|Select)/(16384|131072)/rule:(0|1|2|3|5|9|10)/'
for round in 1 2; do
  for build in before after; do
    bench=$before
    [[ $build == after ]] && bench=$after
    "$bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true \
      --benchmark_out="$here/$build-$round.json" --benchmark_out_format=json >/dev/null
    echo "$build $round done $(date -u +%H:%M:%S)"
  done
done

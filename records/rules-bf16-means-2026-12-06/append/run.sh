#!/usr/bin/env bash
# What keeping the bf16 copy of the means costs an append: BM_SummaryAppend (bf16 keys, block 32;
# summaries:0 means only, 1 with channel bounds and value norms, 2 with four sub-block means) in
# the two binaries of ../run.sh and in bf16means-review (1e69d9f's review: the row rounded in a
# loop of its own, which vectorises), alternated three times, nothing else running.
#   records/rules-bf16-means-2026-12-06/append/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
out=records/rules-bf16-means-2026-12-06/append
for round in 1 2 3; do
  for side in f32means bf16means bf16means-review; do
    echo "round $round $side ($(date -u +%H:%M:%S) UTC)"
    build/bench-$side/amc-bench --benchmark_filter='^BM_SummaryAppend/' \
      --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
  done
done 2>&1 | grep -E '^round|_median' | tee "$out/output.txt"

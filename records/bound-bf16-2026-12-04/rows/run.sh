#!/usr/bin/env bash
# A/B of commit 548ce55: amc-bench built from 325532a (before: the bound read the f32 channel
# minima and maxima, one pass per head) and from 548ce55 (after: the intervals rounded outward to
# bf16, one pass for the group), on PATH, alternated 3 times: BM_SummaryAppend, and
# BM_RuleSparseDecode at 16384 and 131072 for mean, bound and twostage/bound (and, after only,
# twostage/bound@2 and twostage/mean@2, shortlist 2).
set -euo pipefail
cd "$(dirname "$0")"
for i in 1 2 3; do
  amc-bench-before --benchmark_filter=BM_SummaryAppend --benchmark_out=append-before-$i.json \
    --benchmark_out_format=json >/dev/null
  amc-bench-after --benchmark_filter=BM_SummaryAppend --benchmark_out=append-after-$i.json \
    --benchmark_out_format=json >/dev/null
  amc-bench-before --benchmark_filter='BM_RuleSparseDecode/(16384|131072)/rule:(0|1|3)/' \
    --benchmark_out=before-$i.json --benchmark_out_format=json >/dev/null
  amc-bench-after --benchmark_filter='BM_RuleSparseDecode/(16384|131072)/rule:(0|1|3|9|10)/' \
    --benchmark_out=after-$i.json --benchmark_out_format=json >/dev/null
done

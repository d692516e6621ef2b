#!/usr/bin/env bash
# Issue 32: two levers of the two-stage rules' selection at 128K, each alone, in one run
# (2026-12-06): three binaries alternated three times, each size a process of its own,
# nothing else running:
#   base    amc-bench of 2d6fa9c;
#   listed  amc-bench of 6d8ca1b: a combined row scored at a few blocks is exponentiated
#           there only (KernelTable::list_above, exp_sum_listed), from 1024 candidate blocks on;
#   topk    amc-bench of 9dd0c54: listed, and select_top_k over 1024 or more candidates ranks
#           only those above a lower bound on the k-th score.
# Rules: the whole sparse step and selection of mean (0), bound (1), twostage/mean (2),
# twostage/bound (3), submean (4), oracle (5) at 16384 and 131072, cold, one GQA group
# (BM_RuleSparseDecode, BM_RuleSelect); 131072 alone in its process
# (../cost-words-2026-12-06/). Each step is skipped when its output exists; summarize.py
# writes summary.md.
#
#   build/bench-listed-before/amc-bench  (2d6fa9c; ../rules-cost-listed-2026-12-06/run.sh says how)
#   build/bench-topk-gated/amc-bench     (6d8ca1b, built the same way)
#   build/bench-topk-after/amc-bench     (9dd0c54: build/release/bench/amc-bench)
#   records/rules-cost-topk-2026-12-06/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
out=records/rules-cost-topk-2026-12-06
declare -A binary=([base]=build/bench-listed-before/amc-bench
                   [listed]=build/bench-topk-gated/amc-bench
                   [topk]=build/bench-topk-after/amc-bench)
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
sha256sum "${binary[@]}" >"$out/binaries.txt"
lscpu >"$out/lscpu.txt"
for round in 1 2 3; do
  for side in base listed topk; do
    for n in 16384 131072; do
      json=$out/rules-$n-$side-$round.json
      [[ -f $json ]] && continue
      "${binary[$side]}" --benchmark_filter="^BM_Rule(SparseDecode|Select)/$n/rule:(0|1|2|3|4|5)/" \
        --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
python3 "$out/summarize.py"

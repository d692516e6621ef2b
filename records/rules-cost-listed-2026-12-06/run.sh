#!/usr/bin/env bash
# Issue 32: the per-group combination exponentiates a row scored at a few blocks (a two-stage
# rule's rescored shortlist, -inf elsewhere) at those blocks only (KernelTable::list_above and
# exp_sum_listed, the same bits), 2026-12-06.
# Two binaries alternated three times, each size a process of its own, nothing else running:
#   before  amc-bench of 2d6fa9c (every row exponentiated at every candidate block);
#   after   amc-bench of this change.
# Rules: the whole sparse step and selection of mean (0), bound (1), twostage/mean (2),
# twostage/bound (3), submean (4), oracle (5) at 16384 and 131072, cold, one GQA group
# (BM_RuleSparseDecode, BM_RuleSelect). 131072 runs alone in its process: the first benchmark
# after the 16384 ring and its summaries are freed was slow in either binary
# (../rules-cost-words-2026-12-06/). Each step is skipped when its output exists; summarize.py writes
# summary.md.
#
#   git worktree add --detach /tmp/wt-before 2d6fa9c && cmake -S /tmp/wt-before -B /tmp/wt-before/BUILD \
#     -DCMAKE_BUILD_TYPE=Release -DAMC_BUILD_TESTS=OFF -DAMC_BUILD_EXAMPLES=OFF \
#     -DAMC_BUILD_TOOLS=OFF -DAMC_BUILD_PYTHON=OFF && cmake --build /tmp/wt-before/BUILD --target amc-bench
#   mkdir -p build/bench-listed-before build/bench-listed-after
#   cp /tmp/wt-before/BUILD/bench/amc-bench build/bench-listed-before/
#   cp build/release/bench/amc-bench build/bench-listed-after/
#   records/rules-cost-listed-2026-12-06/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/rules-cost-listed-2026-12-06
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
sha256sum build/bench-listed-before/amc-bench build/bench-listed-after/amc-bench >"$out/binaries.txt"
lscpu >"$out/lscpu.txt"
for round in 1 2 3; do
  for side in before after; do
    for n in 16384 131072; do
      json=$out/rules-$n-$side-$round.json
      [[ -f $json ]] && continue
      "build/bench-listed-$side/amc-bench" \
        --benchmark_filter="^BM_Rule(SparseDecode|Select)/$n/rule:(0|1|2|3|4|5)/" \
        --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
python3 "$out/summarize.py"

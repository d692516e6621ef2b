#!/usr/bin/env bash
# Per-head selection cold (the study's scope; issue 32's targets are per group): the compared
# rules 0-5 (mean, bound, twostage/mean, twostage/bound, submean, oracle) with one selection
# and support per query head of the GQA group, whole step and selection, at 16384 and 131072,
# each size a process of its own, three rounds; the per-group step of the same rules in the
# same processes for comparison. amc-bench of e43833a (the benchmark added; the library as in
# 9dd0c54), copied to build/bench-per-head/. Run 2026-12-06 07:50-07:56 UTC. Writes summary.md
# (summarize.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
out=records/rules-cost-per-head-2026-12-06
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
sha256sum build/bench-per-head/amc-bench >"$out/binaries.txt"
for round in 1 2 3; do
  for n in 16384 131072; do
    json=$out/rules-$n-$round.json
    [[ -f $json ]] && continue
    build/bench-per-head/amc-bench \
      --benchmark_filter="^BM_Rule(SparseDecode|Select)(PerHead)?/$n/rule:(0|1|2|3|4|5)/" \
      --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
  done
done
python3 "$out/summarize.py"

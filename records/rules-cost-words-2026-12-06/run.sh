#!/usr/bin/env bash
# Issue 32: score_rows<bf16> by words (the two-stage rules' second stage, the oracle and the
# channel bound's rows scored as attend_bf16_words scores its keys), 2026-12-06.
# Two binaries alternated three times, each a process of its own, nothing else running:
#   before  amc-bench of 65d49aa (score_rows<bf16>: 16 rows widened into L1, scored row by
#           row and reduced by transposing sums);
#   words   amc-bench of this change.
# Rules: the whole sparse step and selection of mean (0), bound (1), twostage/mean (2),
# twostage/bound (3), submean (4), oracle (5) at 16384 and 131072, cold, one GQA group
# (BM_RuleSparseDecode, BM_RuleSelect). Dense: bf16 decode at 16384 and 65536 cold, the hot
# kernel and the stream read (attend_bf16_words now passes its scores' stride at run time, so
# its code changed too). Each step is skipped when its output exists; summarize.py writes
# summary.md.
#
#   git worktree add --detach /tmp/wt-before 65d49aa && cmake -S /tmp/wt-before -B /tmp/wt-before/BUILD \
#     -DCMAKE_BUILD_TYPE=Release -DAMC_BUILD_TESTS=OFF -DAMC_BUILD_EXAMPLES=OFF \
#     -DAMC_BUILD_TOOLS=OFF -DAMC_BUILD_PYTHON=OFF && cmake --build /tmp/wt-before/BUILD --target amc-bench
#   mkdir -p build/bench-words-before build/bench-words-after
#   cp /tmp/wt-before/BUILD/bench/amc-bench build/bench-words-before/
#   cp build/release/bench/amc-bench build/bench-words-after/
#   records/rules-cost-words-2026-12-06/run.sh [second]
# The runs of 2026-12-06: `run.sh` (03:56 UTC, this directory), `run.sh second`, then
# `SIZES=131072 PARTS=rules run.sh alone-131072` (04:22 UTC). The first build's run, without the
# short scans' prefetch, is in no-prefetch/ (its README.md).
# With an argument, the run goes into that subdirectory (summarize.py takes it as its argument).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/rules-cost-words-2026-12-06
summarize=("$out/summarize.py")
if [[ $# -gt 0 ]]; then
  mkdir -p "$out/$1"
  summarize+=("$1")
  out=$out/$1
fi
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
sha256sum build/bench-words-before/amc-bench build/bench-words-after/amc-bench >"$out/binaries.txt"
lscpu >"$out/lscpu.txt"
# SIZES and PARTS narrow a run (e.g. SIZES=131072 PARTS=rules: 131072 alone in each process,
# where it is not the first benchmark after the 16384 ring and summaries are freed).
rules="^BM_Rule(SparseDecode|Select)/(${SIZES:-16384|131072})/rule:(0|1|2|3|4|5)/"
dense='^BM_DenseDecode/(16384|65536)/|^BM_DenseDecodeHot/2048|^BM_StreamRead/65536/'
for round in 1 2 3; do
  for side in before after; do
    for part in ${PARTS:-rules dense}; do
      json=$out/$part-$side-$round.json
      [[ -f $json ]] && continue
      filter=$rules
      [[ $part == dense ]] && filter=$dense
      "build/bench-words-$side/amc-bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
        --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
python3 "${summarize[@]}"

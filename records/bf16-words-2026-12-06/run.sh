#!/usr/bin/env bash
# Issue 35 (part 4: bf16 dense decode attention cold within 1.5x of its roofline), 2026-12-06.
# Two binaries alternated three times, each a process of its own, nothing else running:
#   before  amc-bench of 978b9f0 (attend<bf16>: keys widened into L1 scratch, scored row by row
#           with transposing sums; the next chunk asked for during the value loop);
#   words   amc-bench of this change (attend_bf16_words: 16 keys transposed as 32-bit words in
#           registers and scored with rows in lanes; values widened two channels per word; the
#           next chunk asked for during the scoring).
# Operators: dense decode cold (bf16, f32, q8_0) at 65536 and 131072 with the stream read and
# FMA peak of the roofline, the hot kernels, the mean rule's sparse step (BM_SparseDecode).
# Rules: the whole sparse step and selection of mean (0), bound (1), twostage/mean (2),
# twostage/bound (3), submean (4) at 16384 and 131072, and dense at 16384 (the sparse steps
# attend their support with the same kernel). Each step is skipped when its output exists;
# summarize.py writes summary.md.
#
#   git worktree add --detach /tmp/wt-before 978b9f0 && cmake -S /tmp/wt-before -B /tmp/wt-before/BUILD \
#     -DCMAKE_BUILD_TYPE=Release -DAMC_BUILD_TESTS=OFF -DAMC_BUILD_EXAMPLES=OFF \
#     -DAMC_BUILD_TOOLS=OFF -DAMC_BUILD_PYTHON=OFF && cmake --build /tmp/wt-before/BUILD --target amc-bench
#   mkdir -p build/bench-bf16-before build/bench-bf16-words
#   cp /tmp/wt-before/BUILD/bench/amc-bench build/bench-bf16-before/
#   cp build/release/bench/amc-bench build/bench-bf16-words/
#   records/bf16-words-2026-12-06/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/bf16-words-2026-12-06
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
sha256sum build/bench-bf16-before/amc-bench build/bench-bf16-words/amc-bench >"$out/binaries.txt"
lscpu >"$out/lscpu.txt"
operators='^BM_(StreamRead|StreamRead_f32|DenseDecode|DenseDecode_f32|DenseDecodeQ8|SparseDecode)/(65536|131072)/|^BM_FmaPeak|^BM_DenseDecodeHot(_f32|Q8)?/'
rules='^BM_Rule(SparseDecode|Select)/(16384|131072)/rule:(0|1|2|3|4)/|^BM_DenseDecode/16384/'
for round in 1 2 3; do
  for side in before words; do
    for part in operators rules; do
      json=$out/$part-$side-$round.json
      [[ -f $json ]] && continue
      filter=$operators
      [[ $part == rules ]] && filter=$rules
      "build/bench-bf16-$side/amc-bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
        --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
python3 "$out/summarize.py"

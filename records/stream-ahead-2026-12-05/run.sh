#!/usr/bin/env bash
# Issues 35 (part 4) and 32 (part 1), 2026-12-05 (fifth session): long reads ask for what they
# read next a few lines at a time, towards L2, while they compute (BlockedOps::AheadLines):
# dense attention its next chunk during this chunk's value loop, instead of all of it at the
# top of each chunk; a selector's long scan of block summaries the group of rows 4 groups
# ahead while the heads score this one, instead of 256-row tiles read ahead with plain loads.
# Two rounds of (before, after), each a process of its own, on a machine with nothing else
# running: dense decode cold (bf16, f32, q8_0) at 65536 and 131072 with the stream read and FMA
# peak of the roofline, the hot kernels, and the rules' whole sparse steps and selections at
# 16384 and 131072. Each step is skipped when its output exists; summarize.py writes summary.md.
#
#   records/stream-ahead-2026-12-05/run.sh
#
# Binaries: build/bench-before-ahead/amc-bench is amc-bench built at d06138e (before the
# change); build/bench-ahead/amc-bench is build/release's amc-bench of this change.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
out=records/stream-ahead-2026-12-05
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
operators='^BM_(StreamRead|StreamRead_f32|DenseDecode|DenseDecode_f32|DenseDecodeQ8|SparseDecode)/(65536|131072)/|^BM_FmaPeak|^BM_DenseDecodeHot(_f32|Q8)?/'
# Rules (bench_decode.cpp's kComparedRules): 0 mean, 1 bound, 2 twostage/mean, 3 twostage/bound,
# 4 submean, 9 twostage/bound@2, 10 twostage/mean@2.
rules='^BM_Rule(SparseDecode|Select)/(16384|131072)/rule:(0|1|2|3|4|9|10)/'
for round in 1 2; do
  for side in before after; do
    bin=build/bench-before-ahead
    [[ $side == after ]] && bin=build/bench-ahead
    for part in operators rules; do
      json=$out/$part-$side-$round.json
      [[ -f $json ]] && continue
      filter=$operators
      [[ $part == rules ]] && filter=$rules
      "$bin/amc-bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
        --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
python3 "$out/summarize.py"

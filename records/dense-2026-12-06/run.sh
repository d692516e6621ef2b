#!/usr/bin/env bash
# Issue 35 (part 4: dense decode attention cold within 1.5x of its roofline), 2026-12-06, after
# the read-ahead levers of issue 32 (a record since deleted): they changed the
# code of the bf16 word kernel's unit (src/kernels_avx512_words.cpp: the short scans' RowsAhead,
# attend's AttendArgs::next_keys, which dense decode leaves empty) but not what dense decode
# asks for. A first run of base and ahead (first/, 10:21-10:26 UTC, this script with the two)
# found dense bf16 4-10% slower cold with ahead; split (505641e) gives the sparse ranges' ask an
# instantiation of its own. Three binaries alternated three times, each a process of its own,
# nothing else running:
#   base   amc-bench of a669c14 (build/bench-ahead-before, as in cost-ahead-2026-12-06);
#   ahead  amc-bench of 5841b42 (build/bench-words256);
#   split  amc-bench of 505641e (build/bench-split).
# Dense decode cold (bf16, f32, q8_0) at 65536 and 131072 with the stream read and FMA peak of
# the roofline, and the hot kernels. Each step is skipped when its output exists; summarize.py
# writes summary.md.
#   records/dense-2026-12-06/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/dense-2026-12-06
declare -A binary=([base]=build/bench-ahead-before/amc-bench [ahead]=build/bench-words256/amc-bench
                   [split]=build/bench-split/amc-bench)
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
sha256sum "${binary[@]}" >"$out/binaries.txt"
lscpu >"$out/lscpu.txt"
filter='^BM_(StreamRead|StreamRead_f32|DenseDecode|DenseDecode_f32|DenseDecodeQ8)/(65536|131072)/|^BM_FmaPeak|^BM_DenseDecodeHot(_f32|Q8)?/'
for round in 1 2 3; do
  for side in base ahead split; do
    json=$out/operators-$side-$round.json
    [[ -f $json ]] && continue
    date -u +"%H:%M:%S $side $round" >>"$out/times.txt"
    "${binary[$side]}" --benchmark_filter="$filter" --benchmark_repetitions=3 \
      --benchmark_out="$json" --benchmark_out_format=json >/dev/null
  done
done
date -u +"%H:%M:%S done" >>"$out/times.txt"
python3 "$out/summarize.py"

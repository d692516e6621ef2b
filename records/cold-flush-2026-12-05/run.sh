#!/usr/bin/env bash
# Issues 32 (part 1) and 35 (part 4), 2026-12-05 (sixth session). Two changes measured in one
# run, three binaries alternated twice, each a process of its own, nothing else running:
#   noflush  a85cce8's amc-bench: cold sparse calls read the 64 MiB eviction buffer only, which
#            on this VM (480 MiB L3 reported) stays in L3 and leaves each copy's summaries and
#            support there too;
#   flush    2b1fd4d's amc-bench: they also flush their copy's lines from every cache level
#            (CLFLUSHOPT), so the call reads memory; dense attention asks for its next chunk
#            towards L2 (T2), as since 827c985;
#   l1       this change's amc-bench: the same flush; dense attention asks towards L1 (T0).
# Operators: dense decode cold (bf16, f32, q8_0) at 65536 and 131072 with the stream read and
# FMA peak of the roofline, the hot kernels, the mean rule's sparse step (BM_SparseDecode).
# Rules: each rule's whole sparse step and selection at 16384 and 131072 (bench_decode.cpp's
# kComparedRules: 0 mean, 1 bound, 2 twostage/mean, 3 twostage/bound, 4 submean,
# 9 twostage/bound@2, 10 twostage/mean@2) and dense at 16384. Each step is skipped when its
# output exists; summarize.py writes summary.md.
#
#   records/cold-flush-2026-12-05/run.sh
#
# Binaries: build/bench-before-flush/amc-bench (a85cce8's bench_decode.cpp against the same
# libamc), build/bench-flush/amc-bench (2b1fd4d), build/bench-l1/amc-bench (this change).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/cold-flush-2026-12-05
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
operators='^BM_(StreamRead|StreamRead_f32|DenseDecode|DenseDecode_f32|DenseDecodeQ8|SparseDecode)/(65536|131072)/|^BM_FmaPeak|^BM_DenseDecodeHot(_f32|Q8)?/'
rules='^BM_Rule(SparseDecode|Select)/(16384|131072)/rule:(0|1|2|3|4|9|10)/|^BM_DenseDecode/16384/'
for round in 1 2; do
  for side in noflush flush l1; do
    case $side in
      noflush) bin=build/bench-before-flush ;;
      flush) bin=build/bench-flush ;;
      l1) bin=build/bench-l1 ;;
    esac
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

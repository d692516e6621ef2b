#!/usr/bin/env bash
# A second run of run.sh's base and split, bf16 only (dense decode cold at 65536 and 131072, the
# stream read and FMA peak of its roofline, the hot kernel), three alternated rounds, each a
# process of its own, nothing else running. Writes second/ (summarize.py second).
#   records/dense-2026-12-06/second.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/dense-2026-12-06/second
mkdir -p "$out"
declare -A binary=([base]=build/bench-ahead-before/amc-bench [split]=build/bench-split/amc-bench)
sha256sum "${binary[@]}" >"$out/binaries.txt"
filter='^BM_(StreamRead|DenseDecode)/(65536|131072)/|^BM_FmaPeak|^BM_DenseDecodeHot/'
for round in 1 2 3; do
  for side in base split; do
    json=$out/operators-$side-$round.json
    [[ -f $json ]] && continue
    date -u +"%H:%M:%S $side $round" >>"$out/times.txt"
    "${binary[$side]}" --benchmark_filter="$filter" --benchmark_repetitions=3 \
      --benchmark_out="$json" --benchmark_out_format=json >/dev/null
  done
done
date -u +"%H:%M:%S done" >>"$out/times.txt"
python3 records/dense-2026-12-06/summarize.py second

#!/usr/bin/env bash
# The second run of cost-topk-2026-12-06: 131072 only, listed against topk, four alternated
# rounds (the first run's mean step differed by 4.6% between the two, in a lever that does
# not touch its attention). Writes second/ (summarize.py second).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
out=records/rules-cost-topk-2026-12-06/second
mkdir -p "$out"
declare -A binary=([listed]=build/bench-topk-gated/amc-bench [topk]=build/bench-topk-after/amc-bench)
sha256sum "${binary[@]}" >"$out/binaries.txt"
for round in 1 2 3 4; do
  for side in listed topk; do
    json=$out/rules-131072-$side-$round.json
    [[ -f $json ]] && continue
    "${binary[$side]}" --benchmark_filter="^BM_Rule(SparseDecode|Select)/131072/rule:(0|1|2|3)/" \
      --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
  done
done

#!/usr/bin/env bash
# The mean rule's whole sparse step against its touched-bytes bound at 131072 (issue 32: within
# 2x), base (2d6fa9c) against topk (9dd0c54), which changed the mean step's top-k at 131072:
# BM_SparseDecode/131072 (bf16 KV, the default config, cold) and BM_StreamRead/131072 in the
# same process, three alternated rounds. Writes touched/ (touched.py prints the ratios).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
out=records/rules-cost-topk-2026-12-06/touched
mkdir -p "$out"
declare -A binary=([base]=build/bench-listed-before/amc-bench [topk]=build/bench-topk-after/amc-bench)
sha256sum "${binary[@]}" >"$out/binaries.txt"
for round in 1 2 3; do
  for side in base topk; do
    json=$out/$side-$round.json
    [[ -f $json ]] && continue
    "${binary[$side]}" --benchmark_filter='^BM_(StreamRead|SparseDecode)/131072/' \
      --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
  done
done
python3 records/rules-cost-topk-2026-12-06/touched.py | tee "$out/summary.txt"

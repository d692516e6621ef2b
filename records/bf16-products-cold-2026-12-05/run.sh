#!/usr/bin/env bash
# Issue 35 part 4, 2026-12-05 (sixth session): dense decode attention over a bf16 cache, cold,
# in the exact f32 arithmetic (BM_DenseDecode) and in AttentionArithmetic::bf16_products
# (BM_DenseDecodeBf16Products: AVX512_BF16 dot products, the opt-in mode), at 65536 and 131072,
# with the stream read and FMA peak of the roofline and both hot kernels; two processes of the
# current amc-bench, nothing else running. summarize.py writes summary.md.
#
#   records/bf16-products-cold-2026-12-05/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/bf16-products-cold-2026-12-05
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
filter='^BM_(StreamRead|DenseDecode|DenseDecodeBf16Products)/(65536|131072)/|^BM_FmaPeak|^BM_DenseDecodeHot(Bf16Products)?/'
for round in 1 2; do
  json=$out/round-$round.json
  [[ -f $json ]] && continue
  build/release/bench/amc-bench --benchmark_filter="$filter" --benchmark_repetitions=3 \
    --benchmark_out="$json" --benchmark_out_format=json >/dev/null
done
python3 "$out/summarize.py"

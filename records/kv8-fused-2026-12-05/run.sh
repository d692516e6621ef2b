#!/usr/bin/env bash
# Issue 35's runs of 2026-12-05 (third session), one after the other on a machine with nothing
# else running: the fused q8_0 attention kernel (KernelTable::attend_q8_0) against the widening
# view it replaces and against bf16, in the operator benchmarks; the same in the reference
# transformer on SmolLM2-135M-Instruct Q4_1 at 8128 against llama.cpp; and the Qwen2-0.5B-shaped
# BF16 file at 16K against llama.cpp (the target not measured in the second session).
# Each step is skipped when its output exists.
#
#   records/kv8-fused-2026-12-05/run.sh
#
# Binaries: build/bench-before-fused/amc-bench is build/release's amc-bench at 75287cb (before
# the fused kernel); build/bench-fused holds build/release's binaries of this change.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/kv8-fused-2026-12-05
before=build/bench-before-fused
after=build/bench-fused
mkdir -p "$after"
[[ -x $after/amc-generate ]] || cp build/release/examples/transformer/amc-generate "$after/"
[[ -x $after/amc-bench ]] || cp build/release/bench/amc-bench "$after/"
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"

# 1. Operators, two rounds of (before, after): dense and sparse decode (mean rule, cold) over one
#    GQA group of the Qwen2-0.5B shape (7 query heads, head_dim 64) in bf16, f32 and q8_0; the
#    hot kernels; the stream read and the FMA peak, for the roofline (bench/report).
filter='^BM_(StreamRead|StreamRead_f32|DenseDecode|DenseDecode_f32|DenseDecodeQ8|SparseDecode|SparseDecodeQ8)/(16384|65536|131072)/|^BM_FmaPeak|^BM_DenseDecodeHot(_f32)?/'
for round in 1 2; do
  for side in before after; do
    bin=$before
    [[ $side == after ]] && bin=$after
    json=$out/operators-$side-$round.json
    [[ -f $json ]] && continue
    "$bin/amc-bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
      --benchmark_out="$json" --benchmark_out_format=json >/dev/null
  done
done

peer() {  # NAME ARGS...: one bench/peer-llama-cpp run into $out/NAME
  local name=$1
  shift
  [[ -f $out/$name/summary.md ]] && return 0
  bench/peer-llama-cpp --out "$out/$name" --amc "$after/amc-generate" "$@"
}

# 2. SmolLM2-135M-Instruct Q4_1 at 8128, stored weights, the cache in bf16 and in q8_0.
peer smollm2-q4_1 --depths 8128 --rounds 3 --skip-greedy \
  --amc-flags '--weight-dtype stored --activations q8'
peer smollm2-q4_1-kv8 --depths 8128 --rounds 3 --skip-greedy \
  --amc-flags '--weight-dtype stored --activations q8 --kv-dtype q8_0'
# 3. The Qwen2-0.5B-shaped BF16 file at 16K, weight for weight (about 15 minutes a round).
peer qwen2-bf16-16k --model build/bench-qwen2-0.5b-bf16.gguf --depths 16384 --rounds 2 \
  --skip-greedy

#!/usr/bin/env bash
# Issue 35's speed runs of 2026-12-05 (second session), one after the other on a machine with
# nothing else running: the q8_0 KV cache against bf16 in the operator benchmarks, then the peer
# (bench/peer-llama-cpp) on the Qwen2-0.5B-shaped synthetic files (Q8_0 and BF16, made by
# tools/checkpoint-to-gguf from amc-synth --shape qwen2-0.5b) and on SmolLM2-135M-Instruct Q4_1.
# Each step is skipped when its output exists. Binaries: a snapshot of build/release.
#
#   records/stored-and-kv8-2026-12-05/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/stored-and-kv8-2026-12-05
bin=build/bench-snapshot
mkdir -p "$bin"
[[ -x $bin/amc-generate ]] || cp build/release/examples/transformer/amc-generate "$bin/"
[[ -x $bin/amc-bench ]] || cp build/release/bench/amc-bench "$bin/"
git rev-parse HEAD >"$out/commit.txt"

# 1. The q8_0 cache in the operators: dense and sparse (mean rule, cold) over one GQA group.
#    (Run after the peer steps on 2026-12-05: a first attempt's filter matched nothing.)
if [[ ! -f $out/kv8.json ]]; then
  "$bin/amc-bench" \
    --benchmark_filter='^BM_(StreamRead|DenseDecode|DenseDecodeQ8|SparseDecode|SparseDecodeQ8)/(16384|65536|131072)/' \
    --benchmark_repetitions=3 --benchmark_out="$out/kv8.json" --benchmark_out_format=json
fi

peer() {  # NAME ARGS...: one bench/peer-llama-cpp run into $out/NAME
  local name=$1
  shift
  [[ -f $out/$name/summary.md ]] && return 0
  bench/peer-llama-cpp --out "$out/$name" --amc "$bin/amc-generate" "$@"
}

# 2. The Qwen2-0.5B-shaped Q8_0 file: stored blocks with 8-bit activations, depth 0 and 16K.
peer qwen2-q8_0 --model build/bench-qwen2-0.5b-q8_0.gguf --depths 0,16384 --rounds 2 \
  --skip-greedy --amc-flags '--weight-dtype stored --activations q8'
# 3. The same shape in BF16, weight for weight (amc's default: the file's bf16 weights); depth 0
#    only (a 16K round takes about 15 minutes on this VM).
peer qwen2-bf16 --model build/bench-qwen2-0.5b-bf16.gguf --depths 0 --rounds 3 --skip-greedy
# 4. SmolLM2-135M-Instruct Q4_1, as the first session measured it; then with the q8_0 cache.
peer smollm2-q4_1 --depths 0,8128 --rounds 3 --skip-greedy \
  --amc-flags '--weight-dtype stored --activations q8'
peer smollm2-q4_1-kv8 --depths 8128 --rounds 3 --skip-greedy \
  --amc-flags '--weight-dtype stored --activations q8 --kv-dtype q8_0'

#!/usr/bin/env bash
# Issue 35 on a Q4_K_M file, the type most CPU users run: SmolLM2-135M-Instruct requantized by
# llama.cpp's own quantizer from the Q4_1 file of scripts/fetch-model (the only real weights this
# machine has; a Q4_K_M made from f16 weights would be more accurate, with the same tensor types
# and sizes). llama.cpp gives the matrices whose rows (576) are not a multiple of 256 Q5_0 or
# Q8_0 instead of a K-quant: 166 Q5_0, 15 Q8_0, 16 Q4_K, 14 Q6_K tensors (53.7, 31.7, 8.0 and
# 10.2 MB). Then bench/peer-llama-cpp on it: amc with the stored blocks and 8-bit activations
# against llama.cpp at depth 0 and 8128, 3 rounds; and amc with f32 activations at depth 0.
# Nothing else running. Binaries: a snapshot of build/release.
#
#   records/q4km-2026-12-05/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/q4km-2026-12-05
bin=build/bench-q4km
mkdir -p "$bin"
[[ -x $bin/amc-generate ]] || cp build/release/examples/transformer/amc-generate "$bin/"
git rev-parse HEAD >"$out/commit.txt"

bench/peer-llama-cpp --build-only
peer_build=build/peer/llama.cpp-build
[[ -x $peer_build/bin/llama-quantize ]] || cmake --build "$peer_build" --target llama-quantize -j2
model=$HOME/.cache/amc/SmolLM2-135M-Instruct.Q4_K_M-requant.gguf
if [[ ! -f $model ]]; then
  LD_LIBRARY_PATH=$peer_build/bin "$peer_build/bin/llama-quantize" --allow-requantize \
    "$(scripts/fetch-model)" "$model" Q4_K_M 2 >"$out/quantize.log" 2>&1
fi

peer() {  # NAME ARGS...: one bench/peer-llama-cpp run into $out/NAME
  local name=$1
  shift
  [[ -f $out/$name/summary.md ]] && return 0
  bench/peer-llama-cpp --out "$out/$name" --amc "$bin/amc-generate" --model "$model" "$@"
}

peer stored-q8 --depths 0,8128 --rounds 3 --skip-greedy \
  --amc-flags '--weight-dtype stored --activations q8'
peer stored-f32 --depths 0 --rounds 3 --skip-greedy --amc-flags '--weight-dtype stored'

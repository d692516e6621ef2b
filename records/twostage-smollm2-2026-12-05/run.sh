#!/usr/bin/env bash
# The two-stage rule end to end on SmolLM2-135M-Instruct Q4_1 (stored blocks, 8-bit activations),
# bf16 and q8_0 caches, before and after this session's second-stage changes: BEFORE is
# build/bench-fused/amc-generate (c022c75, as in records/kv8-fused-2026-12-05/twostage-q8-smollm2.txt),
# AFTER a copy of build/release's in build/bench-twostage/ (the block log-mass kernel 0328649,
# the key-only widening of a q8_0 cache 8200125 and the per-head reduction 9ebf279). A 5025-token
# prose prompt, 64 decoded tokens, per-head selection (amc-generate's default scope), 2 threads;
# the binaries alternated, 3 rounds; the background sweeps stopped (SIGSTOP). Output: speed.txt
# beside this script.
#   records/twostage-smollm2-2026-12-05/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
out=records/twostage-smollm2-2026-12-05/speed.txt
model=$(scripts/fetch-model)
prompt="$(head -c 20000 /usr/share/doc/python3.11/html/_sources/whatsnew/2.5.rst.txt)"
{
  echo "# round kv binary: decode tokens/s ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  for round in 1 2 3; do
    for kv in bf16 q8_0; do
      for bin in build/bench-fused/amc-generate build/bench-twostage/amc-generate; do
        speed=$("$bin" --model "$model" --prompt "$prompt" -n 64 --ignore-eos --json --kv-dtype "$kv" \
          --attention sparse --score twostage --shortlist-score bound --weight-dtype stored \
          --activations q8 | tail -1 | python3 -c 'import json, sys; print(round(json.load(sys.stdin)["decode_tokens_per_s"], 1))')
        echo "$round $kv $bin: $speed"
      done
    done
  done
} | tee "$out"

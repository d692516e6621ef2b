#!/usr/bin/env bash
# The house keeping (one word per concept, the weight kernels split by concern, the families and
# tensor names in tables, the forward pass restructured) must not change speed: the code before
# it (7a755dc) against after, interleaved, on one machine, nothing else running.
#   before: a build of 7a755dc (git worktree, cmake --preset release), in $BEFORE/build/release
#   after:  build/release of the commit in commit.txt
#   records/house-ab-2026-12-07/run.sh BEFORE_TREE
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/house-ab-2026-12-07
before=${1:?usage: run.sh BEFORE_TREE}/build/release
after=build/release
model=$(scripts/fetch-model)
git rev-parse HEAD >"$out/commit.txt"
lscpu >"$out/lscpu.txt"
for round in 1 2 3; do
  for side in before after; do
    dir=${!side}
    # End to end: SmolLM2 decode, dense, 64 tokens after one, 2 threads; bf16 weights (the
    # default) and the stored blocks with 8-bit activations (spelled q8 before, int8 after).
    activations=int8
    [[ $side == before ]] && activations=q8
    for flags in "" "--weight-dtype stored --activations $activations"; do
      name=$([[ -z $flags ]] && echo bf16 || echo stored-int8)
      "$dir/examples/transformer/amc-generate" --model "$model" --prompt-ids 1 -n 64 --ignore-eos \
        --threads 2 --json $flags 2>/dev/null | tail -n 1 >"$out/generate-$name-$side-$round.json"
    done
    # The weight kernels: every type's matrix-vector products.
    "$dir/bench/amc-bench-gguf" --benchmark_filter='^Matvec' \
      --benchmark_out="$out/matvec-$side-$round.json" --benchmark_out_format=json >/dev/null
    # Dense decode, and the mean step on bf16 mean keys (rule 0 before, rule 11 after: the same
    # computation), cold, one GQA group.
    rule=$([[ $side == before ]] && echo 0 || echo 11)
    "$dir/bench/amc-bench" \
      --benchmark_filter="^(BM_DenseDecode/(16384|131072)/|BM_RuleSparseDecode/(16384|131072)/rule:$rule/)" \
      --benchmark_out="$out/decode-$side-$round.json" --benchmark_out_format=json >/dev/null
  done
done
python3 "$out/summarize.py" >"$out/summary.md"

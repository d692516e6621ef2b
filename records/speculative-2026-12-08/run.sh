#!/usr/bin/env bash
# Speculative decoding's speed, one run on a machine with nothing else of ours running:
#   1. SmolLM2-135M-Instruct (Q4_1 GGUF) end to end with amc-generate, at depths 2048, 4096
#      and 8064 of GPL-3 text (bench/peer-llama-cpp's filler, tokenized by amc), 64 tokens
#      after the prompt, 2 threads: dense, sparse and speculative decode tokens/s, interleaved
#      per depth, for the default bf16 weights and for the stored blocks with int8 activations;
#      drafts twostage/bound and mean pooling (blocks of 32, top-k 16, 4 sinks, window 64,
#      per group), 4 drafted tokens.
#   2. Acceptance against draft length and the adaptive margin at 8064 (bf16, twostage/bound).
#   3. The Qwen2-0.5B-shaped synthetic file (amc-bench-qwen2 writes it): a dense step, a draft
#      step and a verify pass at 16K and 32K (random caches), and the speed they project.
# Binaries: a snapshot of build/release. Output: results.jsonl (one line per amc-generate run),
# bench-qwen2.txt, stderr.log.
#
#   records/speculative-2026-12-08/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/speculative-2026-12-08
bin=build/bench-snapshot-speculative
mkdir -p "$bin"
cp build/release/examples/transformer/amc-generate build/release/bench/amc-bench-qwen2 "$bin/"
git rev-parse HEAD >"$out/commit.txt"
model=${AMC_MODEL_FILE:-$HOME/.cache/amc/SmolLM2-135M-Instruct.Q4_1.gguf}
ids_file=$(mktemp)
"$bin/amc-generate" --model "$model" --prompt "$(cat /usr/share/common-licenses/GPL-3)" -n 1 --json \
  >"$ids_file.all"
head -1 "$ids_file.all" >"$ids_file"
prompt_ids() {  # DEPTH: the first DEPTH ids of GPL-3, repeated as needed
  python3 -c "import json,sys; ids=json.load(open('$ids_file'))['prompt_ids']; d=int(sys.argv[1]); print(','.join(map(str,(ids*(d//len(ids)+1))[:d])))" "$1"
}
draft_flags="--block-size 32 --top-k 16 --sinks 4 --window 64 --scope group"
run() {  # LABEL DEPTH FLAGS...: one amc-generate run, its summary as a JSON line
  local label=$1 depth=$2
  shift 2
  "$bin/amc-generate" --model "$model" --prompt-ids "$(prompt_ids "$depth")" -n 64 --ignore-eos \
    --json --threads 2 "$@" 2>>"$out/stderr.log" | tail -1 |
    python3 -c "import json,sys; s=json.load(sys.stdin); s.pop('tokens'); s.update(label='$label', depth=$depth, flags='$*'); print(json.dumps(s))" \
    >>"$out/results.jsonl"
}
: >"$out/results.jsonl"
for weights in "" "--weight-dtype stored --activations int8"; do
  for depth in 2048 4096 8064; do
    run dense "$depth" $weights
    run sparse-twostage "$depth" $weights --attention sparse $draft_flags --rule twostage --shortlist-rule bound
    run speculative-twostage "$depth" $weights --decoding speculative --draft-tokens 4 $draft_flags --rule twostage --shortlist-rule bound
    run speculative-mean "$depth" $weights --decoding speculative --draft-tokens 4 $draft_flags --rule mean
    run sparse-mean "$depth" $weights --attention sparse $draft_flags --rule mean
  done
done
for draft in 2 6 8; do
  run "speculative-twostage-draft$draft" 8064 --decoding speculative --draft-tokens "$draft" $draft_flags --rule twostage --shortlist-rule bound
done
for margin in 0.5 1.0; do
  run "speculative-twostage-margin$margin" 8064 --decoding speculative --draft-tokens 8 --draft-margin "$margin" $draft_flags --rule twostage --shortlist-rule bound
done
"$bin/amc-bench-qwen2" --model build/bench-qwen2-0.5b --only-verify --verify-depths 16384,32768 \
  --rounds 3 --steps 4 >"$out/bench-qwen2.txt"
rm -f "$ids_file" "$ids_file.all"

#!/usr/bin/env bash
# GEN_DIR holds amc-generate binaries named gen-NAME; run from the repository root.
# round-robin.sh ROUNDS NAME...: decode tokens/s of $GEN_DIR/gen-NAME, the order rotated each round
n=$1; shift
names=("$@")
m=$(scripts/fetch-model)
declare -A sum
for r in $(seq $n); do
  k=${#names[@]}
  for i in $(seq 0 $((k-1))); do
    name=${names[$(( (i + r) % k ))]}
    v=$($GEN_DIR/gen-$name --model $m --prompt-ids 1 -n 128 --ignore-eos --threads 2 --json "${EXTRA[@]}" 2>/dev/null | tail -1 | python3 -c 'import json,sys;print(round(json.load(sys.stdin)["decode_tokens_per_s"],2))')
    echo "$r $name $v"
  done
done

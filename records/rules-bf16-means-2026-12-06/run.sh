#!/usr/bin/env bash
# The mean-pooled rule scoring its mean keys' bf16 copy (bf16means) against scoring the f32 means
# (f32means, ca9f503), with every rule of issue 32's table: BM_RuleSparseDecode and
# BM_RuleSelect (cold, one GQA group of 7 heads, bf16 KV, blocks of 32, k 16), dense decode at
# 16384, and at 131072 BM_SparseDecode and BM_StreamRead (the touched-bytes bound). Two binaries
# alternated three times, each size a process of its own, nothing else running.
#   build/bench-f32means/amc-bench is build/release/bench/amc-bench at ca9f503
#   build/bench-bf16means/amc-bench is the same with the mean keys scored in bf16
#   records/rules-bf16-means-2026-12-06/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/rules-bf16-means-2026-12-06
declare -A binary=([f32means]=build/bench-f32means/amc-bench [bf16means]=build/bench-bf16means/amc-bench)
declare -A extra=([16384]='BM_DenseDecode/16384/' [131072]='BM_(SparseDecode|StreamRead|DenseDecode)/131072/')
sha256sum "${binary[@]}" >"$out/binaries.txt"
for round in 1 2 3; do
  for side in f32means bf16means; do
    for n in 16384 131072; do
      json=$out/rules-$n-$side-$round.json
      [[ -f $json ]] && continue
      date -u +"%H:%M:%S $side $n $round" >>"$out/times.txt"
      "${binary[$side]}" \
        --benchmark_filter="^(BM_Rule(SparseDecode|Select)/$n/rule:(0|1|2|3|4|5)/|${extra[$n]})" \
        --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
date -u +"%H:%M:%S done" >>"$out/times.txt"
python3 records/rules-bf16-means-2026-12-06/summarize.py

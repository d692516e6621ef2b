#!/usr/bin/env bash
# The Qwen2-0.5B-shaped Q8_0 file (random weights; issue 35's second file) at depth 0 on this
# VM, where llama.cpp also repacks Q8_0 (ggml-cpu's amx/ lists it): 6 interleaved rounds of 64
# tokens on 2 threads, amc before (7581810, row by row) and now (rows interleaved, run.sh's
# snapshot of 50d48b8), stored blocks with 8-bit activations, against llama.cpp with flash
# attention on, repacking and not. The file, made as in records/stored-and-kv8-2026-12-05/run.sh:
#   build/release/examples/transformer/amc-synth --shape qwen2-0.5b --out build/bench-qwen2-0.5b
#   build/venv/bin/python tools/checkpoint-to-gguf build/bench-qwen2-0.5b \
#     build/bench-qwen2-0.5b-q8_0.gguf --type q8_0
#
#   records/interleaved-2026-12-05/qwen2-q8_0.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/interleaved-2026-12-05
model=build/bench-qwen2-0.5b-q8_0.gguf
bench=build/peer/llama.cpp-build/bin/llama-bench
csv=$out/qwen2-q8_0.csv
echo "round,engine,variant,decode_tokens_per_s,loadavg_before" >"$csv"
for round in 1 2 3 4 5 6; do
  for variant in before interleaved; do
    b=build/bench-snapshot-peer/amc-generate
    [[ $variant == interleaved ]] && b=build/bench-snapshot-interleaved/amc-generate
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    tps=$("$b" --model "$model" --prompt-ids 1 -n 64 --ignore-eos --weight-dtype stored \
      --activations q8 --json 2>/dev/null | tail -n 1 |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["decode_tokens_per_s"])')
    echo "$round,amc,$variant,$tps,$load" >>"$csv"
  done
  for repack in 1 0; do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    tps=$("$bench" -m "$model" -p 0 -n 64 -t 2 -fa 1 -r 1 --repack "$repack" -o json 2>/dev/null |
      python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])')
    echo "$round,llama.cpp,fa-on-repack-$repack,$tps,$load" >>"$csv"
  done
done
python3 - "$csv" <<'PY' | tee "$out/qwen2-q8_0.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(f"{r['engine']} {r['variant']}", []).append(float(r["decode_tokens_per_s"]))
best = max(statistics.median(by[k]) for k in by if k.startswith("llama.cpp"))
print("| engine | median tokens/s | min | max | / llama.cpp's best median |")
print("|---|---:|---:|---:|---:|")
for name, v in by.items():
    m = statistics.median(v)
    print(f"| {name} | {m:.1f} | {min(v):.1f} | {max(v):.1f} | {m / best:.2f} |")
PY

#!/usr/bin/env bash
# Why llama.cpp decodes SmolLM2 Q4_1 faster than amc at depth 0 on this VM: its CPU backend
# repacks Q4_1 weights at load (llama-bench --repack 1, the default; the build reports
# AMX_INT8 = 1 and ggml-cpu's amx/ lists Q4_1 among the types it repacks). 8 interleaved rounds
# of amc (stored blocks, 8-bit activations), llama.cpp with flash attention on and repacking,
# and the same without repacking (--repack 0), each 64 tokens at depth 0 on 2 threads.
# Needs run.sh's snapshot (build/bench-snapshot-peer) and bench/peer-llama-cpp --build-only.
#
#   records/peer-depth0-2026-12-05/repack.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/peer-depth0-2026-12-05
amc=build/bench-snapshot-peer/amc-generate
bench=build/peer/llama.cpp-build/bin/llama-bench
model=$(scripts/fetch-model --path)
csv=$out/repack.csv
echo "round,engine,variant,decode_tokens_per_s,loadavg_before" >"$csv"
for round in 1 2 3 4 5 6 7 8; do
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  tps=$("$amc" --model "$model" --prompt-ids 1 -n 64 --ignore-eos --weight-dtype stored \
    --activations q8 --json 2>/dev/null | tail -n 1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["decode_tokens_per_s"])')
  echo "$round,amc,dense,$tps,$load" >>"$csv"
  for repack in 1 0; do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    tps=$("$bench" -m "$model" -p 0 -n 64 -t 2 -fa 1 -r 1 --repack "$repack" -o json 2>/dev/null |
      python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])')
    echo "$round,llama.cpp,fa-on-repack-$repack,$tps,$load" >>"$csv"
  done
done
python3 - "$csv" <<'PY' | tee "$out/repack.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(f"{r['engine']} {r['variant']}", []).append(float(r["decode_tokens_per_s"]))
amc = statistics.median(by["amc dense"])
print("| engine | median tokens/s | min | max | amc / this |")
print("|---|---:|---:|---:|---:|")
for name, v in by.items():
    m = statistics.median(v)
    print(f"| {name} | {m:.1f} | {min(v):.1f} | {max(v):.1f} | {amc / m:.2f} |")
PY

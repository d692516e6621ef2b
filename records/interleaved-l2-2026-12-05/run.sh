#!/usr/bin/env bash
# Issue 35, depth 0 on both of the issue's files, after the interleaved kernel's read-ahead went
# towards L2 (commit.txt): 6 interleaved rounds of 64 tokens on 2 threads, nothing else running.
# amc (stored blocks, --activations q8): before (7581810, row by row), interleaved with the
# read-ahead towards L1 (50d48b8, interleaved-2026-12-05's snapshot) and towards L2 (this
# commit); llama.cpp 0c1e57098 with flash attention on, repacking (its default) and not.
# Files: SmolLM2-135M-Instruct Q4_1 (scripts/fetch-model) and the Qwen2-0.5B-shaped Q8_0 file of
# records/interleaved-2026-12-05/qwen2-q8_0.sh. Output: <file>.csv and <file>.md, md5.txt.
#
#   records/interleaved-l2-2026-12-05/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/interleaved-l2-2026-12-05
bin=build/bench-snapshot-interleaved-l2
mkdir -p "$bin"
cp build/release/examples/transformer/amc-generate "$bin/"
git rev-parse HEAD >"$out/commit.txt"
before=build/bench-snapshot-peer/amc-generate
l1=build/bench-snapshot-interleaved/amc-generate
l2=$bin/amc-generate
bench=build/peer/llama.cpp-build/bin/llama-bench
md5sum "$before" "$l1" "$l2" | cut -c1-12 >"$out/md5.txt"

for name in smollm2-q4_1 qwen2-q8_0; do
  model=$(scripts/fetch-model --path)
  [[ $name == qwen2-q8_0 ]] && model=build/bench-qwen2-0.5b-q8_0.gguf
  csv=$out/$name.csv
  echo "round,engine,variant,decode_tokens_per_s,loadavg_before" >"$csv"
  for round in 1 2 3 4 5 6; do
    for variant in before interleaved-l1 interleaved-l2; do
      case $variant in
        before) b=$before ;;
        interleaved-l1) b=$l1 ;;
        *) b=$l2 ;;
      esac
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      tps=$("$b" --model "$model" --prompt-ids 1 -n 64 --ignore-eos --weight-dtype stored \
        --activations q8 --json 2>/dev/null | tail -n 1 |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["decode_tokens_per_s"])')
      echo "$round,amc,$variant,$tps,$load" >>"$csv"
    done
    for repack in 1 0; do
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      tps=$("$bench" -m "$model" -p 0 -n 64 -t 2 -fa 1 -r 1 --repack "$repack" -o json \
        2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])')
      echo "$round,llama.cpp,fa-on-repack-$repack,$tps,$load" >>"$csv"
    done
  done
  python3 - "$csv" <<'PY' | tee "$out/$name.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(f"{r['engine']} {r['variant']}", []).append(float(r["decode_tokens_per_s"]))
best = statistics.median(by["llama.cpp fa-on-repack-1"])
print(f"{sys.argv[1]}\n")
print("| engine | median tokens/s | min | max | / llama.cpp repacking (medians) |")
print("|---|---:|---:|---:|---:|")
for name, v in by.items():
    m = statistics.median(v)
    print(f"| {name} | {m:.1f} | {min(v):.1f} | {max(v):.1f} | {m / best:.2f} |")
PY
done

#!/usr/bin/env bash
# Issue 35: rows interleaved 16 to a group for the 8-bit activations (commit.txt), measured on
# SmolLM2-135M-Instruct Q4_1 against llama.cpp on the same file, one window, nothing else running.
#   1. amc-bench-gguf: the [1536, 576] matvec of each type row by row (Matvec/stored-q8) and
#      interleaved (Matvec/interleaved-q8), one thread, 3 repetitions (matvec.json).
#   2. Depth 0, 8 interleaved rounds of 64 tokens on 2 threads (depth0.csv, depth0.md): amc
#      before (build/bench-snapshot-peer/amc-generate, commit 7581810, the rows alone), amc now
#      (interleaved), amc now without the kernel's read-ahead (no-prefetch.patch, built into
#      build/interleaved-noprefetch), llama.cpp with flash attention and its repacking
#      (--repack 1, its default) and without (--repack 0).
#   3. bench/peer-llama-cpp at depths 0 and 8128, 3 rounds, amc now, llama.cpp with --repack 0
#      (peer/): with its repacking, every llama-bench run at a depth above 0 (512 and 8128 in
#      llama-crash.txt) died with SIGSEGV on this VM, so at depth llama.cpp runs
#      its row-by-row kernels; at depth 0 step 2 has both.
# Each step is skipped when its output exists (a first run stopped at step 3's crash).
#
#   records/interleaved-2026-12-05/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=records/interleaved-2026-12-05
bin=build/bench-snapshot-interleaved
mkdir -p "$bin"
[[ -x $bin/amc-generate ]] ||
  cp build/release/examples/transformer/amc-generate build/release/bench/amc-bench-gguf "$bin/"
[[ -f $out/commit.txt ]] || git rev-parse HEAD >"$out/commit.txt"
model=$(scripts/fetch-model --path)
bench=build/peer/llama.cpp-build/bin/llama-bench
before=build/bench-snapshot-peer/amc-generate
no_prefetch=build/interleaved-noprefetch/examples/transformer/amc-generate
md5sum "$before" "$bin/amc-generate" "$no_prefetch" "$bin/amc-bench-gguf" | cut -c1-12 >"$out/md5.txt"

[[ -f $out/matvec.json ]] || "$bin/amc-bench-gguf" --benchmark_filter='^Matvec/(stored-q8|interleaved-q8)/(Q8_0|Q4_0|Q4_1)$' \
  --benchmark_repetitions=3 --benchmark_out="$out/matvec.json" --benchmark_out_format=json \
  >"$out/matvec.txt"

amc_tps() {  # BINARY: decode tokens/s at depth 0
  "$1" --model "$model" --prompt-ids 1 -n 64 --ignore-eos --weight-dtype stored \
    --activations q8 --json 2>/dev/null | tail -n 1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["decode_tokens_per_s"])'
}
csv=$out/depth0.csv
if [[ ! -f $csv ]]; then
echo "round,engine,variant,decode_tokens_per_s,loadavg_before" >"$csv"
for round in 1 2 3 4 5 6 7 8; do
  for variant in before interleaved no-prefetch; do
    case $variant in
      before) b=$before ;;
      interleaved) b=$bin/amc-generate ;;
      *) b=$no_prefetch ;;
    esac
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "$round,amc,$variant,$(amc_tps "$b"),$load" >>"$csv"
  done
  for repack in 1 0; do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    tps=$("$bench" -m "$model" -p 0 -n 64 -t 2 -fa 1 -r 1 --repack "$repack" -o json 2>/dev/null |
      python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])')
    echo "$round,llama.cpp,fa-on-repack-$repack,$tps,$load" >>"$csv"
  done
done
python3 - "$csv" <<'PY' | tee "$out/depth0.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(f"{r['engine']} {r['variant']}", []).append(float(r["decode_tokens_per_s"]))
best = statistics.median(by["llama.cpp fa-on-repack-1"])
print("| engine | median tokens/s | min | max | / llama.cpp repacking (medians) |")
print("|---|---:|---:|---:|---:|")
for name, v in by.items():
    m = statistics.median(v)
    print(f"| {name} | {m:.1f} | {min(v):.1f} | {max(v):.1f} | {m / best:.2f} |")
PY
fi

[[ -f $out/peer/summary.md ]] ||
  bench/peer-llama-cpp --out "$out/peer" --amc "$bin/amc-generate" --depths 0,8128 --rounds 3 \
    --skip-greedy --amc-flags '--weight-dtype stored --activations q8' --llama-flags '--repack 0'

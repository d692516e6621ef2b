#!/usr/bin/env bash
# Where the hot bf16 dense kernel's time goes (issue 35, item 4: "what limits it measured"):
# BlockedOps<avx512bw>::attend<bf16> with parts switched off one at a time by environment
# switches read once per process (switches.patch, applied to a worktree of commit.txt and built
# into build/bench-attrib; exploratory, not a library build). X_NOSCORE: the keys are neither
# widened nor scored (the scores are zeros); X_NOFOLD: no online-softmax fold (rescale 1);
# X_NOVALUES: no value accumulation; X_NOAHEAD: the value loop asks for no lines of the next
# chunk. One GQA group (7 heads, head_dim 64), 1024 and 8192 positions read again and again
# (BM_DenseDecodeHotX), 3 rounds alternating the variants, each a process of its own.
#
#   git worktree add --detach /tmp/wt-attrib $(cat commit.txt) && cd /tmp/wt-attrib &&
#   git apply switches.patch && cmake -S . -B BUILD -DCMAKE_BUILD_TYPE=Release \
#     -DAMC_BUILD_TESTS=OFF -DAMC_BUILD_EXAMPLES=OFF -DAMC_BUILD_TOOLS=OFF -DAMC_BUILD_PYTHON=OFF &&
#   cmake --build BUILD --target amc-bench; then run.sh BUILD/bench/amc-bench
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bench=${1:?usage: run.sh AMC_BENCH}
out=$here/output.txt
: >"$out"
for round in 1 2 3; do
  for switches in "" X_NOAHEAD X_NOFOLD X_NOVALUES X_NOSCORE "X_NOSCORE X_NOFOLD" \
    "X_NOFOLD X_NOVALUES"; do
    echo "== round $round switches: ${switches:-none}" >>"$out"
    env $(for s in $switches; do echo "$s=1"; done) "$bench" \
      --benchmark_filter='^BM_DenseDecodeHotX/(1024|8192)/' --benchmark_min_time=0.5 2>&1 |
      grep '^BM_' >>"$out"
  done
done
python3 - "$out" <<'PY' | tee "$here/summary.md"
import re, statistics, sys
runs, current = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"== round \d+ switches: (.*)", line)
    if m:
        current = m.group(1).strip()
        continue
    m = re.match(r"BM_DenseDecodeHotX/(\d+)/real_time\s+([\d.]+) us", line)
    if m:
        n, us = int(m.group(1)), float(m.group(2))
        runs.setdefault((current, n), []).append(1000 * us / n)
print("| switched off | ns per position, 1024 (median of 3) | 8192 |")
print("|---|---:|---:|")
for switches in dict.fromkeys(k[0] for k in runs):
    cells = [f"{statistics.median(runs[(switches, n)]):.1f}" for n in (1024, 8192)]
    print(f"| {switches} | {cells[0]} | {cells[1]} |")
PY

#!/usr/bin/env bash
# Follow-up of ../run.sh: the final code of the session, where short scans (attention's chunks)
# no longer build an empty AheadLines per group of rows, against 827c985 (the code ../run.sh
# measured as "after"), alternated twice, each a process of its own, nothing else running: the
# hot kernels, dense decode and the rules at 131072 (cold). Output: out-*.json, summary.txt.
#
#   records/stream-ahead-2026-12-05/followup/run.sh
#
# Binaries: build/bench-ahead/amc-bench (827c985), build/bench-final/amc-bench (this code).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."
out=records/stream-ahead-2026-12-05/followup
git rev-parse HEAD >"$out/commit.txt"
git status --short >>"$out/commit.txt"
filter='^BM_DenseDecodeHot(_f32|Q8)?/|^BM_DenseDecode(_f32|Q8)?/131072/|^BM_RuleSparseDecode/131072/rule:(0|1|3)/'
for round in 1 2; do
  for side in 827c985 final; do
    bin=build/bench-ahead
    [[ $side == final ]] && bin=build/bench-final
    json=$out/out-$side-$round.json
    [[ -f $json ]] && continue
    "$bin/amc-bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
      --benchmark_out="$json" --benchmark_out_format=json >/dev/null
  done
done
python3 - "$out" <<'PY' >"$out/summary.txt"
import json, re, sys, os
out = sys.argv[1]
def medians(path):
    m = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            name = re.sub(r"/(real_time|manual_time|iterations:\d+)", "", b["run_name"])
            m[name] = b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
    return m
runs = {(s, r): medians(os.path.join(out, f"out-{s}-{r}.json")) for s in ("827c985", "final") for r in (1, 2)}
print("medians of 3 repetitions, us: benchmark | 827c985 round 1, 2 | final round 1, 2")
for name in sorted(runs[("final", 1)]):
    print(f"{name} | {runs[('827c985', 1)][name]:.1f}, {runs[('827c985', 2)][name]:.1f} | "
          f"{runs[('final', 1)][name]:.1f}, {runs[('final', 2)][name]:.1f}")
PY
cat "$out/summary.txt"

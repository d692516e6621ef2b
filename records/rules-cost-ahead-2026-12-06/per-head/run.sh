#!/usr/bin/env bash
# The read-ahead levers per query head (the study's scope): BM_RuleSparseDecodePerHead for the
# mean rule (0) and the two-stage rules (2, 3), base (a669c14) against words (5841b42, all
# three levers), three alternated rounds, each size a process of its own, nothing else running.
#   records/rules-cost-ahead-2026-12-06/per-head/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."
out=records/rules-cost-ahead-2026-12-06/per-head
declare -A binary=([base]=build/bench-ahead-before/amc-bench [words]=build/bench-words256/amc-bench)
sha256sum "${binary[@]}" >"$out/binaries.txt"
for round in 1 2 3; do
  for side in base words; do
    for n in 16384 131072; do
      json=$out/per-head-$n-$side-$round.json
      [[ -f $json ]] && continue
      date -u +"%H:%M:%S $side $n $round" >>"$out/times.txt"
      "${binary[$side]}" --benchmark_filter="^BM_RuleSparseDecodePerHead/$n/rule:(0|2|3)/" \
        --benchmark_repetitions=3 --benchmark_out="$json" --benchmark_out_format=json >/dev/null
    done
  done
done
python3 - "$out" <<'PY' | tee "$out/summary.md"
import json, os, re, sys
here = sys.argv[1]
def med(path):
    return {re.sub(r"/(manual_time|iterations:\d+)", "", b["run_name"]): b["real_time"]
            for b in json.load(open(path))["benchmarks"] if b.get("aggregate_name") == "median"}
print("| rule | n | base per round (us) | words per round (us) | words / base (averages) | "
      "step / mean step: base, words (rounds) |")
print("|---|---:|---|---|---:|---|")
for n in (16384, 131072):
    runs = {(s, r): med(os.path.join(here, f"per-head-{n}-{s}-{r}.json"))
            for s in ("base", "words") for r in (1, 2, 3)}
    for rule, name in ((0, "mean"), (2, "twostage/mean"), (3, "twostage/bound")):
        key = f"BM_RuleSparseDecodePerHead/{n}/rule:{rule}"
        t = {s: [runs[(s, r)][key] for r in (1, 2, 3)] for s in ("base", "words")}
        ratio = {s: [runs[(s, r)][key] / runs[(s, r)][f"BM_RuleSparseDecodePerHead/{n}/rule:0"]
                     for r in (1, 2, 3)] for s in ("base", "words")}
        print(f"| {name} | {n} | " + ", ".join(f"{x:.0f}" for x in t["base"]) + " | " +
              ", ".join(f"{x:.0f}" for x in t["words"]) + f" | {sum(t['words']) / sum(t['base']):.3f} | " +
              f"{min(ratio['base']):.2f}-{max(ratio['base']):.2f}, {min(ratio['words']):.2f}-{max(ratio['words']):.2f} |")
PY

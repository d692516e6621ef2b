#!/usr/bin/env python3
"""A cost table from an A/B run.sh's JSON (before-1.json, before-2.json, after-1.json and
after-2.json beside it, or in the directory given): per rule and context, the medians of the 3 repetitions averaged over the two
rounds, before and after, and each build's step over its own mean-pooled step (rule 0).

  summarize.py [DIR]      (default: this script's directory)
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

# bench/bench_decode.cpp's kComparedRules, by index.
RULES = ["mean", "bound", "twostage/mean", "twostage/bound", "submean", "oracle", "submean:8",
         "twostage/submean:8", "twostage/submean:16", "twostage/bound@2", "twostage/mean@2"]

here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
t = defaultdict(list)  # (build, kind, n, rule) -> [us]
for build in ("before", "after"):
    for rnd in (1, 2):
        for b in json.load(open(here / f"{build}-{rnd}.json"))["benchmarks"]:
            if b.get("aggregate_name") != "median":
                continue
            name, n, rule = b["run_name"].split("/")[:3]
            kind = "step" if "SparseDecode" in name else "select"
            scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
            t[(build, kind, int(n), int(rule.split(":")[1]))].append(b["real_time"] * scale)
avg = {k: sum(v) / len(v) for k, v in t.items()}
rules = sorted({k[3] for k in t})
has_select = any(k[1] == "select" for k in t)
print("| rule | n | step before | step after | after/before |"
      + (" select before | select after |" if has_select else "")
      + " step/mean before | step/mean after | rounds (step after) |")
print("|---|---:|---:|---:|---:|" + ("---:|---:|" if has_select else "") + "---:|---:|---|")
for r in rules:
    for n in (16384, 131072):
        sb, sa = avg[("before", "step", n, r)], avg[("after", "step", n, r)]
        mb, ma = avg[("before", "step", n, 0)], avg[("after", "step", n, 0)]
        select = ""
        if has_select:
            select = f" {avg[('before', 'select', n, r)]:.0f} | {avg[('after', 'select', n, r)]:.0f} |"
        rounds = ", ".join(f"{x:.0f}" for x in t[("after", "step", n, r)])
        print(f"| {RULES[r]} | {n} | {sb:.0f} | {sa:.0f} | {sa / sb:.2f} |{select} "
              f"{sb / mb:.2f} | {sa / ma:.2f} | {rounds} |")

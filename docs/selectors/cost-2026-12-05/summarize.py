#!/usr/bin/env python3
"""The cost table of selectors.md from run.sh's JSON: per rule and context, the medians of the
3 repetitions, averaged over the two rounds, before and after; step / mean step within a build."""
import json
import sys
from collections import defaultdict
from pathlib import Path

here = Path(__file__).resolve().parent
rules = {0: "mean", 1: "bound", 2: "twostage/mean", 3: "twostage/bound", 5: "oracle",
         9: "twostage/bound@2", 10: "twostage/mean@2"}
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
print("| rule | n | step before | step after | after/before | select before | select after | "
      "step/mean before | step/mean after | rounds (step after) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for r, name in rules.items():
    for n in (16384, 131072):
        sb, sa = avg[("before", "step", n, r)], avg[("after", "step", n, r)]
        lb, la = avg[("before", "select", n, r)], avg[("after", "select", n, r)]
        mb, ma = avg[("before", "step", n, 0)], avg[("after", "step", n, 0)]
        rounds = ", ".join(f"{x:.0f}" for x in t[("after", "step", n, r)])
        print(f"| {name} | {n} | {sb:.0f} | {sa:.0f} | {sa / sb:.2f} | {lb:.0f} | {la:.0f} | "
              f"{sb / mb:.2f} | {sa / ma:.2f} | {rounds} |")

#!/usr/bin/env python3
"""The two binaries of run.sh (before, after) from the JSON of this directory; writes
summary.md. Medians of each process's 3 repetitions; "avg" is the mean of the three rounds'
medians."""
import json
import os
import re

here = os.path.dirname(os.path.abspath(__file__))
RULES = {0: "mean", 1: "bound", 2: "twostage/mean", 3: "twostage/bound", 4: "submean", 5: "oracle"}
SIDES, ROUNDS, SIZES = ("before", "after"), (1, 2, 3), (16384, 131072)


def medians(path):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[re.sub(r"/(real_time|manual_time|iterations:\d+)", "", b["run_name"])] = b
    return out


def us(b):
    return b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]


runs = {(n, s, r): medians(os.path.join(here, f"rules-{n}-{s}-{r}.json"))
        for n in SIZES for s in SIDES for r in ROUNDS}


def step(n, s, r, rule, kind="SparseDecode"):
    return us(runs[(n, s, r)][f"BM_Rule{kind}/{n}/rule:{rule}"])


def avg(n, s, rule, kind="SparseDecode"):
    return sum(step(n, s, r, rule, kind) for r in ROUNDS) / len(ROUNDS)


out = ["# cost-listed-2026-12-06: before (2d6fa9c), after (rows listed in the combination)", "",
       "## Rules: whole step and selection, cold (us; averages of the three rounds' medians)", "",
       "| rule | n | step before | step after | after / before | select before | select after |"
       " step / mean step: before | after |",
       "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
for n in SIZES:
    for rule, name in RULES.items():
        t = {s: avg(n, s, rule) for s in SIDES}
        sel = {s: avg(n, s, rule, "Select") for s in SIDES}
        ratio = {s: t[s] / avg(n, s, 0) for s in SIDES}
        out.append(f"| {name} | {n} | {t['before']:.0f} | {t['after']:.0f} | "
                   f"{t['after'] / t['before']:.3f} | {sel['before']:.0f} | {sel['after']:.0f} | "
                   f"{ratio['before']:.2f} | {ratio['after']:.2f} |")
out += ["", "## Per round (step us; the spread behind the averages)", "",
        "| rule | n | round | before | after | step / mean step: before | after |",
        "|---|---:|---:|---:|---:|---:|---:|"]
for n in SIZES:
    for rule, name in RULES.items():
        for r in ROUNDS:
            t = {s: step(n, s, r, rule) for s in SIDES}
            m = {s: step(n, s, r, 0) for s in SIDES}
            out.append(f"| {name} | {n} | {r} | {t['before']:.0f} | {t['after']:.0f} | "
                       f"{t['before'] / m['before']:.2f} | {t['after'] / m['after']:.2f} |")
open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))

#!/usr/bin/env python3
"""run.sh's processes: per-head and per-group steps and selections (medians of 3 repetitions;
averages of the three rounds' medians, and each round's step over its own mean step)."""
import json
import os
import re

here = os.path.dirname(os.path.abspath(__file__))
RULES = {0: "mean", 1: "bound", 2: "twostage/mean", 3: "twostage/bound", 4: "submean", 5: "oracle"}
ROUNDS, SIZES = (1, 2, 3), (16384, 131072)


def medians(path):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[re.sub(r"/(real_time|manual_time|iterations:\d+)", "", b["run_name"])] = b
    return out


def us(b):
    return b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]


runs = {(n, r): medians(os.path.join(here, f"rules-{n}-{r}.json")) for n in SIZES for r in ROUNDS}


def t(n, r, kind, rule):
    return us(runs[(n, r)][f"BM_Rule{kind}/{n}/rule:{rule}"])


out = ["# cost-per-head-2026-12-06: per-head against per-group selection, cold (us)", "",
       "| rule | n | step per head | select per head | step per group | per head / per group |"
       " step / mean step per head (rounds) | per group (rounds) |",
       "|---|---:|---:|---:|---:|---:|---|---|"]
for n in SIZES:
    for rule, name in RULES.items():
        head = sum(t(n, r, "SparseDecodePerHead", rule) for r in ROUNDS) / len(ROUNDS)
        sel = sum(t(n, r, "SelectPerHead", rule) for r in ROUNDS) / len(ROUNDS)
        group = sum(t(n, r, "SparseDecode", rule) for r in ROUNDS) / len(ROUNDS)
        rh = ", ".join(f"{t(n, r, 'SparseDecodePerHead', rule) / t(n, r, 'SparseDecodePerHead', 0):.2f}"
                       for r in ROUNDS)
        rg = ", ".join(f"{t(n, r, 'SparseDecode', rule) / t(n, r, 'SparseDecode', 0):.2f}"
                       for r in ROUNDS)
        out.append(f"| {name} | {n} | {head:.0f} | {sel:.0f} | {group:.0f} | {head / group:.2f} | "
                   f"{rh} | {rg} |")
open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))

#!/usr/bin/env python3
"""The binaries of run.sh (base, listed, topk) from the JSON of this directory, or of second.sh
(listed, topk at 131072, four rounds) with the argument `second`; writes summary.md there.
Medians of each process's 3 repetitions; the averages are the means of the rounds' medians."""
import json
import os
import re
import sys

top = os.path.dirname(os.path.abspath(__file__))
RULES = {0: "mean", 1: "bound", 2: "twostage/mean", 3: "twostage/bound", 4: "submean", 5: "oracle"}
if len(sys.argv) > 1 and sys.argv[1] == "second":
    here, SIDES, ROUNDS, SIZES = os.path.join(top, "second"), ("listed", "topk"), (1, 2, 3, 4), (131072,)
    RULES = {r: RULES[r] for r in range(4)}
    title = "cost-topk-2026-12-06/second: listed (6d8ca1b), topk (9dd0c54), 131072"
else:
    here, SIDES, ROUNDS, SIZES = top, ("base", "listed", "topk"), (1, 2, 3), (16384, 131072)
    title = "cost-topk-2026-12-06: base (2d6fa9c), listed (6d8ca1b), topk (9dd0c54)"


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


pairs = list(zip(SIDES, SIDES[1:]))
out = [f"# {title}", "",
       "## Rules: whole step, cold (us; averages of the rounds' medians)", "",
       "| rule | n | " + " | ".join(SIDES) + " | " + " | ".join(f"{b} / {a}" for a, b in pairs) +
       " | " + " | ".join(f"select {s}" for s in SIDES) + " | " +
       " | ".join(f"step / mean step {s}" for s in SIDES) + " |",
       "|---|---:|" + "---:|" * (3 * len(SIDES) + len(pairs))]
for n in SIZES:
    for rule, name in RULES.items():
        t = {s: avg(n, s, rule) for s in SIDES}
        sel = {s: avg(n, s, rule, "Select") for s in SIDES}
        ratio = {s: t[s] / avg(n, s, 0) for s in SIDES}
        out.append(f"| {name} | {n} | " + " | ".join(f"{t[s]:.0f}" for s in SIDES) + " | " +
                   " | ".join(f"{t[b] / t[a]:.3f}" for a, b in pairs) + " | " +
                   " | ".join(f"{sel[s]:.0f}" for s in SIDES) + " | " +
                   " | ".join(f"{ratio[s]:.2f}" for s in SIDES) + " |")
out += ["", "## Per round (step us; the spread behind the averages)", "",
        "| rule | n | round | " + " | ".join(SIDES) + " | " +
        " | ".join(f"step / mean step {s}" for s in SIDES) + " |",
        "|---|---:|---:|" + "---:|" * (2 * len(SIDES))]
for n in SIZES:
    for rule, name in RULES.items():
        for r in ROUNDS:
            t = {s: step(n, s, r, rule) for s in SIDES}
            m = {s: step(n, s, r, 0) for s in SIDES}
            out.append(f"| {name} | {n} | {r} | " + " | ".join(f"{t[s]:.0f}" for s in SIDES) +
                       " | " + " | ".join(f"{t[s] / m[s]:.2f}" for s in SIDES) + " |")
open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))

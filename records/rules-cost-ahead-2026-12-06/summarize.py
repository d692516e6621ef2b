#!/usr/bin/env python3
"""run.sh's JSON (base, ahead, attend, words; three rounds; 16384 and 131072) to summary.md, or
(argument `final` or `restructured`) that directory's run.sh's (words, final) to its summary.md.
Medians of each process's 3 repetitions; averages are the means of the rounds' medians; the
ranges are over the rounds."""
import json
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
SIDES, ROUNDS, SIZES = ("base", "ahead", "attend", "words"), (1, 2, 3), (16384, 131072)
title = "cost-ahead-2026-12-06: base (a669c14), ahead (655776f), attend (6d30a7f), words (5841b42)"
if len(sys.argv) > 1 and sys.argv[1] == "final":  # final/run.sh: words against the final code
    here, SIDES = os.path.join(here, "final"), ("words", "final")
    title = "cost-ahead-2026-12-06/final: words (5841b42), final (a8ff102)"
elif len(sys.argv) > 1 and sys.argv[1] == "restructured":  # restructured/run.sh
    here, SIDES = os.path.join(here, "restructured"), ("words", "final")
    title = "cost-ahead-2026-12-06/restructured: words (5841b42), final (580cc5f)"
RULES = {0: "mean", 1: "bound", 2: "twostage/mean", 3: "twostage/bound", 4: "submean", 5: "oracle"}


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


def avg(values):
    values = list(values)
    return sum(values) / len(values)


def span(values, digits=2):
    values = list(values)
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


pairs = list(zip(SIDES, SIDES[1:]))
out = [f"# {title}", "",
       "## Rules: whole step, cold (us; averages of the rounds' medians)", "",
       "| rule | n | " + " | ".join(SIDES) + " | " +
       " | ".join(f"{b} / {a}" for a, b in pairs) + " | " +
       " | ".join(f"select {s}" for s in SIDES) + " |",
       "|---|---:|" + "---:|" * (2 * len(SIDES) + len(pairs))]
for n in SIZES:
    for rule, name in RULES.items():
        t = {s: avg(step(n, s, r, rule) for r in ROUNDS) for s in SIDES}
        sel = {s: avg(step(n, s, r, rule, "Select") for r in ROUNDS) for s in SIDES}
        out.append(f"| {name} | {n} | " + " | ".join(f"{t[s]:.0f}" for s in SIDES) + " | " +
                   " | ".join(f"{t[b] / t[a]:.3f}" for a, b in pairs) + " | " +
                   " | ".join(f"{sel[s]:.0f}" for s in SIDES) + " |")
out += ["", "## Step / the mean rule's step in the same process: average of the rounds' "
        "ratios (range over the rounds)", "",
        "| rule | n | " + " | ".join(SIDES) + " |", "|---|---:|" + "---|" * len(SIDES)]
for n in SIZES:
    for rule, name in RULES.items():
        if rule == 0:
            continue
        cells = []
        for s in SIDES:
            ratios = [step(n, s, r, rule) / step(n, s, r, 0) for r in ROUNDS]
            cells.append(f"{avg(ratios):.2f} ({span(ratios)})")
        out.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
out += ["", "## Dense decode at 16384 / the mean rule's step (issue 32: at least 8x)", "",
        "| side | dense (us) per round | mean step (us) per round | dense / mean step per round |",
        "|---|---|---|---|"]
for s in SIDES:
    dense = [us(runs[(16384, s, r)]["BM_DenseDecode/16384"]) for r in ROUNDS]
    mean = [step(16384, s, r, 0) for r in ROUNDS]
    out.append(f"| {s} | " + ", ".join(f"{d:.0f}" for d in dense) + " | " +
               ", ".join(f"{m:.1f}" for m in mean) + " | " +
               ", ".join(f"{d / m:.2f}" for d, m in zip(dense, mean)) + " |")
out += ["", "## The mean step at 131072 over its touched-bytes bound (issue 32: within 2x)", "",
        "BM_SparseDecode/131072's bytes (the support's keys and values and the mean keys) at the "
        "same process's BM_StreamRead/131072 bandwidth.", "",
        "| side | round | step (us) | stream (GB/s) | bound (us) | step / bound |",
        "|---|---:|---:|---:|---:|---:|"]
for s in SIDES:
    for r in ROUNDS:
        m = runs[(131072, s, r)]
        sparse, stream = m["BM_SparseDecode/131072"], m["BM_StreamRead/131072"]
        bound = sparse["bytes_per_second"] * us(sparse) / stream["bytes_per_second"]
        out.append(f"| {s} | {r} | {us(sparse):.1f} | {stream['bytes_per_second'] / 1e9:.2f} | "
                   f"{bound:.1f} | {us(sparse) / bound:.2f} |")
open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))

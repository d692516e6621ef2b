#!/usr/bin/env python3
"""The two binaries of run.sh (before, after), from the JSON of this directory or of the run
directory given (second, alone-131072, no-prefetch); writes summary.md there. Medians of each
process's 3 repetitions; "avg" is the mean of the three rounds' medians."""
import json
import os
import re
import sys

top = os.path.dirname(os.path.abspath(__file__))
here = os.path.join(top, sys.argv[1]) if len(sys.argv) > 1 else top
run = os.path.relpath(here, os.path.dirname(top))
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


rules = {(s, r): medians(os.path.join(here, f"rules-{s}-{r}.json")) for s in SIDES for r in ROUNDS}
has_dense = os.path.exists(os.path.join(here, "dense-before-1.json"))
dense = {(s, r): medians(os.path.join(here, f"dense-{s}-{r}.json"))
         for s in SIDES for r in ROUNDS} if has_dense else {}
SIZES = tuple(n for n in SIZES if f"BM_RuleSparseDecode/{n}/rule:0" in rules[("before", 1)])


def avg(side, kind, n, rule):
    return sum(us(rules[(side, r)][f"BM_Rule{kind}/{n}/rule:{rule}"]) for r in ROUNDS) / len(ROUNDS)


out = [f"# {run}: before (65d49aa), after (score_rows<bf16> by words)", "",
       "## Rules: whole step and selection, cold (us; averages of the three rounds' medians)", "",
       "| rule | n | step before | step after | after / before | select before | select after |"
       " step / mean step: before | after |",
       "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
for n in SIZES:
    for rule, name in RULES.items():
        step = {s: avg(s, "SparseDecode", n, rule) for s in SIDES}
        sel = {s: avg(s, "Select", n, rule) for s in SIDES}
        ratio = {s: step[s] / avg(s, "SparseDecode", n, 0) for s in SIDES}
        out.append(f"| {name} | {n} | {step['before']:.0f} | {step['after']:.0f} | "
                   f"{step['after'] / step['before']:.3f} | {sel['before']:.0f} | {sel['after']:.0f} | "
                   f"{ratio['before']:.2f} | {ratio['after']:.2f} |")
out += ["", "## Rules per round (step us; the spread behind the averages)", "",
        "| rule | n | round | before | after | step / mean step: before | after |",
        "|---|---:|---:|---:|---:|---:|---:|"]
for n in SIZES:
    for rule, name in RULES.items():
        for r in ROUNDS:
            t = {s: us(rules[(s, r)][f"BM_RuleSparseDecode/{n}/rule:{rule}"]) for s in SIDES}
            m = {s: us(rules[(s, r)][f"BM_RuleSparseDecode/{n}/rule:0"]) for s in SIDES}
            out.append(f"| {name} | {n} | {r} | {t['before']:.0f} | {t['after']:.0f} | "
                       f"{t['before'] / m['before']:.2f} | {t['after'] / m['after']:.2f} |")
if not has_dense:
    open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
    print("\n".join(out))
    raise SystemExit
out += ["", "## Dense bf16 decode (the word kernel, its scores' stride now a run-time value)", "",
        "| benchmark | round | before | after |", "|---|---:|---:|---:|"]
for name in ("BM_DenseDecode/16384", "BM_DenseDecode/65536", "BM_DenseDecodeHot/2048"):
    for r in ROUNDS:
        out.append(f"| {name} (us) | {r} | " +
                   " | ".join(f"{us(dense[(s, r)][name]):.1f}" for s in SIDES) + " |")
for r in ROUNDS:
    out.append(f"| BM_StreamRead/65536 (GB/s) | {r} | " + " | ".join(
        f"{dense[(s, r)]['BM_StreamRead/65536']['bytes_per_second'] / 1e9:.2f}" for s in SIDES) + " |")
for r in ROUNDS:
    cells = []
    for s in SIDES:
        d = dense[(s, r)]
        per = us(d["BM_DenseDecode/65536"]) * 1e3 / 65536
        roof = 256 / d["BM_StreamRead/65536"]["bytes_per_second"] * 1e9
        cells.append(f"{per / roof:.2f}")
    out.append(f"| dense 65536 / stream roofline | {r} | " + " | ".join(cells) + " |")
out += ["", "## Dense at 16384 against the mean rule's step (dense from the dense process, the mean"
        " step from the rules process of the same round)", "",
        "| side | round | dense us | mean step us | dense / mean step |", "|---|---:|---:|---:|---:|"]
for s in SIDES:
    for r in ROUNDS:
        d = us(dense[(s, r)]["BM_DenseDecode/16384"])
        m = us(rules[(s, r)]["BM_RuleSparseDecode/16384/rule:0"])
        out.append(f"| {s} | {r} | {d:.0f} | {m:.0f} | {d / m:.1f} |")
open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))

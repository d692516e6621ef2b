#!/usr/bin/env python3
"""From run.sh's JSON, the bf16means side (every summary scored in bf16): each rule's step
against dense decode in the same process, and dense bf16 decode at 131072 against its stream
bound (256 bytes per position at the process's BM_StreamRead/131072 rate). Medians of each
process's 3 repetitions; ranges over the three rounds. Prints against_dense.txt's content.

    python3 records/rules-bf16-means-2026-12-06/against_dense.py
"""
import json
import os
import re

here = os.path.dirname(os.path.abspath(__file__))
ROUNDS, SIZES = (1, 2, 3), (16384, 131072)
RULES = {0: "mean", 1: "bound", 2: "twostage/mean", 3: "twostage/bound", 4: "submean", 5: "oracle"}
SIDES = ("bf16means", "f32means")


def medians(path):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[re.sub(r"/(real_time|manual_time|iterations:\d+)", "", b["run_name"])] = b
    return out


def us(b):
    return b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]


def span(values, digits):
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


runs = {(n, s, r): medians(os.path.join(here, f"rules-{n}-{s}-{r}.json"))
        for n in SIZES for s in SIDES for r in ROUNDS}

print("bf16means: step (us, range of the rounds' medians); step / mean step; dense / step\n")
print("| rule | n | step us | step / mean step | dense / step |")
print("|---|---:|---|---|---|")
for n in SIZES:
    for rule, name in RULES.items():
        steps = [us(runs[(n, "bf16means", r)][f"BM_RuleSparseDecode/{n}/rule:{rule}"])
                 for r in ROUNDS]
        means = [us(runs[(n, "bf16means", r)][f"BM_RuleSparseDecode/{n}/rule:0"]) for r in ROUNDS]
        dense = [us(runs[(n, "bf16means", r)][f"BM_DenseDecode/{n}"]) for r in ROUNDS]
        print(f"| {name} | {n} | {span(steps, 0)} | {span([s / m for s, m in zip(steps, means)], 2)}"
              f" | {span([d / s for d, s in zip(dense, steps)], 1)} |")
print("\ndense (us) per round: " + "; ".join(
    f"{n}: " + ", ".join(f"{us(runs[(n, 'bf16means', r)][f'BM_DenseDecode/{n}']):.0f}" for r in ROUNDS)
    for n in SIZES))

print("\nDense bf16 decode at 131072 against 256 bytes per position at BM_StreamRead/131072 "
      "(both sides: the dense kernel is the same code)\n")
print("| side | round | dense ns/position | stream GB/s | stream ns/position | dense / stream |")
print("|---|---:|---:|---:|---:|---:|")
for s in SIDES:
    for r in ROUNDS:
        m = runs[(131072, s, r)]
        ns = us(m["BM_DenseDecode/131072"]) * 1e3 / 131072
        rate = m["BM_StreamRead/131072"]["bytes_per_second"]
        floor = 256 / rate * 1e9
        print(f"| {s} | {r} | {ns:.1f} | {rate / 1e9:.2f} | {floor:.1f} | {ns / floor:.2f} |")

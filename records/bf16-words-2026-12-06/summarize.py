#!/usr/bin/env python3
"""The two binaries of run.sh (before, words), from this directory's JSON; writes summary.md.
Medians of each process's 3 repetitions; "avg" is the mean of the three rounds.

Dense decode against its roofline: per position, max(row bytes / stream bandwidth, 896 FMAs /
FMA rate), with the stream bandwidth and FMA rate of the same process (BM_StreamRead,
BM_StreamRead_f32, BM_FmaPeak); q8_0 rows (136 bytes) use the bf16 stream's rate. The mean
rule's sparse step against its touched-bytes bound: BM_SparseDecode's bytes (the support's keys
and values and the mean keys) at the same process's BM_StreamRead."""
import json
import os
import re

here = os.path.dirname(os.path.abspath(__file__))
ROW_BYTES = {"bf16": 256, "f32": 512, "q8_0": 136}
DENSE = {"bf16": "BM_DenseDecode", "f32": "BM_DenseDecode_f32", "q8_0": "BM_DenseDecodeQ8"}
STREAM = {"bf16": "BM_StreamRead", "f32": "BM_StreamRead_f32", "q8_0": "BM_StreamRead"}
FMAS = 896
RULES = {0: "mean", 1: "bound", 2: "twostage/mean", 3: "twostage/bound", 4: "submean"}
SIDES, ROUNDS = ("before", "words"), (1, 2, 3)


def medians(path):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[re.sub(r"/(real_time|manual_time|iterations:\d+)", "", b["run_name"])] = b
    return out


def us(b):
    return b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]


ops = {(s, r): medians(os.path.join(here, f"operators-{s}-{r}.json")) for s in SIDES for r in ROUNDS}
rules = {(s, r): medians(os.path.join(here, f"rules-{s}-{r}.json")) for s in SIDES for r in ROUNDS}


def roofline_ns(m, kv, n):
    return max(ROW_BYTES[kv] / m[f"{STREAM[kv]}/{n}"]["bytes_per_second"],
               FMAS / m["BM_FmaPeak"]["items_per_second"]) * 1e9


def touched_bound_us(m, n):
    sparse = m[f"BM_SparseDecode/{n}"]
    return sparse["bytes_per_second"] * us(sparse) / m[f"BM_StreamRead/{n}"]["bytes_per_second"]


out = ["# bf16-words-2026-12-06: before (978b9f0), words (this change)", "",
       "## Dense decode against its roofline (ns per position; roofline of each process)", "",
       "| KV | n | round | before | words | roofline (words) | before / roof | words / roof |",
       "|---|---:|---:|---:|---:|---:|---:|---:|"]
for kv in ("bf16", "f32", "q8_0"):
    for n in (65536, 131072):
        for r in ROUNDS:
            per = {s: us(ops[(s, r)][f"{DENSE[kv]}/{n}"]) * 1e3 / n for s in SIDES}
            roof = {s: roofline_ns(ops[(s, r)], kv, n) for s in SIDES}
            out.append(f"| {kv} | {n} | {r} | " + " | ".join(f"{per[s]:.1f}" for s in SIDES) +
                       f" | {roof['words']:.1f} | " + " | ".join(f"{per[s] / roof[s]:.2f}" for s in SIDES) + " |")
out += ["", "## Hot kernels (us) and the stream read (GB/s)", "",
        "| benchmark | round | before | words |", "|---|---:|---:|---:|"]
for name in ("BM_DenseDecodeHot/2048", "BM_DenseDecodeHot_f32/2048", "BM_DenseDecodeHotQ8/2048"):
    for r in ROUNDS:
        out.append(f"| {name} | {r} | " + " | ".join(f"{us(ops[(s, r)][name]):.1f}" for s in SIDES) + " |")
for n in (65536, 131072):
    for r in ROUNDS:
        out.append(f"| BM_StreamRead/{n} | {r} | " + " | ".join(
            f"{ops[(s, r)][f'BM_StreamRead/{n}']['bytes_per_second'] / 1e9:.2f}" for s in SIDES) + " |")
out += ["", "## The mean rule's sparse step against its touched-bytes bound (BM_SparseDecode, bf16)", "",
        "| n | round | before us | words us | bound us (words) | before / bound | words / bound |",
        "|---:|---:|---:|---:|---:|---:|---:|"]
for n in (65536, 131072):
    for r in ROUNDS:
        t = {s: us(ops[(s, r)][f"BM_SparseDecode/{n}"]) for s in SIDES}
        b = {s: touched_bound_us(ops[(s, r)], n) for s in SIDES}
        out.append(f"| {n} | {r} | " + " | ".join(f"{t[s]:.1f}" for s in SIDES) + f" | {b['words']:.1f} | " +
                   " | ".join(f"{t[s] / b[s]:.2f}" for s in SIDES) + " |")


def avg(side, kind, n, rule):
    return sum(us(rules[(side, r)][f"BM_Rule{kind}/{n}/rule:{rule}"]) for r in ROUNDS) / len(ROUNDS)


out += ["", "## Rules: whole step and selection, cold (us; averages of the three rounds' medians)", "",
        "| rule | n | step before | step words | select before | select words | "
        "step / mean step: before | words |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
for n in (16384, 131072):
    for i, name in RULES.items():
        step = {s: avg(s, "SparseDecode", n, i) for s in SIDES}
        select = {s: avg(s, "Select", n, i) for s in SIDES}
        mean_step = {s: avg(s, "SparseDecode", n, 0) for s in SIDES}
        out.append(f"| {name} | {n} | " + " | ".join(f"{step[s]:.0f}" for s in SIDES) + " | " +
                   " | ".join(f"{select[s]:.0f}" for s in SIDES) + " | " +
                   " | ".join(f"{step[s] / mean_step[s]:.2f}" for s in SIDES) + " |")
out += ["", "## Rules per round (step us at 131072; the spread behind the averages)", "",
        "| rule | round | before | words |", "|---|---:|---:|---:|"]
for i, name in RULES.items():
    for r in ROUNDS:
        out.append(f"| {name} | {r} | " + " | ".join(
            f"{us(rules[(s, r)][f'BM_RuleSparseDecode/131072/rule:{i}']):.0f}" for s in SIDES) + " |")
out += ["", "## Dense at 16384 against the mean rule's step (the same processes)", "",
        "| side | round | dense us | mean step us | dense / mean step |", "|---|---:|---:|---:|---:|"]
for s in SIDES:
    for r in ROUNDS:
        d = us(rules[(s, r)]["BM_DenseDecode/16384"])
        m = us(rules[(s, r)]["BM_RuleSparseDecode/16384/rule:0"])
        out.append(f"| {s} | {r} | {d:.0f} | {m:.0f} | {d / m:.1f} |")
open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))

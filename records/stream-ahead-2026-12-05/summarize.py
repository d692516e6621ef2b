#!/usr/bin/env python3
"""Before and after, from this directory's JSON (run.sh); writes summary.md.

Dense decode against its roofline: per position, max(row bytes / stream bandwidth, 896 FMAs /
FMA rate), with the stream bandwidth and FMA rate of the same process (BM_StreamRead,
BM_StreamRead_f32, BM_FmaPeak); q8_0 rows (136 bytes: 64 quants and a 2-byte scale per 32, keys
and values) use the bf16 stream's rate. The rules: whole sparse step and selection (us), and the
step over the mean rule's step of the same process. Medians of each process's repetitions."""
import json
import os
import re

here = os.path.dirname(os.path.abspath(__file__))
ROW_BYTES = {"bf16": 256, "f32": 512, "q8_0": 136}
DENSE = {"bf16": "BM_DenseDecode", "f32": "BM_DenseDecode_f32", "q8_0": "BM_DenseDecodeQ8"}
STREAM = {"bf16": "BM_StreamRead", "f32": "BM_StreamRead_f32", "q8_0": "BM_StreamRead"}
FMAS = 896
RULES = {0: "mean", 1: "bound", 2: "twostage/mean", 3: "twostage/bound", 4: "submean",
         9: "twostage/bound@2", 10: "twostage/mean@2"}
SIDES, ROUNDS = ("before", "after"), (1, 2)


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
out = ["## Dense decode against its roofline (ns per position; roofline of each process)", "",
       "| KV | n | round | before | after | roofline | before / roofline | after / roofline |",
       "|---|---:|---:|---:|---:|---:|---:|---:|"]
for kv in ("bf16", "f32", "q8_0"):
    for n in (65536, 131072):
        for r in ROUNDS:
            per, ratio = {}, {}
            for s in SIDES:
                m = ops[(s, r)]
                per[s] = us(m[f"{DENSE[kv]}/{n}"]) * 1e3 / n
                roof = max(ROW_BYTES[kv] / m[f"{STREAM[kv]}/{n}"]["bytes_per_second"],
                           FMAS / m["BM_FmaPeak"]["items_per_second"]) * 1e9
                ratio[s] = per[s] / roof
            out.append(f"| {kv} | {n} | {r} | {per['before']:.1f} | {per['after']:.1f} | {roof:.1f} | "
                       f"{ratio['before']:.2f} | {ratio['after']:.2f} |")
out += ["", "## Hot kernels and the mean rule's sparse step (us)", "",
        "| benchmark | round | before | after |", "|---|---:|---:|---:|"]
for name in ("BM_DenseDecodeHot/2048", "BM_DenseDecodeHot_f32/2048", "BM_DenseDecodeHotQ8/2048",
             "BM_SparseDecode/65536", "BM_SparseDecode/131072"):
    for r in ROUNDS:
        out.append(f"| {name} | {r} | {us(ops[('before', r)][name]):.1f} | {us(ops[('after', r)][name]):.1f} |")
out += ["", "## The mean rule's sparse step against its touched-bytes bound (BM_SparseDecode, bf16:",
        "the support's keys and values and the mean keys, at the same process's BM_StreamRead)", "",
        "| n | round | before us | after us | bound us | before / bound | after / bound |",
        "|---:|---:|---:|---:|---:|---:|---:|"]
for n in (65536, 131072):
    for r in ROUNDS:
        t, bound = {}, {}
        for s in SIDES:
            m = ops[(s, r)]
            sparse = m[f"BM_SparseDecode/{n}"]
            t[s] = us(sparse)
            bound[s] = sparse["bytes_per_second"] * us(sparse) / m[f"BM_StreamRead/{n}"]["bytes_per_second"]
        out.append(f"| {n} | {r} | {t['before']:.1f} | {t['after']:.1f} | {bound['after']:.1f} | "
                   f"{t['before'] / bound['before']:.2f} | {t['after'] / bound['after']:.2f} |")
out += ["", "## Rules: whole step and selection, cold (us; averages of the two rounds' medians)", "",
        "| rule | n | step before | step after | select before | select after | "
        "step / mean step before | after |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
for n in (16384, 131072):
    for i, name in RULES.items():
        def avg(kind, s, rule=i):
            return sum(us(rules[(s, r)][f"BM_Rule{kind}/{n}/rule:{rule}"]) for r in ROUNDS) / len(ROUNDS)
        step = {s: avg("SparseDecode", s) for s in SIDES}
        select = {s: avg("Select", s) for s in SIDES}
        mean_step = {s: avg("SparseDecode", s, 0) for s in SIDES}
        out.append(f"| {name} | {n} | {step['before']:.0f} | {step['after']:.0f} | "
                   f"{select['before']:.0f} | {select['after']:.0f} | "
                   f"{step['before'] / mean_step['before']:.2f} | {step['after'] / mean_step['after']:.2f} |")
open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))

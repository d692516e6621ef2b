#!/usr/bin/env python3
"""Dense bf16 decode, exact and bf16_products, against the roofline of each process (run.sh):
ns per position cold over max(256 bytes / BM_StreamRead's rate, 896 FMAs / BM_FmaPeak's rate),
medians of 3 repetitions; the hot kernels in us; bf16_products' own error counters."""
import json
import os
import re

here = os.path.dirname(os.path.abspath(__file__))


def medians(path):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[re.sub(r"/(real_time|manual_time|iterations:\d+)", "", b["run_name"])] = b
    return out


def us(b):
    return b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]


out = ["| round | n | exact ns/position | bf16_products ns/position | roofline ns | exact / roofline | bf16_products / roofline |",
       "|---:|---:|---:|---:|---:|---:|---:|"]
hot, errors = [], []
for r in (1, 2):
    m = medians(os.path.join(here, f"round-{r}.json"))
    for n in (65536, 131072):
        roof = max(256 / m[f"BM_StreamRead/{n}"]["bytes_per_second"], 896 / m["BM_FmaPeak"]["items_per_second"]) * 1e9
        exact = us(m[f"BM_DenseDecode/{n}"]) * 1e3 / n
        fast = us(m[f"BM_DenseDecodeBf16Products/{n}"]) * 1e3 / n
        out.append(f"| {r} | {n} | {exact:.1f} | {fast:.1f} | {roof:.1f} | {exact / roof:.2f} | {fast / roof:.2f} |")
    hot.append(f"| {r} | {us(m['BM_DenseDecodeHot/2048']):.1f} | {us(m['BM_DenseDecodeHotBf16Products/2048']):.1f} |")
    b = m["BM_DenseDecodeBf16Products/131072"]
    errors.append(f"| {r} | {b.get('lse_error', float('nan')):.2e} | {b.get('out_error', float('nan')):.2e} |")
out += ["", "Hot kernels at 2048 positions (us):", "", "| round | exact | bf16_products |", "|---:|---:|---:|"] + hot
out += ["", "bf16_products against exact on the first copy (BM_DenseDecodeBf16Products/131072's counters):", "",
        "| round | largest lse difference | largest output difference (relative to the head's largest) |",
        "|---:|---:|---:|"] + errors
open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))

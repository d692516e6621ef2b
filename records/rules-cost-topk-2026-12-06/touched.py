#!/usr/bin/env python3
"""touched.sh's runs: the mean rule's step (BM_SparseDecode/131072, median of 3) over its
touched-bytes bound (its bytes, the support's keys and values and the mean keys, at the same
process's BM_StreamRead/131072 median bandwidth), per process."""
import json
import os
import re

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "touched")


def medians(path):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[re.sub(r"/(real_time|manual_time|iterations:\d+)", "", b["run_name"])] = b
    return out


def us(b):
    return b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]


print("| side | round | step (us) | stream (GB/s) | bound (us) | step / bound |")
print("|---|---:|---:|---:|---:|---:|")
for side in ("base", "topk"):
    for r in (1, 2, 3):
        m = medians(os.path.join(here, f"{side}-{r}.json"))
        sparse, stream = m["BM_SparseDecode/131072"], m["BM_StreamRead/131072"]
        bound = sparse["bytes_per_second"] * us(sparse) / stream["bytes_per_second"]
        print(f"| {side} | {r} | {us(sparse):.1f} | {stream['bytes_per_second'] / 1e9:.2f} | "
              f"{bound:.1f} | {us(sparse) / bound:.2f} |")

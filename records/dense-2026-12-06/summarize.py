#!/usr/bin/env python3
"""run.sh's binaries (base, ahead, split) from this directory's JSON, or (argument `first`) the
first run's two (base, ahead) from first/, or (`second`) second.sh's from second/; writes
summary.md there. Medians of
each process's 3 repetitions. Dense decode against its roofline: per position, max(row bytes /
stream bandwidth, 896 FMAs / FMA rate), with the stream bandwidth and FMA rate of the same
process (BM_StreamRead, BM_StreamRead_f32, BM_FmaPeak); q8_0 rows (136 bytes) use the bf16
stream's rate (as records/bf16-words-2026-12-06/summarize.py)."""
import json
import os
import re

here = os.path.dirname(os.path.abspath(__file__))
ROW_BYTES = {"bf16": 256, "f32": 512, "q8_0": 136}
DENSE = {"bf16": "BM_DenseDecode", "f32": "BM_DenseDecode_f32", "q8_0": "BM_DenseDecodeQ8"}
STREAM = {"bf16": "BM_StreamRead", "f32": "BM_StreamRead_f32", "q8_0": "BM_StreamRead"}
FMAS = 896
import sys

ROUNDS = (1, 2, 3)
KINDS = ("bf16", "f32", "q8_0")
HOT = ("BM_DenseDecodeHot/2048", "BM_DenseDecodeHot_f32/2048", "BM_DenseDecodeHotQ8/2048")
if len(sys.argv) > 1 and sys.argv[1] == "first":
    here, SIDES = os.path.join(here, "first"), ("base", "ahead")
    title = "dense-2026-12-06/first: base (a669c14), ahead (5841b42)"
elif len(sys.argv) > 1 and sys.argv[1] == "second":
    here, SIDES, KINDS, HOT = os.path.join(here, "second"), ("base", "split"), ("bf16",), HOT[:1]
    title = "dense-2026-12-06/second: base (a669c14), split (505641e), bf16"
else:
    SIDES = ("base", "ahead", "split")
    title = "dense-2026-12-06: base (a669c14), ahead (5841b42), split (505641e)"


def medians(path):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[re.sub(r"/(real_time|manual_time|iterations:\d+)", "", b["run_name"])] = b
    return out


def us(b):
    return b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]


ops = {(s, r): medians(os.path.join(here, f"operators-{s}-{r}.json")) for s in SIDES for r in ROUNDS}


def roofline_ns(m, kv, n):
    return max(ROW_BYTES[kv] / m[f"{STREAM[kv]}/{n}"]["bytes_per_second"],
               FMAS / m["BM_FmaPeak"]["items_per_second"]) * 1e9


out = [f"# {title}", "",
       "## Dense decode against its roofline (ns per position; roofline of each process)", "",
       "| KV | n | round | " + " | ".join(SIDES) + " | roofline (last) | " +
       " | ".join(f"{s} / roof" for s in SIDES) + " |",
       "|---|---:|---:|" + "---:|" * (2 * len(SIDES) + 1)]
for kv in KINDS:
    for n in (65536, 131072):
        for r in ROUNDS:
            per = {s: us(ops[(s, r)][f"{DENSE[kv]}/{n}"]) * 1e3 / n for s in SIDES}
            roof = {s: roofline_ns(ops[(s, r)], kv, n) for s in SIDES}
            out.append(f"| {kv} | {n} | {r} | " + " | ".join(f"{per[s]:.1f}" for s in SIDES) +
                       f" | {roof[SIDES[-1]]:.1f} | " +
                       " | ".join(f"{per[s] / roof[s]:.2f}" for s in SIDES) + " |")
out += ["", "## Hot kernels (us), the stream read (GB/s) and the FMA rate (G/s)", "",
        "| benchmark | round | " + " | ".join(SIDES) + " |", "|---|---:|" + "---:|" * len(SIDES)]
for name in HOT:
    for r in ROUNDS:
        out.append(f"| {name} | {r} | " +
                   " | ".join(f"{us(ops[(s, r)][name]):.1f}" for s in SIDES) + " |")
for n in (65536, 131072):
    for r in ROUNDS:
        out.append(f"| BM_StreamRead/{n} | {r} | " + " | ".join(
            f"{ops[(s, r)][f'BM_StreamRead/{n}']['bytes_per_second'] / 1e9:.2f}" for s in SIDES) + " |")
for r in ROUNDS:
    out.append(f"| BM_FmaPeak | {r} | " + " | ".join(
        f"{ops[(s, r)]['BM_FmaPeak']['items_per_second'] / 1e9:.1f}" for s in SIDES) + " |")
open(os.path.join(here, "summary.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))

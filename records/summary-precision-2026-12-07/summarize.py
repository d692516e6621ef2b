#!/usr/bin/env python3
"""summary.md of run.sh's JSON: each rule's sparse step at both summary precisions, against the
f32 mean step and against dense decode, per round; the append and certified-bounds costs.

    python3 records/summary-precision-2026-12-07/summarize.py > summary.md
"""
import glob
import json
import os
import re
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (16384, 131072)


def runs(pattern):
    """{round: {benchmark name: (time, label, counters)}} over the files matching pattern."""
    out = {}
    for path in sorted(glob.glob(os.path.join(HERE, pattern))):
        round_ = int(re.search(r"-(\d+)\.json$", path).group(1))
        data = json.load(open(path))
        out[round_] = {b["name"]: b for b in data["benchmarks"] if b.get("run_type") == "iteration"}
    return out


def span(values, fmt="{:.1f}"):
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def main():
    print("# Every rule at f32 and bf16 summary precision (`BM_RuleSparseDecode`)\n")
    print("Cold, one GQA group (7 query heads, head_dim 64), bf16 KV, blocks of 32, top-k 16, "
          "4 sinks, window 64, one support per group; microseconds per step, the range over "
          "three rounds (each size a process of its own per round). Ratios are per round, "
          "then ranged.\n")
    by_size = {n: runs(f"rules-{n}-*.json") for n in SIZES}
    rows = []  # (label, {n: [times per round]})
    labels = []
    for n in SIZES:
        for round_, benches in by_size[n].items():
            for name, b in benches.items():
                if name.startswith("BM_RuleSparseDecode/"):
                    label = b.get("label", name)
                    if label not in labels:
                        labels.append(label)
    times = defaultdict(lambda: defaultdict(dict))  # label -> n -> round -> us
    dense = defaultdict(dict)
    sparse_default = defaultdict(dict)
    floor = defaultdict(dict)
    for n in SIZES:
        for round_, benches in by_size[n].items():
            for name, b in benches.items():
                t = b["real_time"]
                if name.startswith("BM_RuleSparseDecode/"):
                    times[b.get("label", name)][n][round_] = t
                elif name.startswith(f"BM_DenseDecode/{n}/"):
                    dense[n][round_] = t
                elif name.startswith(f"BM_SparseDecode/{n}/"):
                    sparse_default[n][round_] = t
                elif name.startswith(f"BM_SupportRead/{n}/"):
                    floor[n][round_] = t
    header = "| rule | precision |"
    rule_line = "|---|---|"
    for n in SIZES:
        header += f" us at {n} | / f32 mean step | dense / step |"
        rule_line += "---:|---:|---:|"
    print(header)
    print(rule_line)
    for label in labels:
        rule, _, precision = label.partition("+")
        precision = precision or "f32"
        line = f"| {rule} | {precision} |"
        for n in SIZES:
            t = times[label][n]
            mean = times["mean"][n]
            rounds = sorted(set(t) & set(mean) & set(dense[n]))
            line += (f" {span([t[r] for r in rounds])} | {span([t[r] / mean[r] for r in rounds], '{:.2f}')}x |"
                     f" {span([dense[n][r] / t[r] for r in rounds], '{:.1f}')}x |")
        print(line)
    print()
    print("| measure | " + " | ".join(str(n) for n in SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    for name, table in (("dense decode (`BM_DenseDecode`), us", dense),
                        ("default sparse step (`BM_SparseDecode`: mean, f32), us", sparse_default),
                        ("its touched bytes read alone (`BM_SupportRead`), us", floor)):
        print(f"| {name} | " + " | ".join(span(list(table[n].values())) for n in SIZES) + " |")
    print("| default sparse step / touched bytes | " + " | ".join(
        span([sparse_default[n][r] / floor[n][r] for r in floor[n]], "{:.2f}") + "x" for n in SIZES) + " |")
    print()
    other = runs("append-bounds-*.json")
    names = []
    for benches in other.values():
        for name in benches:
            if name not in names:
                names.append(name)
    print("| benchmark | time per call (range over rounds) | summary bytes per position |")
    print("|---|---:|---:|")
    for name in names:
        ts = [benches[name]["real_time"] for benches in other.values() if name in benches]
        unit = next(benches[name]["time_unit"] for benches in other.values() if name in benches)
        per = next((benches[name].get("summary_bytes_per_position") for benches in other.values()
                    if name in benches), None)
        print(f"| {name} | {span(ts)} {unit} | {'' if per is None else f'{per:.1f}'} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""summary.md of run.sh: after / before per measure and round, and their range."""
import glob
import json
import os
import re
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))


def bench(path):
    data = json.load(open(path))
    out = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        name = re.sub(r"/rule:\d+/", "/rule:mean-bf16/", b["name"])
        name = name.replace("stored-q8", "stored-int8").replace("interleaved-q8", "interleaved-int8")
        out[name] = b["real_time"]
    return out


def main():
    values = defaultdict(lambda: defaultdict(dict))  # measure -> side -> round -> value
    for path in glob.glob(os.path.join(HERE, "generate-*-*-*.json")):
        name, side, round_ = re.search(r"generate-(.+)-(before|after)-(\d)\.json$", path).groups()
        values[f"amc-generate SmolLM2 {name}, decode tokens/s"][side][round_] = json.load(
            open(path))["decode_tokens_per_s"]
    for kind in ("matvec", "decode"):
        for path in glob.glob(os.path.join(HERE, f"{kind}-*-*.json")):
            side, round_ = re.search(r"-(before|after)-(\d)\.json$", path).groups()
            for name, t in bench(path).items():
                values[name + " (time)"][side][round_] = t
    print("# Before (7a755dc) against after, interleaved rounds\n")
    print("after / before per round: above 1 means after is faster for tokens/s, slower for times.\n")
    print("| measure | before | after | after / before, per round |")
    print("|---|---|---|---|")
    for measure in sorted(values):
        b, a = values[measure]["before"], values[measure]["after"]
        rounds = sorted(set(a) & set(b))
        if not rounds:
            continue
        fmt = lambda xs: f"{min(xs):.4g}-{max(xs):.4g}"
        ratios = ", ".join(f"{a[r] / b[r]:.3f}" for r in rounds)
        print(f"| {measure} | {fmt([b[r] for r in rounds])} | {fmt([a[r] for r in rounds])} | {ratios} |")


if __name__ == "__main__":
    main()

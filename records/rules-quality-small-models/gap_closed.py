#!/usr/bin/env python3
"""The gap closed to the oracle (docs/rules.md) from amc-eval sweep summaries.

    python3 records/rules-quality-small-models/gap_closed.py MEAN_DIR ORACLE_DIR RULE_DIR...

Each DIR holds a sweep's summary.csv. For every rule and support: the largest perplexity change
over prefixes, the median omitted mass (1 - median retained mass), the mean support read, and
G = (mean - rule) / (mean - oracle) on each of the two measures, as a Markdown table.
"""

import csv
import sys
from pathlib import Path


def load(folder):
    with open(Path(folder) / "summary.csv") as f:
        return {(int(r["context"]), int(r["support"])): r for r in csv.DictReader(f)}


def gap(mean, rule, oracle):
    return (mean - rule) / (mean - oracle) if mean != oracle else float("nan")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    mean, oracle = load(sys.argv[1]), load(sys.argv[2])
    print("| rule | context | support | max PPL change | median omitted mass | mean support read "
          "| G (max PPL) | G (omitted mass) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for folder in sys.argv[3:]:
        for key, r in sorted(load(folder).items()):
            m, o = mean[key], oracle[key]
            ppl = [float(x["max_ppl_change_pct"]) for x in (m, r, o)]
            omitted = [1.0 - float(x["median_retained_mass"]) for x in (m, r, o)]
            print(f"| {Path(folder).name} | {key[0]} | {key[1]} | {ppl[1]:+.1f}% | {omitted[1]:.4f} "
                  f"| {float(r['mean_support_read']):.1f} | {gap(*ppl):.2f} | {gap(*omitted):.2f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Medians (us) of BM_RuleSparseDecode/16384 for mean, bound and twostage/bound, per process,
in the two A/B runs of README.md."""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
for run, sides in (("ungated", ("before", "after")), ("gated", ("before", "gated"))):
    print(f"{run}:")
    for side in sides:
        cells, sums = [], [0.0, 0.0, 0.0]
        for r in range(1, 6):
            d = json.load(open(os.path.join(here, run, f"{side}-{r}.json")))
            m = {b["run_name"].split("/")[2]: b["real_time"] for b in d["benchmarks"]
                 if b.get("aggregate_name") == "median"}
            vals = [m[k] for k in ("rule:0", "rule:1", "rule:3")]
            sums = [a + b for a, b in zip(sums, vals)]
            cells.append("/".join(f"{v:.0f}" for v in vals))
        print(f"  {side:7s} {' '.join(cells)}  mean of 5: " + "/".join(f"{s / 5:.1f}" for s in sums))

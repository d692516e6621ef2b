#!/usr/bin/env python3
"""summary.md from run.sh's JSON: each rule's median step (us) per table and round, and the step
over the mean step of the same process."""
import json
import pathlib

here = pathlib.Path(__file__).resolve().parent
rules = {0: "mean", 1: "bound", 3: "twostage/bound", 5: "oracle"}
tables = ["avx512", "amx"]
lines = ["# The whole step: amx table against avx512 (run.sh)", ""]
for n in (16384, 131072):
    lines += [f"## {n} positions", "",
              "| rule | " + " | ".join(f"{t} r{r}" for t in tables for r in (1, 2, 3)) +
              " | step / mean step, avx512 | amx |",
              "|---|" + "---:|" * 8]
    medians = {}
    for t in tables:
        for r in (1, 2, 3):
            data = json.loads((here / f"rules-{n}-{t}-{r}.json").read_text())
            for b in data["benchmarks"]:
                if b.get("aggregate_name") != "median":
                    continue
                rule = int(b["run_name"].split("rule:")[1].split("/")[0])
                medians[(t, r, rule)] = b["real_time"]  # us (time_unit us)
                assert b["time_unit"] == "us"
    for rule, name in rules.items():
        cells = [f"{medians[(t, r, rule)]:.0f}" for t in tables for r in (1, 2, 3)]
        ratios = []
        for t in tables:
            rs = [medians[(t, r, rule)] / medians[(t, r, 0)] for r in (1, 2, 3)]
            ratios.append(f"{min(rs):.2f}-{max(rs):.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines.append("")
(here / "summary.md").write_text("\n".join(lines))
print("\n".join(lines))

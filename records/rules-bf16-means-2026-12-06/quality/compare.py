#!/usr/bin/env python3
"""mean-f32 against mean-bf16 (run.sh), run by run: first divergence, perplexity change and
retained mass."""
import gzip
import json
import pathlib

here = pathlib.Path(__file__).resolve().parent


def runs(side):
    with gzip.open(here / f"mean-{side}" / "runs.jsonl.gz", "rt") as f:
        return {(r["context"], r["prefix"], r["support"]): r for r in map(json.loads, f)}


f32, bf16 = runs("f32"), runs("bf16")
assert f32.keys() == bf16.keys()
keys = sorted(f32)
same_divergence = sum(f32[k]["first_divergence"] == bf16[k]["first_divergence"] for k in keys)
same_tokens = sum(f32[k]["sparse_tokens"] == bf16[k]["sparse_tokens"] for k in keys)
ppl = sorted(abs(f32[k]["ppl_change_pct"] - bf16[k]["ppl_change_pct"]) for k in keys)
mass = max(abs(f32[k]["retained_mass_mean"] - bf16[k]["retained_mass_mean"]) for k in keys)
print(f"{len(keys)} runs: the same first divergence in {same_divergence}, the same sparse "
      f"continuation in {same_tokens}")
print(f"perplexity change: largest difference {ppl[-1]:.2f} points, median {ppl[len(ppl) // 2]:.2f}")
print(f"retained mass (mean over steps, layers, heads): largest difference {mass:.5f}")
print()
print("| context | prefix | support | first divergence f32 | bf16 | PPL change f32 (%) | bf16 | "
      "retained mass f32 | bf16 |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for k in keys:
    a, b = f32[k], bf16[k]
    print(f"| {k[0]} | {k[1]} | {k[2]} | {a['first_divergence']} | {b['first_divergence']} | "
          f"{a['ppl_change_pct']:+.2f} | {b['ppl_change_pct']:+.2f} | "
          f"{a['retained_mass_mean']:.4f} | {b['retained_mass_mean']:.4f} |")

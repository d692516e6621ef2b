#!/usr/bin/env python3
"""The study's findings, counted the study's way on SmolLM2-135M-Instruct's raw runs.

    python3 records/smollm2-quality/study_side_by_side.py [DIR] > DIR/study_side_by_side.txt

DIR (default: this script's folder) holds run.sh's outputs: sweeps-{prose,code}/RULE/
(summary.csv, runs.jsonl.gz) and passkey/NAME/passkey.csv. Every number is computed from the
per-run records in runs.jsonl.gz; the medians per condition are checked against each sweep's
summary.csv (written by amc-eval) before anything is printed.

The study's findings (docs/reproduce.md) and how each is counted here:
(a) runs whose sparse greedy continuation equals the dense one through all 128 tokens;
(b) context-support conditions (supports >= 193: all 9 of this grid) whose MEDIAN teacher-forced
    perplexity change over the 5 prefixes is within 5% (-5% <= median <= +5%);
(c) runs with a teacher-forced match below 70%, and of those the ones with a perplexity change
    above +100%; beside them every run above +100% and the lowest match;
(d) retained mass against decisions: each rule's median retained mass per condition beside its
    exact matches, and the passkey (answers with the planted digits) per rule and support.
First divergence is given both ways: over every run with 128 for a run that never diverges
(amc-eval's summary.md and summary.csv), and over the diverging runs only.
"""

import csv
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
T = 128
# Sweep folder -> rule name; the first five run on both corpora (bound alone on code too).
RULES = {"mean": "mean", "oracle": "oracle", "bound": "bound", "two4": "twostage/mean",
         "two4-bound": "twostage/bound", "tp95-two4-bound": "twostage/bound, top-p 0.95",
         "sub4": "submean", "two4-sub4": "twostage/submean"}
# Passkey run -> {selector in passkey.csv: rule name}.
PASSKEY = {"mean-bound-oracle-two4": {"dense": "dense", "mean": "mean", "bound": "bound",
                                      "oracle": "oracle", "twostage": "twostage/mean"},
           "two4-bound": {"twostage": "twostage/bound"},
           "sub4": {"submean": "submean", "twostage": "twostage/submean"},
           "tp95-two4-bound": {"twostage": "twostage/bound, top-p 0.95"}}


def runs_of(folder):
    with gzip.open(folder / "runs.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def summary_of(folder):
    with open(folder / "summary.csv") as f:
        return {(int(r["context"]), int(r["support"])): r for r in csv.DictReader(f)}


def by_condition(runs):
    groups = defaultdict(list)
    for r in runs:
        groups[(r["context"], r["support"])].append(r)
    return dict(sorted(groups.items()))


def check_against_summary(name, groups, summary):
    """The medians recomputed from runs.jsonl equal summary.csv's (to 1e-9)."""
    assert set(groups) == set(summary), name
    for key, runs in groups.items():
        s = summary[key]
        for field, values in (("median_first_divergence", [r["first_divergence"] for r in runs]),
                              ("median_ppl_change_pct", [r["ppl_change_pct"] for r in runs]),
                              ("median_tf_match_pct", [r["tf_match_pct"] for r in runs]),
                              ("median_retained_mass", [r["retained_mass_mean"] for r in runs])):
            assert abs(statistics.median(values) - float(s[field])) < 1e-9, (name, key, field)
        assert sum(r["exact_match"] for r in runs) == int(s["exact_match_runs"]), (name, key)


def sweep_report(corpus, folder, name, out):
    runs = runs_of(folder)
    groups = by_condition(runs)
    check_against_summary(f"{corpus}/{folder.name}", groups, summary_of(folder))
    rule = RULES[folder.name]
    out.append(f"### {corpus}: {rule} ({folder.name}, {len(runs)} runs, "
               f"{len(groups)} conditions)")
    # (a)
    exact = [r for r in runs if r["exact_match"]]
    where = ", ".join(f"{c}/{s}: {n}" for (c, s), n in sorted(
        {(r["context"], r["support"]): sum(x["exact_match"] for x in groups[(r["context"],
         r["support"])]) for r in exact}.items()))
    out.append(f"(a) exact match through {T} tokens: {len(exact)}/{len(runs)}"
               + (f" (context/support: runs) {where}" if exact else ""))
    # (b)
    medians = {k: statistics.median(r["ppl_change_pct"] for r in v) for k, v in groups.items()}
    within = [k for k, m in medians.items() if -5.0 <= m <= 5.0]
    outside = ", ".join(f"{c}/{s} {m:+.1f}%" for (c, s), m in medians.items()
                        if not -5.0 <= m <= 5.0)
    out.append(f"(b) conditions with median PPL change within 5%: {len(within)}/{len(groups)}"
               + (f"; outside: {outside}" if outside else ""))
    worst = max(runs, key=lambda r: r["ppl_change_pct"])
    out.append(f"    median PPL change per condition {min(medians.values()):+.1f}% to "
               f"{max(medians.values()):+.1f}%; worst run {worst['ppl_change_pct']:+.1f}% "
               f"({worst['context']}/{worst['support']}, prefix {worst['prefix']}, TF match "
               f"{worst['tf_match_pct']:.1f}%)")
    # (c)
    low = [r for r in runs if r["tf_match_pct"] < 70.0]
    high = [r for r in runs if r["ppl_change_pct"] > 100.0]
    lowest = min(runs, key=lambda r: r["tf_match_pct"])
    fmt = lambda r: (f"{r['context']}/{r['support']} prefix {r['prefix']}: TF "  # noqa: E731
                     f"{r['tf_match_pct']:.1f}%, PPL {r['ppl_change_pct']:+.1f}%")
    out.append(f"(c) runs with TF match < 70%: {len(low)}/{len(runs)}, of which PPL > +100%: "
               f"{sum(r['ppl_change_pct'] > 100.0 for r in low)}"
               + (" [" + "; ".join(fmt(r) for r in low) + "]" if low else ""))
    out.append(f"    runs with PPL > +100%: {len(high)}"
               + (" [" + "; ".join(fmt(r) for r in high) + "]" if high else "")
               + f"; lowest TF match: {fmt(lowest)}")
    # (d)
    mass = [statistics.median(r["retained_mass_mean"] for r in v) for v in groups.values()]
    out.append(f"(d) median retained mass per condition {min(mass):.4f} to {max(mass):.4f} "
               f"(median omitted mass {1 - max(mass):.3f} to {1 - min(mass):.3f})")
    # First divergence, both definitions, and the dense margin there.
    all_runs = [r["first_divergence"] for r in runs]
    diverged = [r for r in runs if not r["exact_match"]]
    margins = [r["dense_margin_at_divergence"] for r in diverged]
    out.append(f"first divergence: median over all {len(runs)} runs (128 when none) "
               f"{statistics.median(all_runs):g}; over the {len(diverged)} diverging runs "
               f"{statistics.median(r['first_divergence'] for r in diverged):g}; per condition "
               f"(summary.csv) " + ", ".join(f"{statistics.median(r['first_divergence'] for r in v):g}"
                                            for v in groups.values()))
    out.append(f"dense margin at the first divergence: median {statistics.median(margins):.3f}; "
               f"below 0.5 in {sum(m < 0.5 for m in margins)}/{len(margins)} divergences")
    out.append("")
    return {"exact": len(exact), "runs": len(runs), "within": len(within),
            "conditions": len(groups), "low": len(low),
            "low_high": sum(r["ppl_change_pct"] > 100.0 for r in low), "lowest": lowest,
            "mass": (min(mass), max(mass))}


def dense_margins(folder, out):
    runs = runs_of(folder)
    per_prefix = {(r["context"], r["prefix"]): r["dense_margins"] for r in runs}
    for context in sorted({c for c, _ in per_prefix}):
        steps = [m for (c, _), ms in per_prefix.items() if c == context for m in ms]
        out.append(f"dense decisions at {context}: {len(steps)} steps, median margin "
                   f"{statistics.median(steps):.2f}, {100 * sum(m < 0.1 for m in steps) / len(steps):.1f}% "
                   f"below 0.1, {100 * sum(m < 0.5 for m in steps) / len(steps):.1f}% below 0.5")
    out.append("")


def passkey_report(out):
    cells = defaultdict(lambda: [0, 0, []])  # (rule, support, context) -> correct, trials, mass
    for run, names in PASSKEY.items():
        with open(ROOT / "passkey" / run / "passkey.csv") as f:
            for r in csv.DictReader(f):
                # The column is "rule" in amc-eval's output since the rename, "selector" before.
                rule = r["rule"] if "rule" in r else r["selector"]
                if rule not in names:
                    continue
                cell = cells[(names[rule], r["support"], int(r["context"]))]
                cell[0] += int(r["correct"])
                cell[1] += int(r["trials"])
                cell[2].append(float(r["mean_retained_mass"]))
    contexts = sorted({c for _, _, c in cells})
    out.append("## Passkey (code windows): answers with the digits, and the mean retained mass "
               "at the answering steps (mean over depths)")
    out.append("rule, support: " + ", ".join(str(c) for c in contexts))
    for rule in dict.fromkeys(r for r, _, _ in cells):
        for support in sorted({s for r, s, _ in cells if r == rule}, key=lambda s: int(s or 0)):
            parts = []
            for c in contexts:
                a, t, m = cells[(rule, support, c)]
                parts.append(f"{a}/{t} (mass {statistics.mean(m):.3f})")
            out.append(f"{rule}, {support or '-'}: " + ", ".join(parts))
    out.append("")


def compare(a, b, label, out):
    """Run by run: the same first divergence, PPL change and retained mass differences."""
    ra = {(r["context"], r["prefix"], r["support"]): r for r in runs_of(a)}
    rb = {(r["context"], r["prefix"], r["support"]): r for r in runs_of(b)}
    keys = sorted(set(ra) & set(rb))
    same = sum(ra[k]["first_divergence"] == rb[k]["first_divergence"] for k in keys)
    others = "; ".join(f"{k[0]}/{k[2]} prefix {k[1]}: {ra[k]['first_divergence']} and "
                       f"{rb[k]['first_divergence']}" for k in keys
                       if ra[k]["first_divergence"] != rb[k]["first_divergence"])
    ppl = max(abs(ra[k]["ppl_change_pct"] - rb[k]["ppl_change_pct"]) for k in keys)
    mass = max(abs(ra[k]["retained_mass_mean"] - rb[k]["retained_mass_mean"]) for k in keys)
    out.append(f"{label}: {len(keys)} runs, the same first divergence in {same}"
               + (f" (otherwise {others})" if others else "")
               + f"; PPL change within {ppl:.2f} points; mean retained mass within {mass:.5f}")


def main():
    out = ["# SmolLM2-135M-Instruct against the study's findings (study_side_by_side.py)", ""]
    totals = {}
    for corpus in ("prose", "code"):
        out.append(f"## {corpus}")
        out.append("")
        for folder in RULES:
            path = ROOT / f"sweeps-{corpus}" / folder
            if (path / "runs.jsonl.gz").is_file():
                totals[(corpus, folder)] = sweep_report(corpus, path, folder, out)
        dense_margins(ROOT / f"sweeps-{corpus}" / "mean", out)
    out.append("## The side-by-side table's cells")
    for (corpus, folder), t in totals.items():
        lo = t["lowest"]
        out.append(f"{corpus:5} {RULES[folder]:27} (a) {t['exact']}/{t['runs']}  "
                   f"(b) {t['within']}/{t['conditions']}  (c) {t['low']} below 70% "
                   f"({t['low_high']} above +100%), lowest {lo['tf_match_pct']:.1f}% at "
                   f"{lo['context']}/{lo['support']} ({lo['ppl_change_pct']:+.1f}%)  "
                   f"(d) median mass {t['mass'][0]:.2f}-{t['mass'][1]:.2f}")
    out.append("")
    passkey_report(out)
    out.append("## Summary precision: the same rule, two precisions or two builds")
    compare(ROOT / "sweeps-prose" / "two4-bound", ROOT / "sweeps-prose" / "two4-bound-bf16",
            "twostage/bound, f32 bounds (two4-bound) against bf16 bounds (two4-bound-bf16)", out)
    rerun = ROOT.parent / "rules-bf16-means-2026-12-06" / "quality"
    if (rerun / "mean-f32" / "runs.jsonl.gz").is_file():
        compare(ROOT / "sweeps-prose" / "mean", rerun / "mean-f32",
                "mean, f32 mean keys: this sweep against the rerun in "
                "records/rules-bf16-means-2026-12-06/quality/mean-f32", out)
        compare(rerun / "mean-f32", rerun / "mean-bf16",
                "mean, f32 against bf16 mean keys (the same build)", out)
    print("\n".join(out))


if __name__ == "__main__":
    main()

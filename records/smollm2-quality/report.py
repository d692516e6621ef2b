#!/usr/bin/env python3
"""The tables and plots of docs/results-smollm2.md from run.sh's outputs.

    python3 records/smollm2-quality/report.py [DIR]      (default: this script's folder)

Reads DIR/sweeps-{prose,code}/RULE/summary.csv (amc-eval sweep) and DIR/passkey/RUN/passkey.csv
(amc-eval passkey); writes DIR/tables.md and, per corpus, DIR/quality-CORPUS.{dat,png} (gnuplot).
G is the gap closed to the oracle (docs/rules.md): (mean - rule) / (mean - oracle) on
the largest perplexity change over the prefixes and on the median omitted mass, as
records/rules-quality-small-models/gap_closed.py computes it.
"""

import csv
import gzip
import json
import math
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules-quality-small-models"))
from gap_closed import gap, load  # noqa: E402  (the G of docs/rules.md's tables)

# Sweep directory -> the rule's name in the tables, in table order.
RULES = {
    "mean": "mean",
    "oracle": "oracle",
    "bound": "bound",
    "two4": "twostage/mean",
    "two4-bound": "twostage/bound",
    # At 4096 and 8064 with 385 and 769 only (run.sh says why).
    "two4-bound-bf16": "twostage/bound, bf16 bounds",
    "two2-bound": "twostage/bound, shortlist 2",
    "tp95-two4-bound": "twostage/bound, top-p 0.95",
    "sub4": "submean",
    "two4-sub4": "twostage/submean",
    # The q8_0 KV cache (its G against the bf16 cache's mean and oracle sweeps).
    "two4-bound-q8kv": "twostage/bound, q8_0 KV cache",
}
# Passkey run -> {the run's selector name: the rule's name in the tables}.
PASSKEY_RUNS = {
    "mean-bound-oracle-two4": {"mean": "mean", "bound": "bound", "oracle": "oracle",
                               "twostage": "twostage/mean"},
    "two4-bound": {"twostage": "twostage/bound"},
    "two4-bound-bf16": {"twostage": "twostage/bound, bf16 bounds"},
    "two2-bound": {"twostage": "twostage/bound, shortlist 2"},
    "sub4": {"submean": "submean", "twostage": "twostage/submean"},
    "tp95-two4-bound": {"twostage": "twostage/bound, top-p 0.95"},
    # A run on another cache answers densely on that cache: its dense answers count apart.
    "two4-bound-q8kv": {"dense": "dense, q8_0 KV cache", "twostage": "twostage/bound, q8_0 KV cache"},
}
CORPORA = {"prose": "prose (What's New in Python 2.5-3.3)",
           "code": "code (Python standard-library modules)"}


def load_runs(folder):
    """Every run record of a sweep, from its runs.jsonl (or the .gz run.sh leaves)."""
    plain = folder / "runs.jsonl"
    path = plain if plain.is_file() else folder / "runs.jsonl.gz"
    with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
        return [json.loads(line) for line in f]


def divergence_margins(runs):
    """(context, support) -> the dense model's logit margin (top-1 minus top-2) at each diverged
    run's first divergence."""
    margins = defaultdict(list)
    for r in runs:
        if r["dense_margin_at_divergence"] is not None:
            margins[(r["context"], r["support"])].append(r["dense_margin_at_divergence"])
    return margins


def dense_margin_lines(runs):
    """Per context, how close the dense model's own greedy decisions are: the top-1 minus top-2
    logit margin over every step of every prefix's dense continuation."""
    per_prefix = {(r["context"], r["prefix"]): r["dense_margins"] for r in runs}
    lines = []
    for context in sorted({c for c, _ in per_prefix}):
        steps = [m for (c, _), ms in per_prefix.items() if c == context for m in ms]
        below = [100 * sum(1 for m in steps if m < x) / len(steps) for x in (0.1, 0.5)]
        lines.append(f"- context {context}: {len(steps)} dense steps, median margin "
                     f"{statistics.median(steps):.2f}, {below[0]:.1f}% below 0.1 and "
                     f"{below[1]:.1f}% below 0.5")
    return lines


def measures(row):
    """(largest perplexity change %, median omitted mass) of one summary row."""
    return float(row["max_ppl_change_pct"]), 1.0 - float(row["median_retained_mass"])


def divergence_summary(runs_of, out):
    """Per rule over all its runs: exact matches, first divergences and the dense margin there."""
    out.append("Per rule over its runs (3 contexts x 3 supports x 5 prefixes where it ran the "
               "whole grid): exact matches, the median first divergence over every run (128 for a "
               "run that never diverges, as summary.md counts it) and over the diverging runs "
               "only, the dense model's logit margin at the first divergence, and the lowest "
               "teacher-forced match:\n")
    out.append("| rule | exact match | median first divergence, all runs | median first "
               "divergence, diverging runs | median dense margin there | divergences at a margin "
               "below 0.5 | lowest TF match |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, runs in runs_of.items():
        every = [r["first_divergence"] for r in runs]
        first = [r["first_divergence"] for r in runs if not r["exact_match"]]
        margins = [r["dense_margin_at_divergence"] for r in runs
                   if r["dense_margin_at_divergence"] is not None]
        near = sum(1 for m in margins if m < 0.5)
        out.append(f"| {RULES[name]} | {sum(r['exact_match'] for r in runs)}/{len(runs)} "
                   f"| {statistics.median(every):g} "
                   f"| {f'{statistics.median(first):g}' if first else '-'} "
                   f"| {statistics.median(margins):.3f} | {near}/{len(margins)} "
                   f"| {min(r['tf_match_pct'] for r in runs):.1f}% |")
    out.append("")


def compact_tables(sweeps, out):
    """Two tables with a column per rule: largest perplexity change / median omitted mass, and
    G on each."""
    mean, oracle = sweeps["mean"], sweeps["oracle"]
    names = [n for n in RULES if n in sweeps]
    header = "| context | support | " + " | ".join(RULES[n] for n in names) + " |"
    rule = "|---:|---:|" + "---|" * len(names)
    out.append("Largest perplexity change over the prefixes / median omitted mass:\n")
    out += [header, rule]
    for key in sorted(mean):
        cells = []
        for n in names:
            if key not in sweeps[n]:
                cells.append("-")
                continue
            ppl, omitted = measures(sweeps[n][key])
            cells.append(f"{ppl:+.1f}% / {omitted:.3f}")
        out.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    out.append("\nG on the largest perplexity change / on the median omitted mass:\n")
    names = [n for n in names if n not in ("mean", "oracle")]
    out += ["| context | support | " + " | ".join(RULES[n] for n in names) + " |",
            "|---:|---:|" + "---|" * len(names)]
    for key in sorted(mean):
        m, o = measures(mean[key]), measures(oracle[key])
        cells = []
        for n in names:
            if key not in sweeps[n]:
                cells.append("-")
                continue
            r = measures(sweeps[n][key])
            cells.append(f"{gap(m[0], r[0], o[0]):.2f} / {gap(m[1], r[1], o[1]):.2f}")
        out.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    out.append("")


def sweep_tables(root, corpus, out):
    folder = root / f"sweeps-{corpus}"
    sweeps = {name: load(folder / name) for name in RULES
              if (folder / name / "summary.csv").is_file()}
    runs_of = {name: load_runs(folder / name) for name in sweeps}
    margins = {name: divergence_margins(runs) for name, runs in runs_of.items()}
    if "mean" not in sweeps or "oracle" not in sweeps:
        out.append(f"(no mean and oracle sweeps in {folder} yet)\n")
        return {}
    mean, oracle = sweeps["mean"], sweeps["oracle"]
    out.append(f"## {CORPORA[corpus]}\n")
    out.append("| context | support | rule | exact match | median first divergence | "
               "median dense margin there | median PPL change | max PPL change | median TF match "
               "| median omitted mass | mean support read | G (max PPL) | G (omitted) |")
    out.append("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    plot = defaultdict(list)  # (rule, context) -> [(support, max ppl, omitted)]
    for key in sorted(mean):
        for name, rows in sweeps.items():
            if key not in rows:
                continue
            r = rows[key]
            ppl, omitted = measures(r)
            m_ppl, m_omitted = measures(mean[key])
            o_ppl, o_omitted = measures(oracle[key])
            at_divergence = margins[name].get(key, [])
            margin = f"{statistics.median(at_divergence):.3f}" if at_divergence else "-"
            out.append(
                f"| {key[0]} | {key[1]} | {RULES[name]} | {r['exact_match_runs']}/{r['runs']} "
                f"| {float(r['median_first_divergence']):.0f} | {margin} "
                f"| {float(r['median_ppl_change_pct']):+.1f}% | {ppl:+.1f}% "
                f"| {float(r['median_tf_match_pct']):.1f}% | {omitted:.4f} "
                f"| {float(r['mean_support_read']):.0f} "
                f"| {gap(m_ppl, ppl, o_ppl):.2f} | {gap(m_omitted, omitted, o_omitted):.2f} |")
            plot[(name, key[0])].append((key[1], ppl, omitted))
    out.append("")
    compact_tables(sweeps, out)
    divergence_summary(runs_of, out)
    out.append("The dense model's own decisions (logit margin of its greedy token over the "
               "runner-up):\n")
    out.extend(dense_margin_lines(runs_of["mean"]))
    out.append("")
    return plot


def write_plot(root, corpus, plot):
    contexts = sorted({c for _, c in plot})
    rules = [name for name in RULES if any((name, c) in plot for c in contexts)]
    dat = root / f"quality-{corpus}.dat"
    with open(dat, "w") as f:
        for c in contexts:
            for name in rules:
                f.write(f"# {RULES[name]}, context {c}\n")
                points = sorted(plot.get((name, c), []))
                for support, ppl, omitted in points:
                    f.write(f"{support} {ppl:.4f} {omitted:.6f}\n")
                if not points:  # keeps gnuplot's block numbering (index) aligned
                    f.write("NaN NaN NaN\n")
                f.write("\n\n")
    script = [
        'set terminal pngcairo size 1500,800 font ",10"',
        f'set output "{root / f"quality-{corpus}.png"}"',
        f'set multiplot layout 2,{len(contexts)} title "SmolLM2-135M-Instruct, {corpus}: '
        'the paired protocol, 5 prefixes per context"',
        "set logscale x 2", "set xtics (193, 385, 769)", 'set xlabel "support (positions)"',
        "set key top right font \",8\"",
        f"array T[{len(rules)}] = [" + ", ".join(f'"{RULES[n]}"' for n in rules) + "]",
    ]
    n = len(rules)
    for i, c in enumerate(contexts):
        script += [f'set title "context {c}: largest perplexity change (%)"',
                   f'plot for [r=0:{n - 1}] "{dat}" index {i * n}+r using 1:2 '
                   'with linespoints title T[r+1]']
    script.append("set logscale y")
    for i, c in enumerate(contexts):
        script += [f'set title "context {c}: median omitted mass"',
                   f'plot for [r=0:{n - 1}] "{dat}" index {i * n}+r using 1:($3 > 0 ? $3 : 1e-5) '
                   'with linespoints title T[r+1]']
    script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)


def passkey_table(root, out):
    cells = defaultdict(lambda: [0, 0])  # (rule, support, context) -> [correct, trials]
    contexts = set()
    dense_from = None  # the run whose dense answers are counted
    for run, names in PASSKEY_RUNS.items():
        path = root / "passkey" / run / "passkey.csv"
        if not path.is_file():
            continue
        with open(path) as f:
            for r in csv.DictReader(f):
                # The column is "rule" in amc-eval's output since the rename, "selector" before.
                selector = r["rule"] if "rule" in r else r["selector"]
                if selector == "dense":
                    rule, support = names.get("dense", "dense"), ""
                elif selector in names:
                    rule, support = names[selector], r["support"]
                else:
                    continue
                context = int(r["context"])
                contexts.add(context)
                cell = cells[(rule, support, context)]
                if rule == "dense" and dense_from not in (None, run):
                    continue  # every run answers the same prompts densely: count one run's
                if rule == "dense":
                    dense_from = run
                cell[0] += int(r["correct"])
                cell[1] += int(r["trials"])
    if not cells:
        out.append("(no passkey runs yet)\n")
        return
    contexts = sorted(contexts)
    out.append("## Passkey: trials answered with the planted digits\n")
    out.append("| rule | support | " + " | ".join(str(c) for c in contexts) +
               f" | {contexts[-1]}: share of dense |")
    out.append("|---|---:|" + "---:|" * (len(contexts) + 1))
    dense_last = cells.get(("dense", "", contexts[-1]), [0, 0])[0]
    order = ["dense"] + [r for names in PASSKEY_RUNS.values() for r in names.values()]
    seen = set()
    for rule in order:
        if rule in seen:
            continue
        seen.add(rule)
        supports = sorted({s for (r, s, _) in cells if r == rule}, key=lambda s: int(s or 0))
        for support in supports:
            counts = [cells.get((rule, support, c), [0, 0]) for c in contexts]
            share = counts[-1][0] / dense_last if dense_last else math.nan
            out.append(f"| {rule} | {support or '-'} | " +
                       " | ".join(f"{a}/{t}" if t else "-" for a, t in counts) +
                       f" | {share:.2f} |")
    out.append("")


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    out = ["# SmolLM2-135M-Instruct: the tables (written by report.py from run.sh's outputs)\n"]
    for corpus in CORPORA:
        plot = sweep_tables(root, corpus, out)
        if plot:
            write_plot(root, corpus, plot)
    passkey_table(root, out)
    (root / "tables.md").write_text("\n".join(out))
    print(f"report.py: {root / 'tables.md'}")


if __name__ == "__main__":
    main()

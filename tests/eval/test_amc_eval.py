#!/usr/bin/env python3
"""End-to-end test of amc-eval (Python 3 standard library only) on tiny synthetic checkpoints.

- The dense control: every run matches exactly, perplexity change exactly 0, TF match 100%.
- A support covering the whole context: the same tokens and NLL as the dense reference
  (bitwise per GQA group; per head within rounding).
- A small sweep: every output file present, summary.csv's columns exactly as documented, every
  (context, prefix, support) run recorded once, and every summary number recomputed here from
  runs.jsonl (first divergence, TF match and perplexity change from the token and NLL arrays,
  then the medians) rather than read back from the tool.
- The same sweep as three shards (--shard I/N, run out of order) merged with `amc-eval merge`:
  every run in one shard, summary.csv and summary.md equal to the unsharded sweep's; merge's
  and --shard's refusals through the command line.
- --resume after an interruption (runs.jsonl cut after a few records, plus a partial line)
  gives the same summary.csv as the uninterrupted sweep; a changed setting is refused.
- The mass probe: columns, one row per context, support, layer and head, retained mass in
  (0, 1], not decreasing with the support, 1 where the support covers the context.
- The retrieval probe (synthetic keys, no model): its files, one CSV row per cell, a refusal,
  and its tables without gnuplot.
- Plot scripts run by hand (`gnuplot plots.gp` in the output directory, as docs/reproduce.md
  says) redraw the images under their own names, not the temporary ones.
- --kv-dtype and --rope-angles: runs.jsonl records the resolved values and what was asked for
  (auto: the weights' dtype, config.json's amc_rope_angles else transformers); --resume refuses
  a changed choice, and a changed selection setting of those outside the original six (--top-p,
  --shortlist, --shortlist-rule, --sub-blocks).
- Refusals: exit status 2 and one line on stderr naming the problem.

usage: test_amc_eval.py PATH/TO/amc-synth PATH/TO/amc-eval
"""

import csv
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

# The shared check/run helpers of the tool tests (tests/tools/tool_test.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from tool_test import check, check_refusal, report, run  # noqa: E402

CSV_COLUMNS = ("context,support,k,runs,exact_match_runs,median_first_divergence,"
               "median_ppl_change_pct,min_ppl_change_pct,max_ppl_change_pct,median_tf_match_pct,"
               "median_retained_mass,mean_support_read")


def read_runs(out):
    with open(os.path.join(out, "runs.jsonl")) as f:
        return [json.loads(line) for line in f]


def read_csv(path):
    with open(path) as f:
        text = f.read()
    header = text.splitlines()[0]
    rows = list(csv.DictReader(text.splitlines()))
    return header, rows


def close(a, b, tolerance=1e-9):
    return abs(a - b) <= tolerance * max(1.0, abs(a), abs(b))


def expected_summary(records):
    """summary.csv's rows recomputed from the records' raw arrays."""
    groups = {}
    for r in records:
        dense, sparse = r["dense_tokens"], r["sparse_tokens"]
        steps = len(dense)
        first = next((t for t in range(steps) if dense[t] != sparse[t]), steps)
        check(first == r["first_divergence"], f"first divergence of {r['context'], r['prefix'], r['support']}")
        check(r["exact_match"] == (first == steps), "exact_match")
        match = 100.0 * sum(a == d for a, d in zip(r["sparse_tf_argmax"], dense)) / steps
        check(close(match, r["tf_match_pct"]), "tf_match_pct")
        change = 100.0 * math.expm1(statistics.fmean(r["sparse_tf_nll"]) - statistics.fmean(r["dense_nll"]))
        check(close(change, r["ppl_change_pct"], 1e-7), f"ppl change {change} vs {r['ppl_change_pct']}")
        check(r["sparse_tf_argmax"][0] == dense[0] and r["sparse_tf_nll"][0] == r["dense_nll"][0],
              "step 0 comes from the shared dense prefill")
        groups.setdefault((r["context"], r["support"]), []).append((r, first, change, match))
    rows = {}
    for (context, support), runs in groups.items():
        changes = [c for _, _, c, _ in runs]
        rows[(context, support)] = {
            "k": runs[0][0]["k"],
            "runs": len(runs),
            "exact_match_runs": sum(r["exact_match"] for r, _, _, _ in runs),
            "median_first_divergence": statistics.median(f for _, f, _, _ in runs),
            "median_ppl_change_pct": statistics.median(changes),
            "min_ppl_change_pct": min(changes),
            "max_ppl_change_pct": max(changes),
            "median_tf_match_pct": statistics.median(m for _, _, _, m in runs),
            "median_retained_mass": statistics.median(r["retained_mass_mean"] for r, _, _, _ in runs),
        }
        read = [r["support_read_mean"] for r, _, _, _ in runs if r["support_read_mean"] is not None]
        for r, _, _, _ in runs:  # positions read: never more than the support, nor the context
            if r["support_read_mean"] is not None:
                check(0 < r["support_read_mean"] <= min(r["support"], r["context"] + 128) + 1e-9,
                      f"support_read_mean {r['support_read_mean']} for support {r['support']}")
        rows[(context, support)]["mean_support_read"] = statistics.fmean(read) if read else None
    return rows


def check_summary(out, records):
    header, rows = read_csv(os.path.join(out, "summary.csv"))
    check(header == CSV_COLUMNS, f"summary.csv header: {header}")
    expected = expected_summary(records)
    check(len(rows) == len(expected), f"summary.csv has {len(rows)} rows, expected {len(expected)}")
    for row in rows:
        key = (int(row["context"]), int(row["support"]))
        want = expected.get(key)
        if not check(want is not None, f"summary.csv row {key} has no runs"):
            continue
        for column, value in want.items():
            if value is None:  # the dense control selects nothing: an empty cell
                check(row[column] == "", f"summary.csv {key} {column}: {row[column]!r}, expected ''")
                continue
            got = float(row[column])
            check(close(got, float(value), 1e-9), f"summary.csv {key} {column}: {got}, expected {value}")
    return rows


def check_redraw(out, script, image):
    """Runs SCRIPT by hand in OUT: IMAGE.png and IMAGE.svg come back under their own names."""
    for suffix in (".png", ".svg"):
        os.remove(os.path.join(out, image + suffix))
    result = subprocess.run(["gnuplot", script], cwd=out, capture_output=True, text=True,
                            timeout=300)
    check(result.returncode == 0, f"gnuplot {script}: {result.stderr}")
    for suffix in (".png", ".svg"):
        check(os.path.isfile(os.path.join(out, image + suffix)), f"gnuplot {script}: no {image}{suffix}")
    check(not any(".tmp" in n for n in os.listdir(out)), f"gnuplot {script} drew temporary files")


def write_ids(path, count, vocab, seed):
    r = random.Random(seed)
    with open(path, "w") as f:
        # Mixed separators, as the id format allows.
        f.write("\n".join(", ".join(str(r.randrange(vocab)) for _ in range(10))
                          for _ in range(count // 10)))
        f.write("\n")


def main():
    synth, amc_eval = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        run([synth, "--out", model, "--layers", "2", "--hidden", "64", "--heads", "4",
             "--kv-heads", "2", "--intermediate", "128", "--vocab", "300"])
        docs = []
        for i, length in enumerate((300, 200, 100)):
            docs.append(os.path.join(tmp, f"doc{i}.ids"))
            write_ids(docs[-1], length, 300, i)
        common = [amc_eval, "sweep", "--model", model, "--ids", *docs, "--threads", "2"]
        base = common + ["--tokens", "8"]
        sweep = base + ["--contexts", "64,128,256", "--supports", "65,81,97", "--prefixes", "2"]
        used = {64: 2, 128: 2, 256: 1}  # doc lengths 300, 200, 100

        # --- the small sweep -------------------------------------------------------------
        out = os.path.join(tmp, "sweep")
        result = run(sweep + ["--out", out])
        for context, n in used.items():
            check(f"context {context}: {n} of 2 requested prefixes" in result.stderr,
                  f"prefixes used for {context} not reported: {result.stderr}")
        have_gnuplot = shutil.which("gnuplot") is not None
        names = ["runs.jsonl", "summary.csv", "summary.md", "plots.gp", "ppl_change.dat",
                 "first_divergence.dat", "retained_mass_by_layer.dat"]
        if have_gnuplot:
            for plot in ("ppl_change", "first_divergence", "retained_mass_by_layer"):
                names += [plot + ".png", plot + ".svg"]
        for name in names:
            check(os.path.isfile(os.path.join(out, name)), f"{name} missing")
        if have_gnuplot:
            with open(os.path.join(out, "ppl_change.png"), "rb") as f:
                check(f.read(8) == b"\x89PNG\r\n\x1a\n", "ppl_change.png is not a PNG")
            with open(os.path.join(out, "ppl_change.svg")) as f:
                check("<svg" in f.read(), "ppl_change.svg is not an SVG")
        check(not any(n.endswith(".tmp") for n in os.listdir(out)), "temporary files left behind")
        if have_gnuplot:
            check_redraw(out, "plots.gp", "ppl_change")
        records = read_runs(out)
        keys = [(r["context"], r["prefix"], r["support"]) for r in records]
        check(len(keys) == len(set(keys)), "a run recorded twice")
        check(sorted(keys) == sorted((c, p, s) for c, n in used.items() for p in range(n)
                                     for s in (65, 81, 97)), f"runs recorded: {keys}")
        for r in records:
            check(r["settings"]["tokens"] == 8 and r["settings"]["window"] == 64
                  and r["settings"]["decode"] == "sparse", "settings echoed")
            check(r["settings"]["kv_dtype"] == "bf16" and r["settings"]["kv_dtype_requested"] == "auto"
                  and r["settings"]["rope_angles"] == "transformers"
                  and r["settings"]["rope_angles_requested"] == "auto",
                  f"resolved settings: {r['settings']}")
            check(r["k"] == (r["support"] - 65) // 16, "k")
            check(0.0 < r["retained_mass_min"] <= r["retained_mass_mean"] <= 1.0 + 1e-6,
                  "retained mass range")
            check(0.0 <= r["recall_min"] <= r["recall_mean"] <= 1.0, "recall range")
            layers = r["per_head"]["retained_mass_mean"]
            check(len(layers) == 2 and all(len(h) == 4 for h in layers), "per_head shape")
            check(r["per_head"]["steps"] == 7, "per_head steps")
            check(len(r["dense_tokens"]) == 8 and len(r["sparse_tokens"]) == 8, "T tokens")
        rows = check_summary(out, records)
        for row in rows:
            check(int(row["runs"]) == used[int(row["context"])], f"runs of {row}")
        check(any(not r["exact_match"] for r in records) and any(r["ppl_change_pct"] > 0 for r in records),
              "the sweep is not trivially dense: some run must differ")
        with open(os.path.join(out, "summary.md")) as f:
            markdown = f.read()
        check("teacher-forced on the dense continuation" in markdown, "summary.md lacks the note")
        check(markdown.count("\n| ") == 1 + len(rows), "summary.md table rows")
        with open(os.path.join(out, "summary.csv")) as f:
            reference_csv = f.read()

        # --- the same sweep as three shards, merged ------------------------------------------
        # Run out of order; 15 runs, 5 per shard. The merged tables equal the unsharded ones.
        shard_dirs = [os.path.join(tmp, f"shard{i}") for i in range(3)]
        for i in (1, 2, 0):
            result = run(sweep + ["--shard", f"{i}/3", "--out", shard_dirs[i]])
            check(f"shard {i}/3 owns runs {5 * i + 1} to {5 * i + 5} of the sweep's 15" in result.stderr,
                  f"shard {i}/3 does not say which runs it owns: {result.stderr}")
        shard_keys = [(r["context"], r["prefix"], r["support"]) for d in shard_dirs for r in read_runs(d)]
        check(sorted(shard_keys) == sorted(keys), f"the shards' runs are not the sweep's, each once: {shard_keys}")
        merged = os.path.join(tmp, "merged")
        result = run([amc_eval, "merge", merged, *shard_dirs])
        check(result.stdout == reference_csv, "merge does not print the summary.csv of the sweep")
        for name in ("summary.csv", "summary.md"):
            with open(os.path.join(merged, name)) as f, open(os.path.join(out, name)) as g:
                check(f.read() == g.read(), f"merged {name} differs from the unsharded sweep's")
        check_refusal([amc_eval, "merge", os.path.join(tmp, "merged-bad"), shard_dirs[0], shard_dirs[2]],
                      ["merge: 5 of the sweep's 15 runs are missing", "shard 1/3 is not among"])
        check_refusal([amc_eval, "merge", os.path.join(tmp, "merged-bad"), shard_dirs[0], tmp],
                      ["merge: ", tmp, "not a sweep output"])
        check_refusal([amc_eval, "merge", os.path.join(tmp, "merged-bad")], ["DIR is required"])
        check_refusal(sweep + ["--shard", "3/3", "--out", os.path.join(tmp, "merged-bad")],
                      ["sweep: --shard: the shard index 3 is not below the shard count 3", "'3/3'"])
        check(not os.path.exists(os.path.join(tmp, "merged-bad")), "a refused merge or shard wrote")

        # --- an existing runs.jsonl needs --resume ---------------------------------------
        check_refusal(sweep + ["--out", out], ["already holds runs", "--resume"])

        # --- --resume after an interruption ----------------------------------------------
        resumed = os.path.join(tmp, "resumed")
        os.makedirs(resumed)
        with open(os.path.join(out, "runs.jsonl")) as f:
            lines = f.readlines()
        with open(os.path.join(resumed, "runs.jsonl"), "w") as f:
            f.writelines(lines[:4])
            f.write(lines[4][:200])  # the record being appended when the run was killed
        result = run(sweep + ["--out", resumed, "--resume"])
        check("dropped an incomplete last line" in result.stderr, "partial line not reported")
        with open(os.path.join(resumed, "summary.csv")) as f:
            check(f.read() == reference_csv, "resumed summary.csv differs from the uninterrupted one")
        again = read_runs(resumed)  # every line parses: the partial one was cut off
        check(len(again) == len(records), f"{len(again)} records after resume")
        strip = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "threads")}
        check(sorted(map(json.dumps, map(strip, again))) == sorted(map(json.dumps, map(strip, records))),
              "resumed records differ from the uninterrupted ones")
        check_refusal(sweep + ["--out", resumed, "--resume", "--window", "48"],
                      ["--resume", "window = 64", "window = 48"])
        check_refusal(sweep + ["--out", resumed, "--resume", "--kv-dtype", "f32"],
                      ["--resume", 'kv_dtype = "bf16"', 'kv_dtype = "f32"'])
        check_refusal(sweep + ["--out", resumed, "--resume", "--rope-angles", "exact"],
                      ["--resume", 'rope_angles = "transformers"', 'rope_angles = "exact"'])
        # The session flags refuse as amc-generate's do (one declaration, session_flags.hpp).
        plain = [amc_eval, "sweep", "--model", model, "--ids", *docs, "--contexts", "64", "--supports",
                 "65", "--out", os.path.join(tmp, "refused")]
        check_refusal(plain + ["--threads", "0"],
                      ["amc-eval: --threads: must be an integer in [1, 1024], got 0"])
        check_refusal(plain + ["--kv-dtype", "f16"],
                      ["amc-eval: --kv-dtype: expected auto, bf16, f32 or q8_0, got 'f16'"])
        check(not os.path.exists(os.path.join(tmp, "refused")), "a refused sweep created its --out")
        # Every selection setting the sweep takes is recorded, those that are unset as null.
        for flag, value, key, shown in (("--top-p", "0.9", "top_p", "0.9"),
                                        ("--shortlist", "2", "shortlist", "2"),
                                        ("--shortlist-rule", "bound", "shortlist_rule", '"bound"'),
                                        ("--sub-blocks", "2", "sub_blocks", "2")):
            check_refusal(sweep + ["--out", resumed, "--resume", flag, value],
                          ["--resume", f"{key} = null", f"{key} = {shown}"])
        # Nothing left to do: the reports are rewritten from the records alone.
        run(sweep + ["--out", resumed, "--resume"])

        # --- the dense control ------------------------------------------------------------
        control = os.path.join(tmp, "control")
        run(base + ["--contexts", "64,128", "--supports", "65,97", "--prefixes", "2",
                    "--dense-control", "--out", control])
        records = read_runs(control)
        check(len(records) == 8, f"dense control: {len(records)} runs")
        for r in records:
            check(r["exact_match"] and r["first_divergence"] == 8, "dense control: exact match")
            check(r["ppl_change_pct"] == 0.0, f"dense control: ppl change {r['ppl_change_pct']}")
            check(r["tf_match_pct"] == 100.0, "dense control: tf match")
            check(r["sparse_tf_nll"] == r["dense_nll"], "dense control: NLL")
        for row in check_summary(control, records):
            check(row["exact_match_runs"] == row["runs"] and float(row["median_ppl_change_pct"]) == 0.0
                  and float(row["max_ppl_change_pct"]) == 0.0, f"dense control row {row}")

        # --- a support covering the whole context is dense --------------------------------
        # Context 64 + 8 tokens: at most 72 positions; sinks 1 + window 64 + 1 block of 16 = 81
        # reads every one of them.
        dense_tokens = {r["prefix"]: r["dense_tokens"] for r in records if r["context"] == 64}
        for scope in ("group", "head"):
            covering = os.path.join(tmp, "covering-" + scope)
            run(base + ["--contexts", "64", "--supports", "81", "--prefixes", "2", "--scope",
                        scope, "--out", covering])
            for r in read_runs(covering):
                check(r["dense_tokens"] == dense_tokens[r["prefix"]], "dense reference is deterministic")
                check(r["exact_match"] and r["sparse_tokens"] == r["dense_tokens"],
                      f"covering support ({scope}): tokens differ")
                check(r["tf_match_pct"] == 100.0, f"covering support ({scope}): tf match")
                check(abs(r["retained_mass_min"] - 1.0) < 1e-5, f"covering support ({scope}): mass")
                if scope == "group":  # the one range [0, n) for all heads, as dense decode reads it
                    check(r["ppl_change_pct"] == 0.0 and r["sparse_tf_nll"] == r["dense_nll"],
                          f"covering support per group: ppl change {r['ppl_change_pct']}")
                else:
                    check(abs(r["ppl_change_pct"]) < 1e-3, f"covering support per head: {r['ppl_change_pct']}")

        # --- KV cache dtype and RoPE angles: auto resolved per checkpoint ------------------
        f32_model = os.path.join(tmp, "model-f32")
        run([synth, "--out", f32_model, "--dtype", "f32", "--layers", "2", "--hidden", "64", "--heads", "4",
             "--kv-heads", "2", "--intermediate", "128", "--vocab", "300"])
        with open(os.path.join(f32_model, "config.json")) as f:
            config = json.load(f)
        config["amc_rope_angles"] = "exact"
        with open(os.path.join(f32_model, "config.json"), "w") as f:
            json.dump(config, f)
        one = ["--ids", docs[0], "--contexts", "64", "--supports", "65", "--prefixes", "1", "--tokens", "4"]
        for label, extra, expected in (
                ("auto", [], ("f32", "auto", "exact", "auto")),
                ("explicit", ["--kv-dtype", "bf16", "--rope-angles", "transformers"],
                 ("bf16", "bf16", "transformers", "transformers"))):
            settings_out = os.path.join(tmp, "settings-" + label)
            run([amc_eval, "sweep", "--model", f32_model, *one, *extra, "--out", settings_out])
            s = read_runs(settings_out)[0]["settings"]
            got = (s["kv_dtype"], s["kv_dtype_requested"], s["rope_angles"], s["rope_angles_requested"])
            check(got == expected, f"{label}: recorded {got}, expected {expected}")
        run([amc_eval, "mass", "--model", f32_model, *one, "--rope-angles", "transformers", "--kv-dtype", "f32",
             "--out", os.path.join(tmp, "mass-settings")])
        # --kv-dtype q8_0: recorded as such, and the sweep's and the mass probe's own operators
        # read the q8_0 cache through its view; it needs head_dim a multiple of 32 (16 above).
        q8_model = os.path.join(tmp, "model-q8")
        run([synth, "--out", q8_model, "--dtype", "f32", "--layers", "2", "--hidden", "64", "--heads", "2",
             "--kv-heads", "1", "--intermediate", "128", "--vocab", "300"])
        q8_out = os.path.join(tmp, "settings-q8")
        run([amc_eval, "sweep", "--model", q8_model, *one, "--kv-dtype", "q8_0", "--out", q8_out])
        s = read_runs(q8_out)[0]["settings"]
        check((s["kv_dtype"], s["kv_dtype_requested"]) == ("q8_0", "q8_0"),
              f"q8_0: recorded {s['kv_dtype']}, {s['kv_dtype_requested']}")
        run([amc_eval, "mass", "--model", q8_model, *one, "--kv-dtype", "q8_0",
             "--out", os.path.join(tmp, "mass-q8")])
        check_refusal([amc_eval, "sweep", "--model", f32_model, *one, "--kv-dtype", "q8_0",
                       "--out", os.path.join(tmp, "q8-refused")],
                      ["--kv-dtype q8_0: needs head_dim a multiple of 32", "this model's is 16"])
        bad_config = os.path.join(tmp, "model-bad-angles")
        shutil.copytree(f32_model, bad_config)
        config["amc_rope_angles"] = "float32"
        with open(os.path.join(bad_config, "config.json"), "w") as f:
            json.dump(config, f)
        check_refusal([amc_eval, "sweep", "--model", bad_config, *one, "--out", os.path.join(tmp, "bad-angles")],
                      ["config.json", "key 'amc_rope_angles' must be \"transformers\" or \"exact\", "
                       "got \"float32\""])

        # --- text documents, encoded with the model's tokenizer ------------------------------
        text = os.path.join(tmp, "doc.txt")
        with open(text, "w") as f:
            f.write("The keeper of the lighthouse wrote in his logbook every evening. " * 40)
        text_out = os.path.join(tmp, "text")
        run([amc_eval, "sweep", "--model", model, "--text", text, "--contexts", "64",
             "--supports", "65", "--prefixes", "1", "--tokens", "4", "--out", text_out])
        records = read_runs(text_out)
        check(len(records) == 1 and records[0]["settings"]["input"] == "text", "text sweep")
        check_refusal([amc_eval, "sweep", "--model", model, "--text", text, "--ids", docs[0],
                       "--contexts", "64", "--supports", "65", "--out", text_out],
                      ["--text", "--ids"])

        # --- plots skipped without gnuplot ------------------------------------------------
        no_plots = os.path.join(tmp, "no-plots")
        env = dict(os.environ, PATH=os.path.join(tmp, "empty-path"))
        result = run(base + ["--contexts", "64", "--supports", "65", "--prefixes", "1",
                             "--out", no_plots], env=env)
        check("gnuplot was not found" in result.stderr, "missing gnuplot not reported")
        with open(os.path.join(no_plots, "summary.md")) as f:
            check("Not drawn: gnuplot was not found" in f.read(), "summary.md does not say why")
        check(not os.path.exists(os.path.join(no_plots, "ppl_change.png")), "a plot without gnuplot")
        check(os.path.isfile(os.path.join(no_plots, "summary.csv")), "summary.csv without gnuplot")

        # --- the mass probe ---------------------------------------------------------------
        mass = os.path.join(tmp, "mass")
        result = run([amc_eval, "mass", "--model", model, "--ids", *docs, "--contexts", "64,128",
                      "--supports", "65,81,97,129", "--prefixes", "2", "--tokens", "5",
                      "--out", mass])
        header, rows = read_csv(os.path.join(mass, "mass.csv"))
        check(header == "context,support,k,layer,head,steps,mean_retained_mass,min_retained_mass",
              f"mass.csv header {header}")
        check(len(rows) == 2 * 4 * 2 * 4, f"mass.csv has {len(rows)} rows")
        table = {}
        for row in rows:
            m, low = float(row["mean_retained_mass"]), float(row["min_retained_mass"])
            check(0.0 < low <= m + 1e-12 and m <= 1.0 + 1e-6, f"mass out of range: {row}")
            check(int(row["steps"]) == 2 * 4, f"mass steps: {row}")
            table[(int(row["context"]), int(row["layer"]), int(row["head"]), int(row["support"]))] = m
        for (context, layer, head, support), m in table.items():
            larger = [s for s in (65, 81, 97, 129) if s > support]
            if larger:  # top-(k+1) contains top-k: more support never keeps less mass
                check(table[(context, layer, head, larger[0])] >= m - 1e-6, f"mass not monotone at {context, layer, head, support}")
            if context == 64 and support >= 81:
                check(abs(m - 1.0) < 1e-5, f"covering support keeps all mass: {m}")
        check(any(m < 0.99 for m in table.values()), "the mass probe measured nothing below 1")
        if have_gnuplot:
            check(os.path.isfile(os.path.join(mass, "mass_vs_support.png")), "mass plot missing")

        # --- the retrieval probe -----------------------------------------------------------
        retrieval = os.path.join(tmp, "retrieval")
        probe = [amc_eval, "retrieval", "--contexts", "512", "--block-sizes", "8,32", "--ks", "2",
                 "--depths", "0.5", "--trials", "2"]
        result = run(probe + ["--out", retrieval])
        names = ["retrieval.csv", "retrieval.md", "retrieval_plot.dat", "retrieval.gp"]
        if have_gnuplot:
            names += ["retrieval.png", "retrieval.svg"]
        for name in names:
            path = os.path.join(retrieval, name)
            check(os.path.isfile(path) and f"wrote {path}\n" in result.stdout, f"retrieval: {name}")
        written = sorted(set(os.listdir(retrieval)) - {"retrieval_gnuplot.log"})  # if it warned
        check(written == sorted(names), f"retrieval wrote {written}, expected {sorted(names)}")
        header, rows = read_csv(os.path.join(retrieval, "retrieval.csv"))
        check(header.startswith("rule,block_size,k,context,depth,trials,hit_rate,"),
              f"retrieval.csv header {header}")
        check(len(rows) == 3 * 2, f"retrieval.csv has {len(rows)} rows, expected 3 rules x 2 B")
        if have_gnuplot:
            check_redraw(retrieval, "retrieval.gp", "retrieval")
        check_refusal([amc_eval, "retrieval", "--ks", "0", "--out", os.path.join(tmp, "bad-retrieval")],
                      ["retrieval: --ks", "0 is not in [1, "])
        check(not os.path.exists(os.path.join(tmp, "bad-retrieval")), "a refused probe wrote")
        retrieval_no_plots = os.path.join(tmp, "retrieval-no-plots")
        result = run(probe + ["--out", retrieval_no_plots], env=env)
        check("gnuplot was not found" in result.stderr, "retrieval: missing gnuplot not reported")
        check(os.path.isfile(os.path.join(retrieval_no_plots, "retrieval.csv")) and
              not os.path.exists(os.path.join(retrieval_no_plots, "retrieval.png")),
              "retrieval without gnuplot: tables, and no plots")

        # --- refusals ---------------------------------------------------------------------
        bad = os.path.join(tmp, "bad")
        small = base + ["--contexts", "64", "--prefixes", "1", "--out", bad]
        check_refusal(small + ["--supports", "100"],
                      ["--supports 100 does not map to whole blocks (block size 16, sinks 1, "
                       "window 64): nearest valid sizes are 97 and 113"])
        check_refusal(small + ["--supports", "40"], ["--supports 40", "smallest valid size is 65"])
        check_refusal(base + ["--contexts", "64,400", "--supports", "65", "--out", bad],
                      ["--contexts 400", "the longest has 300"])
        missing = [amc_eval, "sweep", "--model", os.path.join(tmp, "no-such-model"), "--ids",
                   docs[0], "--contexts", "64", "--supports", "65", "--out", bad]
        check_refusal(missing, ["--model", "no-such-model", "neither a checkpoint directory", "nor a GGUF file"])
        empty_model = os.path.join(tmp, "empty-model")
        os.makedirs(empty_model)
        check_refusal(missing[:2] + ["--model", empty_model] + missing[4:], ["config.json"])
        bad_ids = os.path.join(tmp, "bad.ids")
        with open(bad_ids, "w") as f:
            f.write("1 2 3\n4 x5 6\n")
        check_refusal([amc_eval, "sweep", "--model", model, "--ids", bad_ids, "--contexts", "2",
                       "--supports", "65", "--out", bad], [bad_ids + ":2:3: 'x5'"])
        check_refusal(common + ["--tokens", "1", "--contexts", "64", "--supports", "65", "--out",
                                bad], ["--tokens must be >= 2"])
        check_refusal(small + ["--supports", "65", "--scope", "all"], ["scope must be 'head' or 'group'", "'all'"])
        check_refusal(small + ["--supports", "65", "--kv-dtype", "f16"], ["--kv-dtype", "f16"])
        check_refusal(small + ["--supports", "65", "--rope-angles", "double"], ["--rope-angles", "double"])
        check_refusal([amc_eval, "mass", "--model", model, "--ids", docs[0], "--contexts", "64", "--supports",
                       "65", "--kv-dtype", "bfloat16", "--out", bad], ["--kv-dtype"])
        check_refusal([amc_eval, "mass", "--model", model, "--ids", docs[0], "--contexts",
                       "64", "--supports", "70", "--out", bad], ["nearest valid sizes are 65 and 81"])
        check_refusal(base + ["--contexts", "32761", "--supports", "65", "--out", bad],
                      ["max_position_embeddings"])
        check_refusal([amc_eval], ["subcommand"])
        check(not os.path.exists(os.path.join(bad, "runs.jsonl")), "a refused sweep wrote runs")

    return report("amc-eval end-to-end")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Greedy decoding with the KV cache in f32, bf16 and q8_0, dense attention, on SmolLM2.

What does the cache's own rounding do to greedy decoding, with sparse attention out of the
picture? For each document (the texts of records/smollm2-quality/run.sh: five prose, five code),
its first BYTES bytes (cut back to a line end) are the prompt; amc-generate decodes TOKENS tokens
greedily, dense, once per cache dtype (everything else amc-generate's defaults: the GGUF file's
weights widened to bf16). Against the f32 cache, per run: the first step whose token differs,
the share of steps with the same token, and both runs' own logit margins (top-1 minus top-2) at
that first step. After the first difference the two continuations read different text, so the
share after it says little; the first step and its margins are the measure.

  records/smollm2-quality/kv8-greedy.py [--generate BIN] [--bytes N] [--tokens N] --out DIR

Writes DIR/kv8-greedy.csv (one row per document and dtype) and DIR/kv8-greedy.md (printed too).
Errors: one line on stderr, exit status 2.
"""
import argparse
import csv
import json
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROSE = [f"/usr/share/doc/python3.11/html/_sources/whatsnew/{v}.rst.txt"
         for v in ("2.5", "2.6", "2.7", "3.2", "3.3")]
CODE = [f"/usr/lib/python3.11/{m}.py" for m in ("argparse", "tarfile", "zipfile", "datetime", "inspect")]
DTYPES = ("f32", "bf16", "q8_0")


def fail(message):
    print(f"kv8-greedy.py: {message}", file=sys.stderr)
    sys.exit(2)


def prompt_of(path, size):
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror} (apt-get install python3.11-doc python3.11)")
    cut = text[:size]
    return cut[: cut.rfind("\n") + 1] if "\n" in cut else cut


def generate(binary, model, prompt, tokens, dtype):
    command = [binary, "--model", model, "--prompt", prompt, "-n", str(tokens), "--ignore-eos",
               "--json", "--kv-dtype", dtype, "--threads", "2"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        fail(f"amc-generate --kv-dtype {dtype} failed: {done.stderr.strip()}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    steps = [line for line in lines if "step" in line]
    return {"prompt_tokens": len(lines[0]["prompt_ids"]),
            "tokens": [s["token"] for s in steps],
            "margins": [s["margin"] for s in steps]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generate", default=str(ROOT / "build/release/examples/transformer/amc-generate"))
    parser.add_argument("--model", default=None, help="GGUF file (default: scripts/fetch-model's)")
    parser.add_argument("--bytes", type=int, default=20000)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--out", required=True)
    a = parser.parse_args()
    model = a.model or subprocess.run([str(ROOT / "scripts/fetch-model")], capture_output=True,
                                      text=True, check=True).stdout.strip()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for corpus, paths in (("prose", PROSE), ("code", CODE)):
        for path in paths:
            prompt = prompt_of(path, a.bytes)
            runs = {d: generate(a.generate, model, prompt, a.tokens, d) for d in DTYPES}
            reference = runs["f32"]
            for dtype in DTYPES[1:]:
                run = runs[dtype]
                pairs = list(zip(reference["tokens"], run["tokens"]))
                first = next((i for i, (x, y) in enumerate(pairs) if x != y), None)
                rows.append({
                    "corpus": corpus, "document": pathlib.Path(path).name,
                    "prompt_tokens": reference["prompt_tokens"], "dtype": dtype,
                    "tokens": len(pairs),
                    "first_difference": "" if first is None else first,
                    "same_share": sum(x == y for x, y in pairs) / len(pairs),
                    "f32_margin": "" if first is None else reference["margins"][first],
                    "margin": "" if first is None else run["margins"][first],
                })
                print(f"{corpus} {rows[-1]['document']} {dtype}: first difference "
                      f"{'none' if first is None else first}", file=sys.stderr)
    with open(out / "kv8-greedy.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"# Greedy decoding against the f32 cache, dense (run of {started})", "",
             f"amc-generate --ignore-eos -n {a.tokens} --kv-dtype DTYPE, prompts the first {a.bytes} "
             "bytes of each document; margins are each run's own top-1 minus top-2 logit at the "
             "first differing step.", "",
             "| corpus | document | prompt tokens | cache | first differing step | same token | f32 margin there | its margin there |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    def margin(x):
        return "" if x == "" else f"{x:.3f}"

    for r in rows:
        lines.append(f"| {r['corpus']} | {r['document']} | {r['prompt_tokens']} | {r['dtype']} | "
                     f"{'none' if r['first_difference'] == '' else r['first_difference']} | "
                     f"{r['same_share']:.3f} | {margin(r['f32_margin'])} | {margin(r['margin'])} |")
    for dtype in DTYPES[1:]:
        mine = [r for r in rows if r["dtype"] == dtype]
        identical = sum(r["first_difference"] == "" for r in mine)
        lines.append("")
        lines.append(f"{dtype}: {identical} of {len(mine)} continuations identical to f32's over "
                     f"{a.tokens} tokens.")
    (out / "kv8-greedy.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

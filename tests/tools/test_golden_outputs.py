#!/usr/bin/env python3
"""The tools' outputs on fixed inputs, byte for byte against tests/golden/tool_outputs.json.

Refactorings must not change what amc-generate, amc-eval and amc-bounds compute: this runs each
on fixed inputs (data/qwen2-tiny, a held-out-style text, a q/k/v dump written here from a seeded
generator) with the portable scalar kernels and one thread, so the numbers do not depend on the
machine's instruction set or on scheduling, and compares every output file with the recorded
one. Only what cannot repeat is removed first: timings (keys ending in _per_s or seconds) and
the checkout's absolute path. When a change is meant to alter outputs, rerun with --update and
say in the commit what moved and why.

One file per architecture, since the same source rounds differently on each: the default,
tests/golden/tool_outputs.json, is x86-64's; tests/golden/tool_outputs_aarch64.json is aarch64's
(recorded under qemu-aarch64 by the cross build, preset aarch64, which passes --golden). There
the compiler fuses a * b + c into one FMA, Eigen's GEMM is NEON and libm is aarch64's, so the
numbers differ from x86-64's in their last digits (token ids and selections do not). A change
meant to alter outputs updates both: the aarch64 one with the cross build's emulated tools,
`test_golden_outputs.py build/aarch64/emulated/amc-generate build/aarch64/emulated/amc-eval
build/aarch64/emulated/amc-bounds --golden tests/golden/tool_outputs_aarch64.json --update`
(after `scripts/ci-arm64` built them).

usage: test_golden_outputs.py AMC_QWEN2 AMC_EVAL AMC_BOUNDS [--update] [--golden FILE]
"""

import argparse
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "tool_outputs.json"
MODEL = ROOT / "data" / "qwen2-tiny"
TEXT = ROOT / "tools" / "train_tiny" / "model.py"
TIMING = re.compile(r"(_per_s|seconds)$")


def strip_timings(value):
    if isinstance(value, dict):
        return {k: strip_timings(v) for k, v in value.items() if not TIMING.search(k)}
    if isinstance(value, list):
        return [strip_timings(v) for v in value]
    return value


def normalise(text):
    """JSON lines without timings (other lines as they are), the checkout path as <root>."""
    lines = []
    for line in text.splitlines():
        try:
            line = json.dumps(strip_timings(json.loads(line)), sort_keys=True)
        except ValueError:
            pass
        lines.append(line.replace(str(ROOT), "<root>"))
    return "\n".join(lines)


def run(args, cwd=None):
    env = dict(os.environ, AMC_KERNELS="scalar")
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env,
                            timeout=600, cwd=cwd)
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))}: exit {result.returncode}: {result.stderr}")
    return result.stdout


def write_dump(path):
    """q [4, 16], k and v [2, 300, 16] in F32, with a few needle keys, from a fixed seed."""
    rng = random.Random(1201)
    hq, hkv, n, d = 4, 2, 300, 16
    q = [rng.gauss(0, 1) for _ in range(hq * d)]
    k = [rng.gauss(0, 1) for _ in range(hkv * n * d)]
    v = [rng.gauss(0, 1) for _ in range(hkv * n * d)]
    for g in range(hkv):
        for p in (37, 150, 222):
            for i in range(d):
                k[(g * n + p) * d + i] = 2.5 * q[g * 2 * d + i]
    header, blobs, offset = {}, [], 0
    for name, shape, values in (("q", [hq, d], q), ("k", [hkv, n, d], k), ("v", [hkv, n, d], v)):
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def outputs(qwen2, evaluate, bounds, tmp):
    out = {}
    model = ["--model", MODEL, "--threads", "1", "--json", "-n", "12", "--prompt",
             "def forward(self, x):\n    return"]
    for label, extra in {
        "qwen2 dense": ["--attention", "dense"],
        "qwen2 sparse mean head": ["--attention", "sparse", "--top-k", "2", "--block-size", "16",
                                   "--window", "8"],
        "qwen2 sparse bound group f32": ["--attention", "sparse", "--top-k", "1", "--block-size",
                                         "8", "--window", "4", "--scope", "group", "--score",
                                         "bound", "--kv-dtype", "f32", "--retained-mass"],
        "qwen2 sparse oracle transformers": ["--attention", "sparse", "--top-k", "3", "--score",
                                             "oracle", "--rope-angles", "transformers"],
    }.items():
        out[label] = normalise(run([qwen2] + model + extra))

    common = ["--model", MODEL, "--text", TEXT, "--threads", "1", "--prefixes", "2"]
    for label, args in {
        "eval sweep mean": ["sweep", "--contexts", "256", "--supports", "97,193", "--tokens", "6"],
        "eval sweep oracle group": ["sweep", "--contexts", "300", "--supports", "113",
                                    "--tokens", "5", "--score", "oracle", "--scope", "group",
                                    "--block-size", "16"],
        "eval mass": ["mass", "--contexts", "256", "--supports", "97,193", "--tokens", "3"],
    }.items():
        directory = Path(tmp) / label.replace(" ", "_")
        run([evaluate] + args[:1] + common + args[1:] + ["--out", directory])
        for name in sorted(os.listdir(directory)):
            if name.endswith((".csv", ".jsonl", ".md")):
                out[f"{label}: {name}"] = normalise((directory / name).read_text())
    directory = Path(tmp) / "retrieval"
    run([evaluate, "retrieval", "--contexts", "512", "--block-sizes", "16,32", "--ks", "2",
         "--depths", "0.3,0.7", "--trials", "4", "--out", directory])
    out["eval retrieval: retrieval.csv"] = normalise((directory / "retrieval.csv").read_text())

    dump = Path(tmp) / "dump.safetensors"
    write_dump(dump)
    for label, extra in {
        "bounds default": [],
        "bounds group max bound": ["--scope", "group", "--combine", "max", "--score", "bound",
                                   "--block-size", "8", "--top-k", "3"],
        "bounds oracle": ["--score", "oracle", "--block-size", "4", "--top-k", "5", "--sinks", "0"],
        "bounds adaptive head": ["--target-eps", "0.01", "--block-size", "8"],
        "bounds adaptive group capped": ["--target-eps", "0.001", "--max-k", "4", "--scope",
                                         "group", "--block-size", "16"],
    }.items():
        # A relative path: the tool echoes it in its output.
        out[label] = normalise(run([Path(bounds).resolve(), dump.name, "--json"] + extra, cwd=tmp))
    return out


def main():
    parser = argparse.ArgumentParser(usage=__doc__.strip().splitlines()[-1][len("usage: "):])
    parser.add_argument("qwen2")
    parser.add_argument("evaluate")
    parser.add_argument("bounds")
    parser.add_argument("--update", action="store_true", help="rewrite the golden file")
    parser.add_argument("--golden", type=Path, default=GOLDEN,
                        help="the golden file of the tools' architecture (default: x86-64's)")
    args = parser.parse_args()
    golden = args.golden.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        got = outputs(args.qwen2, args.evaluate, args.bounds, tmp)
    if args.update:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {golden} ({len(got)} outputs)")
        return 0
    expected = json.loads(golden.read_text())
    failures = 0
    for label in sorted(set(expected) | set(got)):
        if label not in got or label not in expected:
            print(f"FAIL: {label}: {'missing' if label not in got else 'not in the golden file'}")
            failures += 1
            continue
        if got[label] != expected[label]:
            failures += 1
            old, new = expected[label].splitlines(), got[label].splitlines()
            line = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
            a = old[line] if line < len(old) else "<end>"
            b = new[line] if line < len(new) else "<end>"
            column = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            start = max(0, column - 60)
            print(f"FAIL: {label}: line {line + 1}, column {column + 1}:\n"
                  f"  golden: ...{a[start:column + 60]}\n"
                  f"  now:    ...{b[start:column + 60]}")
    if failures:
        print(f"{failures} of {len(expected)} outputs differ from {golden}")
        return 1
    print(f"test_golden_outputs: all {len(expected)} outputs identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""End-to-end test of amc-bounds (Python 3 standard library only).

Writes q/k/v dumps byte by byte, runs the tool with --json, and checks every reported number
against a reference computed here in double precision with plain loops: the selection (top-k of
mean block scores), the omitted mass, the error norm, the identity, and that the certified
bounds are never below the true values. Then checks that bad input gives exit status 2, one
line on stderr and nothing on stdout.

usage: test_amc_bounds.py PATH/TO/amc-bounds
"""

import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)


def to_bf16_bits(x):
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    rounding = 0x7FFF + ((bits >> 16) & 1)
    return ((bits + rounding) >> 16) & 0xFFFF


def from_bf16_bits(b):
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


def write_safetensors(path, tensors, raw_header=None):
    """tensors: list of (name, dtype, shape, flat values); values already representable."""
    header, blobs, offset = {}, [], 0
    for name, dtype, shape, values in tensors:
        if dtype == "F32":
            blob = struct.pack(f"<{len(values)}f", *values)
        elif dtype == "BF16":
            blob = struct.pack(f"<{len(values)}H", *[to_bf16_bits(v) for v in values])
        else:
            raise ValueError(dtype)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = raw_header if raw_header is not None else json.dumps(header)
    text = text.encode() + b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def make_inputs(rng, hq, hkv, n, d, dtype):
    def rounded(x):
        return from_bf16_bits(to_bf16_bits(x)) if dtype == "BF16" else struct.unpack("<f", struct.pack("<f", x))[0]

    q = [rounded(rng.gauss(0, 1)) for _ in range(hq * d)]
    k = [rounded(rng.gauss(0, 1)) for _ in range(hkv * n * d)]
    v = [rounded(rng.gauss(0, 1)) for _ in range(hkv * n * d)]
    # A few strong keys (needles) aligned with the first query of each group.
    group = hq // hkv
    for g in range(hkv):
        for p in rng.sample(range(n), 3):
            for i in range(d):
                k[(g * n + p) * d + i] = rounded(2.0 * q[g * group * d + i])
    return q, k, v


def reference(q, k, v, hq, hkv, n, d, scale, config):
    """Per head: expected blocks (mean pooling, per-head scope), eps, error, dense/sparse outputs."""
    group = hq // hkv
    B, K, sinks, window = config["block_size"], config["top_k"], config["sinks"], config["window"]
    out = []
    for h in range(hq):
        g = h // group
        s = [scale * sum(q[h * d + i] * k[(g * n + p) * d + i] for i in range(d)) for p in range(n)]
        blocks = (n + B - 1) // B
        shat = [sum(s[b * B:min(n, (b + 1) * B)]) / (min(n, (b + 1) * B) - b * B) for b in range(blocks)]
        kept_prefix = min(sinks, n)
        kept_suffix = max(n - window, kept_prefix)
        candidates = list(range(kept_prefix // B, (kept_suffix + B - 1) // B)) if kept_prefix < kept_suffix else []
        ranked = sorted(candidates, key=lambda b: (-shat[b], b))
        out.append({"scores": s, "shat": shat, "ranked": ranked, "top": sorted(ranked[:K])})
    return out


def attention(s, v_rows, positions, d):
    m = max(s[p] for p in positions)
    w = {p: math.exp(s[p] - m) for p in positions}
    z = sum(w.values())
    return [sum(w[p] * v_rows[p][i] for p in positions) / z for i in range(d)], m + math.log(z)


def run(tool, args):
    return subprocess.run([tool] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, extra, label):
    result = run(tool, [path, "--json"] + extra)
    check(result.returncode == 0, f"{label}: exit {result.returncode}, stderr {result.stderr!r}")
    if result.returncode != 0:
        return
    report = json.loads(result.stdout)
    cfg = report["config"]
    scale = cfg["scale"]
    check(abs(scale - 1 / math.sqrt(d)) < 1e-7 or "--scale" in extra, f"{label}: default scale {scale}")
    ref = reference(q, k, v, hq, hkv, n, d, scale, cfg)
    group = hq // hkv
    check(len(report["heads"]) == hq, f"{label}: {len(report['heads'])} head records, expected {hq}")
    summary_eps = 0.0
    for record in report["heads"]:
        h = record["head"]
        g = h // group
        r = ref[h]
        check(record["kv_head"] == g, f"{label} head {h}: kv_head {record['kv_head']}")
        blocks = record["selected_blocks"]
        if cfg["scope"] == "head" and not cfg["adaptive"] and cfg["rule"] == "mean":
            if blocks != r["top"]:
                # Only a near-tie may differ: every chosen block scores within 1e-5 of the k-th best.
                kth = min(r["shat"][b] for b in r["top"]) if r["top"] else math.inf
                check(all(r["shat"][b] >= kth - 1e-5 for b in blocks), f"{label} head {h}: blocks {blocks} vs {r['top']}")
        B = cfg["block_size"]
        support = set(range(min(cfg["sinks"], n))) | set(range(max(0, n - cfg["window"]), n))
        for b in blocks:
            support |= set(range(b * B, min(n, (b + 1) * B)))
        check(record["support_size"] == len(support), f"{label} head {h}: support {record['support_size']} vs {len(support)}")
        v_rows = [[v[(g * n + p) * d + i] for i in range(d)] for p in range(n)]
        dense, lse_all = attention(r["scores"], v_rows, range(n), d)
        sparse, lse_s = attention(r["scores"], v_rows, sorted(support), d)
        z_all = math.exp(lse_all)
        eps = sum(math.exp(r["scores"][p] - lse_all) for p in range(n) if p not in support)
        error = math.sqrt(sum((a - b) ** 2 for a, b in zip(dense, sparse)))
        scale_o = max(math.sqrt(sum(x * x for x in dense)), 1e-3)
        check(abs(record["omitted_mass"] - eps) <= 1e-12 * max(eps, 1e-3), f"{label} head {h}: eps {record['omitted_mass']} vs {eps}")
        # The tool's exact analysis is in double, as this reference: they agree to rounding.
        check(abs(record["error_norm"] - error) <= 1e-12 * scale_o, f"{label} head {h}: error {record['error_norm']} vs {error}")
        check(record["sparse_operator_error"] <= 2e-5 * scale_o, f"{label} head {h}: sparse operator error {record['sparse_operator_error']}")
        check(record["dense_operator_error"] <= 2e-5 * scale_o, f"{label} head {h}: dense operator error {record['dense_operator_error']}")
        check(abs(record["lse_all"] - lse_all) <= 2e-5 * (1 + abs(lse_all)), f"{label} head {h}: lse_all")
        check(abs(record["lse_support"] - lse_s) <= 2e-5 * (1 + abs(lse_s)), f"{label} head {h}: lse_support")
        check(record["relative_identity_residual"] <= 1e-5, f"{label} head {h}: identity residual {record['relative_identity_residual']}")
        check(record["value_bound"] * (1 + 1e-12) >= error, f"{label} head {h}: value bound below error")
        check(record["certified_omitted_mass_bound"] >= eps, f"{label} head {h}: certified eps {record['certified_omitted_mass_bound']} < {eps}")
        check(record["certified_error_bound"] >= error, f"{label} head {h}: certified error below error")
        check(len(blocks) <= cfg["top_k"] or cfg["adaptive"], f"{label} head {h}: more blocks than top_k")
        if cfg["adaptive"]:
            met = record["certified_omitted_mass_bound"] <= cfg["target_eps"]
            cap = cfg["max_k"]
            check(met or (cap is not None and record["needed_k"] == cap) or record["needed_k"] == len(r["ranked"]),
                  f"{label} head {h}: target not met with needed_k {record['needed_k']}")
            check(len(blocks) == record["needed_k"], f"{label} head {h}: needed_k vs blocks")
        if cfg["scope"] == "group":
            first = report["heads"][g * group]
            check(blocks == first["selected_blocks"], f"{label} head {h}: group heads must share blocks")
            if cfg["adaptive"]:
                check(record["needed_k"] == first["needed_k"], f"{label} head {h}: group needed_k differs")
        summary_eps = max(summary_eps, record["omitted_mass"])
    check(abs(report["summary"]["max_omitted_mass"] - summary_eps) < 1e-12, f"{label}: summary max_omitted_mass")


def expect_usage_error(tool, args, words, label):
    result = run(tool, args)
    check(result.returncode == 2, f"{label}: exit {result.returncode}, expected 2 (stderr {result.stderr!r})")
    check(result.stdout == "", f"{label}: stdout not empty: {result.stdout[:80]!r}")
    lines = result.stderr.strip().splitlines()
    check(len(lines) == 1, f"{label}: stderr has {len(lines)} lines: {result.stderr!r}")
    for word in words:
        check(word in result.stderr, f"{label}: stderr {result.stderr.strip()!r} lacks {word!r}")


def regressions(tool, tmp):
    """Issue 13's reproducers, whose exact answers are known in closed form."""
    # 16 equal keys [2^24 + 2, -1.5 * 2^24, 0...] (scores a difference of large products: exact
    # 3/8, f32 1/4), q = [1.5, 1, 0...], values -e1 at the sink and +e1 elsewhere: eps = 15/16
    # exactly, error = 2 eps. BF16 rounds 2^24 + 2 to 2^24: scores 0, the same eps and error.
    d, n = 64, 16
    q = [1.5, 1.0] + [0.0] * (d - 2)
    k, v = [], []
    for p in range(n):
        k += [16777218.0, -1.5 * 16777216.0] + [0.0] * (d - 2)
        v += [-1.0 if p == 0 else 1.0] + [0.0] * (d - 1)
    for dtype in ("F32", "BF16"):
        path = os.path.join(tmp, f"cancel_{dtype}.safetensors")
        write_safetensors(path, [("q", "F32", [1, d], q), ("k", dtype, [1, n, d], k), ("v", "F32", [1, n, d], v)])
        base = [path, "--json", "--block-size", "16", "--sinks", "1", "--window", "0"]
        result = run(tool, base + ["--top-k", "0"])
        check(result.returncode == 0, f"cancel {dtype}: exit {result.returncode} {result.stderr!r}")
        if result.returncode == 0:
            head = json.loads(result.stdout)["heads"][0]
            check(head["omitted_mass"] == 0.9375, f"cancel {dtype}: exact eps {head['omitted_mass']}")
            check(head["error_norm"] == 1.875, f"cancel {dtype}: exact error {head['error_norm']}")
            check(0.9375 <= head["certified_omitted_mass_bound"] <= 0.9375 * (1 + 1e-6),
                  f"cancel {dtype}: certified eps {head['certified_omitted_mass_bound']}")
            check(1.875 <= head["certified_error_bound"] <= 1.875 * (1 + 1e-6),
                  f"cancel {dtype}: certified error {head['certified_error_bound']}")
        result = run(tool, base + ["--target-eps", "0.93"])
        if result.returncode == 0:
            head = json.loads(result.stdout)["heads"][0]
            check(head["needed_k"] == 1, f"cancel {dtype} adaptive: needed_k {head['needed_k']}, 0.9375 > 0.93")
        else:
            check(False, f"cancel {dtype} adaptive: exit {result.returncode} {result.stderr!r}")
    # The echo of the settings comes from the library's table: every setting the tool takes is
    # there, a given one with its value, an unset optional one as null.
    result = run(tool, [os.path.join(tmp, "cancel_F32.safetensors"), "--json", "--rule", "twostage",
                        "--shortlist", "3", "--shortlist-rule", "bound", "--top-p", "0.5"])
    check(result.returncode == 0, f"settings echo: exit {result.returncode} {result.stderr!r}")
    if result.returncode == 0:
        cfg = json.loads(result.stdout)["config"]
        echoed = {key: cfg.get(key, "(missing)") for key in ("rule", "shortlist", "shortlist_rule", "top_p",
                                                              "sub_blocks", "target_eps", "max_k")}
        check(echoed == {"rule": "twostage", "shortlist": 3, "shortlist_rule": "bound", "top_p": 0.5,
                         "sub_blocks": None, "target_eps": None, "max_k": None}, f"settings echo: {echoed}")
    # q = [1], keys [720, 0 x 15], block 1, sink 1: eps = 15 e^-720 / (1 + 15 e^-720), subnormal.
    path = os.path.join(tmp, "underflow.safetensors")
    write_safetensors(path, [("q", "F32", [1, 1], [1.0]), ("k", "F32", [1, 16, 1], [720.0] + [0.0] * 15),
                             ("v", "F32", [1, 16, 1], [1.0] * 16)])
    result = run(tool, [path, "--json", "--block-size", "1", "--sinks", "1", "--window", "0", "--top-k", "0"])
    check(result.returncode == 0, f"underflow: exit {result.returncode} {result.stderr!r}")
    if result.returncode == 0:
        head = json.loads(result.stdout)["heads"][0]
        log_eps = math.log(15.0) - 720.0
        check(head["certified_omitted_mass_bound"] > 0.0, "underflow: certified eps rounded to 0")
        check(head["certified_log_omitted_mass_bound"] >= log_eps, f"underflow: log bound {head['certified_log_omitted_mass_bound']}")
        check(abs(head["omitted_mass"] - math.exp(log_eps)) <= 1e-3 * math.exp(log_eps), f"underflow: eps {head['omitted_mass']}")


def main():
    tool = sys.argv[1]
    rng = random.Random(1129)
    with tempfile.TemporaryDirectory() as tmp:
        hq, hkv, n, d = 4, 2, 150, 8
        for dtype in ("F32", "BF16"):
            q, k, v = make_inputs(rng, hq, hkv, n, d, dtype)
            path = os.path.join(tmp, f"dump_{dtype}.safetensors")
            write_safetensors(path, [("q", dtype, [hq, d], q), ("k", dtype, [hkv, n, d], k), ("v", dtype, [hkv, n, d], v)])
            base = ["--block-size", "8", "--top-k", "3", "--sinks", "2", "--window", "16"]
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, base, f"{dtype} mean/head")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, base + ["--scope", "group"], f"{dtype} mean/group")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, base + ["--scope", "group", "--combine", "max"],
                      f"{dtype} mean/group/max")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, base + ["--rule", "oracle"], f"{dtype} oracle")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, base + ["--rule", "bound", "--scale", "0.2"], f"{dtype} bound")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, base + ["--target-eps", "0.05"], f"{dtype} adaptive")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, base + ["--target-eps", "0.001", "--max-k", "2", "--scope", "group"],
                      f"{dtype} adaptive capped group")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, [], f"{dtype} defaults")
            # Two-stage and sub-block means: the analysis and the certified bounds hold for what
            # they chose.
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, base + ["--rule", "twostage", "--shortlist", "2"],
                      f"{dtype} twostage")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype,
                      base + ["--rule", "twostage", "--shortlist-rule", "bound", "--scope", "group"],
                      f"{dtype} twostage bound group")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, base + ["--rule", "submean", "--sub-blocks", "2"],
                      f"{dtype} submean")
            check_run(tool, path, q, k, v, hq, hkv, n, d, dtype, ["--block-size", "8", "--top-k", "6", "--sinks", "2", "--window", "16", "--top-p", "0.5"],
                      f"{dtype} top-p")
            table = run(tool, [path])
            check(table.returncode == 0 and "omitted" in table.stdout, f"{dtype}: table output")

        regressions(tool, tmp)

        q, k, v = make_inputs(rng, 3, 1, 10, 4, "F32")
        good = os.path.join(tmp, "good.safetensors")
        write_safetensors(good, [("q", "F32", [3, 4], q), ("k", "F32", [1, 10, 4], k), ("v", "F32", [1, 10, 4], v)])
        cases = {
            "missing_v": ([("q", "F32", [3, 4], q), ("k", "F32", [1, 10, 4], k)], ["missing tensor 'v'"]),
            "rank": ([("q", "F32", [12], q), ("k", "F32", [1, 10, 4], k), ("v", "F32", [1, 10, 4], v)], ["'q'", "rank 2"]),
            "heads": ([("q", "F32", [3, 4], q), ("k", "F32", [2, 5, 4], k), ("v", "F32", [2, 5, 4], v)], ["not a multiple of KV heads"]),
            "empty": ([("q", "F32", [3, 4], q), ("k", "F32", [1, 0, 4], []), ("v", "F32", [1, 0, 4], [])], ["n = 0"]),
            "head_dim": ([("q", "F32", [3, 4], q), ("k", "F32", [1, 5, 8], k[:40]), ("v", "F32", [1, 5, 8], v[:40])], ["head_dim"]),
        }
        for label, (tensors, words) in cases.items():
            path = os.path.join(tmp, f"{label}.safetensors")
            write_safetensors(path, tensors)
            expect_usage_error(tool, [path, "--json"], words, label)
        # Non-finite values are refused up front (the bounds would be meaningless), in any dtype.
        nan_k = list(k)
        nan_k[17] = float("nan")
        inf_q = list(q)
        inf_q[3] = float("inf")
        neg_inf_v = list(v)
        neg_inf_v[0] = float("-inf")
        non_finite = {
            "nan_k": ([("q", "F32", [3, 4], q), ("k", "F32", [1, 10, 4], nan_k), ("v", "F32", [1, 10, 4], v)], "'k'"),
            "inf_q": ([("q", "BF16", [3, 4], inf_q), ("k", "BF16", [1, 10, 4], k), ("v", "BF16", [1, 10, 4], v)], "'q'"),
            "neg_inf_v": ([("q", "F32", [3, 4], q), ("k", "F32", [1, 10, 4], k), ("v", "BF16", [1, 10, 4], neg_inf_v)], "'v'"),
        }
        for label, (tensors, name) in non_finite.items():
            path = os.path.join(tmp, f"{label}.safetensors")
            write_safetensors(path, tensors)
            expect_usage_error(tool, [path, "--json"], [name, "holds a non-finite value"], label)
        # Hostile files: a wrong dtype, a header longer than the file, a cut buffer, an empty
        # file, a directory, shapes whose product overflows 64 bits, offsets past the end.
        good_bytes = open(good, "rb").read()
        header_size = struct.unpack("<Q", good_bytes[:8])[0]
        good_header = good_bytes[8:8 + header_size].decode().rstrip()
        hostile = {
            "wrong_dtype": good_header.replace('"F32"', '"I32"', 1).encode(),
            "overflow_shape": good_header.replace("[3, 4]", "[4294967296, 4294967297]", 1).encode(),
            "past_end": good_header.replace("[0, 48]", "[0, 4800]", 1).encode(),
        }
        for label, header in hostile.items():
            path = os.path.join(tmp, f"{label}.safetensors")
            with open(path, "wb") as f:
                header = header + b" " * ((8 - len(header) % 8) % 8)
                f.write(struct.pack("<Q", len(header)) + header + good_bytes[8 + header_size:])
            expect_usage_error(tool, [path], [f"{label}.safetensors"], label)
        raw = {
            "header_too_long": struct.pack("<Q", len(good_bytes)) + good_bytes[8:],
            "header_huge": struct.pack("<Q", (1 << 64) - 1) + good_bytes[8:],
            "cut_buffer": good_bytes[:len(good_bytes) - 5],
            "cut_prefix": good_bytes[:5],
            "empty": b"",
        }
        for label, data in raw.items():
            path = os.path.join(tmp, f"{label}.safetensors")
            with open(path, "wb") as f:
                f.write(data)
            expect_usage_error(tool, [path, "--json"], [f"{label}.safetensors"], label)
        expect_usage_error(tool, [tmp], [os.path.basename(tmp)], "directory")
        malformed = os.path.join(tmp, "malformed.safetensors")
        with open(malformed, "wb") as f:
            f.write(struct.pack("<Q", 1000) + b"{}")
        expect_usage_error(tool, [malformed], ["malformed.safetensors"], "malformed")
        expect_usage_error(tool, [os.path.join(tmp, "absent.safetensors")], ["absent.safetensors"], "unreadable")
        expect_usage_error(tool, [good, "--block-size", "0"], ["block_size", "0"], "block size 0")
        expect_usage_error(tool, [good, "--top-k", "-1"], ["top_k", "-1"], "negative k")
        expect_usage_error(tool, [good, "--scope", "layer"], ["scope", "layer"], "bad scope")
        expect_usage_error(tool, [good, "--rule", "max"], ["rule", "max"], "bad score")
        expect_usage_error(tool, [good, "--combine", "mean"], ["combine", "'sum' or 'max'", "mean"], "bad combine")
        expect_usage_error(tool, [good, "--target-eps", "2"], ["target_eps", "[0, 1]", "2"], "bad target")
        expect_usage_error(tool, [good, "--max-k", "3"], ["max_k needs target_eps"], "max-k alone")
        expect_usage_error(tool, [good, "--scale", "-1"], ["scale"], "bad scale")
        expect_usage_error(tool, [good, "--block-size", "x"], ["block_size", "'x'"], "non-numeric")
        expect_usage_error(tool, [good, "--frobnicate"], ["frobnicate"], "unknown flag")
        expect_usage_error(tool, [], ["input"], "no input")

    if FAILURES:
        for failure in FAILURES[:30]:
            print("FAIL:", failure)
        print(f"0 passed, {len(FAILURES)} failed")
        return 1
    print("amc-bounds end-to-end: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

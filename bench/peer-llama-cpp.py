#!/usr/bin/env python3
"""The Python part of bench/peer-llama-cpp (run it through that script, which builds llama.cpp).

Greedy comparison and decode speed of amc-generate (amc-qwen2 before its rename) against llama.cpp on one GGUF file. llama.cpp is
driven through the Python binding of the llama-cpp-python sdist it came from (llama_cpp/llama_cpp.py,
ctypes only), loaded on the libllama.so that bench/peer-llama-cpp built; the package's __init__ is
not run (it imports the high-level wrapper and its dependencies, which are not needed here).

Terms used in the output:
  margin     top-1 logit minus top-2 logit of one engine at one step.
  gap        at a step where X chose a and Y chose b: X's logit[a] - logit[b] (for X), Y's
             logit[b] - logit[a] (for Y); gap >= margin, equal when the other's choice was the
             runner-up.
  shift      gap_X + gap_Y: how much the two engines' logits moved the difference logit[a] -
             logit[b] apart. At steps with the same context where they agree, the same quantity
             for X's top-2 pair (|difference of X's and Y's top-2 margins|) is the pair's usual
             logit noise; a divergence whose shift is within the 99th percentile of that is a
             near-tie that the engines' arithmetic (activations quantized to Q8_1, f16 KV cache,
             bf16) explains, anything larger a real disagreement.
  forced     llama.cpp fed amc's generated tokens (teacher forcing), so every step has the same
             context on both sides: the share of steps where llama.cpp's argmax is amc's token.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import gzip
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types

import numpy as np


def fail(message: str) -> None:
    print(f"peer-llama-cpp: {message}", file=sys.stderr)
    sys.exit(1)


def note(message: str) -> None:
    print(f"peer-llama-cpp: {message}", file=sys.stderr, flush=True)


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# --- prompts --------------------------------------------------------------------------------


def read_prompts(spec: str) -> list[dict]:
    prompts = []
    with open(spec, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = [x.strip() for x in line.split("|")]
            if len(fields) != 4:
                fail(f"{spec}:{number}: expected 'name | file | start regex | bytes'")
            name, path, start, size = fields
            try:
                opener = gzip.open if path.endswith(".gz") else open
                with opener(path, "rb") as g:
                    data = g.read().decode("utf-8")
            except (OSError, UnicodeDecodeError) as e:
                fail(f"{spec}:{number}: cannot read {path}: {e}")
            if start != "-":
                m = re.search(start, data, re.M)
                if not m:
                    fail(f"{spec}:{number}: no line of {path} matches {start!r}")
                data = data[data.rfind("\n", 0, m.start()) + 1 :]
            raw = data.encode("utf-8")[: int(size)]
            raw = raw[: raw.rfind(b"\n") + 1] if b"\n" in raw else raw
            prompts.append({"name": name, "source": path, "start": start, "text": raw.decode("utf-8", "ignore")})
    if not prompts:
        fail(f"{spec}: no prompts")
    return prompts


# --- amc ------------------------------------------------------------------------------------


def read_safetensors_logits(path: str) -> np.ndarray:
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        t = header["logits"]
        if t["dtype"] != "F32":
            fail(f"{path}: logits are {t['dtype']}, expected F32")
        begin, end = t["data_offsets"]
        f.seek(8 + n + begin)
        return np.frombuffer(f.read(end - begin), dtype=np.float32).reshape(t["shape"])


def run_amc(amc: str, model: str, args: list[str], threads: int, timeout: int = 3600) -> dict:
    cmd = [amc, "--model", model, *args, "--json", "--threads", str(threads)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail(f"amc {' '.join(a for a in args if len(a) < 40)} ran past {timeout} s")
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        fail(f"amc {' '.join(a for a in args if len(a) < 40)} failed ({p.returncode}): {last}")
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    if len(lines) < 2 or "prompt_ids" not in lines[0] or "decode_tokens_per_s" not in lines[-1]:
        fail("amc --json printed no prompt_ids line or no summary")
    steps = [x for x in lines[1:-1] if "token" in x]
    return {
        "settings": lines[0],
        "prompt_ids": lines[0]["prompt_ids"],
        "tokens": [x["token"] for x in steps],
        "margins": [x["margin"] for x in steps],
        "texts": [x.get("text", "") for x in steps],
        "summary": lines[-1],
    }


def amc_sparse_defaults(amc: str) -> str:
    """The default selection as amc-generate --help states it ("--top-k INT=8" and so on)."""
    text = subprocess.run([amc, "--help"], capture_output=True, text=True).stdout
    found = dict(re.findall(r"--(block-size|top-k|sinks|window|scope|score)\s+\w+=(\S+)", text))
    return ", ".join(f"--{k} {v}" for k, v in found.items()) or "unknown"


# --- llama.cpp through the sdist's ctypes binding ---------------------------------------------


class LlamaCpp:
    def __init__(self, sdist: str, lib_dir: str, model: str, threads: int, n_ctx: int):
        os.environ["LLAMA_CPP_LIB_PATH"] = lib_dir
        pkg = types.ModuleType("llama_cpp")
        pkg.__path__ = [os.path.join(sdist, "llama_cpp")]
        sys.modules["llama_cpp"] = pkg
        try:
            import llama_cpp.llama_cpp as L  # noqa: E402  (the sdist's own binding)
        except Exception as e:  # a missing symbol, a library that does not load
            fail(f"cannot load the binding on {lib_dir}/libllama.so: {e}")
        self.L = L
        self._log = L.llama_log_callback(lambda level, text, data: None)
        L.llama_log_set(self._log, ctypes.c_void_p())
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(model.encode(), mp)
        if not self.model:
            fail(f"llama.cpp could not load {model}")
        desc = ctypes.create_string_buffer(256)
        L.llama_model_desc(self.model, desc, len(desc))
        self.desc = desc.value.decode(errors="replace")  # "qwen2 1B Q8_0": architecture, size, type
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.threads, self.n_ctx = threads, n_ctx
        self.contexts: dict[int, object] = {}
        self.system_info = L.llama_print_system_info().decode(errors="replace").strip()

    def context(self, fa: int):
        if fa not in self.contexts:
            L = self.L
            cp = L.llama_context_default_params()
            cp.n_ctx = self.n_ctx
            cp.n_batch = self.n_ctx
            cp.n_threads = cp.n_threads_batch = self.threads
            cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if fa else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
            cp.no_perf = True
            ctx = L.llama_init_from_model(self.model, cp)
            if not ctx:
                fail(f"llama.cpp could not make a context (flash attention {'on' if fa else 'off'})")
            self.contexts[fa] = (ctx, cp.type_k, cp.type_v)
        return self.contexts[fa][0]

    def kv_types(self, fa: int) -> tuple[int, int]:
        self.context(fa)
        return self.contexts[fa][1], self.contexts[fa][2]

    def _decode(self, ctx, ids: list[int]) -> np.ndarray:
        L = self.L
        arr = (L.llama_token * len(ids))(*ids)
        rc = L.llama_decode(ctx, L.llama_batch_get_one(arr, len(ids)))
        if rc != 0:
            fail(f"llama_decode returned {rc}")
        ptr = L.llama_get_logits_ith(ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def generate(self, fa: int, prompt: list[int], n: int, forced: list[int] | None = None):
        """Greedy (or teacher-forced on `forced`): prefill the prompt in one batch, then one token
        per decode call, as amc-generate does. Returns the tokens and the (n, vocab) logits."""
        L = self.L
        ctx = self.context(fa)
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        logits = np.empty((n, self.n_vocab), dtype=np.float32)
        tokens = []
        row = self._decode(ctx, prompt)
        for step in range(n):
            logits[step] = row
            tokens.append(int(forced[step]) if forced is not None else int(np.argmax(row)))
            if step + 1 < n:
                row = self._decode(ctx, [tokens[-1]])
        return tokens, logits

    def tokenize(self, text: str) -> list[int]:
        L = self.L
        raw = text.encode()
        buf = (L.llama_token * (len(raw) + 16))()
        n = L.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), False, False)
        if n < 0:
            fail("llama_tokenize: buffer too small")
        return list(buf[:n])

    def piece(self, token: int) -> str:
        buf = ctypes.create_string_buffer(256)
        n = self.L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", "replace")

    def close(self):
        for ctx, _, _ in self.contexts.values():
            self.L.llama_free(ctx)
        self.contexts.clear()
        self.L.llama_model_free(self.model)


# --- comparison -----------------------------------------------------------------------------


def margin_of(row: np.ndarray) -> float:
    top = np.partition(row, -2)[-2:]
    return float(top.max() - top.min())


def top2_shift(x: np.ndarray, y: np.ndarray) -> float:
    """|X's top-2 margin - Y's logit difference of the same two tokens|."""
    t2, t1 = np.argpartition(x, -2)[-2:]
    if x[t2] > x[t1]:
        t1, t2 = t2, t1
    return float(abs((x[t1] - x[t2]) - (y[t1] - y[t2])))


def rank_in(row: np.ndarray, token: int) -> int:
    return int((row > row[token]).sum()) + 1


def compare(x_tokens, x_logits, y_tokens, y_logits) -> dict:
    n = min(len(x_tokens), len(y_tokens))
    same = sum(int(a == b) for a, b in zip(x_tokens[:n], y_tokens[:n]))
    first = next((i for i in range(n) if x_tokens[i] != y_tokens[i]), None)
    prefix = n if first is None else first
    noise = [top2_shift(x_logits[t], y_logits[t]) for t in range(prefix)]
    out = {"steps": n, "identical": same, "first_divergence": first, "prefix_shifts": noise,
           "prefix_max_abs_logit_diff": [float(np.abs(x_logits[t] - y_logits[t]).max()) for t in range(prefix)]}
    if first is not None:
        a, b = x_tokens[first], y_tokens[first]
        x, y = x_logits[first], y_logits[first]
        out.update({
            "x_token": a, "y_token": b,
            "x_margin": margin_of(x), "y_margin": margin_of(y),
            "x_gap": float(x[a] - x[b]), "y_gap": float(y[b] - y[a]),
            "y_token_rank_in_x": rank_in(x, b), "x_token_rank_in_y": rank_in(y, a),
        })
        out["shift"] = out["x_gap"] + out["y_gap"]
    return out


def forced_compare(x_tokens, x_logits, y_logits) -> dict:
    n = len(x_tokens)
    argmax = [int(np.argmax(y_logits[t])) for t in range(n)]
    return {
        "steps": n,
        "agree": sum(int(argmax[t] == x_tokens[t]) for t in range(n)),
        "shifts": [top2_shift(x_logits[t], y_logits[t]) for t in range(n)],
        "max_abs_logit_diff": [float(np.abs(x_logits[t] - y_logits[t]).max()) for t in range(n)],
        "rms_logit_diff": [float(np.sqrt(np.mean((x_logits[t] - y_logits[t]) ** 2))) for t in range(n)],
        "disagreements": [
            {"step": t, "amc": x_tokens[t], "llama": argmax[t],
             "amc_gap": float(x_logits[t][x_tokens[t]] - x_logits[t][argmax[t]]),
             "llama_gap": float(y_logits[t][argmax[t]] - y_logits[t][x_tokens[t]])}
            for t in range(n) if argmax[t] != x_tokens[t]
        ],
    }


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values), q))


AMC_VARIANTS = {"amc-f32": ["--weight-dtype", "f32", "--kv-dtype", "f32"], "amc-bf16": []}
LLAMA_VARIANTS = {"llama-fa0": 0, "llama-fa1": 1}
PAIRS = [("amc-f32", "llama-fa0"), ("amc-f32", "llama-fa1"), ("amc-bf16", "llama-fa0"),
         ("amc-bf16", "llama-fa1"), ("amc-f32", "amc-bf16"), ("llama-fa0", "llama-fa1")]


def pairs_of(runs) -> list[tuple[str, str]]:
    return [(x, y) for x, y in PAIRS if x in runs and y in runs]


def greedy(a, llama: LlamaCpp, prompts: list[dict]) -> dict:
    results = []
    with tempfile.TemporaryDirectory(prefix="peer-llama-cpp.") as tmp:
        for p in prompts:
            t0 = time.time()
            runs, ids = {}, None
            for name, extra in (AMC_VARIANTS.items() if not a.llama_only else ()):
                path = os.path.join(tmp, f"{name}.safetensors")
                r = run_amc(a.amc, a.model, [f"--prompt={p['text']}", "-n", str(a.tokens), "--ignore-eos",
                                             "--logits-out", path, *extra], a.threads)
                if ids is not None and r["prompt_ids"] != ids:
                    fail(f"{p['name']}: amc tokenized the prompt differently for {name}")
                ids = r["prompt_ids"]
                logits = read_safetensors_logits(path)
                if logits.shape[0] != len(r["tokens"]):
                    fail(f"{p['name']}: {name} wrote {logits.shape[0]} logit rows for {len(r['tokens'])} tokens")
                runs[name] = {"tokens": r["tokens"], "logits": logits, "margins": r["margins"],
                              "texts": r["texts"], "settings": r["settings"]}
            llama_ids = llama.tokenize(p["text"])
            if a.llama_only:
                ids = llama_ids
            if len(ids) + a.tokens > llama.n_ctx:
                fail(f"{p['name']}: {len(ids)} prompt tokens do not fit llama.cpp's context of {llama.n_ctx}")
            for name, fa in LLAMA_VARIANTS.items():
                tokens, logits = llama.generate(fa, ids, a.tokens)
                runs[name] = {"tokens": tokens, "logits": logits, "margins": [margin_of(r) for r in logits]}
            entry = {"name": p["name"], "source": p["source"], "prompt_tokens": len(ids), "prompt_ids": ids,
                     "llama_tokenizer_same_ids": llama_ids == ids,
                     "tokens": {k: v["tokens"] for k, v in runs.items()},
                     "margins": {k: v["margins"] for k, v in runs.items()},
                     "texts": {k: "".join(llama.piece(t) for t in v["tokens"]) for k, v in runs.items()},
                     "amc_settings": {k: {x: v for x, v in runs[k]["settings"].items() if x != "prompt_ids"}
                                      for k in AMC_VARIANTS if k in runs},
                     "pairs": {}, "forced": {}}
            for x, y in pairs_of(runs):
                c = compare(runs[x]["tokens"], runs[x]["logits"], runs[y]["tokens"], runs[y]["logits"])
                for key in ("x_token", "y_token"):
                    if key in c:
                        c[key + "_text"] = llama.piece(c[key])
                entry["pairs"][f"{x}|{y}"] = c
            for x in (k for k in AMC_VARIANTS if k in runs):
                for y, fa in LLAMA_VARIANTS.items():
                    _, logits = llama.generate(fa, ids, a.tokens, forced=runs[x]["tokens"])
                    entry["forced"][f"{x}|{y}"] = forced_compare(runs[x]["tokens"], runs[x]["logits"], logits)
            results.append(entry)
            key = "llama-fa0|llama-fa1" if a.llama_only else "amc-f32|llama-fa0"
            main = entry["pairs"][key]
            note(f"greedy {p['name']}: {len(ids)} prompt tokens, {key.replace('|', ' vs ')} "
                 f"{main['identical']}/{main['steps']} identical, first divergence "
                 f"{main['first_divergence']} ({time.time() - t0:.0f} s)")
    return {"prompts": results}


# --- speed ----------------------------------------------------------------------------------


def measure(a, engine: str, variant: str, depth: int, threads: int, ids: list[int]) -> tuple[float, dict]:
    """One decode-speed measurement: tokens/s and what else the tool reported."""
    if engine == "amc":
        s = run_amc(a.amc, a.model, ["--prompt-ids", ",".join(map(str, ids)), "-n", str(a.speed_tokens),
                                     "--ignore-eos", "--attention", variant] + a.amc_flags.split(), threads)
        return s["summary"]["decode_tokens_per_s"], {
            "prompt_tokens": len(ids), "decode_steps": len(s["tokens"]) - 1,
            "prefill_tokens_per_s": s["summary"]["prefill_tokens_per_s"],
            "kv_dtype": s["settings"].get("kv_dtype"), "weight_dtype": s["settings"].get("weight_dtype")}
    cmd = [a.llama_bench, "-m", a.model, "-p", "0", "-n", str(a.speed_tokens), "-d", str(depth),
           "-t", str(threads), "-fa", "1" if variant == "fa-on" else "0", "-r", "1", "-o", "json"
           ] + a.llama_flags.split()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    except subprocess.TimeoutExpired:
        fail(f"llama-bench -d {depth} -t {threads} ran past 3600 s")
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        fail(f"llama-bench -d {depth} -t {threads} ({variant}) failed ({p.returncode}): {last}")
    try:
        j = json.loads(p.stdout)[0]
    except (ValueError, IndexError):
        fail(f"llama-bench -o json printed no result for -d {depth} -t {threads}")
    return j["avg_ts"], {"prompt_tokens": depth, "decode_steps": j["n_gen"], "build_commit": j.get("build_commit"),
                         "build_number": j.get("build_number"), "type_k": j.get("type_k"),
                         "cpu_info": j.get("cpu_info"), "backends": j.get("backends")}


SPEED_ORDER = (("amc", "dense"), ("llama.cpp", "fa-off"), ("amc", "sparse"), ("llama.cpp", "fa-on"))


def speed(a, filler: list[int]) -> list[dict]:
    """Rounds of (threads x depths x SPEED_ORDER), amc and llama.cpp interleaved."""
    depths = [int(d) for d in a.depths.split(",")]
    thread_counts = [int(t) for t in a.speed_threads.split(",")]
    rows = []
    for r in range(1, a.rounds + 1):
        for t in thread_counts:
            for d in depths:
                ids = (filler * (d // len(filler) + 1))[: max(d, 1)]  # amc needs a prompt of >= 1 id
                for engine, variant in SPEED_ORDER:
                    if engine == "amc" and a.llama_only:
                        continue
                    before, t0 = loadavg(), time.time()
                    tps, extra = measure(a, engine, variant, d, t, ids)
                    rows.append({"round": r, "threads": t, "engine": engine, "variant": variant, "depth": d,
                                 "decode_tokens_per_s": tps, "seconds": round(time.time() - t0, 1),
                                 "loadavg_before": before, **extra})
                    note(f"speed round {r}, {t} threads, depth {d}, {engine} {variant}: {tps:.1f} tokens/s "
                         f"(load {before})")
    return rows


# --- report ---------------------------------------------------------------------------------


def fmt(x, digits=3):
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def summary_md(info: dict, g: dict | None, rows: list[dict] | None) -> str:
    L = []
    L.append(f"# amc vs llama.cpp on {os.path.basename(info['model'])}\n")
    L.append(f"Run of {info['date']} on {info['machine']}. Load average (1, 5, 15 min) at the start "
             f"{info['loadavg_start']}, at the end {info['loadavg_end']} (a shared machine).\n")
    L.append("Versions: " + "; ".join(f"{k} {v}" for k, v in info["versions"].items()) + ".\n")
    if g:
        P = g["prompts"]
        n_tok = info["tokens"]
        L.append(f"## Greedy tokens ({len(P)} prompts, {n_tok} tokens each, the same prompt ids)\n")
        # Not one file's types: the peer runs on the SmolLM2 Q4_1 file and on converted ones
        # (tools/checkpoint-to-gguf: Q8_0, BF16, ...); llama.cpp names the file's main type.
        L.append(f"Model: {info.get('llama_model_desc', '?')} (llama.cpp's description). "
                 "amc-f32: `--weight-dtype f32 --kv-dtype f32` (the file's weights dequantized to f32, f32 "
                 "activations); amc-bf16: the defaults (weights widened to bf16, KV cache bf16); llama-fa0/fa1: "
                 "llama.cpp (the weights as stored, times activations converted to the type its CPU kernel "
                 "pairs with them: Q8_1 for Q4_1, Q8_0 for Q8_0 and Q4_0, bf16 for BF16; KV cache f16) with "
                 "flash attention off/on. "
                 "\"forced agree\": llama.cpp fed amc's tokens, share of steps where its argmax is amc's token "
                 "(the same context at every step). \"noise p50/p99\": the shift of the top-2 logit difference "
                 "between the two engines at steps with the same context (forced steps for amc vs llama.cpp, "
                 "the common prefix otherwise).\n")
        L.append("| pair | identical tokens | prompts identical to the end | median first divergence | forced agree | forced disagreements within noise p99 | largest forced shift | noise p50 | noise p99 | max abs logit diff p50 |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        present = [tuple(k.split("|")) for k in P[0]["pairs"]]
        for x, y in present:
            key = f"{x}|{y}"
            cs = [p["pairs"][key] for p in P]
            same = sum(c["identical"] for c in cs)
            steps = sum(c["steps"] for c in cs)
            full = sum(c["first_divergence"] is None for c in cs)
            firsts = [c["first_divergence"] if c["first_divergence"] is not None else c["steps"] for c in cs]
            within, largest = "-", "-"
            if key in P[0]["forced"]:
                fs = [p["forced"][key] for p in P]
                agree = f"{sum(f['agree'] for f in fs) / sum(f['steps'] for f in fs):.3f}"
                shifts = [s for f in fs for s in f["shifts"]]
                maxdiff = [s for f in fs for s in f["max_abs_logit_diff"]]
                dis = [d["amc_gap"] + d["llama_gap"] for f in fs for d in f["disagreements"]]
                within = f"{sum(x <= pct(shifts, 99) for x in dis)}/{len(dis)}"
                largest = fmt(max(dis)) if dis else "-"
            else:
                agree = "-"
                shifts = [s for c in cs for s in c["prefix_shifts"]]
                maxdiff = [s for c in cs for s in c["prefix_max_abs_logit_diff"]]
            g.setdefault("noise_p99", {})[key] = pct(shifts, 99)
            L.append(f"| {x} vs {y} | {same / steps:.3f} ({same}/{steps}) | {full}/{len(cs)} | "
                     f"{statistics.median(firsts):g} | {agree} | {within} | {largest} | {fmt(pct(shifts, 50))} | {fmt(pct(shifts, 99))} | "
                     f"{fmt(pct(maxdiff, 50))} |")
        L.append("")
        same_ids = sum(bool(p.get("llama_tokenizer_same_ids")) for p in P)
        L.append(f"Prompt ids: amc's tokenizer; llama.cpp's own tokenizer gives the same ids for {same_ids} of "
                 f"{len(P)} prompts. Prompt sizes {min(p['prompt_tokens'] for p in P)}-"
                 f"{max(p['prompt_tokens'] for p in P)} tokens. Greedy runs use {info['threads']} threads: amc's "
                 "results do not depend on it, nor do llama.cpp's without flash attention; with flash attention "
                 "llama.cpp's decode logits change with the thread count (its CPU kernel splits the KV "
                 "sequence over the threads).\n")
        for x, y in [q for q in present if q != ("llama-fa0", "llama-fa1")] or present:
            key = f"{x}|{y}"
            p99 = g["noise_p99"][key]
            L.append(f"### Where {x} and {y} part\n")
            L.append(f"At the first step where they differ (the same context up to there): each one's token, its "
                     f"margin (top-1 minus top-2) and gap (its logit of its token minus its logit of the other's); "
                     f"shift = gap sum. Verdict: near-tie when the shift is within the pair's noise p99 "
                     f"({fmt(p99)}), else disagreement.\n")
            L.append(f"| prompt | prompt tokens | identical | first divergence | {x} token | margin | gap | {y} token | margin | gap | shift | verdict |")
            L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
            for p in P:
                c = p["pairs"][key]
                if c["first_divergence"] is None:
                    L.append(f"| {p['name']} | {p['prompt_tokens']} | {c['identical']}/{c['steps']} | none | | | | | | | | |")
                    continue
                verdict = "near-tie" if c["shift"] <= p99 else "disagreement"
                L.append(f"| {p['name']} | {p['prompt_tokens']} | {c['identical']}/{c['steps']} | {c['first_divergence']} | "
                         f"{json.dumps(c['x_token_text'])} ({c['x_token']}) | {fmt(c['x_margin'])} | {fmt(c['x_gap'])} | "
                         f"{json.dumps(c['y_token_text'])} ({c['y_token']}) | {fmt(c['y_margin'])} | {fmt(c['y_gap'])} | "
                         f"{fmt(c['shift'])} | {verdict} |")
            L.append("")
    if rows:
        L.append(f"## Decode tokens/s (median of {info['rounds']} interleaved rounds; threads {info['speed_threads']})\n")
        L.append("amc: `amc-generate --prompt-ids` (D ids of real text, 1 at depth 0) `-n "
                 f"{info['speed_tokens']} --ignore-eos{(' ' + info['amc_flags']) if info.get('amc_flags') else ''}`, "
                 f"the summary's decode_tokens_per_s (weights bf16 unless --weight-dtype stored keeps the file's "
                 f"blocks; KV cache bf16; sparse: `--attention sparse` with amc-generate's default selection, "
                 f"{info.get('amc_sparse_defaults', '?')}). llama.cpp: "
                 f"`llama-bench -p 0 -n {info['speed_tokens']} -d D -t T -fa 0|1 -r 1"
                 f"{(' ' + info['llama_flags']) if info.get('llama_flags') else ''}` (KV cache f16, random "
                 f"tokens), one call per round. Order in a round: per thread count and depth, amc dense, "
                 f"llama.cpp fa off, amc sparse, llama.cpp fa on. The raw numbers, with the load average before each, "
                 f"are in speed.csv.\n")
        depths = sorted({r["depth"] for r in rows})
        variants = [("amc", "dense"), ("amc", "sparse"), ("llama.cpp", "fa-off"), ("llama.cpp", "fa-on")]
        L.append("| threads | depth | amc dense | amc sparse | llama.cpp fa off | llama.cpp fa on | amc dense / llama.cpp best | amc sparse / llama.cpp best | spread (max/min over rounds) |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for t in sorted({r["threads"] for r in rows}):
            for d in depths:
                med, spread = {}, []
                for e, v in variants:
                    vals = [r["decode_tokens_per_s"] for r in rows
                            if r["threads"] == t and r["depth"] == d and r["engine"] == e and r["variant"] == v]
                    med[(e, v)] = statistics.median(vals) if vals else float("nan")
                    if vals and min(vals) > 0:
                        spread.append(f"{max(vals) / min(vals):.2f}")
                best = max(med[("llama.cpp", "fa-off")], med[("llama.cpp", "fa-on")])
                L.append(f"| {t} | {d} | " + " | ".join(fmt(med[k], 1) for k in variants) +
                         f" | {fmt(med[('amc', 'dense')] / best, 2)} | {fmt(med[('amc', 'sparse')] / best, 2)} | "
                         + " / ".join(spread) + " |")
        L.append("")
    return "\n".join(L) + "\n"


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    f = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    name = f.get("Model name", "?").strip()
    cpus = f.get("CPU(s)", "?").strip()
    flags = set(f.get("Flags", "").split())
    wanted = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16")
    isa = (f"flags {' '.join(x for x in wanted if x in flags) or '-'} "
           f"(not: {' '.join(x for x in wanted if x not in flags) or '-'})")
    caches = ", ".join(f"{k} {f[k].strip()}" for k in ("L1d cache", "L2 cache", "L3 cache") if k in f)
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{name} (lscpu), {cpus} CPUs, {isa}; {caches}; {mem:.0f} GiB; Linux {os.uname().release}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--amc", required=True)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--lib-dir", required=True)
    ap.add_argument("--sdist", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--speed-tokens", type=int, default=64)
    ap.add_argument("--depths", default="0,2048,8128")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="threads of the greedy runs")
    ap.add_argument("--speed-threads", default="2", help="comma-separated thread counts of the speed runs")
    ap.add_argument("--amc-flags", default="",
                    help="more amc-generate flags for the speed runs, e.g. '--weight-dtype stored'")
    ap.add_argument("--llama-flags", default="",
                    help="more llama-bench flags for the speed runs, e.g. '--repack 0'")
    ap.add_argument("--skip-greedy", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--llama-only", action="store_true",
                    help="llama.cpp alone: its own tokenizer for the prompt ids, no amc runs")
    ap.add_argument("--version", action="append", default=[], help="NAME=VALUE for the report")
    a = ap.parse_args()
    for path in ([] if a.llama_only else [a.amc]) + [a.llama_bench, a.model, a.prompts]:
        if not os.path.exists(path):
            fail(f"{path} not found")
    os.makedirs(a.out, exist_ok=True)
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "loadavg_start": loadavg(), "model": a.model, "tokens": a.tokens,
            "speed_tokens": a.speed_tokens, "rounds": a.rounds, "threads": a.threads, "depths": a.depths,
            "speed_threads": a.speed_threads, "amc_flags": a.amc_flags,
            "llama_flags": a.llama_flags,
            "versions": dict(v.split("=", 1) for v in a.version)}
    prompts = read_prompts(a.prompts)
    if not a.llama_only:
        info["amc_sparse_defaults"] = amc_sparse_defaults(a.amc)
    llama = LlamaCpp(a.sdist, a.lib_dir, a.model, a.threads, n_ctx=4096)
    info["llama_system_info"] = llama.system_info
    info["llama_model_desc"] = llama.desc
    kt, vt = llama.kv_types(0)
    info["llama_kv_types"] = {"type_k": kt, "type_v": vt}  # ggml_type ids: 1 = f16
    filler = llama.tokenize(open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read())
    g = None
    if not a.skip_greedy:
        g = greedy(a, llama, prompts)
    llama.close()
    rows = None
    if not a.skip_speed:
        rows = speed(a, filler)
    info["loadavg_end"] = loadavg()
    md = summary_md(info, g, rows)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "peer.json"), "w") as f:
        # The prompts by where they come from, not their text (Debian's files, not the project's).
        listed = [{"name": p["name"], "source": p["source"], "start": p["start"],
                   "bytes": len(p["text"].encode()),
                   "sha256": hashlib.sha256(p["text"].encode()).hexdigest()} for p in prompts]
        json.dump({"info": info, "prompts": listed,
                   "greedy": g, "speed": rows}, f, indent=1)
    if g:
        with open(os.path.join(a.out, "greedy.csv"), "w") as f:
            f.write("prompt,prompt_tokens,pair,identical,steps,first_divergence,x_token,y_token,x_margin,y_margin,x_gap,y_gap,shift,forced_agree\n")
            for p in g["prompts"]:
                for key, c in p["pairs"].items():
                    fa = p["forced"].get(key, {}).get("agree", "")
                    vals = [p["name"], p["prompt_tokens"], key.replace("|", " vs "), c["identical"], c["steps"],
                            "" if c["first_divergence"] is None else c["first_divergence"]]
                    vals += [c.get(k, "") for k in ("x_token", "y_token", "x_margin", "y_margin", "x_gap", "y_gap", "shift")]
                    f.write(",".join(str(v) for v in vals + [fa]) + "\n")
    if rows:
        with open(os.path.join(a.out, "speed.csv"), "w") as f:
            keys = ["round", "threads", "engine", "variant", "depth", "decode_tokens_per_s", "prompt_tokens", "decode_steps", "seconds", "loadavg_before"]
            f.write(",".join(keys) + "\n")
            for r in rows:
                f.write(",".join(str(r.get(k, "")) for k in keys) + "\n")
    sys.stdout.write(md)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""transformers generating with its own attention and with amc's, in one run: SmolLM2-135M-Instruct
loaded by transformers from the GGUF file, decode tokens/s at several context lengths for
attn_implementation eager, sdpa, amc (dense) and amc_sparse (block-sparse), the attention's share
of each decode step, and the Python overhead of one amc attention call.

    PYTHONPATH=build/release/python build/venv-transformers/bin/python bench/transformers_speed.py \\
        [--contexts 2048 4096 8064] [--new-tokens 33] [--rounds 3] [--json OUT.json]

Each measurement is one model.generate call (greedy, batch 1) on the first N tokens of real
English text (the licence texts of Debian's /usr/share/common-licenses, concatenated). Decode
tokens/s counts the steps after the first: a logits processor stamps the time of every step, so
prefill (the first step) is left out and the rest is generate's own decode loop, sampling and
all. The attention's share: every implementation runs through a timing wrapper registered with
AttentionInterface (the wrapped function is transformers' eager_attention_forward or
sdpa_attention_forward, or amc's), which sums the time of its decode calls (one query position);
share = that sum / the decode time. Implementations alternate within each round, contexts in
the outer loop; medians over the rounds.

amc_sparse runs each rule of --rules with blocks of 32, top_k 16, 4 sinks and a window of 64
(584 positions, as the C++ benchmarks' sparse step) in an AmcCache. Weights: transformers
dequantizes the Q4_1 file to float32, so keys and values are f32 for every implementation.
Threads: torch.set_num_threads(--threads) and amc's decoders with the same count.

The overhead: amc's "amc" attention function called as transformers calls it (query [1, 9, 1,
64], key and value [1, 3, n, 64] f32) against DenseDecoder.time_decode, the same operator looped
in C++ on the same tensors, rounds alternated, medians.
"""

import argparse
import glob
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (AttentionInterface, AutoModelForCausalLM, AutoTokenizer,  # noqa: E402
                          LogitsProcessor, LogitsProcessorList)
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask  # noqa: E402
from transformers.models.llama.modeling_llama import eager_attention_forward  # noqa: E402

import amc  # noqa: E402
import amc.transformers  # noqa: E402
from python_overhead import machine  # noqa: E402  (bench/, the script's directory)

MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


class Timed:
    """An attention function that sums the time of its decode calls."""

    def __init__(self, function):
        self.function, self.seconds = function, 0.0

    def __call__(self, module, query, *args, **kwargs):
        if query.shape[2] > 1:
            return self.function(module, query, *args, **kwargs)
        start = time.perf_counter()
        out = self.function(module, query, *args, **kwargs)
        self.seconds += time.perf_counter() - start
        return out


class Stamps(LogitsProcessor):
    """Records the time of every generation step (called once per step, after the forward)."""

    def __init__(self):
        self.times = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def rule_config(rule):
    score, _, first = rule.partition("/")
    settings = dict(block_size=32, top_k=16, sinks=4, window=64, rule=score)
    if first:
        settings["shortlist_rule"] = first
    return amc.SparseConfig(**settings)


def overhead(threads, positions, rounds=51, iterations=200):
    torch.manual_seed(0)
    q = torch.randn(1, 9, 1, 64)
    k, v = torch.randn(1, 3, positions, 64), torch.randn(1, 3, positions, 64)
    attention = amc.torch.make_decode_attention(threads=threads)
    decoder = amc.DenseDecoder(0.125, threads)
    for _ in range(50):
        attention(None, q, k, v, None, scaling=0.125)
    cpp, python = [], []
    for _ in range(rounds):
        cpp.append(decoder.time_decode(q[0, :, 0], k[0], v[0], iterations))
        start = time.perf_counter()
        for _ in range(iterations):
            attention(None, q, k, v, None, scaling=0.125)
        python.append((time.perf_counter() - start) / iterations)
    c, p = statistics.median(cpp), statistics.median(python)
    return {"positions": positions, "cpp_us": c * 1e6, "attention_call_us": p * 1e6,
            "overhead_us": (p - c) * 1e6}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.path.join(
        os.environ.get("AMC_MODEL_CACHE") or os.path.expanduser("~/.cache/amc"), MODEL))
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 4096, 8064])
    parser.add_argument("--new-tokens", type=int, default=33)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch's threads")
    parser.add_argument("--amc-threads", type=int, default=1,
                        help="amc's decoder threads (beside torch's, not instead)")
    parser.add_argument("--rules", nargs="+", default=["mean", "twostage/bound"])
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    amc.transformers.register(threads=args.amc_threads)
    directory, name = os.path.split(args.model)
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name,
                                                 attn_implementation="eager").eval()
    text = "\n\n".join(open(p, encoding="utf-8", errors="replace").read()
                       for p in sorted(glob.glob("/usr/share/common-licenses/*"))
                       if os.path.isfile(p))
    all_ids = tokenizer(text, return_tensors="pt")["input_ids"]
    if all_ids.shape[1] < max(args.contexts):
        parser.error(f"the text has {all_ids.shape[1]} tokens, fewer than {max(args.contexts)}")

    wrapped = {"eager": (eager_attention_forward, eager_mask),
               "sdpa": (sdpa_attention_forward, sdpa_mask),
               "amc": (AttentionInterface()["amc"], sdpa_mask)}
    for rule in args.rules:
        wrapped[f"amc_sparse {rule}"] = (AttentionInterface()["amc_sparse"], sdpa_mask)
    # Registered under plain names: one with a "/" would be taken for a hub kernel's.
    timers, names = {}, {}
    for index, (label, (function, mask)) in enumerate(wrapped.items()):
        timers[label], names[label] = Timed(function), f"timed_{index}"
        AttentionInterface.register(names[label], timers[label])
        AttentionMaskInterface.register(names[label], mask)

    runs = []
    for context in args.contexts:
        ids = all_ids[:, :context]
        for round_index in range(args.rounds):
            for label, timer in timers.items():
                model.set_attn_implementation(names[label])
                kwargs = {}
                if label.startswith("amc_sparse"):
                    kwargs["cache"] = amc.transformers.AmcCache(rule_config(label.split()[1]))
                stamps = Stamps()
                timer.seconds = 0.0
                start = time.perf_counter()
                with torch.no_grad():
                    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                         max_new_tokens=args.new_tokens, do_sample=False,
                                         logits_processor=LogitsProcessorList([stamps]),
                                         pad_token_id=0, **kwargs)
                total = time.perf_counter() - start
                decode = stamps.times[-1] - stamps.times[0]
                steps = len(stamps.times) - 1
                runs.append({"context": context, "round": round_index, "attention": label,
                             "prefill_s": stamps.times[0] - start, "generate_s": total,
                             "decode_steps": steps, "decode_s": decode,
                             "decode_tokens_per_s": steps / decode,
                             "attention_decode_s": timer.seconds,
                             "attention_share": timer.seconds / decode,
                             "tokens": out[0, context:].tolist()})
                print(f"{context:6d} round {round_index} {label:24s} "
                      f"{steps / decode:7.2f} tok/s, attention {timer.seconds / decode:5.1%}, "
                      f"prefill {stamps.times[0] - start:6.2f} s", flush=True)

    overheads = [overhead(args.amc_threads, n) for n in (16, 2048)]
    for o in overheads:
        print(f"amc attention call at {o['positions']} positions: {o['attention_call_us']:.1f} us, "
              f"C++ {o['cpp_us']:.1f} us, overhead {o['overhead_us']:.1f} us")
    summary = []
    for context in args.contexts:
        for label in timers:
            mine = [r for r in runs if r["context"] == context and r["attention"] == label]
            summary.append({
                "context": context, "attention": label,
                "decode_tokens_per_s": statistics.median(r["decode_tokens_per_s"] for r in mine),
                "attention_share": statistics.median(r["attention_share"] for r in mine)})
    print("\n| context | attention | decode tokens/s | attention share |")
    print("|---:|---|---:|---:|")
    for s in summary:
        print(f"| {s['context']} | {s['attention']} | {s['decode_tokens_per_s']:.2f} | "
              f"{s['attention_share']:.1%} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "cpus": os.cpu_count(), "threads": args.threads,
                       "amc_threads": args.amc_threads,
                       "torch": torch.__version__, "transformers": transformers.__version__,
                       "amc": amc.__version__, "kernels": amc.kernels(),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "new_tokens": args.new_tokens, "rules": args.rules, "runs": runs,
                       "summary": summary, "overhead": overheads}, f, indent=1)


if __name__ == "__main__":
    main()

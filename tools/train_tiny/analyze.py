#!/usr/bin/python3
"""What the attention of an exported tiny checkpoint learned: sinks, concentration, copying.

    /usr/bin/python3 tools/train_tiny/analyze.py --model data/qwen2-tiny [--out FILE.json]

Runs the PyTorch model of model.py on the exported bf16 weights (float32 arithmetic) and
measures, on held-out code from the training corpus's validation files:
- sinks: the attention weight on position 0 per layer and head (mean over queries at positions
  >= 256), against the uniform weight 1/(position + 1) it would get from diffuse attention;
- concentration: per layer and head, the smallest number of positions holding 50% and 90% of
  the softmax mass of a query, and the largest weight (medians over queries at positions
  >= 1024); where the largest weight sits (its most common distances back from the query, and
  how often it lies 64 or more positions back, outside a window of 64);
- copying (an induction test): the loss on a random string (letters, and printable ASCII) the
  second time it appears against the first time, right after it and after 1000 bytes of code
  in between (--trials strings of --length bytes each; bytes 16.. of each copy count, so the
  first bytes of the second copy, which could not be known to start one, do not).
- held-out loss: the mean loss (nats per byte) over every byte of the held-out files, in
  consecutive windows of --window bytes (the training probes' few windows are too few to
  compare checkpoints by).
Prints a markdown report; --out also writes the numbers as JSON.
"""

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_maps import attention_logits  # noqa: E402
from model import Qwen2Tiny, TinyConfig  # noqa: E402
from train import EOS_ID, keep_freed_memory, split_corpus  # noqa: E402


def load_safetensors(path):
    raw = Path(path).read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    base = 8 + size
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        buf = bytearray(raw[base + begin:base + end])
        if entry["dtype"] == "BF16":
            t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16).float()
        elif entry["dtype"] == "F32":
            t = torch.frombuffer(buf, dtype=torch.float32)
        else:
            t = torch.frombuffer(buf, dtype=torch.int32)
        out[name] = t.reshape(entry["shape"])
    return out


def load_model(model_dir):
    config_json = json.loads((Path(model_dir) / "config.json").read_text())
    fields = TinyConfig.__dataclass_fields__
    config = TinyConfig(**{k: v for k, v in config_json.items() if k in fields})
    # The rotary-angle convention the model was trained with (as amc's loader reads it).
    model = Qwen2Tiny(config, rope=config_json.get("amc_rope_angles", "exact"))
    weights = load_safetensors(Path(model_dir) / "model.safetensors")
    model.load_state_dict({k[len("model."):]: v for k, v in weights.items()})
    return model.eval()


def attention_probabilities(model, ids):
    """[layers] of [heads, seq, seq] softmax weights of one sequence."""
    return [F.softmax(logits, dim=-1) for logits in attention_logits(model, ids)]


def sink_and_concentration(model, text_ids):
    probs = attention_probabilities(model, text_ids)
    t = text_ids.numel()
    rows = []
    for layer, p in enumerate(probs):
        for head in range(p.shape[0]):
            w = p[head]
            queries = torch.arange(256, t)
            sink = w[queries, 0].mean().item()
            uniform = (1.0 / (queries + 1).float()).mean().item()
            late = w[1024:]  # queries with at least 1024 positions to choose from
            ordered = late.sort(dim=-1, descending=True).values.cumsum(dim=-1)
            need50 = (ordered < 0.5).sum(dim=-1).float().median().item() + 1
            need90 = (ordered < 0.9).sum(dim=-1).float().median().item() + 1
            # Where the largest weight sits, as a distance back from the query.
            offsets = torch.arange(1024, t) - late.argmax(dim=-1)
            values, counts = offsets.unique(return_counts=True)
            top = counts.argsort(descending=True)[:3]
            rows.append({"layer": layer, "head": head, "sink_weight": sink,
                         "uniform_weight": uniform, "positions_for_50pct": need50,
                         "positions_for_90pct": need90,
                         "median_max_weight": late.max(dim=-1).values.median().item(),
                         "median_argmax_distance": offsets.float().median().item(),
                         "common_argmax_distances": values[top].tolist(),
                         "share_argmax_beyond_64": (offsets >= 64).float().mean().item()})
    return rows


ALPHABETS = {"letters": b"abcdefghijklmnopqrstuvwxyz",
             "printable": bytes(range(32, 127))}


@torch.no_grad()
def copying(model, filler, trials=8, length=128, seed=7):
    """Mean loss (nats per byte) on the first and second copy of random strings of each
    alphabet, with the copies adjacent and with 1000 bytes of held-out code between them. The
    strings and the code between are drawn afresh for every trial."""
    g = torch.Generator().manual_seed(seed)
    result = {}
    for alphabet_name, alphabet in ALPHABETS.items():
        symbols = torch.tensor(list(alphabet))
        for gap_name, gap in (("adjacent", 0), ("after_1000_bytes", 1000)):
            first, second = [], []
            for trial in range(trials):
                seq = symbols[torch.randint(0, len(symbols), (length,), generator=g)]
                start = trial * 1500
                between = filler[start:start + gap]
                ids = torch.cat([seq, between, seq])
                logits = model(ids.unsqueeze(0))[0]
                loss = F.cross_entropy(logits[:-1], ids[1:], reduction="none")
                first.append(loss[16:length - 1].mean().item())  # skip the first few bytes
                second.append(loss[length + gap + 15:].mean().item())
            result[f"{alphabet_name}_{gap_name}"] = {
                "first_copy_loss": sum(first) / trials,
                "second_copy_loss": sum(second) / trials,
                "uniform_loss": math.log(len(symbols)), "trials": trials, "length": length}
    return result


@torch.no_grad()
def held_out_loss(model, valid, window):
    """Mean next-byte loss over the whole held-out stream, cut into consecutive windows of
    `window` + 1 tokens that overlap by one (every byte after the first is a target once)."""
    total, count = 0.0, 0
    for start in range(0, valid.numel() - 1, window):
        ids = valid[start:start + window + 1]
        logits = model(ids[:-1].unsqueeze(0))[0]
        total += F.cross_entropy(logits, ids[1:], reduction="sum").item()
        count += ids.numel() - 1
    return total / count


def report(model_dir, sinks, copy, loss=None, window=0):
    lines = [f"# Attention of {model_dir}", ""]
    if loss is not None:
        lines += [f"Held-out loss: {loss:.4f} nats per byte (every byte of the held-out files, "
                  f"windows of {window})", ""]
    lines.append("| layer | head | weight on position 0 | uniform weight | positions for 50% | "
                 "positions for 90% | median largest weight | its usual distances back | "
                 "largest weight >= 64 back |")
    lines.append("|--:|--:|--:|--:|--:|--:|--:|---|--:|")
    for r in sinks:
        distances = ", ".join(str(d) for d in r["common_argmax_distances"])
        lines.append(f"| {r['layer']} | {r['head']} | {r['sink_weight']:.3f} | "
                     f"{r['uniform_weight']:.4f} | {r['positions_for_50pct']:.0f} | "
                     f"{r['positions_for_90pct']:.0f} | {r['median_max_weight']:.3f} | "
                     f"{distances} | {100 * r['share_argmax_beyond_64']:.0f}% |")
    lines += ["", "| copy | trials | first copy loss | second copy loss | uniform over the alphabet |",
              "|---|--:|--:|--:|--:|"]
    for name, r in copy.items():
        lines.append(f"| {name} | {r['trials']} | {r['first_copy_loss']:.3f} | "
                     f"{r['second_copy_loss']:.3f} | {r['uniform_loss']:.3f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, default=50, help="strings per copy test")
    parser.add_argument("--length", type=int, default=100, help="bytes per string")
    parser.add_argument("--window", type=int, default=2048,
                        help="window of the held-out loss (0: skip it)")
    args = parser.parse_args()
    if args.trials < 1 or args.length < 32:
        sys.exit(f"analyze.py: --trials must be >= 1 and --length >= 32, got {args.trials} and "
                 f"{args.length}")
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    _, _, valid = split_corpus()
    # 2048 bytes of held-out code that does not cross a file boundary.
    boundaries = (valid == EOS_ID).nonzero().flatten().tolist()
    start = next(b + 1 for a, b in zip(boundaries, boundaries[1:]) if b - a > 2049)
    text = valid[start:start + 2048]
    sinks = sink_and_concentration(model, text)
    copy = copying(model, valid[valid != EOS_ID], args.trials, args.length)
    loss = held_out_loss(model, valid, args.window) if args.window > 0 else None
    print(report(args.model, sinks, copy, loss, args.window))
    if args.out:
        args.out.write_text(json.dumps({"heads": sinks, "copying": copy, "held_out_loss": loss,
                                        "held_out_window": args.window}, indent=2) + "\n")


if __name__ == "__main__":
    main()

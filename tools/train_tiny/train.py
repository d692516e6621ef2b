#!/usr/bin/python3
"""Trains amc's tiny Qwen2-architecture checkpoint (data/qwen2-tiny) on the Python standard
library's sources, and exports it with the reference logits the C++ tests compare against.

    /usr/bin/python3 tools/train_tiny/train.py --out data/qwen2-tiny [--steps N] [--threads 2]

Needs Debian's python3-torch (and python3-numpy, which it pulls in); /usr/bin/python3 because
that is where Debian installs torch. Deterministic for a given thread count: every random draw
comes from seeded generators. See data/qwen2-tiny/README.md for the recipe and the results.
"""

import argparse
import ctypes
import csv
import json
import math
import os
import struct
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import Qwen2Tiny, TinyConfig  # noqa: E402

EOS_ID = 256  # <|endoftext|>, after the 256 byte tokens
CORPUS_ROOT = Path("/usr/lib/python3.11")
VALIDATION_EVERY = 32  # every 32nd file (in sorted order) is held out


def corpus_files():
    """The standard library's .py files, sorted; third-party packages excluded (not PSF)."""
    files = [
        p for p in CORPUS_ROOT.rglob("*.py")
        if "dist-packages" not in p.parts and "site-packages" not in p.parts
    ]
    return sorted(files, key=lambda p: str(p.relative_to(CORPUS_ROOT)))


def token_stream(files):
    """Byte ids of the files, each followed by <|endoftext|>: one int64 tensor."""
    parts = []
    for path in files:
        data = path.read_bytes()
        if data:  # empty __init__.py files add nothing but their separator
            parts.append(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64))
        parts.append(torch.tensor([EOS_ID]))
    return torch.cat(parts)


def keep_freed_memory():
    """Makes glibc keep freed memory for reuse instead of unmapping it. PyTorch allocates a
    fresh buffer for every intermediate tensor; glibc serves the large ones with mmap and
    returns them at free, so every step pays a page fault per 4 KiB touched: on the project's
    machine that made element-wise operations 60x slower (silu of 12M floats 181 ms, 3 ms
    without the faults) and training about 5x slower."""
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)


def split_corpus():
    files = corpus_files()
    train = [f for i, f in enumerate(files) if i % VALIDATION_EVERY != 0]
    valid = [f for i, f in enumerate(files) if i % VALIDATION_EVERY == 0]
    return files, token_stream(train), token_stream(valid)


def bytes_to_unicode():
    """GPT-2's byte-to-unicode map, which ByteLevel tokenizers write their tokens in."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def tokenizer_json():
    """A byte-level tokenizer (id = byte value, no merges) in Hugging Face's format."""
    table = bytes_to_unicode()
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": EOS_ID, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": {table[b]: b for b in range(256)},
                  "merges": []},
    }


def write_safetensors(path, tensors, metadata=None):
    """A safetensors file (little-endian, header then buffer in insertion order), atomically."""
    header, chunks, offset = {}, [], 0
    dtypes = {torch.bfloat16: "BF16", torch.float32: "F32", torch.int32: "I32"}
    for name, tensor in tensors.items():
        tensor = tensor.contiguous()
        raw = tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor
        data = raw.numpy().tobytes()
        header[name] = {"dtype": dtypes[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)
    os.replace(tmp, path)


def write_json(path, value):
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def learning_rate(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def windows(stream, count, length, generator):
    """`count` random windows of `length` + 1 tokens: [count, length + 1]."""
    starts = torch.randint(0, stream.numel() - length - 1, (count,), generator=generator)
    return torch.stack([stream[s:s + length + 1] for s in starts.tolist()])


@torch.no_grad()
def validation_loss(model, batches):
    model.eval()
    total = 0.0
    for batch in batches:
        logits = model(batch[:, :-1])
        total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).item()
    model.train()
    return total / len(batches)


def reference_inputs(valid):
    """Fixed inputs for the cross-framework check: the first 512 tokens of a held-out file."""
    return valid[:512].clone()


@torch.no_grad()
def reference_logits(model, ids, kv_bf16):
    """Logits of the exported (bf16-rounded) weights, computed in float64: [len(ids), vocab]."""
    exact = Qwen2Tiny(model.config, model.rope).to(torch.float64)
    exact.load_state_dict({k: v.to(torch.bfloat16).to(torch.float64)
                           for k, v in model.state_dict().items()})
    return exact(ids.unsqueeze(0), kv_bf16)[0]


def export_folder(model, out, valid, meta, description):
    """The checkpoint folder: bf16 weights, config.json (with `description`, and the model's
    rotary-angle convention as "amc_rope_angles"), tokenizer.json, the reference logits of the
    cross-framework check and `meta` as training.json."""
    out.mkdir(parents=True, exist_ok=True)
    weights = {k: v.to(torch.bfloat16) for k, v in model.hf_state_dict().items()}
    write_safetensors(out / "model.safetensors", weights, {"format": "pt"})
    write_json(out / "config.json", model.config.hf_config(EOS_ID, description, rope=model.rope))
    write_json(out / "tokenizer.json", tokenizer_json())
    ids = reference_inputs(valid)
    logits = reference_logits(model, ids, kv_bf16=False)
    logits_bf16_kv = reference_logits(model, ids, kv_bf16=True)
    write_safetensors(out / "reference_logits.safetensors",
                      {"ids": ids.to(torch.int32), "logits": logits.to(torch.float32),
                       "logits_bf16_kv": logits_bf16_kv.to(torch.float32)},
                      {"source": "float64 forward of the bf16 weights (tools/train_tiny/model.py, "
                                 f"rotary angles: {model.rope})",
                       "logits_bf16_kv": "keys (after RoPE) and values rounded to bf16"})
    write_json(out / "training.json", meta)


def export(model, out, valid, meta):
    params = sum(p.numel() for p in model.parameters())
    description = (f"{out.name}: a {params / 1e6:.1f}M-parameter Qwen2-architecture model trained "
                   f"by amc (tools/train_tiny) on the Python standard library's sources, one "
                   f"token per byte. Too small to write good code: its greedy continuations "
                   f"soon repeat whitespace or a word; watch the retained mass per layer and "
                   f"where dense and sparse decoding part (see its README.md)")
    export_folder(model, out, valid, meta, description)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=2, help="sequences per step")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--save-state", type=Path,
                        help="also torch.save the trained f32 parameters here")
    parser.add_argument("--export-from", type=Path,
                        help="skip training: export the parameters --save-state wrote (the "
                             "training.json and loss_curve.csv already in --out are kept)")
    parser.add_argument("--time-steps", type=int, default=0,
                        help="time this many steps and exit (sizing the run)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    files, train, valid = split_corpus()
    print(f"corpus: {len(files)} files, {train.numel()} train and {valid.numel()} validation "
          f"tokens (bytes)", flush=True)

    config = TinyConfig(max_position_embeddings=max(4096, args.context))
    model = Qwen2Tiny(config)
    if args.export_from:
        model.load_state_dict(torch.load(args.export_from))
        meta = json.loads((args.out / "training.json").read_text())
        export(model, args.out, valid, meta)
        print(f"exported {args.export_from} to {args.out}")
        return
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params} parameters", flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95))
    data_gen = torch.Generator().manual_seed(args.seed)
    eval_gen = torch.Generator().manual_seed(args.seed + 1)
    eval_batches = [windows(valid, 1, args.context, eval_gen) for _ in range(4)]

    args.out.mkdir(parents=True, exist_ok=True)
    curve_path = args.out / "loss_curve.csv"
    rows = []
    start = time.time()
    steps = args.time_steps or args.steps
    for step in range(steps):
        lr = learning_rate(step, args.steps, args.lr, args.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = windows(train, args.batch, args.context, data_gen)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        row = {"step": step + 1, "tokens": (step + 1) * args.batch * args.context,
               "train_loss": loss.item(), "lr": lr, "seconds": time.time() - start,
               "valid_loss": ""}
        if (step + 1) % args.eval_every == 0 or step + 1 == steps:
            row["valid_loss"] = validation_loss(model, eval_batches)
        rows.append(row)
        if step % 10 == 0 or row["valid_loss"] != "":
            print(f"step {step + 1}/{steps} loss {row['train_loss']:.4f} "
                  f"valid {row['valid_loss']} lr {lr:.2e} {row['seconds']:.0f} s", flush=True)
    if args.time_steps:
        print(f"{(time.time() - start) / steps:.2f} s/step")
        return
    if args.save_state:
        torch.save(model.state_dict(), args.save_state)
    with open(curve_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta = {
        "corpus": f"{CORPUS_ROOT}/**/*.py (Debian 12 python3.11 standard library, PSF license)",
        "files": len(files), "train_tokens_available": train.numel(),
        "validation_tokens": valid.numel(), "parameters": params,
        "steps": args.steps, "batch": args.batch, "context": args.context, "peak_lr": args.lr,
        "warmup": args.warmup, "seed": args.seed, "threads": args.threads,
        "tokens_seen": args.steps * args.batch * args.context,
        "final_train_loss": rows[-1]["train_loss"], "final_valid_loss": rows[-1]["valid_loss"],
        "seconds": rows[-1]["seconds"], "torch": torch.__version__,
    }
    export(model, args.out, valid, meta)
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()

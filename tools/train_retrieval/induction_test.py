#!/usr/bin/python3
"""The induction test of EXPERIMENTS.md: does a model of train.py's architecture learn to copy?

Each sequence holds a random string twice, at random positions in random filler
(data.repeated_string; --fixed: the string and its repeat back to back, half the context
each, which a positional head can copy); the loss counts only the repeat, whose bytes after
the first can be copied from the string. Separates the model and optimiser from
the data mixture: a recipe whose model cannot pass this will not learn retrieval from code.

    /usr/bin/python3 tools/train_retrieval/induction_test.py --alphabets all,printable,letters \
        --layers 4 --width 384 --lr 5e-4 --steps 300 --batch 18 --context 256
"""

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "train_tiny"))
import train  # noqa: E402
from attention import chunked_causal_attention  # noqa: E402
from model import Qwen2Tiny, TinyConfig  # noqa: E402

import data  # noqa: E402

ALPHABETS = {"all": data.ALL_BYTES, "printable": data.PRINTABLE, "letters": data.LETTERS}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alphabets", default="all,printable,letters",
                        help="comma-separated, from " + ",".join(ALPHABETS) +
                             "; rows cycle through them")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=384, help="hidden size (64 per head)")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=18)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kv-heads", type=int, default=0, help="0: a third of the heads")
    parser.add_argument("--code-share", type=float, default=0.0,
                        help="share of rows that are plain code windows (trained on, not "
                             "reported), where n-gram statistics reward previous-token heads")
    parser.add_argument("--f32", action="store_true", help="no bf16 autocast")
    parser.add_argument("--fixed", action="store_true",
                        help="the repeat always at half the context (a fixed distance)")
    args = parser.parse_args()
    kinds = args.alphabets.split(",")
    for kind in kinds:
        if kind not in ALPHABETS:
            sys.exit(f"induction_test.py: unknown alphabet {kind!r} (known: {', '.join(ALPHABETS)})")
    train.keep_freed_memory()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    heads = args.width // 64
    config = TinyConfig(hidden_size=args.width, intermediate_size=args.width * 8 // 3 // 64 * 64,
                        num_hidden_layers=args.layers, num_attention_heads=heads,
                        num_key_value_heads=args.kv_heads or max(1, heads // 3))
    model = Qwen2Tiny(config, rope="transformers")
    model.use_attention(chunked_causal_attention)
    optimizer = train.new_optimizer(model, args.lr)
    generator = torch.Generator().manual_seed(1)
    stream = train.split_corpus()[1] if args.code_share > 0 else None
    copy_rows = args.batch - round(args.batch * args.code_share)
    half = args.context // 2
    start = time.time()
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / args.warmup)
        rows, row_weights = [], []
        for r in range(args.batch):
            if r >= copy_rows:
                rows.append(data.code_window(stream, args.context + 1, generator))
                row_weights.append(torch.ones(args.context))
                continue
            alphabet = ALPHABETS[kinds[r % len(kinds)]]
            if args.fixed:
                text = data.random_bytes(generator, alphabet, half + 1)
                ids_row = torch.tensor(list(text + text)[:args.context + 1])
                w = torch.zeros(args.context + 1)
                w[half + 2:] = 1.0
            else:
                ids_row, w = data.repeated_string(args.context, generator, alphabet)
            rows.append(ids_row)
            row_weights.append(w[1:])  # weights of the targets
        ids = torch.stack(rows)
        weights = torch.stack(row_weights)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not args.f32):
            logits = model(ids[:, :-1])
        losses = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten(),
                                 reduction="none").view(args.batch, args.context)
        loss = (losses * weights).sum() / weights.sum()
        copy_weights = weights[:copy_rows]
        copy_loss = (losses[:copy_rows] * copy_weights).sum() / copy_weights.sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 20 == 0 or step == args.steps - 1:
            per_row = ((losses[:copy_rows] * copy_weights).sum(1) / copy_weights.sum(1)).detach()
            parts = " ".join(f"{k} {per_row[i::len(kinds)].mean():.3f}"
                             for i, k in enumerate(kinds))
            code = (f" code {losses[copy_rows:].mean().item():.3f}" if copy_rows < args.batch
                    else "")
            print(f"step {step} copy loss {copy_loss.item():.3f} ({parts}){code} "
                  f"{time.time() - start:.0f} s",
                  flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Trains amc's retrieval checkpoint (data/qwen2-retrieval): a Qwen2-architecture model that
copies and looks up by content at up to 4096 tokens, on the Python standard library's sources
mixed with synthetic retrieval sequences (data.py), with a curriculum from short pure-copy
sequences to 4096-token code windows.

    /usr/bin/python3 tools/train_retrieval/train.py --state DIR [--threads 2]
    /usr/bin/python3 tools/train_retrieval/train.py --state DIR --export data/qwen2-retrieval

Training saves its whole state (weights, optimizer, the curve so far) to DIR/state.pt every few
minutes and resumes from it when started again, so it may run in several stretches; each batch
is a pure function of the seed and the step, so a resumed run sees the same data as an
uninterrupted one. --export writes the checkpoint folder from the finished state. Needs
Debian's python3-torch and, for speed, libopenblas0-pthread (see README.md here).
"""

import argparse
import collections
import csv
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "train_tiny"))
import data  # noqa: E402
import probes  # noqa: E402
from attention import chunked_causal_attention  # noqa: E402
from model import Qwen2Tiny, TinyConfig  # noqa: E402

# tools/train_tiny/train.py (the corpus, the export), under a name that is not this file's.
_spec = importlib.util.spec_from_file_location("tiny_train", HERE.parent / "train_tiny" / "train.py")
tiny_train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny_train)
CORPUS_ROOT, split_corpus, export_folder = (tiny_train.CORPUS_ROOT, tiny_train.split_corpus,
                                            tiny_train.export_folder)

# The model: 4 layers of width 256 (4 query heads of 64, one KV head), 2.7M parameters.
# Training starts with its first SEED_LAYERS layers alone, on short sequences (96 bytes) of
# random strings repeated at varied distances and plain code, until they copy by content (a
# previous-token head and an induction head: at 96 bytes the 2-layer model leaves its plateau
# after about 250 steps; at 256 bytes it took 600-900, and a 4-layer model had not after 880,
# EXPERIMENTS.md); at GROW_AT the remaining layers are appended with zero output projections,
# so the grown model computes exactly what the 2-layer one did, and training continues on the
# curriculum below, where code takes over and the context grows to 4096.
FINAL_CONFIG = dict(hidden_size=256, intermediate_size=640, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=4096)
SEED_LAYERS = 2
GROW_AT = 600
SEED_LR = 1e-3  # constant after the warm-up, until GROW_AT
REWARMUP = 50  # steps of linear warm-up again after growing (a fresh optimizer)
SNAPSHOT_EVERY = 250  # steps between kept copies of the training state

# The curriculum: (first step, context, sequences per step, mix of repeated strings / pure
# copies / code with records and copies / plain code).
# Step times on the project's idle machine (2 threads): 96 x 64 0.45 s (2 layers), then
# 256 x 48 2.1 s, 512 x 24 2.4 s, 1024 x 12 3.2 s, 2048 x 6 5.0 s, 4096 x 3 8.3 s.
#
# Two recipes (--recipe; the state records which): v2, the default, made data/qwen2-retrieval
# (3.1 hours with the probes, beside other work; EXPERIMENTS.md): Qwen2-0.5B's RoPE base (1e6)
# instead of data/qwen2-tiny's, and the 2048 phase's time spent at 4096 from step 1600, where
# the learning rate is still about half its peak. v1, the first run (2.8 hours), retrieves over
# about 1000 positions only; kept so that EXPERIMENTS.md's first run can be reproduced.
Recipe = collections.namedtuple("Recipe", "name rope_theta phases steps")
_SHORT_PHASES = [
    (0, 96, 64, (0.75, 0.0, 0.0, 0.25)),
    (GROW_AT, 256, 48, (0.2, 0.3, 0.4, 0.1)),
    (GROW_AT + 300, 512, 24, (0.1, 0.1, 0.6, 0.2)),
    (GROW_AT + 700, 1024, 12, (0.0, 0.05, 0.6, 0.35)),
]
RECIPES = {
    "v1": Recipe("v1", 1e4, _SHORT_PHASES + [
        (GROW_AT + 1200, 2048, 6, (0.0, 0.0, 0.6, 0.4)),
        (GROW_AT + 1700, 4096, 3, (0.0, 0.0, 0.6, 0.4)),
    ], GROW_AT + 2100),
    "v2": Recipe("v2", 1e6, _SHORT_PHASES + [
        (GROW_AT + 1000, 4096, 3, (0.0, 0.0, 0.6, 0.4)),
    ], GROW_AT + 1800),
}
DEFAULT_RECIPE = "v2"  # data/qwen2-retrieval's
# The recipe of this run, set once by main() from --recipe or the saved state.
RECIPE = RECIPES[DEFAULT_RECIPE]


keep_freed_memory = tiny_train.keep_freed_memory


def phase_at(step):
    return [p for p in RECIPE.phases if p[0] <= step][-1]


def learning_rate(step, peak, warmup):
    """Before GROW_AT: a linear warm-up over `warmup` steps to SEED_LR, then SEED_LR. From
    GROW_AT (a fresh optimizer, without moments): a linear warm-up over REWARMUP steps to
    `peak`, then a cosine to a tenth of it at the recipe's last step."""
    if step < GROW_AT:
        return SEED_LR * min(1.0, (step + 1) / warmup)
    if step < GROW_AT + REWARMUP:
        return peak * (step - GROW_AT + 1) / REWARMUP
    progress = (step - GROW_AT - REWARMUP) / max(1, RECIPE.steps - GROW_AT - REWARMUP)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def new_model(layers=FINAL_CONFIG["num_hidden_layers"]):
    # Rotary angles as transformers computes them (float32), the convention amc defaults to.
    config = TinyConfig(**{**FINAL_CONFIG, "num_hidden_layers": layers,
                           "rope_theta": RECIPE.rope_theta})
    return Qwen2Tiny(config, rope="transformers")


def training_model(step):
    """The model trained at `step` (SEED_LAYERS layers before GROW_AT), with the chunked
    attention of attention.py (same function, less memory)."""
    model = new_model(SEED_LAYERS if step < GROW_AT else FINAL_CONFIG["num_hidden_layers"])
    model.use_attention(chunked_causal_attention)
    return model


def grow(seed_model, seed):
    """The full-depth model whose first layers are `seed_model`'s and whose appended layers
    add nothing yet (zero attention output and MLP down projections, so the residual stream
    passes through them unchanged): the same function, and the appended layers learn from the
    gradient of their zero projections on."""
    torch.manual_seed(seed)
    model = training_model(GROW_AT)
    missing, unexpected = model.load_state_dict(seed_model.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("layers.") for k in missing), (missing, unexpected)
    for layer in model.layers[SEED_LAYERS:]:
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
    return model


# The largest attention logit q.k / sqrt(head_dim) any input can produce, enforced after every
# optimizer step by cap_attention_logits. Above the cap's bound of every head through step 1000
# of the run that produced the checkpoint (layer 0's largest bound there: about 160).
LOGIT_CAP = 200.0


@torch.no_grad()
def attention_logit_bounds(model):
    """[layers][heads] a bound on |q.k| / sqrt(d) for every input: q_proj and k_proj read
    RMSNorm's output, of norm at most R = sqrt(hidden) max|gamma|, so a query head's q has norm
    at most s(W_q,h) R + |b_q,h| (s the spectral norm), its KV head's k likewise, and RoPE's
    rotations keep norms."""
    c = model.config
    d, heads, kv_heads = c.head_dim, c.num_attention_heads, c.num_key_value_heads
    bounds = []
    for layer in model.layers:
        attn = layer.self_attn
        radius = math.sqrt(c.hidden_size) * layer.input_layernorm.weight.abs().max()
        q = (torch.linalg.matrix_norm(attn.q_proj.weight.view(heads, d, -1), 2) * radius
             + attn.q_proj.bias.view(heads, d).norm(dim=-1))
        k = (torch.linalg.matrix_norm(attn.k_proj.weight.view(kv_heads, d, -1), 2) * radius
             + attn.k_proj.bias.view(kv_heads, d).norm(dim=-1))
        bounds.append(q * k.repeat_interleave(heads // kv_heads) / math.sqrt(d))
    return bounds


@torch.no_grad()
def cap_attention_logits(model, cap):
    """Scales down the query projection (weights and bias) of every head whose logit bound
    (attention_logit_bounds) exceeds `cap`, so that it equals `cap`: a max-norm constraint,
    applied after each optimizer step, that keeps the function a plain Qwen2 model. Why: nothing
    else bounds attention logits in this architecture (no q/k normalisation), and on the copy
    data Adam grew one layer-0 head's without limit (its largest logit on held-out code 31 at
    step 1000, 157 at 1200; about 4000 in the first run, which diverged), while bf16 rounding of
    q and k makes the noise of a logit grow with it (EXPERIMENTS.md)."""
    heads = model.config.num_attention_heads
    for layer, bound in zip(model.layers, attention_logit_bounds(model)):
        scale = (cap / bound).clamp(max=1.0)
        attn = layer.self_attn
        attn.q_proj.weight.view(heads, -1).mul_(scale[:, None])
        attn.q_proj.bias.view(heads, -1).mul_(scale[:, None])


class PausedTime:
    """Seconds this process spent stopped by tools/train_retrieval/paused (which appends each
    stopped interval to STATE/paused.log), so that the training time in the curve and the
    README counts training, not the builds and analyses it was stopped for."""

    def __init__(self, state_dir):
        self.path, self.since = state_dir / "paused.log", time.time()

    def seconds(self):
        """Stopped seconds since this process started (the log holds earlier runs' too)."""
        if not self.path.exists():
            return 0.0
        total = 0.0
        for line in self.path.read_text().splitlines():
            try:
                begin, end = (float(x) for x in line.split())
            except ValueError:
                continue  # a line being written
            total += max(0.0, min(end, time.time()) - max(begin, self.since))
        return total


def new_optimizer(model, lr):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def save_state(path, model, optimizer, step, rows, seconds):
    tmp = Path(str(path) + ".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step, "rows": rows, "seconds": seconds, "recipe": RECIPE.name}, tmp)
    os.replace(tmp, path)


def train(args):
    torch.manual_seed(args.seed)
    files, stream, valid = split_corpus()
    state_path = args.state / "state.pt"
    step, rows, seconds_before = 0, [], 0.0
    state = torch.load(state_path) if state_path.exists() else None
    if state:
        step = state["step"]
    model = training_model(step)
    optimizer = new_optimizer(model, args.lr)
    if state:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, rows, seconds_before = state["step"], state["rows"], state["seconds"]
        print(f"resuming at step {step} ({seconds_before / 60:.0f} min trained)", flush=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params} parameters; corpus {len(files)} files", flush=True)
    probe_set = probes.ProbeSet(valid, seed=args.seed + 1)
    paused = PausedTime(args.state)
    start, last_save = time.time(), time.time()
    end = args.stop_at or RECIPE.steps
    while step < end:
        if step == GROW_AT and len(model.layers) == SEED_LAYERS:
            model = grow(model, args.seed + GROW_AT)
            optimizer = new_optimizer(model, args.lr)
            print(f"step {step}: grown to {len(model.layers)} layers", flush=True)
        first, context, count, mix = phase_at(step)
        lr = learning_rate(step, args.lr, args.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        generator = torch.Generator().manual_seed(args.seed * 100003 + step)
        ids, weights = data.batch(stream, context, count, generator, mix)
        # Matrix products in bf16 (AVX512_BF16: 3.5x the f32 rate here), float32 master
        # weights, attention arithmetic and unembedding.
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids[:, :-1])
        losses = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="none")
        loss = (losses * weights.flatten()).sum() / weights.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if args.logit_cap > 0:
            cap_attention_logits(model, args.logit_cap)
        step += 1
        seconds = seconds_before + time.time() - start - paused.seconds()
        row = {"step": step, "context": context, "tokens": count * context,
               "train_loss": loss.item(), "lr": lr, "seconds": round(seconds, 1)}
        if step % args.eval_every == 0 or step == RECIPE.steps:
            row.update(probe_set.measure(model, max_context=context))
        rows.append(row)
        if step % 10 == 0 or len(row) > 6:
            extra = " ".join(f"{k} {v:.3f}" for k, v in row.items() if k not in
                             ("step", "context", "tokens", "train_loss", "lr", "seconds"))
            print(f"step {step}/{RECIPE.steps} ctx {context} loss {row['train_loss']:.4f} "
                  f"lr {lr:.2e} {seconds / 60:.1f} min {extra}", flush=True)
        if time.time() - last_save > args.save_every or step == end:
            save_state(state_path, model, optimizer, step, rows, seconds)
            last_save = time.time()
        if step % SNAPSHOT_EVERY == 0:
            # Kept, so that a run that goes wrong can be resumed from before it did.
            save_state(args.state / f"state-{step:05d}.pt", model, optimizer, step, rows,
                       seconds)
    write_curve(args.state / "loss_curve.csv", rows)


def write_curve(path, rows):
    fields = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def export(args):
    state = torch.load(args.state / "state.pt")
    if state["step"] < RECIPE.steps:
        sys.exit(f"train.py: the state in {args.state} is at step {state['step']} of "
                 f"{RECIPE.steps}; "
                 f"finish training first")
    model = new_model()
    model.load_state_dict(state["model"])
    files, stream, valid = split_corpus()
    rows = state["rows"]
    out = args.export
    out.mkdir(parents=True, exist_ok=True)
    write_curve(out / "loss_curve.csv", rows)
    params = sum(p.numel() for p in model.parameters())
    description = (f"{out.name}: a {params / 1e6:.1f}M-parameter Qwen2-architecture model "
                   f"trained by amc (tools/train_retrieval) on the Python standard library's "
                   f"sources with planted records and copied strings, one token per byte, "
                   f"context 4096: it copies and looks values up by content (see its README.md)")
    last = rows[-1]
    meta = {
        "corpus": f"{CORPUS_ROOT}/**/*.py (Debian 12 python3.11 standard library, PSF license)",
        "files": len(files), "train_tokens_available": stream.numel(),
        "validation_tokens": valid.numel(), "parameters": params, "recipe": RECIPE.name,
        "rope_theta": RECIPE.rope_theta, "steps": RECIPE.steps,
        "phases": [{"first_step": p[0], "context": p[1], "sequences": p[2],
                    "mix_repeats_pure_copies_code_with_inserts_plain_code": list(p[3])}
                   for p in RECIPE.phases],
        "peak_lr": args.lr, "warmup": args.warmup, "logit_cap": args.logit_cap,
        "seed": args.seed, "threads": args.threads,
        "tokens_seen": sum(r["tokens"] for r in rows), "seconds": last["seconds"],
        "final": {k: v for k, v in last.items() if k not in ("step", "tokens", "lr")},
        "torch": torch.__version__,
    }
    export_folder(model, out, valid, meta, description)
    print(json.dumps(meta, indent=2))


def use_recipe(args):
    """Sets RECIPE: the saved state's (states written before recipes existed are v1's), which
    --recipe may name again but not change; for a new state --recipe's, else DEFAULT_RECIPE."""
    global RECIPE
    state_path = args.state / "state.pt"
    saved = None
    if state_path.exists():
        saved = torch.load(state_path, map_location="cpu").get("recipe", "v1")
    if saved and args.recipe and args.recipe != saved:
        sys.exit(f"train.py: the state in {args.state} is recipe {saved}'s, not {args.recipe}'s; "
                 f"use another --state")
    RECIPE = RECIPES[args.recipe or saved or DEFAULT_RECIPE]
    print(f"recipe {RECIPE.name}: RoPE base {RECIPE.rope_theta:g}, {RECIPE.steps} steps",
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", type=Path, required=True,
                        help="folder for the training state (state.pt) and loss_curve.csv")
    parser.add_argument("--export", type=Path, help="write the checkpoint folder and exit")
    parser.add_argument("--lr", type=float, default=3e-4,
                        help="peak learning rate of the grown model (SEED_LR before)")
    parser.add_argument("--logit-cap", type=float, default=LOGIT_CAP,
                        help="bound on every attention logit, enforced each step (0: none)")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--save-every", type=float, default=300, help="seconds")
    parser.add_argument("--stop-at", type=int, default=0,
                        help="stop (saving the state) after this step, to resume later")
    parser.add_argument("--recipe", choices=sorted(RECIPES),
                        help="v2 (data/qwen2-retrieval's) or v1 (the first run); default: the "
                             "saved state's, else v2")
    args = parser.parse_args()
    use_recipe(args)
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    args.state.mkdir(parents=True, exist_ok=True)
    if args.export:
        export(args)
    else:
        train(args)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How closely can any float32 implementation match a checkpoint's reference logits?

The reference logits that the training tools export (reference_logits.safetensors) come from
the PyTorch model in float64, once with exact keys and values and once with them rounded to
bf16 (as amc's bf16 KV cache stores them). Rounding to bf16 is not smooth: an element near a
rounding boundary goes one way or the other with the last bit of the arithmetic before it. This
runs the same model on the same ids in float32 and prints its largest relative error against
float64, per position (max |a - b| / max |b| over the vocabulary, as tests/test_checkpoint.cpp
measures amc), with exact and with bf16-rounded keys and values: the floor under the tolerance
test_checkpoint.cpp uses for each.

    /usr/bin/python3 tools/train_tiny/kv_rounding_floor.py data/qwen2-retrieval
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze import load_model, load_safetensors  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="checkpoint folder with reference_logits")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = load_model(args.model)
    ids = load_safetensors(args.model / "reference_logits.safetensors")["ids"].long()

    @torch.no_grad()
    def logits(dtype, kv_bf16):
        return model.to(dtype)(ids.unsqueeze(0), kv_bf16)[0].double()

    for kv_bf16 in (False, True):
        want, got = logits(torch.float64, kv_bf16), logits(torch.float32, kv_bf16)
        error = ((got - want).abs().amax(dim=1) / want.abs().amax(dim=1)).max().item()
        kind = "bf16-rounded" if kv_bf16 else "exact"
        print(f"{args.model}: {kind} keys and values: float32 vs float64, largest relative "
              f"error {error:.3g}")


if __name__ == "__main__":
    main()

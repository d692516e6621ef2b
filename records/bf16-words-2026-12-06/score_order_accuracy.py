#!/usr/bin/env python3
"""How far three f32 summation orders of a 64-channel score land from the exact one, relative to
the size of the terms (sum_i |q_i k_i|, which any order's rounding scales with: THEORY section 8):
  chains-of-32  the word kernel's first draft: even and odd channels in two chains of 32 FMAs;
  blocks-of-8   score16_bf16_words: per 16 channels, even and odd chains of 8, added, then added
                to the head's sum;
  lanes+tree    the row-by-row kernel before it: 16 lanes of 4 FMAs, then a 4-level tree.
q ~ N(0, 1) / 8 (the scaled query), k ~ N(0, 16) rounded to bf16 (the test cache's needle rows),
20000 draws. Each FMA is emulated exactly: the product of an f32 and a bf16 is exact in double,
and the sum rounds once to f32. Needs numpy: build/venv/bin/python score_order_accuracy.py"""
import numpy as np

rng = np.random.default_rng(1)
N, f = 20000, np.float32
q = rng.standard_normal((N, 64)).astype(f) * f(0.125)
bits = (rng.standard_normal((N, 64)).astype(f) * f(4)).view(np.uint32)
k = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(f)  # to bf16
exact = (q.astype(np.float64) * k.astype(np.float64)).sum(1)


def fma(a, b, c):
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(f)


even, odd = np.zeros(N, f), np.zeros(N, f)
for j in range(32):
    even, odd = fma(k[:, 2 * j], q[:, 2 * j], even), fma(k[:, 2 * j + 1], q[:, 2 * j + 1], odd)
chains = (even + odd).astype(f)

total = np.zeros(N, f)
for c in range(0, 64, 16):
    even, odd = (q[:, c] * k[:, c]).astype(f), (q[:, c + 1] * k[:, c + 1]).astype(f)
    for j in range(1, 8):
        even = fma(k[:, c + 2 * j], q[:, c + 2 * j], even)
        odd = fma(k[:, c + 2 * j + 1], q[:, c + 2 * j + 1], odd)
    total = (total + (even + odd).astype(f)).astype(f)
blocks = total

lanes = [np.zeros(N, f)] * 16
for c in range(0, 64, 16):
    lanes = [fma(q[:, c + i], k[:, c + i], lanes[i]) for i in range(16)]
for width in (8, 4, 2, 1):
    lanes = [(lanes[i] + lanes[i + width]).astype(f) for i in range(width)]
tree = lanes[0]

size = np.abs(q.astype(np.float64) * k).sum(1)
print(f"unit roundoff u = {2.0 ** -24:.3g}; error / sum_i |q_i k_i| over {N} draws:")
for name, got in (("chains-of-32", chains), ("blocks-of-8", blocks), ("lanes+tree", tree)):
    r = np.abs(got - exact) / size
    print(f"{name:13s} rms {np.sqrt((r ** 2).mean()):.3g}  max {r.max():.3g}")

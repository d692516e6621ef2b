"""Shared pieces of the amc package tests: independent float64 references in plain NumPy (none
calls amc), random inputs, and the build tree's tools."""

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def softmax_attention(q, k, v, scale, positions=None):
    """q [d], k and v [n, d] (float64): (output [d], lse) over `positions` (all if None)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    idx = np.arange(k.shape[0]) if positions is None else np.asarray(positions)
    scores = scale * (k[idx] @ q)
    top = scores.max()
    w = np.exp(scores - top)
    return (w[:, None] * v[idx]).sum(0) / w.sum(), top + np.log(w.sum())


def mean_rule_selection(q, k, block_size, top_k, sinks, window, scale):
    """The mean-pooled rule's support for one head, by plain loops: candidate blocks are those
    not entirely inside sinks or window; the top_k by scale * <q, block mean> are kept."""
    n = k.shape[0]
    kept_prefix = min(sinks, n)
    suffix = max(n - window, kept_prefix)
    blocks = []
    if kept_prefix < suffix:
        first, last = kept_prefix // block_size, -(-suffix // block_size)
        scored = []
        for b in range(first, last):
            rows = k[b * block_size:min((b + 1) * block_size, n)].astype(np.float64)
            scored.append((-scale * float(rows.mean(0) @ q), b))
        blocks = sorted(b for _, b in sorted(scored)[:top_k])
    positions = set(range(0, min(sinks, n))) | set(range(max(n - window, 0), n))
    for b in blocks:
        positions |= set(range(b * block_size, min((b + 1) * block_size, n)))
    return blocks, sorted(positions)


def random_qkv(rng, query_heads=6, kv_heads=2, n=300, d=32, dtype=np.float32):
    q = rng.standard_normal((query_heads, d)).astype(dtype)
    k = rng.standard_normal((kv_heads, n, d)).astype(dtype)
    v = rng.standard_normal((kv_heads, n, d)).astype(dtype)
    return q, k, v


@pytest.fixture
def rng():
    return np.random.default_rng(20261201)


@pytest.fixture
def build_dir():
    """The CMake build tree whose module is under test (ctest sets AMC_BUILD_DIR)."""
    path = os.environ.get("AMC_BUILD_DIR")
    return Path(path) if path else None

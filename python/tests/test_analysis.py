"""amc.analyse against amc-bounds' JSON and against float64 references; the margin utilities
and omitted-mass helpers against plain NumPy."""

import json
import math
import subprocess

import numpy as np
import pytest
import torch

import amc
from conftest import random_qkv, softmax_attention

CASES = [
    {},
    {"scope": "group", "combine": "max", "rule": "bound", "block_size": 8, "top_k": 3},
    {"rule": "oracle", "block_size": 4, "top_k": 5, "sinks": 0},
    {"target_eps": 0.01, "block_size": 8},
    {"target_eps": 0.001, "max_k": 4, "scope": "group", "block_size": 16},
    {"rule": "twostage", "top_k": 2},
    {"top_p": 0.8, "top_k": 6},
]


def inputs(rng):
    q, k, v = random_qkv(rng, query_heads=4, kv_heads=2, n=300, d=16)
    for g in range(2):  # needles: keys aligned with the group's first query
        for p in (37, 150, 222):
            k[g, p] = 2.5 * q[2 * g]
    return q, k, v


@pytest.mark.parametrize("settings", CASES)
def test_same_as_amc_bounds(rng, tmp_path, build_dir, settings):
    if build_dir is None or not (build_dir / "tools" / "amc-bounds").exists():
        pytest.skip("amc-bounds not built (run through ctest, which sets AMC_BUILD_DIR)")
    q, k, v = inputs(rng)
    # bf16 keys: the tool and the package both convert them to f32 exactly.
    k16 = torch.from_numpy(k).bfloat16()
    path = tmp_path / "step.safetensors"
    amc.save_safetensors(path, {"q": q, "k": k16, "v": v})
    flags = []
    for name, value in settings.items():
        flags += ["--" + name.replace("_", "-"), str(value)]
    tool = subprocess.run([build_dir / "tools" / "amc-bounds", path, "--json"] + flags,
                          capture_output=True, text=True, check=True)
    expected = json.loads(tool.stdout)
    del expected["config"]["input"]
    got = amc.analyse(q, k16, v, **settings).to_dict()
    assert got == expected


def test_against_float64_reference(rng):
    q, k, v = inputs(rng)
    analysis = amc.analyse(q, k, v, top_k=2, block_size=16)
    scale = 1 / math.sqrt(16)
    assert analysis.scale == np.float32(scale) and len(analysis.heads) == 4
    for head in analysis.heads:
        g = head.head // 2
        positions = [p for b, e in head.support for p in range(b, e)]
        dense, lse_all = softmax_attention(q[head.head], k[g], v[g], scale)
        sparse, lse_s = softmax_attention(q[head.head], k[g], v[g], scale, positions)
        eps = -math.expm1(lse_s - lse_all)
        assert head.omitted_mass == pytest.approx(eps, rel=1e-9, abs=1e-15)
        assert head.retained_mass == pytest.approx(1 - eps, rel=1e-12)
        assert head.error_norm == pytest.approx(np.linalg.norm(dense - sparse), rel=1e-9,
                                                abs=1e-15)
        omitted = sorted(set(range(300)) - set(positions))
        worst = max(np.linalg.norm(v[g, j].astype(np.float64) - sparse) for j in omitted)
        assert head.value_bound == pytest.approx(eps * worst, rel=1e-9)
        assert head.certified_omitted_mass_bound >= head.omitted_mass
        assert head.certified_error_bound >= head.error_norm
        assert head.n == 300 and head.support_size == len(positions)
        assert head.needed_k is None
    s = analysis.summary
    assert s.max_omitted_mass == max(h.omitted_mass for h in analysis.heads)
    assert s.min_retained_mass == min(h.retained_mass for h in analysis.heads)
    adaptive = amc.analyse(q, k, v, target_eps=0.01)
    assert adaptive.summary.max_needed_k == max(h.needed_k for h in adaptive.heads)
    for head in adaptive.heads:
        if head.certified_omitted_mass_bound <= 0.01 * (1 + 1e-12):
            assert head.omitted_mass <= 0.01


def test_analysis_refusals(rng):
    q, k, v = inputs(rng)
    bad = k.copy()
    bad[1, 7, 3] = np.nan
    with pytest.raises(amc.Error, match="amc::analyse_step: k holds a non-finite value nan at "
                                        "flat index 4915"):
        amc.analyse(q, bad, v)
    with pytest.raises(amc.Error, match="k has head_dim 16 but q has 8"):
        amc.analyse(q[:, :8], k, v)
    with pytest.raises(amc.Error, match="query heads \\(3\\) are not a multiple of KV heads"):
        amc.analyse(q[:3], k, v)
    with pytest.raises(amc.Error, match="k and v hold n = 0 positions"):
        amc.analyse(q, k[:, :0], v[:, :0])
    with pytest.raises(amc.Error, match="max_k needs target_eps"):
        amc.analyse(q, k, v, max_k=2)


def test_margins(rng):
    logits = rng.standard_normal(50).astype(np.float32)
    logits[7] = 4.0
    logits[31] = 3.5
    m = amc.logit_margin(logits)
    assert (m.top, m.runner_up) == (7, 31)
    assert m.margin == pytest.approx(0.5) and m.margin <= 0.5
    w = rng.standard_normal((50, 12)).astype(np.float32)
    w64 = w.astype(np.float64)
    distances = np.linalg.norm(w64 - w64[7], axis=1)
    distances[7] = 0
    radius = amc.sufficient_radius(w, 7, 0.5)
    assert radius == pytest.approx(0.5 / distances.max(), rel=1e-12)
    norms = amc.unembedding_row_norms(w)
    np.testing.assert_allclose(norms, np.linalg.norm(w64, axis=1), rtol=1e-12)
    others = np.delete(np.linalg.norm(w64, axis=1), 7)
    assert amc.sufficient_radius_from_norms(norms, 7, 0.5) == pytest.approx(
        0.5 / (np.linalg.norm(w64[7]) + others.max()), rel=1e-12)
    for _ in range(20):
        delta = (rng.standard_normal(12) * rng.uniform(0.01, 0.5)).astype(np.float32)
        shifted = logits.astype(np.float64) + w64 @ delta.astype(np.float64)
        expected = all(shifted[b] < shifted[7] for b in range(50) if b != 7)
        assert amc.greedy_token_kept(w, logits, delta, 7) == expected
        if np.linalg.norm(delta) < radius:
            assert expected
    assert amc.attention_error_keeps_token(0.1, 2.0, 1.5, 0.31)
    assert not amc.attention_error_keeps_token(0.1, 2.0, 1.5, 0.3)
    assert amc.omitted_mass(-1.0, 0.0) == pytest.approx(-math.expm1(-1.0), rel=1e-15)
    assert amc.retained_mass(-1.0, 0.0) == pytest.approx(math.exp(-1.0), rel=1e-15)
    # bf16 logits are read as stored.
    assert amc.logit_margin(torch.from_numpy(logits).bfloat16()).top == 7
    with pytest.raises(amc.Error, match="amc::logit_margin: logits\\[3\\] is NaN"):
        amc.logit_margin(np.array([0, 1, 2, np.nan], np.float32))
    with pytest.raises(amc.Error, match="amc.logit_margin: logits has dtype float64"):
        amc.logit_margin(np.zeros(4))
    with pytest.raises(amc.Error, match="top = 50 is outside \\[0, 50\\)"):
        amc.sufficient_radius(w, 50, 0.5)
    with pytest.raises(amc.Error, match="delta has size 11 but unembedding has 12 columns"):
        amc.greedy_token_kept(w, logits, np.zeros(11, np.float32), 7)
    with pytest.raises(amc.Error, match="lse_support = 1 exceeds lse_all = 0"):
        amc.omitted_mass(1.0, 0.0)

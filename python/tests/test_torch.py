"""amc.torch.decode_attention inside a small Qwen2 model with a KV cache, on data/qwen2-tiny's
weights: transformers' attention interface, dense and sparse against eager PyTorch attention."""

import json
import math
import sys

import pytest
import torch
import torch.nn.functional as F

import amc
import amc.torch
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools" / "train_tiny"))
from model import Qwen2Tiny, TinyConfig, rope_tables, rotate_half  # noqa: E402

PROMPT = b"import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n        return [line.rstrip() for line in f]\n\n\ndef main():\n    for name in os.listdir('.'):\n        "


def eager_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                    **kwargs):
    """The reference, written as Qwen2's eager attention: repeat_kv, softmax in float32."""
    group = query.shape[1] // key.shape[1]
    k = key.float().repeat_interleave(group, dim=1)
    v = value.float().repeat_interleave(group, dim=1)
    scores = (query.float() @ k.transpose(-1, -2)) * scaling
    t, n = query.shape[2], key.shape[2]
    if attention_mask is not None:
        scores = scores + attention_mask[..., :n]
    elif t > 1:
        causal = torch.arange(n)[None, :] > torch.arange(t)[:, None] + (n - t)
        scores = scores.masked_fill(causal, float("-inf"))
    out = F.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).contiguous().to(query.dtype), None


@pytest.fixture(scope="module")
def tiny():
    directory = ROOT / "data" / "qwen2-tiny"
    config = json.loads((directory / "config.json").read_text())
    fields = TinyConfig.__dataclass_fields__
    model = Qwen2Tiny(TinyConfig(**{k: v for k, v in config.items() if k in fields}), "exact")
    weights = amc.torch.load_safetensors(directory / "model.safetensors")
    model.load_state_dict({k.removeprefix("model."): v.float() for k, v in weights.items()})
    return model.eval()


class CachedQwen2:
    """Qwen2Tiny's layers run with a KV cache [batch, kv_heads, n, head_dim] per layer and the
    attention called as transformers calls it."""

    def __init__(self, model, attention, kv_dtype=torch.float32):
        self.model, self.attention, self.kv_dtype = model, attention, kv_dtype
        self.cache = [None] * len(model.layers)

    @torch.no_grad()
    def __call__(self, ids, mask=None):
        m, c = self.model, self.model.config
        b, t = ids.shape
        start = 0 if self.cache[0] is None else self.cache[0][0].shape[2]
        cos, sin = rope_tables(c, start + t, torch.float32, m.rope)
        cos, sin = cos[start:], sin[start:]
        x = m.embed_tokens(ids)
        for i, layer in enumerate(m.layers):
            attn, h = layer.self_attn, layer.input_layernorm(x)
            q = attn.q_proj(h).view(b, t, c.num_attention_heads, c.head_dim).transpose(1, 2)
            k = attn.k_proj(h).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
            v = attn.v_proj(h).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = k.to(self.kv_dtype), v.to(self.kv_dtype)
            if self.cache[i] is not None:
                k = torch.cat([self.cache[i][0], k], dim=2)
                v = torch.cat([self.cache[i][1], v], dim=2)
            self.cache[i] = (k, v)
            out, none = self.attention(attn, q, k, v, mask, scaling=1 / math.sqrt(c.head_dim),
                                       dropout=0.0)
            assert none is None and out.shape == (b, t, c.num_attention_heads, c.head_dim)
            x = x + attn.o_proj(out.reshape(b, t, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return m.norm(x) @ m.embed_tokens.weight.T


def greedy(model, attention, steps=12, kv_dtype=torch.float32):
    runner = CachedQwen2(model, attention, kv_dtype)
    logits = runner(torch.tensor([list(PROMPT)]))[:, -1]
    tokens, all_logits = [], [logits]
    for _ in range(steps):
        token = int(logits.argmax())
        tokens.append(token)
        logits = runner(torch.tensor([[token]]))[:, -1]
        all_logits.append(logits)
    return tokens, torch.cat(all_logits)


def relative(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16])
def test_dense_and_covering_sparse_match_eager(tiny, kv_dtype):
    tokens, logits = greedy(tiny, eager_attention, kv_dtype=kv_dtype)
    dense_tokens, dense_logits = greedy(tiny, amc.torch.decode_attention, kv_dtype=kv_dtype)
    assert dense_tokens == tokens
    assert relative(dense_logits, logits) <= 1e-4
    covering = amc.torch.make_decode_attention(amc.SparseConfig(window=4096))
    sparse_tokens, sparse_logits = greedy(tiny, covering, kv_dtype=kv_dtype)
    assert sparse_tokens == tokens
    assert relative(sparse_logits, logits) <= 1e-4


def test_real_sparse_setting_runs(tiny):
    _, dense_logits = greedy(tiny, eager_attention)
    attention = amc.torch.make_decode_attention(block_size=16, top_k=2, sinks=1, window=16)
    assert attention.config.top_k == 2
    tokens, logits = greedy(tiny, attention)
    assert len(tokens) == 12 and torch.isfinite(logits).all()
    # It read fewer positions than the cache holds, so its logits are not dense's.
    assert relative(logits, dense_logits) > 1e-5
    # Per-group scope with the bound rule and adaptive selection run too.
    for settings in ({"scope": "group", "score": "bound"}, {"target_eps": 0.05, "max_k": 4}):
        tokens, logits = greedy(tiny, amc.torch.make_decode_attention(**settings), steps=3)
        assert torch.isfinite(logits).all()


def test_left_padded_batch(tiny):
    """Two prompts, the shorter left-padded: an additive mask masks the padding."""
    long, short = list(PROMPT), list(PROMPT[25:])
    pad = len(long) - len(short)
    ids = torch.tensor([long, [0] * pad + short])
    n = len(long)
    mask = torch.zeros(2, 1, n, n)
    mask[:, :, :, :] = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)
    mask[1, :, :, :pad] = torch.finfo(torch.float32).min
    results = {}
    for name, attention in (("eager", eager_attention), ("amc", amc.torch.decode_attention)):
        runner = CachedQwen2(tiny, attention)
        runner(ids, mask)
        step_mask = torch.zeros(2, 1, 1, n + 1)
        step_mask[1, :, :, :pad] = torch.finfo(torch.float32).min
        results[name] = runner(torch.tensor([[10], [10]]), step_mask)[:, -1]
    assert relative(results["amc"], results["eager"]) <= 1e-4


def test_refusals():
    q, k = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 10, 8)
    mask = torch.zeros(1, 1, 1, 10)
    mask[..., 3] = torch.finfo(torch.float32).min
    with pytest.raises(amc.Error, match="attention_mask allows 9 positions that are not one "
                                        "contiguous range"):
        amc.torch.decode_attention(None, q, k, k, mask, scaling=0.3)
    mask = torch.zeros(1, 1, 1, 10)
    mask[..., 5] = 0.5
    with pytest.raises(amc.Error, match="attention_mask adds biases other than 0"):
        amc.torch.decode_attention(None, q, k, k, mask, scaling=0.3)

    class Training(torch.nn.Module):
        pass

    module = Training().train()
    with pytest.raises(amc.Error, match="dropout 0.1 in training mode"):
        amc.torch.decode_attention(module, q, k, k, None, scaling=0.3, dropout=0.1)
    with pytest.raises(amc.Error, match="amc.dense_decode: q has dtype float64"):
        amc.torch.decode_attention(None, q.double(), k.double(), k.double(), None)
    # A module attribute selects sparse decoding for that module.
    module.eval()
    module.amc_config = amc.SparseConfig(top_k=0, window=2, sinks=0)
    out, _ = amc.torch.decode_attention(module, q, k, k, None, scaling=0.3)
    ref, _ = eager_attention(None, q, k[:, :, 8:], k[:, :, 8:], None, scaling=0.3)
    assert torch.allclose(out, ref, atol=1e-6)

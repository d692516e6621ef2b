"""amc.torch.decode_attention inside a small Qwen2 model with a KV cache, on data/qwen2-tiny's
weights: transformers' attention interface, dense and sparse against eager PyTorch attention."""

import json
import math
import sys

import numpy as np
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
        # The block summaries that follow each layer's cache, as an engine's cache keeps them.
        self.summaries = [amc.torch.KvSummaries() for _ in model.layers]

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
            k.amc_summaries = self.summaries[i]
            out, none = self.attention(attn, q, k, v, mask, scaling=1 / math.sqrt(c.head_dim),
                                       dropout=0.0)
            assert none is None and out.shape == (b, t, c.num_attention_heads, c.head_dim)
            x = x + attn.o_proj(out.reshape(b, t, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return m.norm(x) @ m.embed_tokens.weight.T


def greedy(model, attention, steps=12, kv_dtype=torch.float32, prompt=PROMPT):
    runner = CachedQwen2(model, attention, kv_dtype)
    logits = runner(torch.tensor([list(prompt)]))[:, -1]
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
    for settings in ({"scope": "group", "rule": "bound"}, {"target_eps": 0.05, "max_k": 4}):
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
    k.amc_summaries = amc.torch.KvSummaries()
    out, _ = amc.torch.decode_attention(module, q, k, k, None, scaling=0.3)
    ref, _ = eager_attention(None, q, k[:, :, 8:], k[:, :, 8:], None, scaling=0.3)
    assert torch.allclose(out, ref, atol=1e-6)


def test_two_sequences_with_the_same_first_token_keep_their_own_summaries(tiny):
    """Issue 33's first defect: summaries were kept per attention function and rebuilt only when
    the first key changed, so a second sequence beginning with the same token (a BOS, a chat
    template) selected blocks with the first one's means. Now they follow each cache."""
    attention = amc.torch.make_decode_attention(block_size=8, top_k=2, sinks=1, window=8)
    first = PROMPT[:70]  # the same first token as the second, which is longer
    second = PROMPT[:1] + bytes(reversed(PROMPT[1:])) + PROMPT[1:]
    greedy(tiny, attention, steps=3, prompt=first)
    after_first = greedy(tiny, attention, steps=6, prompt=second)
    alone = greedy(tiny, amc.torch.make_decode_attention(block_size=8, top_k=2, sinks=1,
                                                         window=8), steps=6, prompt=second)
    assert after_first[0] == alone[0]
    assert torch.equal(after_first[1], alone[1])


def test_sparse_without_summaries_is_refused():
    q, k = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 40, 8)
    attention = amc.torch.make_decode_attention(top_k=1, block_size=8)
    with pytest.raises(amc.Error, match="block-sparse decode needs block summaries that follow "
                                        "the cache"):
        attention(None, q, k, k, None, scaling=0.3)
    k.amc_summaries = amc.torch.KvSummaries()
    out, _ = attention(None, q, k, k, None, scaling=0.3)
    assert out.shape == (1, 1, 4, 8)


@pytest.mark.parametrize("name,value", [("sliding_window", 4096), ("softcap", 30.0),
                                        ("s_aux", torch.zeros(4)), ("sinks", torch.zeros(4)),
                                        ("head_mask", torch.ones(4))])
def test_unimplemented_keywords_are_refused_by_name(name, value):
    """Issue 33's second defect: such keywords were swallowed by **kwargs and ignored."""
    q, k = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 10, 8)
    with pytest.raises(amc.Error, match=f"amc.torch.decode_attention: {name}=.* is not "
                                        "implemented"):
        amc.torch.decode_attention(None, q, k, k, None, scaling=0.3, **{name: value})
    # Their neutral value and the keywords that do not change the result pass.
    out, _ = amc.torch.decode_attention(None, q, k, k, None, scaling=0.3, position_ids=None,
                                        use_cache=True, **{name: None})
    assert out.shape == (1, 1, 4, 8)
    with pytest.raises(amc.Error, match="keyword argument 'future_bias' is not implemented"):
        amc.torch.decode_attention(None, q, k, k, None, scaling=0.3, future_bias=1.0)


def test_kv_summaries_follow_crop_and_reordering():
    """crop and select_rows leave each row's summaries equal to ones built from scratch over
    the row's cache as it now is."""
    torch.manual_seed(0)
    config = amc.SparseConfig(block_size=8, top_k=2, rule="bound")
    keys, values = torch.randn(3, 2, 61, 16), torch.randn(3, 2, 61, 16)
    los = [0, 5, 2]
    store = amc.torch.KvSummaries()

    def check(k, v, rows):
        for row, lo in enumerate(rows):
            held = store.for_row(row, k[row, :, lo:], v[row, :, lo:], lo, config)
            fresh = amc.build_summaries(k[row, :, lo:], v[row, :, lo:], config)
            for a, b in zip(held, fresh):
                assert a.positions == b.positions
                np.testing.assert_array_equal(a.mean_keys, b.mean_keys)
                np.testing.assert_array_equal(a.channel_max, b.channel_max)

    check(keys[:, :, :40], values[:, :, :40], los)
    check(keys, values, los)  # appended
    store.crop(keys[:, :, :27], values[:, :, :27])
    check(keys[:, :, :27], values[:, :, :27], los)
    order = [2, 2, 0]  # beam search: row 2 forks, row 1 is dropped
    store.select_rows(order)
    keys, values = keys[order], values[order]
    check(keys[:, :, :27], values[:, :, :27], [los[i] for i in order])
    # The forked rows own separate summaries: growing one leaves the other as it was.
    grown = store.for_row(0, keys[0, :, 2:], values[0, :, 2:], 2, config)
    other = store.for_row(1, keys[1, :, 2:27], values[1, :, 2:27], 2, config)
    assert grown[0].positions == 59 and other[0].positions == 25
    with pytest.raises(amc.Error, match="row 0's summaries cover 59 positions but its cache "
                                        "holds 20"):
        store.for_row(0, keys[0, :, 2:22], values[0, :, 2:22], 2, config)
    store.reset()
    assert len(store) == 0

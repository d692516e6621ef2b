"""amc for PyTorch models: a decode-attention function with transformers' attention interface.

    fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs)
        -> (output, None)

query [batch, heads, q_len, head_dim], key and value [batch, kv_heads, kv_len, head_dim] (the
KV cache, not repeated per query head); output [batch, q_len, heads, head_dim] in the query's
dtype, as transformers' sdpa_attention_forward returns it. A decode step (q_len == 1) runs amc's
dense or block-sparse operator on the CPU tensors in place (bf16 keys and values are read as
bf16); prefill (q_len > 1) falls back to exact dense PyTorch attention. The module does not
link libtorch: tensors reach amc through DLPack.

    attention = amc.torch.make_decode_attention(amc.SparseConfig(top_k=8, window=64))
    # transformers: AttentionInterface.register("amc", attention), attn_implementation="amc"

Block-sparse decoding keeps block summaries per (attention module, batch row) and appends the
positions the cache gained since the previous step; a cache that does not extend the one seen
before (a new sequence: the first key differs, or it is shorter) gets new summaries.
"""

import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from . import _amc
from . import DenseDecoder, Error, SparseConfig, SparseDecoder, build_summaries
from . import load_safetensors as _load_safetensors
from . import update_summaries

__all__ = ["decode_attention", "make_decode_attention", "load_safetensors",
           "dense_attention"]


def dense_attention(query, key, value, attention_mask=None, scaling=None, dropout=0.0,
                    training=False):
    """Exact dense attention in PyTorch (the prefill path): query [batch, heads, q_len, d],
    key/value [batch, kv_heads, kv_len, d], attention_mask None (causal when q_len > 1, the
    last q_len positions being the queries'), bool (True: attend) or additive, broadcastable to
    [batch, heads, q_len, kv_len]. Returns [batch, q_len, heads, d]."""
    b, heads, t, d = query.shape
    kv_heads, n = key.shape[1], key.shape[2]
    group = heads // kv_heads
    k = key.repeat_interleave(group, dim=1)
    v = value.repeat_interleave(group, dim=1)
    scale = scaling if scaling is not None else 1.0 / math.sqrt(d)
    # In float32 whatever the storage (a bf16 cache under an f32 query included).
    scores = (query.float() @ k.float().transpose(-1, -2)) * scale
    if attention_mask is not None:
        mask = attention_mask[..., :n]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    elif t > 1:
        # Query i sits at position n - t + i and sees positions up to it.
        rows = torch.arange(t).unsqueeze(1) + (n - t)
        scores = scores.masked_fill(torch.arange(n).unsqueeze(0) > rows, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if dropout > 0.0 and training:
        weights = F.dropout(weights, p=dropout, training=True)
    return (weights @ v.float()).to(query.dtype).transpose(1, 2).contiguous()


def _allowed_range(mask_row, n, where):
    """[lo, hi): the positions a decode query may attend to, from its mask row [kv_len] (None:
    all). amc reads one contiguous range of the cache, so other masks are refused."""
    if mask_row is None:
        return 0, n
    row = mask_row[:n]
    if row.dtype == torch.bool:
        allowed = row
    else:
        allowed = row > torch.finfo(row.dtype).min / 2
        if bool((row[allowed] != 0).any()):
            raise Error(f"{where}: attention_mask adds biases other than 0 to attended positions; "
                        "amc decodes plain softmax attention (no ALiBi or other biases)")
    where_allowed = torch.nonzero(allowed).flatten()
    if where_allowed.numel() == 0:
        raise Error(f"{where}: attention_mask masks every one of the {n} positions")
    lo, hi = int(where_allowed[0]), int(where_allowed[-1]) + 1
    if hi - lo != where_allowed.numel():
        raise Error(f"{where}: attention_mask allows {where_allowed.numel()} positions that are "
                    f"not one contiguous range (first {lo}, last {hi - 1}); amc reads a "
                    "contiguous range of the cache")
    return lo, hi


class _Summaries:
    """One (module, batch row)'s block summaries and what identifies the cache they cover."""

    def __init__(self, summaries, lo, first_key):
        self.summaries, self.lo, self.first_key = summaries, lo, first_key


def make_decode_attention(config: Optional[SparseConfig] = None, *, threads: int = 1,
                          **settings):
    """A decode-attention function with transformers' attention interface (module docstring).

    config None and no settings: amc's dense decode; otherwise block-sparse decode with
    `config` and keyword settings (SparseConfig's names). A module attribute `amc_config`
    (a SparseConfig, or None for dense) overrides it per attention module. `threads` run the
    GQA groups of a step in parallel. The function's `reset()` drops the kept summaries."""
    base = SparseConfig(**settings) if config is None and settings else (
        config.replace(**settings) if config is not None else None)
    decoders = {}  # (scale, config text) -> DenseDecoder or SparseDecoder
    kept = {}  # (id(module), batch row) -> _Summaries

    def decoder_for(scale, sparse_config):
        key = (scale, None if sparse_config is None else sparse_config.to_text())
        if key not in decoders:
            if sparse_config is None:
                decoders[key] = DenseDecoder(scale, threads)
            else:
                decoders[key] = SparseDecoder(sparse_config.replace(scale=scale), threads)
        return decoders[key]

    def summaries_for(module, row, config, k, v, lo):
        entry = kept.get((id(module), row))
        n = k.shape[1]
        if (entry is None or entry.lo != lo or entry.summaries[0].positions > n
                or not torch.equal(entry.first_key, k[:, 0])):
            entry = _Summaries(build_summaries(k, v, config), lo, k[:, 0].clone())
            kept[(id(module), row)] = entry
        else:
            update_summaries(entry.summaries, k, v)
        return entry.summaries

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                  **kwargs):
        where = "amc.torch.decode_attention"
        if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
            raise Error(f"{where}: query, key and value must be [batch, heads, len, head_dim], "
                        f"got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        b, heads, t, d = query.shape
        n = key.shape[2]
        if t > 1:  # prefill: exact dense attention in PyTorch
            return dense_attention(query, key, value, attention_mask, scaling, dropout,
                                   getattr(module, "training", False)), None
        if dropout > 0.0 and getattr(module, "training", False):
            raise Error(f"{where}: dropout {dropout} in training mode; amc decodes without "
                        "dropout (call model.eval())")
        scale = float(scaling) if scaling is not None else 1.0 / math.sqrt(d)
        sparse_config = getattr(module, "amc_config", base) if module is not None else base
        decoder = decoder_for(scale, sparse_config)
        output = torch.empty((b, 1, heads, d), dtype=query.dtype)
        with torch.no_grad():
            q, k, v = query.detach(), key.detach(), value.detach()
            for row in range(b):
                mask_row = None
                if attention_mask is not None:
                    mask = attention_mask[row] if attention_mask.shape[0] > 1 else attention_mask[0]
                    mask_row = mask.reshape(-1, mask.shape[-1])[-1]
                lo, hi = _allowed_range(mask_row, n, where)
                k_row, v_row = k[row, :, lo:hi], v[row, :, lo:hi]
                if sparse_config is None:
                    result = decoder.decode(q[row, :, 0], k_row, v_row)
                else:
                    summaries = summaries_for(module, row, sparse_config, k_row, v_row, lo)
                    result = decoder.decode(q[row, :, 0], k_row, v_row, summaries)
                output[row, 0] = torch.from_numpy(result.output).to(query.dtype)
        return output, None

    attention.config = base
    attention.reset = kept.clear
    return attention


#: amc's dense decode (exact PyTorch attention for prefill).
decode_attention = make_decode_attention()


def load_safetensors(path):
    """Every tensor of a safetensors file as a PyTorch tensor, bf16 kept as torch.bfloat16."""
    tensors = _load_safetensors(path, bf16="uint16")
    dtypes = _amc.safetensors_dtypes(path)
    out = {}
    for name, array in tensors.items():
        if dtypes[name] == "BF16":  # the raw bits, reinterpreted without a copy
            out[name] = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        else:
            out[name] = torch.from_numpy(array)
    return out

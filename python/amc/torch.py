"""amc for PyTorch models: a decode-attention function with transformers' attention interface.

    fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs)
        -> (output, None)

query [batch, heads, q_len, head_dim], key and value [batch, kv_heads, kv_len, head_dim] (the
KV cache, not repeated per query head); output [batch, q_len, heads, head_dim] in the query's
dtype, as transformers' sdpa_attention_forward returns it. A decode step (q_len == 1) runs amc's
dense or block-sparse operator on the CPU tensors in place (bf16 keys and values are read as
bf16); prefill (q_len > 1) runs the `prefill` function given (amc.transformers passes
transformers' own sdpa attention), else exact dense PyTorch attention. The module does not link
libtorch: tensors reach amc through DLPack.

    attention = amc.torch.make_decode_attention(amc.SparseConfig(top_k=8, window=64))
    # transformers: amc.transformers registers "amc" and "amc_sparse" (docs/python.md)

Block-sparse decoding reads block summaries that follow the cache: a KvSummaries attached to
the key tensor (key.amc_summaries), which the cache that owns the keys keeps in step with them
(amc.transformers.AmcCache does; an engine of one's own calls crop, select_rows and reset as its
cache changes). A sparse call without one is refused rather than guessing which sequence the
keys belong to.

Keyword arguments other than those listed in PASSED_THROUGH are refused by name, and those in
NEUTRAL_ONLY unless they hold their neutral value (None): a model that asks for a sliding window,
logit soft-capping or attention sinks would otherwise be decoded silently wrong.
"""

import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from . import _amc
from . import DenseDecoder, Error, SparseConfig, SparseDecoder, build_summaries
from . import load_safetensors as _load_safetensors
from . import truncate_summaries, update_summaries

__all__ = ["KvSummaries", "decode_attention", "make_decode_attention", "load_safetensors",
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


#: Keyword arguments transformers passes that do not change the attention's result here.
PASSED_THROUGH = frozenset({"position_ids", "cache_position", "use_cache", "output_attentions",
                            "is_causal"})
#: Keyword arguments of attention variants amc does not implement: accepted only as None.
NEUTRAL_ONLY = ("sliding_window", "softcap", "s_aux", "sinks", "head_mask")


def _check_kwargs(kwargs, where):
    for name, value in kwargs.items():
        if name in PASSED_THROUGH:
            continue
        if name in NEUTRAL_ONLY:
            if value is not None:
                shown = tuple(value.shape) if isinstance(value, torch.Tensor) else value
                raise Error(f"{where}: {name}={shown!r} is not implemented (amc decodes plain "
                            f"softmax attention over the whole cache); use another "
                            "attn_implementation for this model")
            continue
        raise Error(f"{where}: keyword argument {name!r} is not implemented; amc accepts "
                    f"{sorted(PASSED_THROUGH)} and {list(NEUTRAL_ONLY)} as None")


class KvSummaries:
    """The block summaries of one attention layer's cache, per batch row: for row r, one
    amc.BlockSummaries per KV head over the positions [lo, n) that row attends to (lo > 0 under
    left padding). Appended as the cache grows (never re-pooled); the cache's owner calls
    crop, select_rows and reset when the cache is cut, reordered or dropped.

    `config` (a SparseConfig or None) is the block-sparse setting of the calls that read these
    summaries, overriding the module's and the attention function's (the per-call setting)."""

    def __init__(self, config: Optional[SparseConfig] = None):
        self.config = config
        self._rows = {}  # batch row -> (lo, SparseConfig, [BlockSummaries per KV head])

    def for_row(self, row, k_row, v_row, lo, config, where="amc.torch.KvSummaries"):
        """Row `row`'s summaries brought up to k_row, v_row [kv_heads, n - lo, head_dim]."""
        entry = self._rows.get(row)
        if entry is None or entry[0] != lo or entry[1] != config:
            # First step of the row, a new padding layout or new settings: built once here.
            # A copy, as decoder_for keeps: a config changed in place must not match itself.
            entry = (lo, config.replace(), build_summaries(k_row, v_row, config))
            self._rows[row] = entry
            return entry[2]
        held = entry[2][0].positions
        if held > k_row.shape[1]:
            raise Error(f"{where}: row {row}'s summaries cover {held} positions but its cache "
                        f"holds {k_row.shape[1]}: the cache was cut without KvSummaries.crop")
        update_summaries(entry[2], k_row, v_row)
        return entry[2]

    def crop(self, keys, values):
        """The cache was cut to keys, values [batch, kv_heads, n, head_dim]: each row's
        summaries are cut to match (BlockSummaries.truncate: at most a block re-read)."""
        n = keys.shape[2]
        for row, (lo, _, summaries) in list(self._rows.items()):
            if n <= lo:
                del self._rows[row]
            elif summaries[0].positions > n - lo:
                truncate_summaries(summaries, keys[row, :, lo:n], values[row, :, lo:n])

    def select_rows(self, indices):
        """The cache's batch rows became rows `indices` of the old batch (beam search's
        reorder, a repeat, a selection): each new row gets its own copy of its source's
        summaries, so beams that fork never share them."""
        old = self._rows
        self._rows = {}
        for new_row, source in enumerate(int(i) for i in indices):
            if source in old:
                lo, config, summaries = old[source]
                self._rows[new_row] = (lo, config, [s.copy() for s in summaries])

    def reset(self):
        """The cache was emptied: every row starts again."""
        self._rows.clear()

    def __len__(self):
        return len(self._rows)


def make_decode_attention(config: Optional[SparseConfig] = None, *, threads: int = 1,
                          prefill=None, on_sparse_step=None, **settings):
    """A decode-attention function with transformers' attention interface (module docstring).

    config None and no settings: amc's dense decode; otherwise block-sparse decode with
    `config` and keyword settings (SparseConfig's names). A module's `amc_config` attribute (a
    SparseConfig, or None for dense) decides for that module. Otherwise a dense function decodes
    densely, and a sparse one with, first found: the KvSummaries' config, the module config's
    `amc_sparse` (a dict of settings), this function's.
    `threads` run the GQA groups of a step in parallel. `prefill` (q_len > 1) is called with
    the attention's own arguments; None: exact dense PyTorch attention (dense_attention).
    `on_sparse_step(key, row, query_row, k_row, scale, result)`, when given, sees each row's
    sparse result (amc.transformers uses it to record the retained mass)."""
    base = SparseConfig(**settings) if config is None and settings else (
        config.replace(**settings) if config is not None else None)
    # [(scale, a copy of the config or None, DenseDecoder or SparseDecoder)]: a model has one
    # scale and a config or two, so a scan comparing configs by value (SparseConfig's ==, in
    # C++) finds the decoder without formatting a key on every call; the copy keeps a config
    # changed in place by its owner from matching its old decoder.
    decoders = []
    where = "amc.torch.decode_attention"

    def decoder_for(scale, sparse_config):
        for known_scale, known_config, decoder in decoders:
            # None == None, and None never equals a SparseConfig (nor one None).
            if known_scale == scale and known_config == sparse_config:
                return decoder
        if sparse_config is None:
            decoder = DenseDecoder(scale, threads)
        else:
            decoder = SparseDecoder(sparse_config.replace(scale=scale), threads)
        decoders.append((scale, None if sparse_config is None else sparse_config.replace(),
                         decoder))
        return decoder

    def sparse_config_for(module, store):
        if module is not None and hasattr(module, "amc_config"):
            return module.amc_config
        if base is None:  # a dense function stays dense, whatever a cache or config asks
            return None
        if store is not None and store.config is not None:
            return store.config
        from_model = getattr(getattr(module, "config", None), "amc_sparse", None)
        if from_model is not None:
            if isinstance(from_model, SparseConfig):
                return from_model
            if not isinstance(from_model, dict):
                raise Error(f"{where}: the model config's amc_sparse must be a dict of "
                            f"SparseConfig settings, got {type(from_model).__name__}")
            return SparseConfig(**from_model)
        return base

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                  **kwargs):
        if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
            raise Error(f"{where}: query, key and value must be [batch, heads, len, head_dim], "
                        f"got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        _check_kwargs(kwargs, where)
        b, heads, t, d = query.shape
        n = key.shape[2]
        training = getattr(module, "training", False)
        if t > 1:  # prefill
            if prefill is not None:
                return prefill(module, query, key, value, attention_mask, scaling=scaling,
                               dropout=dropout, **kwargs)
            return dense_attention(query, key, value, attention_mask, scaling, dropout,
                                   training), None
        if dropout > 0.0 and training:
            raise Error(f"{where}: dropout {dropout} in training mode; amc decodes without "
                        "dropout (call model.eval())")
        scale = float(scaling) if scaling is not None else 1.0 / math.sqrt(d)
        store = getattr(key, "amc_summaries", None)
        sparse_config = sparse_config_for(module, store)
        if sparse_config is not None and store is None:
            raise Error(f"{where}: block-sparse decode needs block summaries that follow the "
                        "cache: generate with cache=amc.transformers.AmcCache(), or attach an "
                        "amc.torch.KvSummaries to the key tensor (key.amc_summaries) and keep "
                        "it in step with the cache")
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
                if sparse_config is not None and hi != n:
                    raise Error(f"{where}: row {row} may attend to positions [{lo}, {hi}) of "
                                f"{n}: block-sparse decode needs the newest position attended")
                k_row, v_row = k[row, :, lo:hi], v[row, :, lo:hi]
                if sparse_config is None:
                    result = decoder.decode(q[row, :, 0], k_row, v_row)
                else:
                    summaries = store.for_row(row, k_row, v_row, lo, sparse_config, where)
                    result = decoder.decode(q[row, :, 0], k_row, v_row, summaries)
                    if on_sparse_step is not None:
                        on_sparse_step(key, row, q[row, :, 0], k_row, scale, result)
                output[row, 0] = torch.from_numpy(result.output).to(query.dtype)
        return output, None

    attention.config = base
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

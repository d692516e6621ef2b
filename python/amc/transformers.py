"""amc inside Hugging Face transformers: attention implementations and a cache that keeps amc's
block summaries.

    import amc.transformers                      # registers "amc" and "amc_sparse"
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="amc_sparse")
    cache = amc.transformers.AmcCache(amc.SparseConfig(top_k=16, window=64))
    out = model.generate(**inputs, cache=cache, max_new_tokens=32, do_sample=False)

"amc" decodes densely with amc's operator, "amc_sparse" block-sparse. Prefill (more than one
query position) runs transformers' own sdpa attention, with the mask transformers builds for
sdpa (registered for both names): causal, batch and left padding as transformers does them. A
decode step reads the cache in place, GQA without repeating KV, one batch row at a time over the
positions its mask allows (left padding excluded from blocks and sinks).

Block-sparse settings, first found: the AmcCache's (per generate call), the model config's
`amc_sparse` (a dict of SparseConfig settings, e.g. model.config.amc_sparse = {"top_k": 16}),
those given to register() (SparseConfig's defaults unless given). Sparse decoding needs an
AmcCache: its layers keep each row's block summaries as keys are appended, and cut, reorder or
drop them with the cache (crop, beam search, reset), so a step never re-pools the cache and
never reads another sequence's summaries.

Needs transformers 5 (the Cache layer API, AttentionInterface, AttentionMaskInterface); tested
with the versions pinned in python/requirements-transformers.txt.
"""

from typing import Optional

import numpy as np
import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from . import Error, SparseConfig
from .torch import KvSummaries, make_decode_attention

__all__ = ["AmcCache", "AmcLayer", "register", "DENSE", "SPARSE"]

#: The attn_implementation names register() adds.
DENSE, SPARSE = "amc", "amc_sparse"


def _record_mass(key, row, query_row, k_row, scale, result):
    """Retained mass of a sparse step, per query head, when the key tensor's cache records it:
    exp(lse read - lse of every position), the same scaled scores (the dense one in float64)."""
    cache = getattr(key, "amc_recording", None)
    if cache is None:
        return
    heads, kv_heads = query_row.shape[0], k_row.shape[0]
    keys = k_row.double().repeat_interleave(heads // kv_heads, dim=0)  # [heads, n, d]
    scores = torch.einsum("hd,hnd->hn", query_row.double(), keys) * scale
    lse_all = torch.logsumexp(scores, dim=-1).numpy()
    cache._record(key.amc_layer, row, np.exp(result.lse.astype(np.float64) - lse_all))


def register(sparse: Optional[SparseConfig] = None, *, threads: int = 1, **settings):
    """Registers "amc" (dense) and "amc_sparse" (block-sparse with `sparse` and `settings`,
    SparseConfig's names, as the fallback settings) with transformers' AttentionInterface, and
    sdpa's mask for both with AttentionMaskInterface. `threads` run a step's GQA groups in
    parallel. Called with no arguments when amc.transformers is imported; call again to change."""
    if sparse is None:
        sparse = SparseConfig(**settings)
    elif settings:
        sparse = sparse.replace(**settings)
    AttentionInterface.register(DENSE, make_decode_attention(threads=threads,
                                                             prefill=sdpa_attention_forward))
    AttentionInterface.register(SPARSE, make_decode_attention(
        sparse, threads=threads, prefill=sdpa_attention_forward, on_sparse_step=_record_mass))
    for name in (DENSE, SPARSE):
        AttentionMaskInterface.register(name, sdpa_mask)


class AmcLayer(DynamicLayer):
    """transformers' DynamicLayer whose keys carry the layer's amc.torch.KvSummaries: appended
    by the attention as positions arrive, cut, reordered and dropped here with the cache."""

    def __init__(self, config: Optional[SparseConfig] = None, **kwargs):
        super().__init__(**kwargs)
        self.summaries = KvSummaries(config)

    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        keys.amc_summaries = self.summaries
        return keys, values

    def reset(self):
        super().reset()
        self.summaries.reset()

    def crop(self, tokens_to_remove: int):
        super().crop(tokens_to_remove)
        if self.is_initialized and self.keys.numel() > 0:
            self.summaries.crop(self.keys, self.values)
            self.keys.amc_summaries = self.summaries
        else:
            self.summaries.reset()

    def _rows_became(self, indices):
        self.summaries.select_rows(indices)
        if self.is_initialized and self.keys is not None:
            self.keys.amc_summaries = self.summaries

    def reorder_cache(self, beam_idx):
        rows = beam_idx.tolist()
        super().reorder_cache(beam_idx)
        self._rows_became(rows)

    def batch_repeat_interleave(self, repeats: int):
        batch = self.keys.shape[0] if self.get_seq_length() > 0 else 0
        super().batch_repeat_interleave(repeats)
        self._rows_became([row for row in range(batch) for _ in range(repeats)])

    def batch_select_indices(self, indices):
        rows = indices
        if isinstance(indices, torch.Tensor):
            rows = (torch.nonzero(indices).flatten() if indices.dtype == torch.bool
                    else indices).tolist()
        super().batch_select_indices(indices)
        self._rows_became(rows)


class AmcCache(DynamicCache):
    """A DynamicCache of AmcLayers: pass it to generate (cache=...) for "amc_sparse".

    `sparse` (a SparseConfig, or settings by keyword) sets the block-sparse decoding of the calls
    that use this cache, over the model config's and register()'s. `record_mass=True` records
    each sparse step's retained mass per layer, batch row and query head (retained_mass()); it
    costs a dense pass in float64 per step, for measuring only.

    The model's layers must all be full attention: a sliding-window or linear-attention layer is
    refused when the model's config is given (config=model.config), and by the attention's
    sliding_window check otherwise."""

    def __init__(self, sparse: Optional[SparseConfig] = None, *, config=None,
                 record_mass: bool = False, **settings):
        if settings:
            sparse = sparse.replace(**settings) if sparse is not None else SparseConfig(
                **settings)
        if config is not None:
            text = config.get_text_config(decoder=True)
            types = getattr(text, "layer_types", None) or []
            other = sorted({t for t in types if t != "full_attention"})
            if other:
                raise Error(f"amc.transformers.AmcCache: the model has {other} layers; amc "
                            "decodes full attention only")
        self.sparse = sparse
        self.record_mass = record_mass
        self._mass = {}  # (layer, row) -> [per-step [heads] retained mass]
        self._scales = {}
        super(DynamicCache, self).__init__(layer_class_to_replicate=self._new_layer)

    def _new_layer(self):
        return AmcLayer(self.sparse)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        if self.record_mass:
            keys.amc_recording, keys.amc_layer = self, layer_idx
        return keys, values

    def _record(self, layer, row, mass):
        self._mass.setdefault((layer, row), []).append(mass)

    def retained_mass(self) -> np.ndarray:
        """[steps, layers, rows, heads]: the retained mass of every sparse decode step recorded
        (record_mass=True), in the order of the steps."""
        if not self._mass:
            raise Error("amc.transformers.AmcCache.retained_mass: nothing recorded (construct "
                        "with record_mass=True and decode with attn_implementation "
                        f"\"{SPARSE}\")")
        layers = 1 + max(layer for layer, _ in self._mass)
        rows = 1 + max(row for _, row in self._mass)
        steps = min(len(v) for v in self._mass.values())
        heads = next(iter(self._mass.values()))[0].shape[0]
        out = np.full((steps, layers, rows, heads), np.nan)
        for (layer, row), per_step in self._mass.items():
            out[:, layer, row] = np.stack(per_step[:steps])
        return out

    def reset(self):
        super().reset()
        self._mass.clear()


register()

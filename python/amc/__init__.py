"""amc: attention-mass-aware sparse decoding, from Python.

The C++ library's operators, selection settings, omitted-mass analysis, margin utilities and
safetensors I/O, on NumPy arrays and PyTorch tensors read in place (DLPack). Shapes are written
outermost first: queries q [query heads, head_dim], keys and values k, v [KV heads, positions,
head_dim]; query head h belongs to KV head h // (query heads // KV heads). Results are NumPy
arrays. Every error is an amc.Error carrying the library's message. See docs/python.md.
"""

import json
from dataclasses import dataclass, field
from typing import List, Optional

from . import _amc
from ._amc import (  # noqa: F401  (re-exported)
    AnalysisSummary,
    BlockSummaries,
    CausalDenseDecoder,
    DecodeResult,
    DenseDecoder,
    Error,
    HeadAnalysis,
    LogitMargin,
    SparseConfig,
    SparseDecoder,
    StepAnalysis,
    attention_error_keeps_token,
    bf16_products_available,
    build_summaries,
    greedy_token_kept,
    kernels,
    load_safetensors,
    logit_margin,
    omitted_mass,
    retained_mass,
    rules,
    safetensors_dtypes,
    safetensors_metadata,
    save_safetensors,
    settings,
    sufficient_radius,
    sufficient_radius_from_norms,
    truncate_summaries,
    unembedding_row_norms,
    update_summaries,
)

__version__ = _amc.__version__

__all__ = [
    "Analysis",
    "AnalysisSummary",
    "BlockSummaries",
    "DecodeResult",
    "DenseDecoder",
    "Error",
    "HeadAnalysis",
    "LogitMargin",
    "SparseConfig",
    "SparseDecoder",
    "analyse",
    "attention_error_keeps_token",
    "bf16_products_available",
    "build_summaries",
    "dense_decode",
    "greedy_token_kept",
    "kernels",
    "load_safetensors",
    "logit_margin",
    "omitted_mass",
    "retained_mass",
    "rules",
    "safetensors_dtypes",
    "safetensors_metadata",
    "save_safetensors",
    "settings",
    "sparse_decode",
    "sufficient_radius",
    "sufficient_radius_from_norms",
    "truncate_summaries",
    "unembedding_row_norms",
    "update_summaries",
]


def dense_decode(q, k, v, *, scale: Optional[float] = None,
                 arithmetic: str = "exact_f32") -> DecodeResult:
    """Dense decode attention of every query head over every position.

    q [query heads, head_dim], k and v [KV heads, n, head_dim]; scale defaults to
    1/sqrt(head_dim). arithmetic "bf16_products" opts into AVX512_BF16 dot products (query and
    weights rounded to bf16; docs/operators.md) where amc.bf16_products_available() says so.
    For repeated calls keep an amc.DenseDecoder (scratch and threads reused).
    """
    return DenseDecoder(scale, arithmetic=arithmetic).decode(q, k, v)


def sparse_decode(q, k, v, config: Optional[SparseConfig] = None, *, summaries=None,
                  **settings) -> DecodeResult:
    """Block-sparse decode: each query head (or GQA group, scope="group") reads sinks, window
    and the blocks its rule selects. `config` and keyword settings (SparseConfig's names) set
    the selection; `summaries` (one amc.BlockSummaries per KV head, covering k's positions) are
    built here when not given. For repeated calls keep an amc.SparseDecoder."""
    return SparseDecoder(config, **settings).decode(q, k, v, summaries)


@dataclass
class Analysis:
    """amc.analyse's result: amc-bounds' analysis of one decode step (docs/bounds-tool.md)."""

    config: SparseConfig
    scale: float
    query_heads: int
    kv_heads: int
    positions: int
    head_dim: int
    kernels: str
    heads: List[HeadAnalysis] = field(default_factory=list)
    summary: Optional[AnalysisSummary] = None
    _step: Optional[StepAnalysis] = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """The object `amc-bounds --json` prints for the same inputs and settings, less its
        "input" (the file name): {"config": ..., "heads": [...], "summary": ...}. Written by
        the same C++ code as the tool's (amc/io/step_analysis_json.hpp), so the two agree."""
        return json.loads(_amc._analysis_json(self._step, self.config, self.query_heads,
                                              self.kv_heads, self.positions, self.head_dim))


def analyse(q, k, v, config: Optional[SparseConfig] = None, **settings) -> Analysis:
    """The omitted-mass analysis of amc-bounds for one decode step of one layer.

    q [query heads, head_dim] (after RoPE, unscaled), k and v [KV heads, n, head_dim], float32,
    float16 or bfloat16 (converted to float32 exactly, as amc-bounds does). `config` and keyword
    settings choose the sparse step analysed (SparseConfig's names and defaults, amc-bounds'
    options). Returns per-head results (exact omitted mass, error, value bounds, direction,
    certified bounds, adaptive k) and their summary.
    """
    config = _amc._make_config(config, **settings)
    step, query_heads, kv_heads, positions, head_dim = _amc._analyse(q, k, v, config)
    return Analysis(config=config, scale=step.scale, query_heads=query_heads, kv_heads=kv_heads,
                    positions=positions, head_dim=head_dim, kernels=kernels(),
                    heads=list(step.heads), summary=step.summary, _step=step)

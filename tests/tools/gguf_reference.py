#!/usr/bin/env python3
"""An independent float64 reference forward pass of a GGUF language model, written without any
of amc's code: gguf-py (gguf.GGUFReader, gguf.quants.dequantize) reads and dequantizes the file,
numpy computes the transformer. It is what tests/tools/test_gguf_forward.py compares amc with.

Architectures (general.architecture): llama, qwen2 (q/k/v biases), qwen3 (per-head q/k RMSNorm);
any other is refused by name. Every number comes from the file's metadata:
  {arch}.block_count, .embedding_length, .feed_forward_length, .attention.head_count,
  .attention.head_count_kv, .attention.key_length/.value_length (default embedding/head_count),
  .attention.layer_norm_rms_epsilon, .rope.freq_base (default 10000), .rope.dimension_count
  (default key_length), .rope.scaling.type (only "none"), and the tensors' own shapes.

RoPE as llama.cpp applies it to the file as stored (llama_model_rope_type in llama.cpp's
src/llama-model.cpp): llama is LLAMA_ROPE_TYPE_NORM, which rotates ADJACENT pairs
(x[2i], x[2i+1]) of the first rope.dimension_count values of each head; llama.cpp's converter
permuted the rows of attn_q/attn_k so that this equals Hugging Face's rotate-half RoPE on the
original weights. qwen2 and qwen3 are LLAMA_ROPE_TYPE_NEOX, rotate-half pairs (x[i], x[i + n/2]),
on unpermuted weights. Angle of pair i at position p: p * freq_base^(-2i/n) / f[i], where f is
the tensor rope_freqs.weight when the file has one (Llama 3.1's frequency factors), else 1.

gguf-py's dequantize returns float32 values (what ggml's dequantization produces), in numpy
shape reversed from ggml's ne: a matrix with ne = [n_in, n_out] is a numpy (n_out, n_in) array,
rows being output features (PyTorch's layout), so y = x @ W.T. They are widened to float64 (or
kept in float32 with dtype=np.float32, to measure the spread between the two).

  gguf_reference.py MODEL.gguf --ids 1,2,3 --out logits.npy [--all-positions] [--dtype float32]
  gguf_reference.py MODEL.gguf --prompt TEXT [--generate N]   (greedy text, the file's tokenizer)
  gguf_reference.py MODEL.gguf --prompt TEXT --spread   (float32 against float64)

Importable: load(path), Model.forward(ids) / Model.session(), tokenizer_from_gguf(reader).
"""

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

ARCHITECTURES = ("llama", "qwen2", "qwen3")
# llama.cpp's llama_model_rope_type: llama NORM (adjacent pairs), qwen2/qwen3 NEOX (rotate-half).
ROPE_ADJACENT = {"llama": True, "qwen2": False, "qwen3": False}


class ReferenceError(Exception):
    """A file the reference does not handle (architecture, rope scaling, tensors)."""


@dataclass
class Config:
    arch: str
    n_layer: int
    d_model: int
    d_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int  # key_length
    value_dim: int  # value_length
    eps: float
    rope_base: float
    rope_dims: int
    rope_adjacent: bool
    vocab: int
    tied: bool


def _field(reader, key, default=None, required=True):
    field = reader.fields.get(key)
    if field is None:
        if required and default is None:
            raise ReferenceError(f"missing metadata key {key}")
        return default
    return field.contents()


def _tensor(tensors, name, dtype, shape=None):
    import gguf

    t = tensors.get(name)
    if t is None:
        raise ReferenceError(f"missing tensor {name}")
    values = gguf.quants.dequantize(t.data, t.tensor_type)
    numpy_shape = tuple(int(n) for n in reversed(t.shape))  # ggml ne is innermost first
    if values.shape != numpy_shape:
        raise ReferenceError(f"{name}: dequantized shape {values.shape}, ggml ne {list(t.shape)}")
    if shape is not None and values.shape != shape:
        raise ReferenceError(f"{name}: shape {values.shape}, expected {shape} from the metadata")
    return np.ascontiguousarray(values, dtype=dtype)


def read_config(reader):
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ReferenceError(f"architecture {arch!r} is not one of {', '.join(ARCHITECTURES)}")
    key = lambda name: f"{arch}.{name}"  # noqa: E731
    d_model = int(_field(reader, key("embedding_length")))
    n_head = int(_field(reader, key("attention.head_count")))
    n_head_kv = int(_field(reader, key("attention.head_count_kv"), default=n_head))
    head_dim = int(_field(reader, key("attention.key_length"), default=d_model // n_head))
    value_dim = int(_field(reader, key("attention.value_length"), default=head_dim))
    rope_dims = int(_field(reader, key("rope.dimension_count"), default=head_dim))
    scaling = _field(reader, key("rope.scaling.type"), default="none")
    if scaling != "none":
        raise ReferenceError(f"rope scaling type {scaling!r} is not supported (only none)")
    factor = float(_field(reader, key("rope.scaling.factor"), default=1.0))
    if factor not in (0.0, 1.0):
        raise ReferenceError(f"rope scaling factor {factor} is not supported")
    # Keys that would change the computation in ways this reference does not model.
    for name in ("expert_count", "attention.sliding_window", "attention.scale",
                 "logit_scale", "embedding_scale", "residual_scale", "attn_logit_softcapping",
                 "final_logit_softcapping"):
        value = _field(reader, key(name), required=False)
        if value not in (None, 0, 0.0):
            raise ReferenceError(f"metadata {key(name)} = {value} is not supported")
    if n_head % n_head_kv:
        raise ReferenceError(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}")
    if rope_dims % 2 or rope_dims > head_dim:
        raise ReferenceError(f"rope.dimension_count {rope_dims} (key_length {head_dim})")
    tensors = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in tensors:
        raise ReferenceError("missing tensor token_embd.weight")
    vocab = int(tensors["token_embd.weight"].shape[1])  # ne = [embedding_length, vocab]
    return Config(
        arch=arch,
        n_layer=int(_field(reader, key("block_count"))),
        d_model=d_model,
        d_ff=int(_field(reader, key("feed_forward_length"))),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        value_dim=value_dim,
        eps=float(_field(reader, key("attention.layer_norm_rms_epsilon"))),
        rope_base=float(_field(reader, key("rope.freq_base"), default=10000.0)),
        rope_dims=rope_dims,
        rope_adjacent=ROPE_ADJACENT[arch],
        vocab=vocab,
        tied="output.weight" not in tensors,
    )


class Model:
    """The dequantized weights (float64 by default) and the forward pass. The layers' matrices
    are kept transposed, layers[i]["q"] = attn_q.weight.T of shape (n_in, n_out); the embedding
    and output matrices as read, (vocab, embedding_length)."""

    def __init__(self, reader, dtype=np.float64):
        self.reader = reader
        self.dtype = np.dtype(dtype)
        c = self.config = read_config(reader)
        tensors = {t.name: t for t in reader.tensors}
        used = set()

        def get(name, shape):
            used.add(name)
            return _tensor(tensors, name, self.dtype, shape)

        def get_t(name, shape):  # a matrix, stored transposed, (n_in, n_out): x @ W.T as x @ W_t
            return np.ascontiguousarray(get(name, shape).T)  # (reference BLAS: 2.3x faster)

        d, q_out, kv_out, v_out = c.d_model, c.n_head * c.head_dim, c.n_head_kv * c.head_dim, \
            c.n_head_kv * c.value_dim
        self.embedding = get("token_embd.weight", (c.vocab, d))
        self.output_norm = get("output_norm.weight", (d,))
        self.output = self.embedding if c.tied else get("output.weight", (c.vocab, d))
        self.freq_factors = None
        if "rope_freqs.weight" in tensors:
            self.freq_factors = get("rope_freqs.weight", (c.rope_dims // 2,)).astype(np.float64)
        self.layers = []
        for i in range(c.n_layer):
            p = f"blk.{i}."
            layer = {
                "attn_norm": get(p + "attn_norm.weight", (d,)),
                "q": get_t(p + "attn_q.weight", (q_out, d)),
                "k": get_t(p + "attn_k.weight", (kv_out, d)),
                "v": get_t(p + "attn_v.weight", (v_out, d)),
                "o": get_t(p + "attn_output.weight", (d, c.n_head * c.value_dim)),
                "ffn_norm": get(p + "ffn_norm.weight", (d,)),
                "gate": get_t(p + "ffn_gate.weight", (c.d_ff, d)),
                "up": get_t(p + "ffn_up.weight", (c.d_ff, d)),
                "down": get_t(p + "ffn_down.weight", (d, c.d_ff)),
            }
            if c.arch == "qwen2":
                layer["q_bias"] = get(p + "attn_q.bias", (q_out,))
                layer["k_bias"] = get(p + "attn_k.bias", (kv_out,))
                layer["v_bias"] = get(p + "attn_v.bias", (v_out,))
            if c.arch == "qwen3":
                layer["q_norm"] = get(p + "attn_q_norm.weight", (c.head_dim,))
                layer["k_norm"] = get(p + "attn_k_norm.weight", (c.head_dim,))
            self.layers.append(layer)
        unused = sorted(set(tensors) - used)
        if unused:  # a tensor this reference would ignore means a model it does not compute
            raise ReferenceError(f"tensors not used by the {c.arch} reference: {', '.join(unused[:5])}")

    # --- pieces ---------------------------------------------------------------------------------

    def rms_norm(self, x, weight):
        mean_square = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(mean_square + self.dtype.type(self.config.eps)) * weight

    def rope_tables(self, positions):
        """cos, sin of shape (T, rope_dims/2), computed in float64."""
        c = self.config
        inv_freq = c.rope_base ** (-np.arange(0, c.rope_dims, 2, dtype=np.float64) / c.rope_dims)
        if self.freq_factors is not None:
            inv_freq = inv_freq / self.freq_factors
        angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
        return np.cos(angles).astype(self.dtype), np.sin(angles).astype(self.dtype)

    def rope(self, x, cos, sin):
        """x: (T, heads, head_dim); rotates the first rope_dims values of each head."""
        n = self.config.rope_dims
        out = x.copy()
        cos, sin = cos[:, None, :], sin[:, None, :]
        if self.config.rope_adjacent:  # ggml NORM: pairs (2i, 2i+1)
            a, b = x[..., 0:n:2], x[..., 1:n:2]
            out[..., 0:n:2] = a * cos - b * sin
            out[..., 1:n:2] = a * sin + b * cos
        else:  # ggml NEOX: pairs (i, i + n/2)
            a, b = x[..., : n // 2], x[..., n // 2: n]
            out[..., : n // 2] = a * cos - b * sin
            out[..., n // 2: n] = a * sin + b * cos
        return out

    # --- forward ----------------------------------------------------------------------------------

    def session(self):
        return Session(self)

    def forward(self, ids, all_positions=True):
        """Logits (T, vocab) for every position of `ids`, or (vocab,) for the last."""
        return self.session().feed(ids, all_positions=all_positions)


class Session:
    """A causal sequence with its keys and values per layer, fed a chunk at a time."""

    def __init__(self, model):
        self.model = model
        c = model.config
        self.keys = [np.zeros((0, c.n_head_kv, c.head_dim), model.dtype) for _ in range(c.n_layer)]
        self.values = [np.zeros((0, c.n_head_kv, c.value_dim), model.dtype) for _ in range(c.n_layer)]
        self.length = 0

    def feed(self, ids, all_positions=True):
        m, c = self.model, self.model.config
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or len(ids) == 0:
            raise ValueError("ids: a non-empty sequence of token ids")
        if ids.min() < 0 or ids.max() >= c.vocab:
            raise ValueError(f"ids must lie in [0, {c.vocab})")
        t = len(ids)
        positions = np.arange(self.length, self.length + t)
        cos, sin = m.rope_tables(positions)
        group = c.n_head // c.n_head_kv
        scale = m.dtype.type(1.0 / np.sqrt(c.head_dim))
        # Causal mask: query at position p sees keys at positions <= p.
        key_positions = np.arange(self.length + t)
        masked = key_positions[None, :] > positions[:, None]  # (t, S)
        x = m.embedding[ids]
        for i, w in enumerate(m.layers):
            h = m.rms_norm(x, w["attn_norm"])
            q, k, v = h @ w["q"], h @ w["k"], h @ w["v"]
            if c.arch == "qwen2":
                q, k, v = q + w["q_bias"], k + w["k_bias"], v + w["v_bias"]
            q = q.reshape(t, c.n_head, c.head_dim)
            k = k.reshape(t, c.n_head_kv, c.head_dim)
            v = v.reshape(t, c.n_head_kv, c.value_dim)
            if c.arch == "qwen3":
                q, k = m.rms_norm(q, w["q_norm"]), m.rms_norm(k, w["k_norm"])
            q, k = m.rope(q, cos, sin), m.rope(k, cos, sin)
            keys = self.keys[i] = np.concatenate([self.keys[i], k])
            values = self.values[i] = np.concatenate([self.values[i], v])
            # GQA: query head j uses key/value head j // group (llama.cpp's broadcast, HF repeat_kv).
            qg = q.reshape(t, c.n_head_kv, group, c.head_dim).transpose(1, 2, 0, 3)  # (kv, g, t, hd)
            kt = keys.transpose(1, 2, 0)  # (kv, hd, S)
            scores = (qg @ kt[:, None]) * scale  # (kv, g, t, S)
            scores = np.where(masked, -np.inf, scores)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            attn = probs @ values.transpose(1, 0, 2)[:, None]  # (kv, g, t, vd)
            attn = attn.transpose(2, 0, 1, 3).reshape(t, c.n_head * c.value_dim)
            x = x + attn @ w["o"]
            h = m.rms_norm(x, w["ffn_norm"])
            gate = h @ w["gate"]
            x = x + ((gate / (1 + np.exp(-gate))) * (h @ w["up"])) @ w["down"]
        self.length += t
        if not all_positions:
            x = x[-1:]
        logits = (m.output @ m.rms_norm(x, m.output_norm).T).T  # (T, vocab)
        return logits if all_positions else logits[0]

    def greedy(self, ids, steps, stop=()):
        """Feeds `ids`, then `steps` greedy tokens (fewer on a token in `stop`); their ids."""
        out = []
        logits = self.feed(ids, all_positions=False)
        for _ in range(steps):
            token = int(np.argmax(logits))
            out.append(token)
            if token in stop:
                break
            logits = self.feed([token], all_positions=False)
        return out


def open_reader(path):
    try:
        import gguf
    except ImportError as e:
        raise ReferenceError(f"{e}: run scripts/python-test-deps and use build/venv/bin/python") from e
    return gguf.GGUFReader(path)


def load(path, dtype=np.float64, reader=None):
    return Model(reader if reader is not None else open_reader(path), dtype)


def tokenizer_from_gguf(reader):
    """A tokenizers.Tokenizer from the file's tokenizer.ggml.* (model gpt2, byte-level BPE), as
    SmolLM2's tokenizer.json sets it up: pre-tokenizer Sequence[Digits(individual_digits=True),
    ByteLevel(add_prefix_space=False, use_regex=True)], ByteLevel decoder; control tokens
    (token_type 3) are special added tokens. The same split as llama.cpp's pre-tokenizer "smollm"
    (src/llama-vocab.cpp: \\p{N}, then GPT-2's regex). Refuses other tokenizer types."""
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError as e:
        raise ReferenceError(f"{e}: run scripts/python-test-deps and use build/venv/bin/python") from e

    kind = _field(reader, "tokenizer.ggml.model")
    pre = _field(reader, "tokenizer.ggml.pre", default="default")
    if kind != "gpt2" or pre not in ("smollm", "starcoder", "refact", "codeshell"):
        raise ReferenceError(f"tokenizer {kind!r}/{pre!r}: only gpt2 with the digit-split pre-tokenizer (smollm)")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type", required=False) or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    special = [AddedToken(tokens[i], special=True, normalized=False) for i, kind in enumerate(types) if kind == 3]
    tokenizer.add_special_tokens(special)
    for token in special:  # added tokens keep the file's ids
        if tokenizer.token_to_id(token.content) != vocab[token.content]:
            raise ReferenceError(f"special token {token.content!r} did not keep its id")
    return tokenizer


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a .gguf file")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ids", help="comma-separated token ids")
    source.add_argument("--prompt", help="text, tokenized with the file's tokenizer")
    parser.add_argument("--out", help="write the logits here (.npy): (vocab,) for the last "
                        "position, (T, vocab) with --all-positions")
    parser.add_argument("--all-positions", action="store_true")
    parser.add_argument("--generate", type=int, default=0, help="greedy tokens to print")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--spread", action="store_true",
                        help="also compute in the other dtype and print the largest difference")
    a = parser.parse_args(argv)
    try:
        start = time.perf_counter()
        reader = open_reader(a.model)
        model = load(a.model, np.dtype(a.dtype), reader)
        loaded = time.perf_counter()
        tokenizer = tokenizer_from_gguf(reader) if a.prompt is not None or a.generate else None
        ids = [int(s) for s in a.ids.split(",")] if a.ids else tokenizer.encode(a.prompt).ids
        session = model.session()
        logits = session.feed(ids, all_positions=a.all_positions)
        done = time.perf_counter()
        print(f"gguf_reference: {model.config.arch}, {len(ids)} tokens, load {loaded - start:.1f} s, "
              f"forward {done - loaded:.1f} s", file=sys.stderr)
        if a.out:
            np.save(a.out, logits)
        if a.spread:
            other = load(a.model, np.float32 if a.dtype == "float64" else np.float64, reader)
            diff = np.abs(other.forward(ids, all_positions=a.all_positions) - logits)
            scale = logits.max(axis=-1) - logits.min(axis=-1)
            print(f"float32 vs float64: max |diff| {diff.max():.3g}, at most "
                  f"{(diff.max(axis=-1) / scale).max():.3g} of the logits' range "
                  f"({'every position' if a.all_positions else 'last position'})")
        if a.generate:
            last = logits[-1] if a.all_positions else logits
            eos = _field(reader, "tokenizer.ggml.eos_token_id", required=False)
            out = [int(np.argmax(last))]
            if out[0] != eos:
                out += session.greedy(out, a.generate - 1, stop=(eos,))
            print(tokenizer.decode(ids + out, skip_special_tokens=False))
    except (ReferenceError, ValueError, OSError) as e:
        print(f"gguf_reference: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""amc on a real pretrained GGUF model against an independent float64 reference.

The model: SmolLM2-135M-Instruct, Q4_1 (Llama architecture), from env AMC_MODEL_FILE, else
${AMC_MODEL_CACHE:-$HOME/.cache/amc}/SmolLM2-135M-Instruct.Q4_1.gguf; scripts/fetch-model puts
it there. A missing file FAILS every test (it never skips). The reference is
tests/tools/gguf_reference.py (gguf-py and numpy, none of amc's code); it needs the packages that
scripts/python-test-deps installs into build/venv. The amc tool is env AMC_GENERATE (ctest sets
it to amc-generate), run as

  $AMC_GENERATE --model MODEL.gguf --weight-dtype f32 --kv-dtype f32 --prompt-ids IDS -n 1
                --logits-out OUT.safetensors --threads 2

(and again with --weight-dtype stored: the Q4_1 and Q8_0 blocks kept as the file stores them)

which writes the logits of each generated step as the F32 tensor "logits" [steps, vocab]; with
-n 1 that is the prediction after the last prompt position, compared here with the reference's:
max |amc - ref| <= 1e-3 * (max(ref) - min(ref)), and the same argmax.

The prompt: the first two paragraphs of the GPL-3 preamble (136 tokens), read at test time from
Debian's /usr/share/common-licenses/GPL-3 (package base-files, always installed; the licence
allows verbatim copies of the whole document only, so no excerpt is copied into the repository).
The reference's forward pass of it takes about 7 s on one core (Debian's reference BLAS), the
whole module about 22 s on an idle machine (40 s on a busy one), amc's run aside.

Small synthetic GGUF files (gguf.GGUFWriter, random weights) check the reference's other paths
without the model: a llama file with attn_q/attn_k permuted as llama.cpp's converter does equals
the qwen2 file of the unpermuted weights (adjacent-pair against rotate-half RoPE), qwen2's biases
and qwen3's q/k norms are used, and what it does not compute is refused by name.
"""

import copy
import dataclasses
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_reference  # noqa: E402

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GPL3 = "/usr/share/common-licenses/GPL-3"
PROMPT_START = "  The GNU General Public License is a free, copyleft license for"
TOLERANCE = 1e-3  # of the reference logits' range


def model_path():
    explicit = os.environ.get("AMC_MODEL_FILE")
    if explicit:
        return explicit
    cache = os.environ.get("AMC_MODEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "amc")
    return os.path.join(cache, MODEL_NAME)


def prompt_text():
    """The GPL-3 preamble's first two paragraphs, as they stand in the file."""
    with open(GPL3, encoding="utf-8") as f:
        paragraphs = f.read().split("\n\n")
    start = next(i for i, p in enumerate(paragraphs) if p.startswith(PROMPT_START))
    return "\n\n".join(paragraphs[start:start + 2])


@pytest.fixture(scope="module")
def reference():
    path = model_path()
    if not os.path.isfile(path):
        pytest.fail(f"model file {path} not found: run scripts/fetch-model (or set AMC_MODEL_FILE)")
    start = time.perf_counter()
    reader = gguf_reference.open_reader(path)
    model = gguf_reference.load(path, np.float64, reader)
    tokenizer = gguf_reference.tokenizer_from_gguf(reader)
    loaded = time.perf_counter()
    text = prompt_text()
    ids = tokenizer.encode(text).ids
    logits = model.forward(ids, all_positions=False)
    done = time.perf_counter()
    print(f"\nreference: load {loaded - start:.1f} s, forward of {len(ids)} tokens {done - loaded:.1f} s")
    return {"path": path, "model": model, "tokenizer": tokenizer, "text": text, "ids": ids,
            "logits": logits}


# --- the reference on its own ------------------------------------------------------------------

def test_model_is_the_expected_llama(reference):
    c = reference["model"].config
    assert (c.arch, c.n_layer, c.d_model, c.n_head, c.n_head_kv, c.head_dim, c.vocab) == \
        ("llama", 30, 576, 9, 3, 64, 49152)
    assert c.rope_adjacent and c.rope_dims == 64 and c.rope_base == 100000.0 and c.tied


def test_prompt_tokenizes_and_round_trips(reference):
    tokenizer, text, ids = reference["tokenizer"], reference["text"], reference["ids"]
    assert 100 <= len(ids) <= 300, len(ids)
    assert tokenizer.decode(ids) == text
    # Digits one by one (SmolLM2's Digits(individual_digits=True)); special tokens kept whole.
    assert tokenizer.encode("2007").tokens == ["2", "0", "0", "7"]
    assert tokenizer.encode("<|im_start|>user").ids[0] == 1


def test_reference_logits_are_finite_and_confident(reference):
    logits = reference["logits"]
    assert logits.shape == (49152,) and np.isfinite(logits).all()
    assert logits.max() - logits.min() > 10


def test_reference_greedy_continues_english(reference):
    model, tokenizer = reference["model"], reference["tokenizer"]
    ids = tokenizer.encode("The capital of France is").ids
    out = model.session().greedy(ids, 3, stop=(2,))
    assert "Paris" in tokenizer.decode(out), tokenizer.decode(out)


def test_session_decode_matches_prefill(reference):
    """Feeding a sequence a token at a time (the keys/values cache) gives the logits of the
    whole-sequence pass."""
    model, tokenizer = reference["model"], reference["tokenizer"]
    ids = tokenizer.encode("Copyleft licenses keep software free.").ids
    whole = model.forward(ids)
    session = model.session()
    steps = np.stack([session.feed([token], all_positions=False) for token in ids])
    assert np.abs(steps - whole).max() <= 1e-9 * (whole.max() - whole.min())


def test_adjacent_pairs_on_stored_weights_equal_rotate_half_on_unpermuted(reference):
    """llama.cpp's converter permuted attn_q/attn_k's rows per head, (x0, x32, x1, x33, ...) from
    Hugging Face's (x0, ..., x63), so that RoPE on adjacent pairs of the stored file is HF's
    rotate-half RoPE on the original weights: both ways give the same logits, and rotate-half
    on the stored weights does not."""
    model, tokenizer = reference["model"], reference["tokenizer"]
    c = model.config
    ids = tokenizer.encode("The quick brown fox jumps over the lazy dog.").ids
    stored = model.forward(ids)

    def unpermute_columns(w_t, heads):  # w_t: (n_in, heads * head_dim), the weight transposed
        n_in, n_out = w_t.shape
        return np.ascontiguousarray(
            w_t.reshape(n_in, heads, n_out // heads // 2, 2).swapaxes(2, 3).reshape(n_in, n_out))

    rotate_half = copy.copy(model)
    rotate_half.config = dataclasses.replace(c, rope_adjacent=False)
    wrong = rotate_half.forward(ids)
    rotate_half.layers = [dict(layer, q=unpermute_columns(layer["q"], c.n_head),
                               k=unpermute_columns(layer["k"], c.n_head_kv)) for layer in model.layers]
    unpermuted = rotate_half.forward(ids)
    scale = stored.max() - stored.min()
    assert np.abs(unpermuted - stored).max() <= 1e-9 * scale
    assert np.abs(wrong - stored).max() > 0.05 * scale


# --- amc against the reference -------------------------------------------------------------------

def read_safetensors(path):
    """{name: float32 array} of an F32-only safetensors file (8-byte length, JSON header, data)."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = np.frombuffer(data[:8], dtype="<u8")
    header = json.loads(data[8:8 + int(length)])
    base = 8 + int(length)
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[base + begin:base + end], dtype="<f4").reshape(entry["shape"])
    return tensors


@pytest.mark.parametrize("weight_dtype", ["f32", "stored"])
def test_amc_logits_match_reference(reference, tmp_path, weight_dtype):
    tool = os.environ.get("AMC_GENERATE")
    if not tool:
        pytest.fail("AMC_GENERATE is not set: the amc generation tool to test, e.g. "
                    "build/release/examples/transformer/amc-generate (ctest sets it)")
    if not os.access(tool, os.X_OK):
        pytest.fail(f"AMC_GENERATE={tool} is not an executable: build amc-generate")
    out = tmp_path / "logits.safetensors"
    args = [tool, "--model", reference["path"], "--weight-dtype", weight_dtype, "--kv-dtype", "f32",
            "--prompt-ids", ",".join(map(str, reference["ids"])), "-n", "1",
            "--logits-out", str(out), "--threads", "2"]
    start = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=120)
    print(f"\namc: {time.perf_counter() - start:.1f} s")
    assert result.returncode == 0, f"{' '.join(args[:3])} ...: exit {result.returncode}: {result.stderr.strip()}"
    logits = read_safetensors(out)["logits"]
    ref = reference["logits"]
    assert logits.shape == (1, ref.shape[0]), logits.shape
    amc = logits[0].astype(np.float64)
    error = np.abs(amc - ref).max()
    scale = ref.max() - ref.min()
    print(f"amc ({weight_dtype} weights) vs reference: max |diff| {error:.3g}, {error / scale:.3g} of the logits' range {scale:.3g}")
    assert error <= TOLERANCE * scale, f"max |amc - ref| = {error:.4g} > {TOLERANCE} * {scale:.4g}"
    assert int(np.argmax(amc)) == int(np.argmax(ref))


# --- small synthetic files: the other architectures and the refusals ------------------------------

TINY = dict(n_layer=2, d_model=32, d_ff=48, n_head=4, n_head_kv=2, head_dim=8, vocab=50)


def tiny_weights(seed=0):
    """Random weights in Hugging Face's layout (rows = output features), float32."""
    t, rng = TINY, np.random.default_rng(seed)
    d, hd = t["d_model"], t["head_dim"]
    w = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)  # noqa: E731
    norm = lambda n: (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)  # noqa: E731
    weights = {"token_embd.weight": w(t["vocab"], d), "output_norm.weight": norm(d)}
    for i in range(t["n_layer"]):
        p = f"blk.{i}."
        weights.update({
            p + "attn_norm.weight": norm(d), p + "ffn_norm.weight": norm(d),
            p + "attn_q.weight": w(t["n_head"] * hd, d), p + "attn_k.weight": w(t["n_head_kv"] * hd, d),
            p + "attn_v.weight": w(t["n_head_kv"] * hd, d), p + "attn_output.weight": w(d, t["n_head"] * hd),
            p + "ffn_gate.weight": w(t["d_ff"], d), p + "ffn_up.weight": w(t["d_ff"], d),
            p + "ffn_down.weight": w(d, t["d_ff"]),
        })
    return weights


def write_gguf(path, arch, weights, extra=None):
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    t = TINY
    writer.add_block_count(t["n_layer"])
    writer.add_embedding_length(t["d_model"])
    writer.add_feed_forward_length(t["d_ff"])
    writer.add_head_count(t["n_head"])
    writer.add_head_count_kv(t["n_head_kv"])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(t["head_dim"])
    for key, value in (extra or {}).items():
        writer.add_string(key, value)
    for name, value in weights.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def llama_permute(w, heads):
    """llama.cpp's converter (LlamaModel.permute): each head's rows (r0..r7) become
    (r0, r4, r1, r5, r2, r6, r3, r7), so adjacent-pair RoPE acts as rotate-half did."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_synthetic_permuted_llama_equals_qwen2(tmp_path):
    """The same weights as a qwen2 file (NEOX RoPE, unpermuted, zero biases) and as a llama file
    with attn_q/attn_k permuted as llama.cpp's converter does (NORM RoPE) give the same logits;
    the qwen2 biases are used; qwen3 (per-head q/k RMSNorm) runs."""
    weights = tiny_weights()
    t = TINY
    zero_bias = {}
    for i in range(t["n_layer"]):
        for name, rows in (("q", t["n_head"]), ("k", t["n_head_kv"]), ("v", t["n_head_kv"])):
            zero_bias[f"blk.{i}.attn_{name}.bias"] = np.zeros(rows * t["head_dim"], np.float32)
    permuted = dict(weights)
    for i in range(t["n_layer"]):
        permuted[f"blk.{i}.attn_q.weight"] = llama_permute(weights[f"blk.{i}.attn_q.weight"], t["n_head"])
        permuted[f"blk.{i}.attn_k.weight"] = llama_permute(weights[f"blk.{i}.attn_k.weight"], t["n_head_kv"])
    ids = [3, 17, 5, 42, 8, 8, 21, 0, 49, 11]
    qwen2 = gguf_reference.load(write_gguf(tmp_path / "q2.gguf", "qwen2", {**weights, **zero_bias}))
    llama = gguf_reference.load(write_gguf(tmp_path / "ll.gguf", "llama", permuted))
    unpermuted_llama = gguf_reference.load(write_gguf(tmp_path / "ll0.gguf", "llama", weights))
    assert qwen2.config.tied and not qwen2.config.rope_adjacent and llama.config.rope_adjacent
    a, b = qwen2.forward(ids), llama.forward(ids)
    scale = a.max() - a.min()
    assert np.abs(a - b).max() <= 1e-9 * scale
    assert np.abs(unpermuted_llama.forward(ids) - a).max() > 1e-3 * scale

    bias = {k: np.full_like(v, 0.5) for k, v in zero_bias.items()}
    biased = gguf_reference.load(write_gguf(tmp_path / "q2b.gguf", "qwen2", {**weights, **bias}))
    assert np.abs(biased.forward(ids) - a).max() > 1e-3 * scale

    norms = {}
    for i in range(t["n_layer"]):
        for name in ("q", "k"):
            norms[f"blk.{i}.attn_{name}_norm.weight"] = np.linspace(0.5, 1.5, t["head_dim"], dtype=np.float32)
    qwen3 = gguf_reference.load(write_gguf(tmp_path / "q3.gguf", "qwen3", {**weights, **norms}))
    c = qwen3.forward(ids)
    assert np.isfinite(c).all() and np.abs(c - a).max() > 1e-3 * scale


@pytest.mark.parametrize("arch, extra, tensors, message", [
    ("gemma", {}, {}, "architecture 'gemma'"),
    ("llama", {"llama.rope.scaling.type": "yarn"}, {}, "rope scaling type 'yarn'"),
    ("qwen2", {}, {}, "missing tensor blk.0.attn_q.bias"),
    ("llama", {}, {"blk.0.extra.weight": np.ones(4, np.float32)}, "not used by the llama reference: blk.0.extra.weight"),
])
def test_synthetic_refusals(tmp_path, arch, extra, tensors, message):
    path = write_gguf(tmp_path / "bad.gguf", arch, {**tiny_weights(), **tensors}, extra)
    with pytest.raises(gguf_reference.ReferenceError, match=message):
        gguf_reference.load(path)

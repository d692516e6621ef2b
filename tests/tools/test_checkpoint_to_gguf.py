"""tools/checkpoint-to-gguf against amc's own reading of the checkpoint it converts.

Three tiny synthetic checkpoints (amc-synth; a few seconds in all): qwen2 (bf16, tied, q/k/v
biases), qwen3 (f32, q/k norms, head_dim stated) and llama (bf16, untied, rms_norm_eps 1e-5, whose
q/k rows the converter permutes). Each is converted with --type f32, bf16, q8_0 and q4_0, and:

- the file, read with gguf-py's GGUFReader and decoded here in plain numpy (F32 as is, BF16 the top
  half of an f32, Q8_0 as f16 scale times int8, Q4_0 as f16 scale times (nibble - 8)), holds
  exactly llama.cpp's tensor names, types and shapes, and values equal to the checkpoint's after
  this file's own round trip (exact for f32, round to nearest even for bf16, and the Q8_0 and
  Q4_0 quantizers of ggml's reference code, ggml-quants.c quantize_row_q8_0_ref and
  quantize_row_q4_0_ref, written again here in numpy and not taken from gguf.quants, which the
  converter uses), llama's q and k rows permuted as llama.cpp's converter permutes them;
- its metadata says the checkpoint's config and tokenizer (token list padded with [PAD<i>]
  UNUSED tokens to the vocabulary, BOS/EOS ids, merges);
- amc-generate computes on it, bit for bit, the logits of 3 steps that it computes on a
  checkpoint directory holding the values a reader must get back: the checkpoint itself for f32
  and bf16 (the same weights; 1-D tensors are F32 in the file and widen exactly from the
  checkpoint's bf16), and for q8_0 and q4_0 a safetensors directory written here with the round
  trip's values in f32. Any mistake in a value, a name, the permutation or a hyperparameter
  changes the logits; tolerance zero;
- with --weight-dtype stored (the Q8_0 and Q4_0 blocks kept and multiplied as stored), the logits
  of --weight-dtype f32 within 1e-5 of their range: the same products summed in another order
  (the criterion and reason of tests/test_real_model.cpp, measured there at 6e-7).

Every row of examples/transformer/tensor_names.def (the tensor names amc's loaders and amc-synth
read too) converts to its GGUF name, across the three checkpoints and a copy of the llama one with
attention_bias true (q, k, v and o_proj biases), on which amc computes the directory's logits.

A sharded checkpoint (model.safetensors.index.json) converts to the single file's bytes. And the
refusals: a bad --type, a missing directory, an unsupported rope_scaling, a row length that is
no multiple of the block of 32, an unknown pre-tokenizer regex, a tensor unknown, missing or
misshapen: exit status 2, one line on stderr, no file left behind (and an existing one untouched).

ctest runs it in the venv of scripts/python-test-deps (numpy, pytest, gguf) with env AMC_SYNTH
and AMC_GENERATE naming the two tools.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import gguf  # gguf-py's reader only; the values are decoded here

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERTER = os.path.join(HERE, "..", "..", "tools", "checkpoint-to-gguf")
PROMPT_IDS = "5,80,17,250,3,99,42,7"
STEPS = 3
STORED_TOLERANCE = 1e-5  # of the f32 run's logit range (module docstring)

# (name, amc-synth arguments): tiny shapes of the three families.
CHECKPOINTS = {
    # 300 tokens for 320 embedding rows: the converter pads the token list with 20.
    "qwen2": ["--shape", "tiny", "--tokenizer-vocab", "300"],
    "qwen3": ["--shape", "tiny", "--family", "qwen3", "--dtype", "f32", "--seed", "3"],
    # smollm2-135m is a llama shape without rope_scaling (tiny llama has llama3 scaling, which
    # the converter refuses), shrunk to test size.
    "llama": ["--shape", "smollm2-135m", "--layers", "2", "--hidden", "64", "--heads", "4",
              "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128", "--vocab", "320",
              "--untied", "--seed", "5"],
}
TYPES = ["f32", "bf16", "q8_0", "q4_0"]


def tool(name):
    path = os.environ.get(name)
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"env {name} does not name an executable (ctest sets it; build the tool)")
    return path


def run(args, expect=0):
    result = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=300)
    assert result.returncode == expect, \
        f"{' '.join(map(str, args))}: exit {result.returncode}, expected {expect}: {result.stderr.strip()}"
    return result


def convert(checkpoint, out, type_name, expect=0):
    return run([sys.executable, CONVERTER, str(checkpoint), str(out), "--type", type_name], expect)


# --- safetensors, read and written here -----------------------------------------------------------

def read_safetensors(path):
    """{name: float32 array} (BF16 and F32)."""
    with open(path, "rb") as f:
        data = f.read()
    length = int(np.frombuffer(data[:8], dtype="<u8")[0])
    header = json.loads(data[8:8 + length])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        raw = data[8 + length + begin:8 + length + end]
        if e["dtype"] == "BF16":
            values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            assert e["dtype"] == "F32", (name, e["dtype"])
            values = np.frombuffer(raw, dtype="<f4")
        out[name] = values.reshape(e["shape"])
    return out


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        blob = np.ascontiguousarray(t, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


# --- the round trips: ggml's reference quantizers, in numpy ---------------------------------------

def roundf(x):
    """C's roundf (half away from zero) of float32 values, exactly: in float64, |x| + 0.5 is exact."""
    x = x.astype(np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def q8_0_round_trip(w):
    """quantize_row_q8_0_ref then dequantize: d = amax / 127 (f32), q = roundf(x * (1/d)),
    d stored as f16; value = f16(d) * q."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    inv = np.zeros_like(d)
    np.divide(np.float32(1), d, out=inv, where=d != 0)
    q = roundf(blocks * inv).astype(np.float32)
    return (d.astype(np.float16).astype(np.float32) * q).astype(np.float32).reshape(w.shape)


def q4_0_round_trip(w):
    """quantize_row_q4_0_ref then dequantize: m = the first value of largest magnitude,
    d = m / -8, q = min(15, trunc(x * (1/d) + 8.5)); value = f16(d) * (q - 8)."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    m = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1)[:, None], axis=1)
    d = (m / np.float32(-8)).astype(np.float32)
    inv = np.zeros_like(d)
    np.divide(np.float32(1), d, out=inv, where=d != 0)
    q = np.minimum(15, np.trunc(blocks * inv + np.float32(8.5))).astype(np.float32)
    return (d.astype(np.float16).astype(np.float32) * (q - 8)).astype(np.float32).reshape(w.shape)


def bf16_round_trip(w):
    """Round to nearest even at 16 bits (every value here is finite)."""
    bits = w.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


ROUND_TRIP = {"f32": lambda w: w, "bf16": bf16_round_trip, "q8_0": q8_0_round_trip,
              "q4_0": q4_0_round_trip}
GGUF_TYPE = {"f32": "F32", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0"}


def decode(tensor):
    """A GGUFReader tensor's values, decoded here from its raw bytes (rows of the GGUF shape
    reversed, i.e. Hugging Face's [rows, cols])."""
    shape = [int(n) for n in reversed(tensor.shape)]
    raw = np.asarray(tensor.data).view(np.uint8).reshape(-1)
    kind = tensor.tensor_type.name
    if kind == "F32":
        return raw.view("<f4").reshape(shape)
    if kind == "BF16":
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if kind == "Q8_0":
        blocks = raw.reshape(-1, 34)
        d = blocks[:, :2].copy().view("<f2").astype(np.float32)
        return (d * blocks[:, 2:].copy().view(np.int8).astype(np.float32)).reshape(shape)
    if kind == "Q4_0":
        blocks = raw.reshape(-1, 18)
        d = blocks[:, :2].copy().view("<f2").astype(np.float32)
        low, high = blocks[:, 2:] & 0x0F, blocks[:, 2:] >> 4
        q = np.concatenate([low, high], axis=1).astype(np.float32) - 8  # element j, then j + 16
        return (d * q).reshape(shape)
    raise AssertionError(f"{tensor.name}: unexpected type {kind}")


def permute(w, heads):
    """llama.cpp's converter: within a head of d rows, the file's row 2i + a is row a * d/2 + i."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf):
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    _, _, layer, rest = hf.split(".", 3)
    return f"blk.{layer}.{LAYER_NAMES[rest]}"


# --- fixtures ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{family: {"dir", "config", "weights", "gguf": {type: path}}}: checkpoints and conversions."""
    synth = tool("AMC_SYNTH")
    root = tmp_path_factory.mktemp("checkpoint-to-gguf")
    out = {}
    for family, args in CHECKPOINTS.items():
        d = root / family
        run([synth, "--out", str(d), *args])
        with open(d / "config.json") as f:
            config = json.load(f)
        files = {t: root / f"{family}-{t}.gguf" for t in TYPES}
        for t, path in files.items():
            convert(d, path, t)
        out[family] = {"dir": d, "config": config, "weights": read_safetensors(d / "model.safetensors"),
                       "gguf": files}
    return out


def logits(model, weight_dtype, tmp_path, tag):
    path = tmp_path / f"{tag}.safetensors"
    run([tool("AMC_GENERATE"), "--model", str(model), "--weight-dtype", weight_dtype, "--kv-dtype", "f32",
         "--prompt-ids", PROMPT_IDS, "-n", str(STEPS), "--ignore-eos", "--logits-out", str(path),
         "--threads", "2"])
    result = read_safetensors(path)["logits"]
    assert result.shape[0] == STEPS and np.isfinite(result).all()
    return result


# --- the file's contents ------------------------------------------------------------------------------

@pytest.mark.parametrize("family", CHECKPOINTS)
@pytest.mark.parametrize("type_name", TYPES)
def test_tensors_are_the_checkpoints_after_the_round_trip(made, family, type_name):
    m = made[family]
    c = m["config"]
    reader = gguf.GGUFReader(m["gguf"][type_name])
    tensors = {t.name: t for t in reader.tensors}
    weights = dict(m["weights"])
    if c["tie_word_embeddings"]:
        assert "lm_head.weight" not in weights
    expected = {gguf_name(hf): hf for hf in weights}
    assert set(tensors) == set(expected), sorted(set(tensors) ^ set(expected))
    for name, hf in expected.items():
        w = weights[hf]
        t = tensors[name]
        want_type = "F32" if w.ndim == 1 else GGUF_TYPE[type_name]
        assert t.tensor_type.name == want_type, (name, t.tensor_type.name)
        want = w if w.ndim == 1 else ROUND_TRIP[type_name](w)
        if c["architectures"][0] == "LlamaForCausalLM" and ".attn_q." in name:
            want = permute(want, c["num_attention_heads"])
        elif c["architectures"][0] == "LlamaForCausalLM" and ".attn_k." in name:
            want = permute(want, c["num_key_value_heads"])
        got = decode(t)
        assert got.shape == want.shape, (name, got.shape, want.shape)
        assert np.array_equal(got, want), f"{name}: {np.count_nonzero(got != want)} values differ"


def field(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]].tolist()[0]


@pytest.mark.parametrize("family", CHECKPOINTS)
def test_metadata_is_the_config_and_tokenizer(made, family):
    m = made[family]
    c = m["config"]
    reader = gguf.GGUFReader(m["gguf"]["q8_0"])
    arch = {"Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "LlamaForCausalLM": "llama"}[
        c["architectures"][0]]
    assert field(reader, "general.architecture") == arch
    assert field(reader, "general.file_type") == 7  # MOSTLY_Q8_0
    for key, value in [("block_count", c["num_hidden_layers"]),
                       ("context_length", c["max_position_embeddings"]),
                       ("embedding_length", c["hidden_size"]),
                       ("feed_forward_length", c["intermediate_size"]),
                       ("attention.head_count", c["num_attention_heads"]),
                       ("attention.head_count_kv", c["num_key_value_heads"])]:
        assert field(reader, f"{arch}.{key}") == value, key
    assert field(reader, f"{arch}.rope.freq_base") == np.float32(c["rope_theta"])
    assert field(reader, f"{arch}.attention.layer_norm_rms_epsilon") == np.float32(c["rms_norm_eps"])
    if "head_dim" in c:
        assert field(reader, f"{arch}.attention.key_length") == c["head_dim"]
    with open(m["dir"] / "tokenizer.json") as f:
        tok = json.load(f)
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    assert len(tokens) == len(types) == c["vocab_size"]  # one per embedding row, as llama.cpp wants
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    special = {a["id"]: a["content"] for a in tok["added_tokens"]}
    for i in range(c["vocab_size"]):
        if i in by_id:
            assert (tokens[i], types[i]) == (by_id[i], 1), i  # NORMAL
        elif i in special:
            assert (tokens[i], types[i]) == (special[i], 3), i  # CONTROL
        else:
            assert (tokens[i], types[i]) == (f"[PAD{i}]", 5), i  # UNUSED
    if family == "qwen2":
        assert len(by_id) + len(special) == 300  # so the padding above was exercised
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.pre") == "qwen2"
    assert field(reader, "tokenizer.ggml.merges") == tok["model"]["merges"]
    assert field(reader, "tokenizer.ggml.bos_token_id") == c["bos_token_id"]
    assert field(reader, "tokenizer.ggml.eos_token_id") == c["eos_token_id"]
    assert field(reader, "tokenizer.ggml.add_bos_token") is False  # the ByteLevel post-processor adds none


# --- amc on the file against amc on the checkpoint ------------------------------------------------------

@pytest.mark.parametrize("family", CHECKPOINTS)
@pytest.mark.parametrize("type_name", TYPES)
def test_amc_logits_equal_the_checkpoints_bit_for_bit(made, family, type_name, tmp_path):
    m = made[family]
    round_trip = None
    for weight_dtype in ("f32", "bf16"):
        # The checkpoint itself holds the file's values when the type keeps them (f32; bf16 of a
        # bf16 checkpoint) or when amc rounds them at load as the converter did (bf16 weights of
        # an f32 checkpoint, both to nearest even); otherwise a checkpoint of the round trip's
        # values, in f32.
        same = type_name == "f32" or (type_name == "bf16" and
                                      (weight_dtype == "bf16" or m["config"]["torch_dtype"] == "bfloat16"))
        if same:
            reference = m["dir"]
        elif round_trip is None:
            reference = round_trip = tmp_path / "round-trip"
            reference.mkdir()
            for name in ("config.json", "tokenizer.json"):
                (reference / name).write_bytes((m["dir"] / name).read_bytes())
            values = {k: (w if w.ndim == 1 else ROUND_TRIP[type_name](w)) for k, w in m["weights"].items()}
            write_safetensors(reference / "model.safetensors", values)
        want = logits(reference, weight_dtype, tmp_path, "reference")
        got = logits(m["gguf"][type_name], weight_dtype, tmp_path, "gguf")
        assert np.array_equal(got, want), \
            f"{weight_dtype} weights: max |gguf - checkpoint| {np.abs(got - want).max():.3g}"


@pytest.mark.parametrize("family", CHECKPOINTS)
@pytest.mark.parametrize("type_name", ["q8_0", "q4_0"])
def test_stored_blocks_give_the_f32_logits_to_rounding(made, family, type_name, tmp_path):
    path = made[family]["gguf"][type_name]
    widened = logits(path, "f32", tmp_path, "f32")
    stored = logits(path, "stored", tmp_path, "stored")
    scale = float(widened.max() - widened.min())
    error = float(np.abs(stored - widened).max())
    print(f"\n{family} {type_name}: stored vs f32 weights: max |diff| {error / scale:.3g} of the range")
    assert error <= STORED_TOLERANCE * scale


# --- the tensor table ------------------------------------------------------------------------------------

TENSOR_NAMES = os.path.join(HERE, "..", "..", "examples", "transformer", "tensor_names.def")


def table_rows():
    """(kind, Hugging Face name, GGUF name) of every row of tensor_names.def, read here with a regex
    of this test's own (the converter has its own reader)."""
    with open(TENSOR_NAMES, encoding="utf-8") as f:
        text = f.read()
    rows = re.findall(r'^AMC_(GLOBAL|LAYER)_TENSOR\(\w+, "([^"]+)", "([^"]+)"', text, re.M)
    assert rows and len(rows) == text.count("\nAMC_")
    return rows


def test_every_row_of_tensor_names_def_converts_to_its_gguf_name(made, tmp_path):
    """Each row of the table that amc's loaders and amc-synth read reaches the converter too: every
    tensor of a converted checkpoint is in the file under the row's GGUF name and nothing else is,
    and the conversions together hold every row. The three families' checkpoints lack the q, k, v
    and o_proj biases of Llama's attention_bias true, so a copy of the llama checkpoint with them
    is converted too, and amc computes on it what it computes on the directory (the biases of q
    and k permuted and put back)."""
    rows = table_rows()
    llama = made["llama"]
    c = dict(llama["config"], attention_bias=True)
    d = tmp_path / "llama-biases"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(c))
    (d / "tokenizer.json").write_bytes((llama["dir"] / "tokenizer.json").read_bytes())
    rng = np.random.default_rng(9)
    weights = dict(llama["weights"])
    sizes = {"q_proj": c["num_attention_heads"] * c["head_dim"], "k_proj": c["num_key_value_heads"] * c["head_dim"],
             "v_proj": c["num_key_value_heads"] * c["head_dim"], "o_proj": c["hidden_size"]}
    for layer in range(c["num_hidden_layers"]):
        for proj, size in sizes.items():
            weights[f"model.layers.{layer}.self_attn.{proj}.bias"] = rng.normal(0, 0.1, size).astype(np.float32)
    write_safetensors(d / "model.safetensors", weights)
    out = tmp_path / "llama-biases.gguf"
    convert(d, out, "f32")

    to_gguf = {hf: gguf for _, hf, gguf in rows}
    seen = set()
    for checkpoint, path in [(made[f]["weights"], made[f]["gguf"]["f32"]) for f in CHECKPOINTS] + [(weights, out)]:
        expected = set()
        for hf in checkpoint:
            if hf in to_gguf:
                expected.add(to_gguf[hf])
                seen.add(hf)
            else:
                _, _, layer, suffix = hf.split(".", 3)
                expected.add(f"blk.{layer}.{to_gguf[suffix]}")
                seen.add(suffix)
        names = {t.name for t in gguf.GGUFReader(path).tensors}
        assert names == expected, sorted(names ^ expected)
    assert seen == set(to_gguf), sorted(set(to_gguf) - seen)
    assert np.array_equal(logits(out, "f32", tmp_path, "gguf"), logits(d, "f32", tmp_path, "directory"))


# --- refusals ---------------------------------------------------------------------------------------------

def refused(args, words, out):
    result = subprocess.run([sys.executable, CONVERTER, *map(str, args)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, (args, result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert all(w in result.stderr for w in words), (result.stderr, words)
    assert not os.path.exists(out)
    assert not [f for f in os.listdir(os.path.dirname(out)) if f.endswith(".tmp")]  # no half-written file


def test_refusals(made, tmp_path):
    qwen2 = made["qwen2"]["dir"]
    out = tmp_path / "out.gguf"
    refused([qwen2, out, "--type", "q5_k"], ["--type", "q5_k"], out)
    refused([tmp_path / "absent", out], ["absent"], out)
    refused([qwen2, out, "--type"], ["--type"], out)
    llama3 = tmp_path / "llama3"
    run([tool("AMC_SYNTH"), "--out", str(llama3), "--shape", "tiny", "--family", "llama"])
    refused([llama3, out], ["rope_scaling"], out)
    odd = tmp_path / "odd"  # rows of 48 values: no whole number of blocks of 32
    run([tool("AMC_SYNTH"), "--out", str(odd), "--hidden", "48", "--heads", "4", "--kv-heads", "2"])
    refused([odd, out, "--type", "q8_0"], ["block of 32"], out)
    # Copies of the qwen2 checkpoint, each broken in one way.
    def broken(name, tensors=None, regex=None):
        d = tmp_path / name
        d.mkdir()
        for f in ("config.json", "tokenizer.json", "model.safetensors"):
            (d / f).write_bytes((qwen2 / f).read_bytes())
        if tensors is not None:
            write_safetensors(d / "model.safetensors", tensors)
        if regex is not None:
            tok = json.loads((d / "tokenizer.json").read_text())
            tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex
            (d / "tokenizer.json").write_text(json.dumps(tok))
        return d

    weights = made["qwen2"]["weights"]
    refused([broken("regex", regex=r"\s+"), out], ["pre-tokenizer"], out)
    refused([broken("extra", {**weights, "model.extra.weight": np.zeros(4, np.float32)}), out],
            ["model.extra.weight", "not part of"], out)
    refused([broken("missing", {k: w for k, w in weights.items() if k != "model.norm.weight"}), out],
            ["model.norm.weight", "missing"], out)
    transposed = {k: (w.T if k == "model.layers.1.mlp.up_proj.weight" else w) for k, w in weights.items()}
    refused([broken("transposed", transposed), out], ["up_proj", "shape"], out)
    convert(odd, out, "bf16")  # no blocks, no refusal
    before = out.read_bytes()
    refused_again = subprocess.run([sys.executable, CONVERTER, str(odd), str(out), "--type", "q4_0"],
                                   capture_output=True, text=True, timeout=120)
    assert refused_again.returncode == 2 and out.read_bytes() == before  # the old file untouched


def test_sharded_checkpoint_gives_the_same_file(made, tmp_path):
    """model.safetensors.index.json and its shards: the same bytes as the single file (the same
    seed, and a directory of the same name, which becomes general.name)."""
    sharded = tmp_path / "sharded" / "qwen2"
    run([tool("AMC_SYNTH"), "--out", str(sharded), *CHECKPOINTS["qwen2"], "--shards", "3"])
    assert (sharded / "model.safetensors.index.json").exists()
    out = tmp_path / "sharded.gguf"
    convert(sharded, out, "q8_0")
    assert out.read_bytes() == made["qwen2"]["gguf"]["q8_0"].read_bytes()

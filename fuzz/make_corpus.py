#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/ (Python 3 stdlib only).

usage: fuzz/make_corpus.py SYNTHETIC_TOKENIZER_JSON
       fuzz/make_corpus.py --gguf-only      (only the fuzz_gguf seeds, which need no input)

SYNTHETIC_TOKENIZER_JSON is amc::transformer::synthetic_tokenizer_json(260) written to a file (e.g.
`amc-synth --out DIR --tokenizer-vocab 260 ...` writes it as DIR/tokenizer.json); the tokenizer
seeds are it and variants of it in the other accepted tokenizer.json shapes. The safetensors seeds come
from tests/tools/write_safetensors.py (the independent writer of the reader tests) and from
the q/k/v layout amc-bounds reads. The GGUF seeds come from gguf() below, a writer of the format
independent of amc's (the reader must take them). Seeds are small on purpose: libFuzzer mutates them, and
small inputs run fast. Re-running rewrites the same files.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def out(target, name, data):
    directory = os.path.join(HERE, "corpus", target)
    os.makedirs(directory, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None, pad=True):
    """tensors: (name, dtype, shape, raw bytes) in data order."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(raw for _, _, _, raw in tensors)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def bf16(values):
    return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16) for v in values)


def f16(values):
    return struct.pack("<%de" % len(values), *values)


def qkv(hq, hkv, n, d, encode, dtype):
    q = [((i * 7) % 11 - 5) / 4.0 for i in range(hq * d)]
    k = [((i * 5) % 13 - 6) / 8.0 for i in range(hkv * n * d)]
    v = [((i * 3) % 7 - 3) / 2.0 for i in range(hkv * n * d)]
    return safetensors([("q", dtype, [hq, d], encode(q)), ("k", dtype, [hkv, n, d], encode(k)),
                        ("v", dtype, [hkv, n, d], encode(v))])


def safetensors_seeds():
    writer = os.path.join(ROOT, "tests", "tools", "write_safetensors.py")
    tmp_dir = tempfile.mkdtemp()
    tmp = os.path.join(tmp_dir, "sample.safetensors")
    for name, extra in (("python_sample_padded", []), ("python_sample_unpadded", ["--no-pad"])):
        subprocess.run([sys.executable, writer, tmp] + extra, check=True)
        with open(tmp, "rb") as f:
            out("fuzz_safetensors", name, f.read())
    os.remove(tmp)
    os.rmdir(tmp_dir)
    out("fuzz_safetensors", "empty_header", safetensors([]))
    out("fuzz_safetensors", "metadata_only", safetensors([], {"format": "pt"}))
    out("fuzz_safetensors", "zero_size_neighbours",
        safetensors([("a", "U8", [0], b""), ("b", "I16", [2], struct.pack("<2h", -1, 7)),
                     ("c", "F64", [0, 3], b""), ("d", "BOOL", [1], b"\x01"),
                     ("e", "F8_E4M3", [2], b"\x38\xb8"), ("f", "U64", [], struct.pack("<Q", 9))]))
    for target in ("fuzz_safetensors", "fuzz_bounds_input"):
        out(target, "qkv_f32_2x1x5x4", qkv(2, 1, 5, 4, f32, "F32"))
        out(target, "qkv_bf16_4x2x3x2", qkv(4, 2, 3, 2, bf16, "BF16"))
        out(target, "qkv_f16_1x1x9x2", qkv(1, 1, 9, 2, f16, "F16"))
    out("fuzz_bounds_input", "qkv_f32_1x1x1x1", qkv(1, 1, 1, 1, f32, "F32"))
    out("fuzz_bounds_input", "qkv_mixed_dtypes",
        safetensors([("k", "F16", [1, 2, 2], f16([1, 0, 0, 1])), ("q", "F32", [2, 2], f32([1, 2, 3, 4])),
                     ("v", "BF16", [1, 2, 2], bf16([0.5, -1, 2, 4]))], {"note": "dumped"}))


# --- GGUF --------------------------------------------------------------------------------------

GGUF_TYPES = {"uint8": (0, "<B"), "int8": (1, "<b"), "uint16": (2, "<H"), "int16": (3, "<h"),
              "uint32": (4, "<I"), "int32": (5, "<i"), "float32": (6, "<f"), "bool": (7, "<?"),
              "string": (8, None), "array": (9, None), "uint64": (10, "<Q"), "int64": (11, "<q"),
              "float64": (12, "<d")}


def gguf_string(text):
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def gguf_value(type_name, value):
    """value: a scalar, a string, or for "array" a pair (element type name, [values])."""
    if type_name == "string":
        return gguf_string(value)
    if type_name == "array":
        element, items = value
        return (struct.pack("<IQ", GGUF_TYPES[element][0], len(items)) +
                b"".join(gguf_value(element, item) for item in items))
    return struct.pack(GGUF_TYPES[type_name][1], value)


def gguf(metadata, tensors, version=3, alignment=32):
    """metadata: (key, type name, value); tensors: (name, ggml type number, shape outermost
    first, raw bytes). Tensors laid out in order, each padded to the alignment."""
    out = struct.pack("<4sIQQ", b"GGUF", version, len(tensors), len(metadata))
    for key, type_name, value in metadata:
        out += gguf_string(key) + struct.pack("<I", GGUF_TYPES[type_name][0]) + gguf_value(type_name, value)
    offset, data = 0, b""
    for name, ggml_type, shape, raw in tensors:
        out += gguf_string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in reversed(shape))  # ggml's ne: innermost first
        out += struct.pack("<IQ", ggml_type, offset)
        data += raw + b"\0" * (-len(raw) % alignment)
        offset = len(data)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def gguf_seeds():
    def block(seed, size):
        return bytes((i * 37 + seed) & 0xFF for i in range(size))

    def with_scale(raw, block_bytes, at, half=0x3C00):  # every block's f16 scale set to 1.0
        raw = bytearray(raw)
        for b in range(0, len(raw), block_bytes):
            raw[b + at:b + at + 2] = struct.pack("<H", half)
        return bytes(raw)

    out("fuzz_gguf", "empty_v3", gguf([], []))
    out("fuzz_gguf", "metadata_every_type_v2", gguf([
        ("general.architecture", "string", "llama"), ("a.u8", "uint8", 7), ("a.i8", "int8", -7),
        ("a.u16", "uint16", 700), ("a.i16", "int16", -700), ("a.u32", "uint32", 70000),
        ("a.i32", "int32", -70000), ("a.f32", "float32", 0.5), ("a.bool", "bool", True),
        ("a.u64", "uint64", 2 ** 40), ("a.i64", "int64", -2 ** 40), ("a.f64", "float64", 0.25),
        ("a.tokens", "array", ("string", ["<s>", "a", "\u00e9"])),
        ("a.nested", "array", ("array", [("int32", [1, 2]), ("string", [])])),
    ], [], version=2))
    out("fuzz_gguf", "tensors_plain", gguf(
        [("general.alignment", "uint32", 64)],
        [("f32", 0, [2, 3], f32([1, -2, 3.5, 0, 1e-3, 7])), ("f16", 1, [4], f16([1, -0.5, 65504, 0])),
         ("bf16", 30, [2], bf16([1.0, -3.0])), ("i8", 24, [3], b"\x01\x80\x7f")], alignment=64))
    out("fuzz_gguf", "tensors_quantized", gguf(
        [("general.name", "string", "q"), ("general.quantization_version", "uint32", 2)],
        [("q8_0", 8, [1, 32], with_scale(block(1, 34), 34, 0)),
         ("q4_0", 2, [1, 32], with_scale(block(2, 18), 18, 0)),
         ("q4_1", 3, [2, 32], with_scale(block(3, 40), 20, 0)),
         ("q5_0", 6, [1, 32], with_scale(block(4, 22), 22, 0)),
         ("q5_1", 7, [1, 32], with_scale(block(5, 24), 24, 0)),
         ("q4_k", 12, [1, 256], with_scale(block(6, 144), 144, 0)),
         ("q5_k", 13, [1, 256], with_scale(block(7, 176), 176, 0)),
         ("q6_k", 14, [1, 256], with_scale(block(8, 210), 210, 208)),
         ("q2_k", 10, [1, 256], block(9, 84))]))


def config_seeds():
    qwen2_05b = {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
        "intermediate_size": 4864, "max_position_embeddings": 131072, "max_window_layers": 24,
        "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 131072, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.40.1", "use_cache": True, "use_sliding_window": False,
        "vocab_size": 151936}
    out("fuzz_config", "qwen2_0.5b.json", json.dumps(qwen2_05b, indent=2) + "\n")
    resaved = dict(qwen2_05b, sliding_window=None, rope_scaling=None, eos_token_id=[151643, 151645],
                   hidden_size=896.0)
    out("fuzz_config", "resaved_nulls.json", json.dumps(resaved))
    out("fuzz_config", "minimal.json", json.dumps(
        {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "vocab_size": 260}))
    out("fuzz_config", "synthetic.json", json.dumps(
        {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 4096,
         "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "head_dim": 32,
         "bos_token_id": None, "eos_token_id": 1021}))
    # The other families (docs/transformer.md, "Model families"): Qwen3's stated head_dim and Llama's
    # rope_scaling object give the fuzzer those keys' structure to mutate.
    out("fuzz_config", "qwen3_0.6b.json", json.dumps(
        {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 128,
         "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 40960,
         "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
         "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
         "tie_word_embeddings": True, "vocab_size": 151936}))
    out("fuzz_config", "llama_3.2_1b.json", json.dumps(
        {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "head_dim": 64,
         "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
         "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
         "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
         "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                          "original_max_position_embeddings": 8192, "rope_type": "llama3"},
         "rope_theta": 500000.0, "tie_word_embeddings": True, "vocab_size": 128256}))


def tokenizer_seeds(base_path):
    with open(base_path, encoding="utf-8") as f:
        base_text = f.read()
    base = json.loads(base_text)
    out("fuzz_tokenizer_json", "synthetic_260.json", base_text)

    pairs = json.loads(base_text)
    pairs["model"]["merges"] = [m.split(" ") for m in pairs["model"]["merges"]]
    pairs["model"]["ignore_merges"] = True
    pairs["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}]}
    out("fuzz_tokenizer_json", "qwen3_style_pairs.json", json.dumps(pairs, ensure_ascii=False))

    gpt2 = json.loads(base_text)
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    gpt2["normalizer"] = None
    gpt2["post_processor"] = None
    gpt2["added_tokens"] = gpt2["added_tokens"][:1]
    out("fuzz_tokenizer_json", "bytelevel_regex.json", json.dumps(gpt2, ensure_ascii=False))

    literal = json.loads(base_text)
    literal["pre_tokenizer"]["pretokenizers"].insert(0, {
        "type": "Split", "pattern": {"String": "\n"}, "behavior": "Isolated", "invert": False})
    out("fuzz_tokenizer_json", "split_string.json", json.dumps(literal, ensure_ascii=False))
    assert base["model"]["type"] == "BPE"


def text_seeds():
    samples = {
        "english.txt": "Hello world. The quick brown fox jumps over the lazy dog; they'll see.\n",
        "code.txt": "int main(int argc, char** argv) {\n  return argc > 1 ? 0 : 1;\n}\n",
        "digits.txt": "12345 3.14159 2024-06-01 0x7fff\n",
        "chat.txt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<|endoftext|>",
        "unicode.txt": "caf\u00e9 cafe\u0301 \u540d\u524d \u0928\u092e\u0938\u094d\u0924\u0947 "
                       "\U0001F600\U0001F44D\U0001F3FD \u00c5ngstr\u00f6m \u212b",
        "combining_after_special.txt": "<|endoftext|>\u0338 e\u0301<|im_end|>\u0301",
        "whitespace.txt": "  a\t\tb \r\n\r\n   \n c   ",
    }
    for name, text in samples.items():
        out("fuzz_tokenizer_encode", name, text)
    out("fuzz_tokenizer_encode", "invalid_utf8.bin", b"ok \xc3\x28 \xed\xa0\x80 \xf4\x90\x80\x80 \xff")
    out("fuzz_tokenizer_encode", "truncated_utf8.bin", b"abc \xe5\x90")


def main():
    if sys.argv[1:] == ["--gguf-only"]:
        gguf_seeds()
        return 0
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    safetensors_seeds()
    gguf_seeds()
    config_seeds()
    tokenizer_seeds(sys.argv[1])
    text_seeds()
    return 0


if __name__ == "__main__":
    sys.exit(main())

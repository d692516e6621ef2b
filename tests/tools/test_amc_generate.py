#!/usr/bin/env python3
"""End-to-end test of amc-synth and amc-generate (Python 3 standard library only).

amc-synth: the same seed gives byte-identical files, another seed other weights; bad flags exit
with status 2 and one line on stderr. amc-generate on a tiny synthetic checkpoint: the JSON lines
(prompt ids with the resolved settings, one object per token with the documented keys, the
summary), --logits-out's F32 [steps, vocab] tensor agreeing with the reported logits, text mode,
the demo, dense and sparse agreeing when the support covers the whole context, threads not
changing the output, --kv-dtype and --rope-angles (auto resolving to the weights' dtype and to
config.json's amc_rope_angles), and every kind of bad input giving exit status 2, one line on
stderr. The other families: amc-synth --family qwen3 and --family llama (and --head-dim,
--untied) write checkpoints of that family that amc-generate runs, dense and sparse alike, naming
the family; unknown architectures and unsupported rope_scaling are refused.

usage: test_amc_generate.py PATH/TO/amc-synth PATH/TO/amc-generate PATH/TO/amc-qwen2
"""

import json
import os
import re
import struct
import sys
import tempfile

from tool_test import check, check_refusal, report, run


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def read_safetensors_f32(path):
    data = read_file(path)
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        check(entry["dtype"] == "F32", f"{name}: dtype {entry['dtype']}")
        values = struct.unpack(f"<{(end - begin) // 4}f", data[8 + n + begin:8 + n + end])
        out[name] = (entry["shape"], values)
    return out


def copy_checkpoint(source, target, replace=None):
    """Copies config.json, model.safetensors and tokenizer.json; `replace` maps names to bytes."""
    os.makedirs(target)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        data = (replace or {}).get(name)
        with open(os.path.join(target, name), "wb") as f:
            f.write(read_file(os.path.join(source, name)) if data is None else data)
    return target


def with_tensor_nan(data, tensor):
    """model.safetensors bytes with every element of a BF16 tensor set to NaN (0x7FC0)."""
    (n,) = struct.unpack("<Q", data[:8])
    entry = json.loads(data[8:8 + n])[tensor]
    check(entry["dtype"] == "BF16", f"{tensor}: dtype {entry['dtype']}")
    begin, end = (8 + n + x for x in entry["data_offsets"])
    return data[:begin] + b"\xc0\x7f" * ((end - begin) // 2) + data[end:]


def hostile_files(qwen2, good, tmp):
    """Hostile checkpoint files and arguments: exit 2, one line naming the problem on stderr,
    and no --logits-out file (nor a temporary one) left behind."""
    config = read_file(os.path.join(good, "config.json")).decode()
    tokenizer = read_file(os.path.join(good, "tokenizer.json")).decode()
    weights = read_file(os.path.join(good, "model.safetensors"))
    deep = "[" * 1000000 + "]" * 1000000
    sparse = json.loads(tokenizer)
    sparse["model"]["vocab"]["x"] = 16777215  # one id sizing every per-id table
    sparse_tokenizer = json.dumps(sparse)
    cases = {
        "config_deep": ({"config.json": config.replace('"hidden_size": 64', '"hidden_size": ' + deep)},
                        ["config.json", "key 'hidden_size' must be an integer, got [[...]]"]),
        "config_float": ({"config.json": config.replace('"hidden_size": 64', '"hidden_size": 1e300')},
                         ["key 'hidden_size' must be an integer, got 1e+300"]),
        "config_kv_heads": ({"config.json": config.replace('"num_key_value_heads": 2', '"num_key_value_heads": 3')},
                            ["num_key_value_heads (3) does not divide num_attention_heads (4)"]),
        "config_huge": ({"config.json": config.replace('"hidden_size": 64', '"hidden_size": 65536')
                                               .replace('"num_hidden_layers": 2', '"num_hidden_layers": 4000')},
                        ["beyond the supported 2^40"]),
        "config_big": ({"config.json": config.replace('"vocab_size": 320', '"vocab_size": 16000000')},
                       ["tensor 'model.embed_tokens.weight' has shape [320, 64], expected [16000000, 64]"]),
        "config_not_json": ({"config.json": b"\xff\xfe{"}, ["config.json: not valid JSON"]),
        "config_rope_angles": ({"config.json": config.replace('"amc_synthetic": true',
                                                              '"amc_synthetic": true, "amc_rope_angles": "double"')},
                               ["config.json", "key 'amc_rope_angles' must be \"transformers\" or \"exact\", "
                                "got \"double\""]),
        "tokenizer_sparse_id": ({"tokenizer.json": sparse_tokenizer},
                                ["tokenizer.json", "= 16777215 is far beyond the"]),
        "tokenizer_cut": ({"tokenizer.json": tokenizer[:len(tokenizer) // 2]}, ["tokenizer.json: not valid JSON"]),
        "weights_cut": ({"model.safetensors": weights[:len(weights) - 100]}, ["model.safetensors"]),
        "weights_header_huge": ({"model.safetensors": struct.pack("<Q", 1 << 62) + weights[8:]},
                                ["model.safetensors"]),
        "weights_nan": ({"model.safetensors": with_tensor_nan(weights, "model.layers.1.self_attn.k_proj.bias")},
                        ["step 0 (prefill): logits[0] = NaN is not finite"]),
    }
    for label, (replace, words) in cases.items():
        replace = {k: v.encode() if isinstance(v, str) else v for k, v in replace.items()}
        model = copy_checkpoint(good, os.path.join(tmp, "hostile_" + label), replace)
        out = os.path.join(tmp, "hostile_" + label + ".safetensors")
        check_refusal([qwen2, "--model", model, "--prompt-ids", "5,6,7", "-n", "3", "--json",
                           "--logits-out", out], words)
        check(not os.path.exists(out), f"{label}: --logits-out file left behind")
    # Hostile GGUF files (the reader's own cases are tests/test_gguf.cpp's): one line, exit 2.
    gguf_cases = {
        "version_1": (b"GGUF" + struct.pack("<I", 1) + bytes(16), ["GGUF version 1 is not supported"]),
        "tensor_count": (b"GGUF" + struct.pack("<IQQ", 3, 1 << 62, 0),
                         ["tensor count 4611686018427387904 exceeds what the remaining 0 bytes could hold"]),
        "metadata_count": (b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 40), ["metadata count 1099511627776"]),
        "cut": (b"GGUF" + struct.pack("<I", 3) + b"\x01", ["file truncated: the tensor count needs 8 bytes"]),
    }
    for label, (data, words) in gguf_cases.items():
        path = os.path.join(tmp, f"hostile_{label}.gguf")
        with open(path, "wb") as f:
            f.write(data)
        check_refusal([qwen2, "--model", path, "--prompt", "x"], ["amc::GgufFile::open", path, *words])
    # The session flags (shared with amc-eval: examples/transformer/session_flags.hpp).
    for flag, value, words in (("--threads", "0", ["--threads", "[1, 1024]", "got 0"]),
                               ("--threads", "two", ["--threads", "got two"]),
                               ("--kv-dtype", "f16", ["--kv-dtype", "got 'f16'"]),
                               ("--weight-dtype", "q4", ["--weight-dtype", "got 'q4'"]),
                               ("--rope-angles", "yarn", ["--rope-angles", "got 'yarn'"]),
                               ("--activations", "int4", ["--activations", "expected f32 or int8",
                                                          "got 'int4'"])):
        check_refusal([qwen2, "--model", good, "--prompt-ids", "5", "-n", "2", flag, value],
                      ["amc-generate: ", *words])
    # Arguments that would exhaust memory are refused before allocating.
    check_refusal([qwen2, "--model", good, "--prompt-ids", "5", "-n", "9223372036854775807"],
                      ["max_position_embeddings (32768)"])
    # The output itself cannot be written: no file, no temporary file left.
    blocker = os.path.join(tmp, "not_a_directory")
    with open(blocker, "wb") as f:
        f.write(b"x")
    before = set(os.listdir(tmp))
    check_refusal([qwen2, "--model", good, "--prompt-ids", "5", "-n", "2", "--logits-out",
                       os.path.join(blocker, "logits.safetensors")], ["logits.safetensors"])
    check(set(os.listdir(tmp)) == before, f"--logits-out under a file left {set(os.listdir(tmp)) - before}")
    directory = os.path.join(tmp, "a_directory")
    os.makedirs(directory)
    before = set(os.listdir(tmp))
    check_refusal([qwen2, "--model", good, "--prompt-ids", "5", "-n", "2", "--logits-out", directory],
                      ["a_directory"])
    check(set(os.listdir(tmp)) == before, f"--logits-out over a directory left {set(os.listdir(tmp)) - before}")


def kv_dtype_and_rope_angles(qwen2, bf16_model, f32_model, tmp):
    """--kv-dtype auto is the weights' dtype, --rope-angles auto is config.json's amc_rope_angles
    (else transformers); explicit choices win; --json's first line records the resolved values
    with what was asked for; auto computes exactly what the explicit resolved choice does."""
    prompt = ",".join(str((7 * i + 3) % 300) for i in range(300))  # positions up to 305

    def generate(model, label, *extra):
        logits = os.path.join(tmp, f"logits_{label}.safetensors")
        out = run([qwen2, "--model", model, "--prompt-ids", prompt, "-n", "6", "--json", "--ignore-eos",
                   "--logits-out", logits, *extra]).stdout.splitlines()
        return json.loads(out[0]) if out else {}, read_file(logits) if os.path.exists(logits) else b""

    def settings(first):  # the KV and RoPE settings (the weight dtype's are checked below)
        return {k: v for k, v in first.items() if k != "prompt_ids" and not k.startswith("weight_dtype")}

    # The KV cache: bf16 weights -> bf16, f32 weights -> f32, unless asked otherwise.
    first, auto_f32 = generate(f32_model, "f32_auto")
    check(settings(first) == {"kv_dtype": "f32", "kv_dtype_requested": "auto", "rope_angles": "transformers",
                              "rope_angles_requested": "auto"}, f"f32 weights, auto: {first}")
    first, explicit_f32 = generate(f32_model, "f32_f32", "--kv-dtype", "f32")
    check(settings(first)["kv_dtype"] == "f32" and first["kv_dtype_requested"] == "f32", f"--kv-dtype f32: {first}")
    check(auto_f32 == explicit_f32, "f32 weights: --kv-dtype auto differs from --kv-dtype f32")
    first, bf16_cache = generate(f32_model, "f32_bf16", "--kv-dtype", "bf16")
    check(first.get("kv_dtype") == "bf16" and first.get("kv_dtype_requested") == "bf16", f"--kv-dtype bf16: {first}")
    check(bf16_cache != auto_f32, "f32 weights: a bf16 cache gives the f32 cache's logits bitwise")
    first, auto_bf16 = generate(bf16_model, "bf16_auto", "--kv-dtype", "auto")
    check(first.get("kv_dtype") == "bf16" and first.get("kv_dtype_requested") == "auto", f"bf16 weights: {first}")
    check(auto_bf16 == generate(bf16_model, "bf16_bf16", "--kv-dtype", "bf16")[1],
          "bf16 weights: --kv-dtype auto differs from --kv-dtype bf16")

    # The weight dtype: as stored unless asked; f32 weights converted to bf16 compute otherwise.
    check(first.get("weight_dtype") == "bf16" and first.get("weight_dtype_requested") == "auto",
          f"bf16 weights, --weight-dtype auto: {first}")
    first, rounded = generate(f32_model, "f32_as_bf16", "--weight-dtype", "bf16", "--kv-dtype", "f32")
    check(first.get("weight_dtype") == "bf16" and first.get("weight_dtype_requested") == "bf16",
          f"--weight-dtype bf16: {first}")
    check(rounded != auto_f32, "f32 weights: --weight-dtype bf16 gives the f32 weights' logits bitwise")
    first, widened = generate(f32_model, "f32_as_f32", "--weight-dtype", "f32")
    check(first.get("weight_dtype") == "f32" and widened == auto_f32,
          f"f32 weights: --weight-dtype f32 differs from auto: {first}")

    # RoPE angles: config.json's amc_rope_angles, else transformers.
    config = read_file(os.path.join(bf16_model, "config.json")).decode()
    exact_model = copy_checkpoint(bf16_model, os.path.join(tmp, "exact_angles"), {
        "config.json": config.replace('"amc_synthetic": true', '"amc_synthetic": true, "amc_rope_angles": "exact"')
        .encode()})
    first, auto_exact = generate(exact_model, "exact_auto")
    check(settings(first) == {"kv_dtype": "bf16", "kv_dtype_requested": "auto", "rope_angles": "exact",
                              "rope_angles_requested": "auto"}, f"amc_rope_angles exact, auto: {first}")
    check(auto_exact == generate(bf16_model, "exact_explicit", "--rope-angles", "exact")[1],
          "amc_rope_angles exact: auto differs from --rope-angles exact on the same weights")
    first, overridden = generate(exact_model, "exact_transformers", "--rope-angles", "transformers")
    check(first.get("rope_angles") == "transformers" and first.get("rope_angles_requested") == "transformers",
          f"--rope-angles transformers over amc_rope_angles exact: {first}")
    check(overridden == auto_bf16, "--rope-angles transformers differs from the default on a config without the key")
    check(overridden != auto_exact, "exact and transformers' angles give bitwise the same logits over 305 positions")
    demo = run([qwen2, "--model", exact_model, "--demo", "-n", "4", "--kv-dtype", "f32"]).stdout
    check("KV cache f32, RoPE angles exact (auto)" in demo, f"--demo does not name the settings: {demo}")


def families(synth, qwen2, tmp):
    """amc-synth --family qwen3 / llama, and amc-generate on what it writes."""
    for family, architecture in (("qwen3", "Qwen3ForCausalLM"), ("llama", "LlamaForCausalLM")):
        model = os.path.join(tmp, "family_" + family)
        again = os.path.join(tmp, "family_again_" + family)
        run([synth, "--out", model, "--family", family, "--seed", "4"])
        run([synth, "--out", again, "--family", family, "--seed", "4"])
        check(read_file(os.path.join(model, "model.safetensors"))
              == read_file(os.path.join(again, "model.safetensors")),
              f"amc-synth --family {family}: two runs with seed 4 differ")
        config = json.loads(read_file(os.path.join(model, "config.json")))
        check(config["architectures"] == [architecture] and config["model_type"] == family
              and config["attention_bias"] is False, f"--family {family}: config.json {config}")
        header = read_file(os.path.join(model, "model.safetensors"))
        names = json.loads(header[8:8 + struct.unpack("<Q", header[:8])[0]])
        check(("model.layers.0.self_attn.q_norm.weight" in names) == (family == "qwen3")
              and "model.layers.0.self_attn.q_proj.bias" not in names
              and ("lm_head.weight" in names) == (family == "llama"),
              f"--family {family}: tensors {sorted(names)}")

        def tokens(*extra):
            out = run([qwen2, "--model", model, "--prompt", "The lighthouse keeper kept a logbook.",
                       "-n", "8", "--json", "--ignore-eos", *extra]).stdout.splitlines()
            return json.loads(out[-1])["tokens"] if out else None

        dense = tokens()
        check(dense is not None and len(dense) == 8, f"{family}: dense tokens {dense}")
        check(tokens("--attention", "sparse", "--top-k", "100", "--scope", "group", "--threads", "2")
              == dense, f"{family}: sparse with a covering support differs from dense")
        text = run([qwen2, "--model", model, "--prompt-ids", "5,6,7", "-n", "3", "--ignore-eos"])
        check(architecture in text.stderr, f"{family}: text mode does not name {architecture}: "
              f"{text.stderr!r}")
        demo = run([qwen2, "--model", model, "--demo", "-n", "4"]).stdout
        check(f"({architecture}, 2 layers" in demo, f"{family}: --demo header: {demo[:200]!r}")

    # A prompt is encoded as Hugging Face's tokenizer(prompt): inside the post-processor's
    # template, as Llama 3.1/3.2's tokenizer.json puts <|begin_of_text|> first (here the
    # synthetic tokenizer's <|im_start|> plays that token).
    llama = os.path.join(tmp, "family_llama")
    templated = os.path.join(tmp, "family_llama_template")
    copy_checkpoint(llama, templated)
    tokenizer = json.loads(read_file(os.path.join(llama, "tokenizer.json")))
    bos = next(t for t in tokenizer["added_tokens"] if t["content"] == "<|im_start|>")
    special = {"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}
    tokenizer["post_processor"] = {"type": "Sequence", "processors": [
        tokenizer["post_processor"],
        {"type": "TemplateProcessing", "single": [special, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [special, {"Sequence": {"id": "A", "type_id": 0}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [bos["id"]],
                                             "tokens": ["<|im_start|>"]}}}]}
    with open(os.path.join(templated, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)

    def prompt_ids(model):
        out = run([qwen2, "--model", model, "--prompt", "Hello there", "-n", "1", "--json"])
        return json.loads(out.stdout.splitlines()[0])["prompt_ids"]

    plain = prompt_ids(llama)
    check(prompt_ids(templated) == [bos["id"]] + plain and bos["id"] not in plain,
          f"--prompt with a TemplateProcessing tokenizer: {prompt_ids(templated)}, without: {plain}")

    # Overrides: a Qwen3 head_dim of 48 (not 64 / 4), an untied Qwen2.
    qwen3 = os.path.join(tmp, "family_qwen3_48")
    run([synth, "--out", qwen3, "--family", "qwen3", "--head-dim", "48"])
    check(json.loads(read_file(os.path.join(qwen3, "config.json")))["head_dim"] == 48, "--head-dim 48")
    run([qwen2, "--model", qwen3, "--prompt-ids", "5,6", "-n", "2", "--json"])
    untied = os.path.join(tmp, "family_untied")
    run([synth, "--out", untied, "--untied"])
    check(json.loads(read_file(os.path.join(untied, "config.json")))["tie_word_embeddings"] is False,
          "--untied: tie_word_embeddings")
    run([qwen2, "--model", untied, "--prompt-ids", "5,6", "-n", "2", "--json"])

    check_refusal([synth, "--out", os.path.join(tmp, "x"), "--family", "mistral"], ["--family"])
    check_refusal([synth, "--out", os.path.join(tmp, "x"), "--shape", "qwen3-0.6b", "--family", "llama"],
                  ["shape 'qwen3-0.6b' is a Qwen3ForCausalLM shape; it cannot be written as LlamaForCausalLM"])
    check_refusal([synth, "--out", os.path.join(tmp, "x"), "--family", "qwen3", "--head-dim", "0"],
                  ["--head-dim"])
    check_refusal([synth, "--out", os.path.join(tmp, "x"), "--family", "qwen3", "--head-dim", "15"],
                  ["key 'head_dim' = 15 must be even"])

    # What amc-generate refuses in a config.json: another architecture, another rope_scaling type.
    llama = os.path.join(tmp, "family_llama")
    config = read_file(os.path.join(llama, "config.json")).decode()
    for label, text, words in (
            ("mistral", config.replace('"LlamaForCausalLM"', '"MistralForCausalLM"'),
             ["config.json", 'architecture "MistralForCausalLM"', "is not supported"]),
            ("yarn", config.replace('"rope_type": "llama3"', '"rope_type": "yarn"'),
             ["config.json", 'rope_scaling type "yarn" is not supported'])):
        model = os.path.join(tmp, "family_refused_" + label)
        os.makedirs(model)
        for name in ("model.safetensors", "tokenizer.json"):
            with open(os.path.join(model, name), "wb") as f:
                f.write(read_file(os.path.join(llama, name)))
        with open(os.path.join(model, "config.json"), "w") as f:
            f.write(text)
        check_refusal([qwen2, "--model", model, "--prompt-ids", "5", "-n", "2"], words)


def main():
    # argv: amc-synth, amc-generate and its alias amc-qwen2 (or, in a cross build, the wrappers
    # that run them under the emulator: cmake/AmcTestTools.cmake).
    synth, qwen2, alias = sys.argv[1], sys.argv[2], sys.argv[3]
    with tempfile.TemporaryDirectory() as tmp:
        a, b, c = (os.path.join(tmp, x) for x in "abc")
        run([synth, "--out", a, "--seed", "5"])
        run([synth, "--out", b, "--seed", "5"])
        run([synth, "--out", c, "--seed", "6"])
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            check(read_file(os.path.join(a, name)) == read_file(os.path.join(b, name)),
                  f"amc-synth: {name} differs between two runs with seed 5")
        check(read_file(os.path.join(a, "model.safetensors")) != read_file(os.path.join(c, "model.safetensors")),
              "amc-synth: seeds 5 and 6 wrote the same weights")
        f32 = os.path.join(tmp, "f32")
        run([synth, "--out", f32, "--dtype", "f32", "--layers", "3", "--hidden", "96", "--heads", "6",
             "--kv-heads", "3", "--intermediate", "80", "--vocab", "400"])
        config = json.loads(read_file(os.path.join(f32, "config.json")))
        check(config["num_hidden_layers"] == 3 and config["num_key_value_heads"] == 3
              and config["vocab_size"] == 400 and config["torch_dtype"] == "float32",
              f"amc-synth overrides: {config}")
        check_refusal([synth, "--out", os.path.join(tmp, "x"), "--heads", "5"], ["does not divide"])
        check_refusal([synth, "--out", os.path.join(tmp, "x"), "--layers", "0"], ["must be positive"])
        check_refusal([synth, "--out", os.path.join(tmp, "x"), "--dtype", "f64"], ["--dtype"])
        check_refusal([synth, "--shape", "tiny"], ["--out"])

        # JSON lines and --logits-out.
        logits_file = os.path.join(tmp, "logits.safetensors")
        result = run([qwen2, "--model", a, "--prompt-ids", "5, 6,7,300", "-n", "6", "--json",
                      "--ignore-eos", "--logits-out", logits_file])
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        check(len(lines) == 8, f"--json: expected 8 lines, got {len(lines)}")
        check(lines[0] == {"prompt_ids": [5, 6, 7, 300], "kv_dtype": "bf16", "kv_dtype_requested": "auto",
                           "rope_angles": "transformers", "rope_angles_requested": "auto",
                           "weight_dtype": "bf16", "weight_dtype_requested": "auto"},
              f"--json first line: {lines[0]}")
        steps = lines[1:-1]
        for i, step in enumerate(steps):
            check(list(step) == ["step", "token", "text", "logit", "margin", "min_retained_mass"],
                  f"--json step keys: {list(step)}")
            check(step["step"] == i and step["min_retained_mass"] is None and step["margin"] >= 0,
                  f"--json step: {step}")
        last = lines[-1]
        check(last["tokens"] == [s["token"] for s in steps], f"--json summary tokens: {last}")
        check(last["prefill_tokens_per_s"] > 0 and last["decode_tokens_per_s"] > 0, f"summary: {last}")
        tensors = read_safetensors_f32(logits_file)
        shape, values = tensors["logits"]
        check(shape == [6, 320], f"--logits-out shape {shape}")
        for i, step in enumerate(steps):
            row = values[i * 320:(i + 1) * 320]
            top = max(range(320), key=lambda j: (row[j], -j))
            check(top == step["token"] and abs(row[top] - step["logit"]) < 1e-6,
                  f"--logits-out row {i}: argmax {top}, reported token {step['token']}")

        # Text mode: the continuation on stdout, matching the JSON tokens' text.
        result = run([qwen2, "--model", a, "--prompt-ids", "5,6,7,300", "-n", "6", "--ignore-eos"])
        check(result.stdout == "".join(s["text"] for s in steps) + "\n", f"text mode: {result.stdout!r}")
        check("KV cache bf16 (auto), RoPE angles transformers (auto)" in result.stderr,
              f"text mode does not name the resolved settings: {result.stderr!r}")

        kv_dtype_and_rope_angles(qwen2, a, f32, tmp)

        # Sparse with a support covering everything = dense; threads do not matter.
        def tokens(*extra):
            out = run([qwen2, "--model", a, "--prompt", "The lighthouse keeper kept a logbook.", "-n", "10",
                       "--json", "--ignore-eos", *extra]).stdout.splitlines()
            return json.loads(out[-1])["tokens"], [json.loads(x) for x in out[1:-1]]

        dense, _ = tokens("--threads", "1")
        check(tokens("--threads", "2")[0] == dense, "dense: 2 threads differ from 1")
        sparse, sparse_steps = tokens("--attention", "sparse", "--top-k", "100", "--retained-mass",
                                      "--scope", "group", "--threads", "2")
        check(sparse == dense, "sparse with a covering support differs from dense")
        check(all(abs(s["min_retained_mass"] - 1) < 1e-5 for s in sparse_steps),
              f"retained mass of a covering support: {[s['min_retained_mass'] for s in sparse_steps]}")
        _, small = tokens("--attention", "sparse", "--block-size", "2", "--top-k", "1", "--sinks", "1",
                          "--window", "2", "--retained-mass", "--rule", "oracle")
        check(all(0 < s["min_retained_mass"] <= 1.00001 for s in small), "retained mass out of (0, 1]")
        # Speculative decoding: drafts from a small sparse support, dense decoding's tokens.
        out = run([qwen2, "--model", a, "--prompt", "The lighthouse keeper kept a logbook.", "-n", "10",
                   "--json", "--ignore-eos", "--decoding", "speculative", "--draft-tokens", "3",
                   "--block-size", "2", "--top-k", "1", "--sinks", "1", "--window", "2"]).stdout.splitlines()
        summary = json.loads(out[-1])
        check(summary["tokens"] == dense, f"speculative tokens {summary['tokens']} differ from dense {dense}")
        check(summary["decoding"] == "speculative" and summary["draft_tokens"] == 3
              and summary["verify_passes"] >= 3 and summary["tokens_per_verify"] >= 1.0
              and summary["accepted_drafts"] + summary["verify_passes"] == 9,
              f"speculative summary: {summary}")

        # The demo.
        demo = run([qwen2, "--model", a, "--demo", "-n", "24"]).stdout
        for words in ("KV cache bf16 (auto), RoPE angles transformers (auto)", "dense decoding:",
                      "sparse decoding: block 16, top-k 8", "decode tokens/s: dense",
                      "speculative decoding (drafts of up to 4 sparse tokens, one dense verify pass "
                      "each): exactly dense decoding's tokens",
                      "(each run timed on its own)", "measuring the retained mass",
                      "of the softmax mass", "retained mass per layer", "layer  0: mean",
                      'the prompt sets REPORT_KEY = "60417" in its third line'):
            check(words in demo, f"--demo output lacks {words!r}: {demo}")
        check("the measuring pass chose other tokens" not in demo,
              f"--demo's measuring pass did not repeat the timed sparse run: {demo}")
        answers = re.findall(r'dense answered "(.*)" \((found|missed) it\), sparse "(.*)" '
                             r'\((found|missed) it\)', demo)
        check(len(answers) == 1 and all((a == "60417") == (v == "found") for a, v in
                                        (answers[0][:2], answers[0][2:])),
              f"--demo's verdict on the planted value does not match its answers: {answers}")
        mine = run([qwen2, "--model", a, "--demo", "-n", "4", "--prompt", "x = 1"]).stdout
        check("REPORT_KEY" not in mine, f"--demo with --prompt asks about the default prompt: {mine}")
        layer_lines = re.findall(r"layer +\d+: mean ([0-9.]+), min ([0-9.]+)", demo)
        check(len(layer_lines) == 2, f"--demo should list retained mass for 2 layers: {demo}")
        check(all(0 < float(lo) <= float(mean) <= 1.0 for mean, lo in layer_lines),
              f"per-layer retained mass out of order or range: {layer_lines}")

        # Bad input: exit 2, one line on stderr.
        check_refusal([qwen2, "--model", os.path.join(tmp, "nowhere"), "--prompt", "x"], ["nowhere: no such file or directory"])
        check_refusal([qwen2, "--model", a], ["--prompt or --prompt-ids"])
        check_refusal([qwen2, "--model", a, "--prompt-ids", "1,320"], ["id 320 is outside the vocabulary [0, 320)"])
        check_refusal([qwen2, "--model", a, "--prompt-ids", "1,x"], ["'x' is not an integer"])
        check_refusal([qwen2, "--model", a, "--prompt-ids", "-1"], ["outside the vocabulary"])
        check_refusal([qwen2, "--model", a, "--prompt", "x", "--attention", "fast"], ["--attention"])
        check_refusal([qwen2, "--model", a, "--prompt", "x", "--decoding", "fast"], ["--decoding"])
        check_refusal([qwen2, "--model", a, "--prompt", "x", "--draft-tokens", "-1"], ["--draft-tokens"])
        check_refusal([qwen2, "--model", a, "--prompt", "x", "--decoding", "speculative", "--retained-mass"],
                      ["retained_mass"])
        check_refusal([qwen2, "--model", a, "--prompt", "x", "--attention", "sparse", "--block-size", "0"],
                          ["block_size must be an integer > 0", "'0'"])
        check_refusal([qwen2, "--model", a, "--prompt", "x", "--threads", "0"], ["--threads"])
        check_refusal([qwen2, "--model", a, "--prompt", "x", "--kv-dtype", "f16"], ["--kv-dtype", "f16"])
        check_refusal([qwen2, "--model", a, "--prompt", "x", "--rope-angles", "double"],
                      ["--rope-angles", "double"])
        check_refusal([qwen2, "--model", a, "--prompt", "x", "--bogus"], ["bogus"])
        no_weights = os.path.join(tmp, "no_weights")
        os.makedirs(no_weights)
        with open(os.path.join(no_weights, "config.json"), "wb") as f:
            f.write(read_file(os.path.join(a, "config.json")))
        check_refusal([qwen2, "--model", no_weights, "--prompt", "x"], ["no model.safetensors"])
        no_tokenizer = os.path.join(tmp, "no_tokenizer")
        os.makedirs(no_tokenizer)
        for name in ("config.json", "model.safetensors"):
            with open(os.path.join(no_tokenizer, name), "wb") as f:
                f.write(read_file(os.path.join(a, name)))
        check_refusal([qwen2, "--model", no_tokenizer, "--prompt", "x"], ["tokenizer.json: file not found"])
        # Ids need no tokenizer; text then shows ids.
        out = run([qwen2, "--model", no_tokenizer, "--prompt-ids", "1,2", "-n", "2", "--ignore-eos"]).stdout
        check(out.startswith("<|id:"), f"no tokenizer: {out!r}")

        hostile_files(qwen2, a, tmp)
        families(synth, qwen2, tmp)

        # amc-qwen2, the tool's former name, is an alias next to it that runs the same program.
        same = ["--model", a, "--prompt-ids", "5,6,7", "-n", "4", "--json", "--ignore-eos"]
        check(os.path.exists(alias), f"no alias {alias}")
        if os.path.exists(alias):
            strip = lambda out: [l for l in out.splitlines() if "tokens_per_s" not in l]  # noqa: E731
            check(strip(run([alias, *same]).stdout) == strip(run([qwen2, *same]).stdout),
                  "amc-qwen2 and amc-generate differ")

    sys.exit(report("amc-synth and amc-generate end-to-end"))


if __name__ == "__main__":
    main()

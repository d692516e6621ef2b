#!/usr/bin/env python3
"""Independent reference for amc's GGUF tokenizer (tests/test_tokenizer_gguf.cpp).

Reads a GGUF file with gguf-py (PyPI gguf) and builds a Hugging Face `tokenizers` Tokenizer
(PyPI tokenizers) from its tokenizer.ggml.tokens, .merges and .token_type, with the
pre-tokenizer that Hugging Face's tokenizer.json of each model family uses, written out below
from those files and not from amc or llama.cpp. Then encodes strings with it.

usage: gguf_tokenizer_reference.py metadata MODEL.gguf OUT.json
         write every tokenizer.* key of MODEL.gguf as {"key": {"type": T, "value": V}} (T the
         GGUF value type number; arrays as {"type": 9, "element_type": T, "value": [...]})
       gguf_tokenizer_reference.py encode MODEL.gguf STRINGS.json OUT.json [--pre NAME]
         STRINGS.json holds {"texts": [...]}; write {"pre": NAME, "ids": [[...], ...],
         "decoded": [...]}: Hugging Face's encode(text, add_special_tokens=False) of each and
         the decode of those ids (skip_special_tokens=False). NAME (a tokenizer.ggml.pre name)
         defaults to the file's tokenizer.ggml.pre.

Exit status 2 with a message on stderr when gguf or tokenizers is missing or the file is not a
byte-level BPE ("gpt2") GGUF.
"""

import json
import sys

try:
    import gguf
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
except ImportError as error:  # pragma: no cover - reported to the C++ test
    sys.stderr.write(f"gguf_tokenizer_reference.py: {error}; run scripts/python-test-deps "
                     "(a venv with PyPI gguf and tokenizers)\n")
    sys.exit(2)

# The Split regexes of Hugging Face's tokenizer.json files (pre_tokenizer.pretokenizers[0]):
# Qwen2 / Qwen2.5 (Qwen/Qwen2-7B) and Llama 3 (meta-llama/Meta-Llama-3-8B).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(use_regex):
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)


# tokenizer.ggml.pre name -> (the family's Hugging Face pre_tokenizer, BPE ignore_merges).
PRE_TOKENIZERS = {
    # HuggingFaceTB/SmolLM2-*: Sequence[Digits(individual_digits), ByteLevel(use_regex)].
    "smollm": (lambda: pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), byte_level(True)]), False),
    # openai-community/gpt2: ByteLevel(use_regex) alone.
    "gpt-2": (lambda: byte_level(True), False),
    "qwen2": (lambda: pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(QWEN2_SPLIT), "isolated"), byte_level(False)]), False),
    "llama-bpe": (lambda: pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated"), byte_level(False)]), True),
}

CONTROL, UNKNOWN, USER_DEFINED = 3, 2, 4


def fail(message):
    sys.stderr.write(f"gguf_tokenizer_reference.py: {message}\n")
    sys.exit(2)


def field_value(field, index):
    """One element of a gguf-py ReaderField (works on the parts/data layout of every version)."""
    part = field.parts[index]
    element_type = field.types[-1]
    if element_type == gguf.GGUFValueType.STRING:
        return bytes(part).decode("utf-8")
    value = part.tolist()[0]
    if element_type == gguf.GGUFValueType.BOOL:
        return bool(value)
    return value


def read_field(field):
    types = [int(t) for t in field.types]
    if types[0] == int(gguf.GGUFValueType.ARRAY):
        if len(types) != 2:
            fail(f"{field.name}: nested arrays are not dumped")
        return {"type": types[0], "element_type": types[1],
                "value": [field_value(field, i) for i in field.data]}
    return {"type": types[0], "value": field_value(field, field.data[0])}


def tokenizer_metadata(path):
    reader = gguf.GGUFReader(path)
    return {name: read_field(field) for name, field in reader.fields.items()
            if name.startswith("tokenizer.")}


def build_tokenizer(metadata, pre):
    def value(key, default=None):
        entry = metadata.get(key)
        return default if entry is None else entry["value"]

    if value("tokenizer.ggml.model") != "gpt2":
        fail(f"tokenizer.ggml.model is {value('tokenizer.ggml.model')!r}, not 'gpt2'")
    if pre not in PRE_TOKENIZERS:
        fail(f"no Hugging Face pre-tokenizer written here for {pre!r}")
    tokens = value("tokenizer.ggml.tokens")
    types = value("tokenizer.ggml.token_type", [1] * len(tokens))
    merges = [tuple(merge.split(" ")) for merge in value("tokenizer.ggml.merges")]
    make_pre, ignore_merges = PRE_TOKENIZERS[pre]
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    tokenizer.pre_tokenizer = make_pre()
    tokenizer.decoder = decoders.ByteLevel()
    # Added tokens as in the model's tokenizer.json: special ones (GGUF control) and the others
    # (user-defined), matched in the raw text.
    tokenizer.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                                  for i, t in enumerate(types) if t in (CONTROL, UNKNOWN)])
    tokenizer.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                          for i, t in enumerate(types) if t == USER_DEFINED])
    return tokenizer


def main(argv):
    if len(argv) == 4 and argv[1] == "metadata":
        with open(argv[3], "w", encoding="utf-8") as out:
            json.dump(tokenizer_metadata(argv[2]), out, ensure_ascii=False)
        return 0
    if len(argv) in (5, 7) and argv[1] == "encode":
        metadata = tokenizer_metadata(argv[2])
        pre = metadata.get("tokenizer.ggml.pre", {}).get("value")
        if len(argv) == 7:
            if argv[5] != "--pre":
                fail(f"unknown option {argv[5]!r}")
            pre = argv[6]
        tokenizer = build_tokenizer(metadata, pre)
        with open(argv[3], encoding="utf-8") as source:
            texts = json.load(source)["texts"]
        encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
        ids = [encoding.ids for encoding in encodings]
        decoded = tokenizer.decode_batch(ids, skip_special_tokens=False)
        with open(argv[4], "w", encoding="utf-8") as out:
            json.dump({"pre": pre, "ids": ids, "decoded": decoded}, out, ensure_ascii=False)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

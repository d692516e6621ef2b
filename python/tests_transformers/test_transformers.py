"""amc inside transformers itself: SmolLM2-135M-Instruct loaded by transformers from the GGUF file
(from_pretrained with gguf_file), generating with attn_implementation "amc" and "amc_sparse"
against transformers' eager attention.

Runs in the environment scripts/transformers-test-deps makes (PyPI's transformers 5.25 and torch
2.15, python/requirements-transformers.txt) with amc's module on PYTHONPATH (ctest's
transformers_package sets both). The model file: env AMC_MODEL_FILE, else
${AMC_MODEL_CACHE:-$HOME/.cache/amc}/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-model). A
missing file or package FAILS (never skips). The prompts are read at test time from Debian's
/usr/share/common-licenses (package base-files, always installed).

Tolerance: amc's dense decode and transformers' eager attention compute the same f32 attention
in different orders, so their logits differ by rounding only (6.5e-7 of the logits' range
measured over 8 steps of a 659-token prompt); 1e-4 of the range leaves two orders of magnitude
for that and still fails on any attended position too many or too few (which moves logits by
1e-2 of the range and more).
"""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is fetched from a hub, ever

import amc  # noqa: E402
import amc.transformers  # noqa: E402  (registers "amc" and "amc_sparse")
from amc.transformers import AmcCache  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOLERANCE = 1e-4  # of the eager logits' range (module docstring)
STEPS = 8
# A real budget: 4 sinks, 4 blocks of 32 and a window of 64, about 260 of the prompts' 500-660.
REAL = amc.SparseConfig(block_size=32, top_k=4, sinks=4, window=64)
COVERING = amc.SparseConfig(window=1 << 20)  # the window covers every position: dense


def model_file():
    explicit = os.environ.get("AMC_MODEL_FILE")
    if explicit:
        return explicit
    cache = os.environ.get("AMC_MODEL_CACHE") or os.path.join(os.path.expanduser("~"),
                                                               ".cache", "amc")
    return os.path.join(cache, MODEL_NAME)


def license_text(name, chars):
    with open(os.path.join("/usr/share/common-licenses", name), encoding="utf-8") as f:
        return f.read()[:chars]


@pytest.fixture(scope="module")
def smollm2():
    path = model_file()
    if not os.path.isfile(path):
        pytest.fail(f"model file {path} not found: run scripts/fetch-model (or set "
                    "AMC_MODEL_FILE)")
    torch.set_num_threads(2)
    directory, name = os.path.split(path)
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name,
                                                 attn_implementation="eager").eval()
    return model, tokenizer


@pytest.fixture(scope="module")
def prompts(smollm2):
    _, tokenizer = smollm2
    return {name: tokenizer(license_text(name, chars), return_tensors="pt")
            for name, chars in (("GPL-3", 3000), ("Apache-2.0", 2600))}


def generate(model, inputs, implementation, cache=None, steps=STEPS, **kwargs):
    """Greedy tokens [batch, steps] and logits [steps, batch, vocab]."""
    model.set_attn_implementation(implementation)
    if cache is not None:
        kwargs["cache"] = cache
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=steps, do_sample=False,
                             output_logits=True, return_dict_in_generate=True,
                             pad_token_id=0, **kwargs)
    prompt = inputs["input_ids"].shape[1]
    return out.sequences[:, prompt:], torch.stack(out.logits)


def relative(a, b):
    return float((a - b).abs().max() / (b.max() - b.min()))


def test_dense_and_covering_sparse_match_eager(smollm2, prompts):
    model, _ = smollm2
    inputs = prompts["GPL-3"]
    tokens, logits = generate(model, inputs, "eager")
    dense_tokens, dense_logits = generate(model, inputs, amc.transformers.DENSE)
    assert torch.equal(dense_tokens, tokens)
    assert relative(dense_logits, logits) <= TOLERANCE
    sparse_tokens, sparse_logits = generate(model, inputs, amc.transformers.SPARSE,
                                            AmcCache(COVERING))
    assert torch.equal(sparse_tokens, tokens)
    assert relative(sparse_logits, logits) <= TOLERANCE


def test_real_budget_reports_tokens_and_retained_mass(smollm2, prompts):
    model, _ = smollm2
    inputs = prompts["GPL-3"]
    _, dense_logits = generate(model, inputs, "eager")
    cache = AmcCache(REAL, record_mass=True)
    tokens, logits = generate(model, inputs, amc.transformers.SPARSE, cache)
    assert tokens.shape == (1, STEPS) and torch.isfinite(logits).all()
    mass = cache.retained_mass()  # [steps, layers, rows, heads]
    # generate's last token is not decoded, so STEPS - 1 decode steps; 30 layers, 9 heads.
    assert mass.shape == (STEPS - 1, 30, 1, 9)
    assert (mass > 0).all() and (mass <= 1 + 1e-6).all()
    assert mass.min() < 0.5  # it read a part of the cache, and it shows
    assert relative(logits, dense_logits) > 1e-3
    # The settings reached the operator from the cache: a covering cache keeps all the mass.
    covering = AmcCache(COVERING, record_mass=True)
    generate(model, inputs, amc.transformers.SPARSE, covering, steps=3)
    assert abs(covering.retained_mass() - 1).max() <= 1e-5


def test_settings_from_the_model_config(smollm2, prompts):
    model, _ = smollm2
    inputs = prompts["GPL-3"]
    from_cache = generate(model, inputs, amc.transformers.SPARSE, AmcCache(REAL), steps=4)
    eager = generate(model, inputs, "eager", steps=4)
    model.config.amc_sparse = REAL.to_dict()
    try:
        from_config = generate(model, inputs, amc.transformers.SPARSE, AmcCache(), steps=4)
        # "amc" stays dense whatever the model config or the cache ask for.
        dense = generate(model, inputs, amc.transformers.DENSE, AmcCache(REAL), steps=4)
    finally:
        del model.config.amc_sparse
    assert torch.equal(from_config[0], from_cache[0])
    assert torch.equal(from_config[1], from_cache[1])
    assert torch.equal(dense[0], eager[0]) and relative(dense[1], eager[1]) <= TOLERANCE
    assert relative(from_cache[1], eager[1]) > 1e-3  # the sparse runs were not dense


def test_two_prompts_in_a_row_and_a_reused_cache(smollm2, prompts):
    """Each prompt gets its own result whatever ran before it through the same model and
    attention function: a second prompt after a first, and a cache reset and reused."""
    model, _ = smollm2
    gpl, apache = prompts["GPL-3"], prompts["Apache-2.0"]
    alone = generate(model, apache, amc.transformers.SPARSE, AmcCache(REAL))
    generate(model, gpl, amc.transformers.SPARSE, AmcCache(REAL))
    after = generate(model, apache, amc.transformers.SPARSE, AmcCache(REAL))
    assert torch.equal(after[0], alone[0]) and torch.equal(after[1], alone[1])
    cache = AmcCache(REAL)
    generate(model, gpl, amc.transformers.SPARSE, cache)
    cache.reset()
    reused = generate(model, apache, amc.transformers.SPARSE, cache)
    assert torch.equal(reused[0], alone[0]) and torch.equal(reused[1], alone[1])


def test_left_padded_batch_gives_each_prompt_its_own_result(smollm2):
    model, tokenizer = smollm2
    texts = [license_text("GPL-3", 2400), license_text("Apache-2.0", 1500)]
    tokenizer.padding_side = "left"
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    assert batch["attention_mask"][1].sum() < batch["attention_mask"][0].sum()  # row 1 padded
    for implementation, cache in ((amc.transformers.DENSE, None),
                                  (amc.transformers.SPARSE, AmcCache(REAL))):
        tokens, logits = generate(model, batch, implementation, cache)
        for row, text in enumerate(texts):
            own = generate(model, tokenizer(text, return_tensors="pt"), implementation,
                           None if cache is None else AmcCache(REAL))
            assert torch.equal(tokens[row], own[0][0]), (implementation, row)
            assert relative(logits[:, row], own[1][:, 0]) <= TOLERANCE, (implementation, row)


def test_beam_search_with_covering_sparse_equals_eager(smollm2, prompts):
    """Beam search expands the batch (batch_repeat_interleave) and reorders the cache every step
    (reorder_cache): the summaries follow, so a covering budget gives eager's beams."""
    model, _ = smollm2
    inputs = prompts["Apache-2.0"]
    eager, _ = generate(model, inputs, "eager", steps=6, num_beams=3)
    sparse, _ = generate(model, inputs, amc.transformers.SPARSE, AmcCache(COVERING), steps=6,
                         num_beams=3)
    assert torch.equal(sparse, eager)
    # With a real budget it runs, every beam with its own summaries.
    tokens, logits = generate(model, inputs, amc.transformers.SPARSE, AmcCache(REAL), steps=6,
                              num_beams=3)
    assert tokens.shape == (1, 6) and torch.isfinite(logits).all()


def forward(model, cache, ids):
    with torch.no_grad():
        return model(input_ids=ids, cache=cache, use_cache=True).logits[:, -1]


def test_crop_cuts_the_summaries_with_the_cache(smollm2, prompts):
    """After cache.crop, decoding continues as if the cut positions had never been there."""
    model, _ = smollm2
    model.set_attn_implementation(amc.transformers.SPARSE)
    prompt = prompts["GPL-3"]["input_ids"]
    follow = torch.tensor([[13719, 919, 357, 9054, 288, 722, 253]])
    cropped = AmcCache(REAL)
    forward(model, cropped, prompt)
    for i in range(follow.shape[1]):
        forward(model, cropped, follow[:, i:i + 1])
    cropped.crop(-40)  # into the prompt: a block is cut in two
    for layer in cropped.layers:  # each layer's summaries: those of its cropped keys
        held = layer.summaries.for_row(0, layer.keys[0], layer.values[0], 0, REAL)
        fresh = amc.build_summaries(layer.keys[0], layer.values[0], REAL)
        assert [s.positions for s in held] == [prompt.shape[1] - 33] * len(fresh)
        for a, b in zip(held, fresh):
            assert (a.mean_keys == b.mean_keys).all()
    # Decoding on matches a cache that never held the cut positions (its keys come from a
    # shorter prefill, equal to rounding: GEMMs of another height).
    direct = AmcCache(REAL)
    forward(model, direct, prompt[:, :-33])
    for i in range(3):
        token = prompt[:, -33 + i:-33 + i + 1]
        assert relative(forward(model, cropped, token), forward(model, direct, token)) <= TOLERANCE


def test_refusals(smollm2, prompts):
    model, _ = smollm2
    with pytest.raises(amc.Error, match="block-sparse decode needs block summaries that follow "
                                        "the cache: generate with cache=amc.transformers"):
        generate(model, prompts["GPL-3"], amc.transformers.SPARSE, steps=2)
    model.config.amc_sparse = "top_k=4"
    try:
        with pytest.raises(amc.Error, match="amc_sparse must be a dict"):
            generate(model, prompts["GPL-3"], amc.transformers.SPARSE, AmcCache(), steps=2)
    finally:
        del model.config.amc_sparse
    config = type(model.config)(**{**model.config.to_dict(),
                                   "layer_types": ["sliding_attention"] * 30})
    with pytest.raises(amc.Error, match=r"AmcCache: the model has \['sliding_attention'\] "
                                        "layers"):
        AmcCache(config=config)

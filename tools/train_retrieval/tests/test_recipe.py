"""Checks of the retrieval recipe (tools/train_retrieval) that need no training: its sequences
(data.py) and its settings (train.py's recipes, learning rate, attention-logit cap). Run by
ctest as train_retrieval_recipe, with Debian's python3-torch and python3-pytest."""
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import data  # noqa: E402
import train  # noqa: E402

RECORD = re.compile(rb'^([A-Za-z0-9_]+) = "([A-Za-z0-9]+)"$')
CODE = b"".join(b"value_%d = compute(%d)\n" % (i, i) for i in range(400))


def generator(seed):
    return torch.Generator().manual_seed(seed)


def test_a_batch_is_a_function_of_its_generator_only():
    stream = torch.tensor(list(CODE))
    mix = (0.25, 0.25, 0.4, 0.1)
    ids, weights = data.batch(stream, 512, 12, generator(7), mix)
    again_ids, again_weights = data.batch(stream, 512, 12, generator(7), mix)
    other_ids, _ = data.batch(stream, 512, 12, generator(8), mix)
    assert ids.shape == (12, 513) and weights.shape == (12, 512)
    assert torch.equal(ids, again_ids) and torch.equal(weights, again_weights)
    assert not torch.equal(ids, other_ids)
    assert set(weights.unique().tolist()) <= {0.0, 1.0}


def first_record_pair(seed):
    """The two inserts of the first record plan_records places with this seed (it may drop a
    record whose query would fall past the code)."""
    for s in range(seed, seed + 50):
        inserts = data.plan_records(generator(s), CODE, 1)
        if inserts:
            return sorted(inserts, key=lambda i: i.offset)
    raise AssertionError("no record placed in 50 seeds")


def test_a_record_is_planted_at_a_line_start_and_asked_for_later():
    record, query = first_record_pair(11)
    assert record.data == query.data and record.offset < query.offset
    for insert in (record, query):
        assert insert.offset == 0 or CODE[insert.offset - 1] == ord("\n")
    match = RECORD.match(record.data.rstrip(b"\n"))
    assert match, record.data
    name, value = match.groups()
    assert name != b"PASSKEY" and 3 <= len(value) <= 8
    # Nothing of the first occurrence can be predicted, nor which name the query asks for;
    # the value after `NAME = "` can (and the closing quote and newline).
    assert record.weights == [0.0] * len(record.data)
    head = len(name) + len(b' = "')
    assert query.weights == [0.0] * head + [1.0] * (len(query.data) - head)


def test_the_probe_name_is_never_drawn():
    # Force the draw of an upper-case name without suffix that spells PASSKEY.
    draws = iter([1, 0])  # kind 1 (upper case), then no suffix
    original_randint, original_bytes = data.randint, data.random_bytes
    try:
        data.randint = lambda g, low, high: next(draws) if high in (3, 2) else low
        data.random_bytes = lambda g, alphabet, length: b"PASSKEY"
        assert data.random_name(generator(0)) == b"KEY_PASSKEY"
    finally:
        data.randint, data.random_bytes = original_randint, original_bytes


def test_code_with_inserts_keeps_each_record_with_its_query():
    stream = torch.tensor(list(CODE))
    for seed in range(5):
        ids, weights = data.augmented_code(stream, 2048, generator(seed), records=3, copies=1)
        assert ids.shape == (2049,) and weights.shape == (2049,)
        lines = bytes(ids.tolist()).split(b"\n")
        records = [line for line in lines if RECORD.match(line)]
        for line in set(records):  # a record and its query: the same line twice
            assert records.count(line) == 2, line


def test_the_recipes():
    v1 = train.RECIPES["v1"]
    assert v1.rope_theta == 1e4 and v1.steps == 2700
    assert [(p[0], p[1], p[2]) for p in v1.phases] == [
        (0, 96, 64), (600, 256, 48), (900, 512, 24), (1300, 1024, 12), (1800, 2048, 6),
        (2300, 4096, 3)]
    v2 = train.RECIPES["v2"]
    assert v2.rope_theta == 1e6 and v2.steps == 2400
    assert v2.phases[:4] == v1.phases[:4] and v2.phases[4][:2] == (1600, 4096)


def test_the_default_recipe_made_the_checkpoint():
    """data/qwen2-retrieval's training.json and config.json against the recipe a new run gets."""
    checkpoint = Path(__file__).resolve().parents[3] / "data" / "qwen2-retrieval"
    made = json.loads((checkpoint / "training.json").read_text())
    config = json.loads((checkpoint / "config.json").read_text())
    recipe = train.RECIPES[train.DEFAULT_RECIPE]
    assert made["recipe"] == recipe.name
    assert made["steps"] == recipe.steps
    assert made["rope_theta"] == config["rope_theta"] == recipe.rope_theta
    assert [(p["first_step"], p["context"], p["sequences"],
             tuple(p["mix_repeats_pure_copies_code_with_inserts_plain_code"]))
            for p in made["phases"]] == [tuple(p) for p in recipe.phases]


def test_the_saved_state_decides_the_recipe(tmp_path):
    saved = train.RECIPE
    try:
        def use(recipe):
            train.use_recipe(SimpleNamespace(state=tmp_path, recipe=recipe))
            return train.RECIPE.name

        assert use(None) == "v2"  # no state: the default
        assert use("v1") == "v1"
        torch.save({"step": 5, "recipe": "v2"}, tmp_path / "state.pt")
        assert use(None) == "v2"
        with pytest.raises(SystemExit, match="recipe v2's, not v1's"):
            use("v1")
        torch.save({"step": 5}, tmp_path / "state.pt")  # written before recipes existed
        assert use(None) == "v1"
    finally:
        train.RECIPE = saved


def test_learning_rate_schedule():
    peak, steps = 3e-4, train.RECIPE.steps
    assert train.learning_rate(0, peak, 100) == pytest.approx(train.SEED_LR / 100)
    assert train.learning_rate(train.GROW_AT - 1, peak, 100) == train.SEED_LR
    assert train.learning_rate(train.GROW_AT, peak, 100) == pytest.approx(peak / train.REWARMUP)
    assert train.learning_rate(train.GROW_AT + train.REWARMUP, peak, 100) == pytest.approx(peak)
    assert train.learning_rate(steps, peak, 100) == pytest.approx(0.1 * peak)


def test_the_logit_cap_bounds_every_head_and_spares_the_others():
    torch.manual_seed(0)
    model = train.new_model(layers=2)
    before = [b.clone() for b in train.attention_logit_bounds(model)]
    with torch.no_grad():
        model.layers[0].self_attn.q_proj.weight[:64] *= 50.0  # head 0 of layer 0 only
    cap = float(before[0].max()) * 2
    train.cap_attention_logits(model, cap)
    after = train.attention_logit_bounds(model)
    assert float(after[0][0]) == pytest.approx(cap, rel=1e-4)
    assert torch.allclose(after[0][1:], before[0][1:]) and torch.allclose(after[1], before[1])

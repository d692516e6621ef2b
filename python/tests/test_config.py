"""amc.SparseConfig: the C++ settings table's names, defaults and validation, from Python."""

import copy

import pytest

import amc

# The defaults of amc::SparseConfig, written out here so that a change on either side fails.
DEFAULTS = {"block_size": 16, "top_k": 8, "sinks": 1, "window": 64, "scope": "head",
            "rule": "mean", "summary_precision": "f32", "combine": "sum", "scale": None, "target_eps": None, "max_k": None,
            "top_p": None, "shortlist": None, "shortlist_rule": None, "sub_blocks": None}


def test_defaults_and_names():
    assert amc.SparseConfig().to_dict() == DEFAULTS
    assert [s["name"] for s in amc.settings()] == list(DEFAULTS)
    assert {s["name"]: s["default"] for s in amc.settings()} == DEFAULTS
    assert [r["name"] for r in amc.rules()] == ["mean", "bound", "oracle", "twostage", "submean"]


def test_every_rules_own_settings_are_settings():
    # A rule's own settings (RuleInfo::settings in its C++ header) reach Python with no code of
    # their own: rows of amc.settings(), attributes, keywords, to_dict, text and ==.
    own = [(r["name"], name) for r in amc.rules() for name in r["settings"]]
    assert own == [("twostage", "shortlist"), ("twostage", "shortlist_rule"),
                   ("submean", "sub_blocks")]
    rows = {s["name"]: s for s in amc.settings()}
    for rule, name in own:
        assert rows[name]["optional"] and rows[name]["default"] is None, name
        assert hasattr(amc.SparseConfig, name), name
        value = "bound" if rows[name]["kind"] == "name" else 2
        config = amc.SparseConfig(rule=rule, **{name: value})
        assert getattr(config, name) == value and config.to_dict()[name] == value
        assert amc.SparseConfig.parse(config.to_text()) == config
        assert config != amc.SparseConfig(rule=rule)
        setattr(config, name, None)
        assert config == amc.SparseConfig(rule=rule)


@pytest.mark.parametrize("rule", ["mean", "bound", "oracle", "twostage", "submean"])
def test_rules_by_name(rule):
    config = amc.SparseConfig(rule=rule, top_k=3, scope="group", combine="max")
    assert (config.rule, config.top_k, config.scope, config.combine) == (rule, 3, "group", "max")


def test_former_names_still_read():
    # score and shortlist_score, the settings' former names, are read as rule and shortlist_rule
    # (keywords, attributes, text), so that earlier scripts keep working; only the new names are
    # written.
    config = amc.SparseConfig(score="twostage", shortlist_score="bound")
    assert config == amc.SparseConfig(rule="twostage", shortlist_rule="bound")
    assert config.score == "twostage" and config.shortlist_score == "bound"
    assert "score" not in config.to_dict() and config.to_dict()["rule"] == "twostage"
    assert amc.SparseConfig.parse("score=bound") == amc.SparseConfig(rule="bound")
    with pytest.raises(amc.Error, match="rule is given twice"):
        amc.SparseConfig.parse("rule=mean score=bound")


def test_attributes_text_and_copies():
    config = amc.SparseConfig(block_size=32, target_eps=0.01, max_k=5, scale=0.125)
    assert config.adaptive and config.max_k == 5 and config.target_eps == 0.01
    assert config.scale == 0.125
    assert config.required_summaries() == {"channel_bounds": True, "value_norms": True,
                                           "sub_blocks": 0, "bf16_copies": False}
    assert amc.SparseConfig(summary_precision="bf16").required_summaries()["bf16_copies"]
    assert amc.SparseConfig.parse(config.to_text()) == config
    assert str(config) == config.to_text()
    assert amc.SparseConfig(**config.to_dict()) == config
    other = copy.copy(config)
    other.top_k = 2
    assert other.top_k == 2 and config.top_k == 8
    other.max_k = None
    assert other.max_k is None
    assert config.replace(top_k=1).top_k == 1
    assert amc.SparseConfig(sinks=4, window=32, top_k=2).nominal_support() == 4 + 32 + 2 * 16
    assert amc.SparseConfig(rule="submean", sub_blocks=2).required_summaries()["sub_blocks"] == 2


@pytest.mark.parametrize("settings, message", [
    ({"top_k": -1}, "amc::SparseConfig: top_k must be an integer >= 0, got '-1'"),
    ({"block_size": 0}, "amc::SparseConfig: block_size must be an integer > 0, got '0'"),
    ({"top_k": 2.5}, "top_k must be an integer >= 0, got '2.5'"),
    ({"top_k": True}, "top_k must be an integer >= 0, got 'True'"),
    ({"scope": "layer"}, "scope must be 'head' or 'group', got 'layer'"),
    ({"rule": "best"}, "rule must be one of mean|bound|oracle|twostage|submean, got 'best'"),
    ({"combine": "mean"}, "combine must be 'sum' or 'max', got 'mean'"),
    ({"target_eps": 1.5}, "target_eps must be a number in [0, 1], got '1.5'"),
    ({"max_k": 3}, "amc::SparseConfig::validate: max_k needs target_eps"),
    ({"top_p": 0.9, "target_eps": 0.1}, "top_p and target_eps are two adaptive budgets"),
    ({"scale": float("inf")}, "scale must be a positive finite number, got 'inf'"),
    ({"shortlist_rule": "oracle"}, "shortlist_rule must be a rule that reads only summaries"),
    ({"rule": "submean", "sub_blocks": 3}, "which must divide block_size 16"),
    ({"windw": 3}, "amc::SparseConfig: no setting 'windw' (settings: block_size, top_k"),
    ({"window": None}, "amc::SparseConfig: window cannot be unset (None)"),
])
def test_refusals_name_field_and_value(settings, message):
    with pytest.raises(amc.Error) as error:
        amc.SparseConfig(**settings)
    assert message in str(error.value)


def test_setter_validates_and_error_class():
    config = amc.SparseConfig()
    with pytest.raises(amc.Error, match="sinks must be an integer >= 0, got '-2'"):
        config.sinks = -2
    assert config.sinks == 1
    assert issubclass(amc.Error, RuntimeError)
    with pytest.raises(amc.Error, match="expected name=value, got 'top_k'"):
        amc.SparseConfig.parse("top_k")

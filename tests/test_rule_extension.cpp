// A rule with a setting of its own is one header plus one registry line (docs/architecture.md,
// "Where a change goes"): this executable links a copy of src/rule_registry.cpp with one line
// added for the test rule of tests/rules/tilted_rule.hpp (tests/CMakeLists.txt makes the copy),
// and nothing else knows the rule. Its setting must then be a setting like any other: a row of
// sparse_settings(), a text key, a JSON key, a command-line option (also for tools that take
// only the rules' settings), compared by ==, range-checked, cross-checked by its rule, and
// given to the rule the registry makes. (Python's attributes come from the same rows:
// python/tests/test_config.py checks every registered rule's settings there.)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "amc/amc.hpp"
#include "amc/cli/sparse_options.hpp"
#include "amc/io/sparse_config_json.hpp"
#include "rules/tilted_rule.hpp"
#include "test_helpers.hpp"

using namespace amc;

namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const amc::error& e) {
    return e.what();
  }
  return "(no error)";
}

SparseConfig parse_flags(std::vector<std::string> args, bool only_rule_settings) {
  CLI::App app;
  std::unique_ptr<cli::SparseOptions> options =
      only_rule_settings ? std::make_unique<cli::SparseOptions>(
                               app, SparseConfig{},
                               cli::SparseOptions::Only{.names = {"rule"}, .rule_settings = true})
                         : std::make_unique<cli::SparseOptions>(app, SparseConfig{});
  std::vector<const char*> argv{"tool"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return options->config();
}

}  // namespace

TEST_CASE("a rule registered by one line brings its setting to every front door", "[config]") {
  // Registered after the built-in rules, with its setting after theirs.
  REQUIRE(registered_rules().back().name == "tilted");
  REQUIRE(RuleName::named("tilted").info().settings.size() == 1);
  const SparseSetting& row = sparse_setting("tilt");
  CHECK(row.rule == "tilted");
  CHECK(row.kind == SettingKind::integer);
  CHECK(row.optional);
  CHECK(sparse_settings().back().name == "tilt");

  // Text: unset by default (not printed), set by name, printed and read back.
  SparseConfig defaults;
  CHECK(defaults.get("tilt").empty());
  CHECK(to_text(defaults).find("tilt") == std::string::npos);
  CHECK(defaults.rule_settings.get<std::int64_t>("tilt") == 0);  // the rule's default
  const SparseConfig text = parse_sparse_config("rule=tilted tilt=3");
  CHECK(text.rule_settings.get<std::int64_t>("tilt") == 3);
  CHECK(to_text(text) ==
        "block_size=16 top_k=8 sinks=1 window=64 scope=head rule=tilted summary_precision=f32 "
        "combine=sum tilt=3");
  CHECK(parse_sparse_config(to_text(text)) == text);
  CHECK(text != parse_sparse_config("rule=tilted tilt=2"));  // == sees rule settings
  CHECK(text != parse_sparse_config("rule=tilted"));         // and set from unset
  CHECK(message_of([] { parse_sparse_config("tilt=-1"); }) ==
        "amc::SparseConfig: tilt must be an integer >= 0, got '-1'");
  CHECK(message_of([] { parse_sparse_config("tilt=x"); }) ==
        "amc::SparseConfig: tilt must be an integer >= 0, got 'x'");
  SparseConfig cleared = text;
  cleared.set("tilt", "");
  CHECK(cleared == parse_sparse_config("rule=tilted"));

  // Typed: range checked by validate(), as a field is; a value of another kind refused at once.
  SparseConfig typed;
  typed.rule_settings.set("tilt", -2);
  CHECK(message_of([&] { typed.validate(); }) ==
        "amc::SparseConfig::validate: tilt must be an integer >= 0, got -2");
  CHECK(message_of([&] {
          typed.rule_settings.set("tilt", RuleName::oracle);
        }).find("amc::RuleSettings::set: tilt is an integer") != std::string::npos);
  CHECK(message_of([&] { typed.rule_settings.set("tlit", 1); }).find("no rule setting 'tlit'") !=
        std::string::npos);
  // The rule's cross-check runs when the configuration names the rule, and only then.
  CHECK(message_of([] { parse_sparse_config("rule=tilted top_k=2 tilt=3"); }) ==
        "amc::SparseConfig::validate: rule tilted takes a tilt of at most top_k 2, got 3");
  CHECK_NOTHROW(parse_sparse_config("rule=mean top_k=2 tilt=3"));

  // JSON: a key like any other, null when unset; read back equal.
  const auto json = to_json(text);
  CHECK(json.at("tilt") == 3);
  CHECK(to_json(defaults).at("tilt").is_null());
  CHECK(sparse_config_from_json(json) == text);
  CHECK(sparse_config_from_json(nlohmann::json::parse(to_json<nlohmann::json>(text).dump())) ==
        text);
  CHECK(message_of([] {
          sparse_config_from_json(nlohmann::json{{"tilt", "3"}});
        }) == "amc::sparse_config_from_json: tilt must be a number, got \"3\"");

  // Command line: --tilt on every tool's options, and on those of a tool that takes only the
  // rules' own settings (amc-eval passkey and retrieval).
  CHECK(parse_flags({"--rule", "tilted", "--tilt", "3"}, false) == text);
  CHECK(parse_flags({"--rule", "tilted", "--tilt", "3"}, true) == text);
  CHECK(message_of([] { parse_flags({"--tilt=-1"}, false); }) ==
        "amc::SparseConfig: tilt must be an integer >= 0, got '-1'");
}

TEST_CASE("the registry gives a rule its setting", "[config]") {
  // Mean scores here are all zero-ish next to a tilt of 8 per block: the newest blocks win.
  constexpr std::int64_t n = 512, d = 8;
  const auto keys = test::random_floats(n * d, 0.1f);
  const auto values = test::random_floats(n * d);
  const KvView<float> kv(keys.data(), values.data(), n, d);
  const auto summaries = BlockSummaries::build(kv, 16);
  const auto q = test::random_floats(d, 0.1f);
  const Eigen::Map<const RowMatrix> query(q.data(), 1, d);
  auto selected = [&](const SparseConfig& config) {
    BlockSparseDecode<> op(config);
    op.select(query, KvHead<KvView<float>>{kv, &summaries});
    std::vector<std::int64_t> out(op.selected_blocks(0).begin(), op.selected_blocks(0).end());
    std::sort(out.begin(), out.end());
    return out;
  };
  SparseConfig config = parse_sparse_config("rule=tilted top_k=3 sinks=0 window=0 tilt=3");
  CHECK(selected(config) == std::vector<std::int64_t>{29, 30, 31});
  // Tilt 0 is mean pooling.
  config.set("tilt", "0");
  SparseConfig mean = config;
  mean.rule = RuleName::mean_pooled;
  CHECK(selected(config) == selected(mean));
}

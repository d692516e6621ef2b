// The selection settings' front door: the settings table, text and JSON round trips, the
// CLI11 options, the rule registry, and adaptive selection as part of BlockSparseDecode.
#include <CLI/CLI.hpp>

#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "amc/amc.hpp"
#include "amc/attention/adaptive_selection.hpp"
#include "amc/cli/sparse_options.hpp"
#include "amc/io/sparse_config_json.hpp"
#include "test_helpers.hpp"

using namespace amc;

namespace {

/// A random valid configuration, every field drawn.
SparseConfig random_config(std::mt19937_64& rng) {
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  SparseConfig c;
  c.block_size = pick(1, 256);
  c.top_k = pick(0, 64);
  c.sinks = pick(0, 8);
  c.window = pick(0, 512);
  c.scope = pick(0, 1) ? SelectionScope::per_group : SelectionScope::per_head;
  const auto rules = registered_rules();
  c.rule = RuleName::named(rules[static_cast<std::size_t>(pick(0, rules.size() - 1))].name);
  c.summary_precision = pick(0, 1) ? SummaryPrecision::bf16 : SummaryPrecision::f32;
  c.combine = pick(0, 1) ? GroupCombine::max : GroupCombine::sum;
  if (pick(0, 1)) c.scale = std::uniform_real_distribution<float>(1e-3f, 4.0f)(rng);
  if (pick(0, 1)) {
    c.target_eps = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    if (pick(0, 1)) c.max_k = pick(0, 100);
  } else if (pick(0, 1)) {
    c.top_p = std::uniform_real_distribution<double>(1e-6, 1.0)(rng);
  }
  if (pick(0, 1)) c.rule_settings.set("shortlist", pick(1, 64));
  if (pick(0, 1)) {
    c.rule_settings.set("shortlist_rule",
                        pick(0, 1) ? RuleName::channel_bound : RuleName::mean_pooled);
  }
  if (c.rule == RuleName::sub_block_means || pick(0, 1)) {
    // A divisor of block_size (what the sub-block-means rule requires).
    std::vector<std::int64_t> divisors;
    for (std::int64_t d = 1; d <= c.block_size; ++d)
      if (c.block_size % d == 0) divisors.push_back(d);
    c.rule_settings.set("sub_blocks",
                        divisors[static_cast<std::size_t>(pick(0, divisors.size() - 1))]);
  }
  return c;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const amc::error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("every configuration survives text and JSON round trips", "[config]") {
  std::mt19937_64 rng(14);
  for (int trial = 0; trial < 2000; ++trial) {
    const SparseConfig c = random_config(rng);
    CAPTURE(to_text(c));
    REQUIRE(parse_sparse_config(to_text(c)) == c);
    REQUIRE(sparse_config_from_json(to_json(c)) == c);
    REQUIRE(sparse_config_from_json(nlohmann::json::parse(to_json<nlohmann::json>(c).dump())) == c);
  }
  // The defaults print as the documented line.
  REQUIRE(to_text(SparseConfig{}) ==
          "block_size=16 top_k=8 sinks=1 window=64 scope=head rule=mean summary_precision=f32 "
          "combine=sum");
  // Unnamed settings keep the base's values; commas separate as well as spaces.
  SparseConfig base;
  base.window = 7;
  const SparseConfig c = parse_sparse_config("top_k=3,rule=bound  scope=group", base);
  REQUIRE(c.top_k == 3);
  REQUIRE(c.rule == RuleName::channel_bound);
  REQUIRE(c.scope == SelectionScope::per_group);
  REQUIRE(c.window == 7);
}

TEST_CASE("bad settings are refused naming the setting and the value", "[config]") {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"block_size=0", {"amc::SparseConfig", "block_size", "'0'"}},
      {"block_size=x", {"block_size", "'x'"}},
      {"block_size=1.5", {"block_size", "'1.5'"}},
      {"top_k=-1", {"top_k", "'-1'"}},
      {"sinks=-2", {"sinks", "'-2'"}},
      {"window=", {"window", "''"}},
      {"scope=layer", {"scope", "'head' or 'group'", "'layer'"}},
      {"rule=max", {"rule", "mean|bound|oracle", "'max'"}},
      {"combine=mean", {"combine", "'sum' or 'max'", "'mean'"}},
      {"summary_precision=f16", {"summary_precision", "'f32' or 'bf16'", "'f16'"}},
      {"scale=0", {"scale", "'0'"}},
      {"scale=inf", {"scale", "'inf'"}},
      {"target_eps=2", {"target_eps", "[0, 1]", "'2'"}},
      {"target_eps=nan", {"target_eps", "'nan'"}},
      {"max_k=-1", {"max_k", "'-1'"}},
      {"max_k=3", {"max_k needs target_eps"}},
      {"top_p=0", {"top_p", "(0, 1]", "'0'"}},
      {"top_p=1.5", {"top_p", "'1.5'"}},
      {"top_p=0.9 target_eps=0.1", {"top_p and target_eps", "set one"}},
      {"shortlist=0", {"shortlist", "an integer >= 1", "'0'"}},
      {"sub_blocks=0", {"sub_blocks", "an integer >= 1", "'0'"}},
      {"shortlist_rule=oracle", {"shortlist_rule", "reads only summaries", "'oracle'"}},
      {"shortlist_rule=twostage", {"shortlist_rule", "mean|bound|submean", "'twostage'"}},
      {"shortlist_rule=quest", {"shortlist_rule", "'quest'"}},
      {"rule=submean sub_blocks=3", {"rule submean keeps 3 sub-blocks", "block_size 16"}},
      {"rule=submean block_size=6", {"rule submean keeps 4 sub-blocks", "block_size 6"}},
      {"topk=3", {"no setting 'topk'", "top_k"}},
      {"top_k", {"expected name=value", "'top_k'"}},
  };
  for (const auto& [text, words] : cases) {
    const std::string message = message_of([&t = text] { parse_sparse_config(t); });
    CAPTURE(text, message);
    for (const std::string& word : words) CHECK(message.find(word) != std::string::npos);
  }
  // JSON: wrong types and unknown keys.
  using nlohmann::json;
  CHECK(message_of([] {
          sparse_config_from_json(json{{"top_k", "3"}});
        }).find("top_k must be a number") != std::string::npos);
  CHECK(message_of([] {
          sparse_config_from_json(json{{"top_k", 2.5}});
        }).find("top_k must be an integer") != std::string::npos);
  CHECK(message_of([] {
          sparse_config_from_json(json{{"scope", 1}});
        }).find("scope must be a string") != std::string::npos);
  CHECK(message_of([] {
          sparse_config_from_json(json{{"block_size", nullptr}});
        }).find("block_size cannot be null") != std::string::npos);
  CHECK(message_of([] { sparse_config_from_json(json::array()); }).find("expected a JSON object") !=
        std::string::npos);
  // null clears an optional setting.
  SparseConfig adaptive;
  adaptive.target_eps = 0.1;
  CHECK_FALSE(sparse_config_from_json(json{{"target_eps", nullptr}}, adaptive).target_eps);
}

TEST_CASE("validate() checks fields set in C++ against the same rows as the text", "[config]") {
  // Each field set directly to a value just outside its row's range: validate() names the
  // field, says what it must be (the text front door's words) and prints the value.
  using Set = std::function<void(SparseConfig&)>;
  const std::vector<std::tuple<std::string, Set, std::string>> cases = {
      {"block_size must be an integer > 0", [](SparseConfig& c) { c.block_size = 0; }, "got 0"},
      {"top_k must be an integer >= 0", [](SparseConfig& c) { c.top_k = -1; }, "got -1"},
      {"sinks must be an integer >= 0", [](SparseConfig& c) { c.sinks = -3; }, "got -3"},
      {"window must be an integer >= 0", [](SparseConfig& c) { c.window = -64; }, "got -64"},
      {"scope must be 'head' or 'group'",
       [](SparseConfig& c) { c.scope = static_cast<SelectionScope>(7); }, "got (invalid value 7)"},
      {"combine must be 'sum' or 'max'",
       [](SparseConfig& c) { c.combine = static_cast<GroupCombine>(9); }, "got (invalid value 9)"},
      {"summary_precision must be 'f32' or 'bf16'",
       [](SparseConfig& c) { c.summary_precision = static_cast<SummaryPrecision>(5); },
       "got (invalid value 5)"},
      {"scale must be a positive finite number", [](SparseConfig& c) { c.scale = -0.5f; },
       "got -0.5"},
      {"scale must be a positive finite number",
       [](SparseConfig& c) { c.scale = std::numeric_limits<float>::infinity(); }, "got inf"},
      {"target_eps must be a number in [0, 1]", [](SparseConfig& c) { c.target_eps = 1.5; },
       "got 1.5"},
      {"target_eps must be a number in [0, 1]",
       [](SparseConfig& c) { c.target_eps = std::numeric_limits<double>::quiet_NaN(); }, "got nan"},
      {"max_k must be an integer >= 0",
       [](SparseConfig& c) {
         c.target_eps = 0.1;
         c.max_k = -2;
       },
       "got -2"},
      {"top_p must be a number in (0, 1]", [](SparseConfig& c) { c.top_p = 0.0; }, "got 0"},
      {"shortlist must be an integer >= 1",
       [](SparseConfig& c) { c.rule_settings.set("shortlist", 0); }, "got 0"},
      {"shortlist_rule must be a rule that reads only summaries: mean|bound|submean",
       [](SparseConfig& c) { c.rule_settings.set("shortlist_rule", RuleName::oracle); },
       "got oracle"},
      {"sub_blocks must be an integer >= 1",
       [](SparseConfig& c) { c.rule_settings.set("sub_blocks", -1); }, "got -1"},
  };
  for (const auto& [what, set, got] : cases) {
    SparseConfig c;
    set(c);
    const std::string message = message_of([&] { c.validate(); });
    CAPTURE(what, message);
    CHECK(message.find("amc::SparseConfig::validate: " + what + ", " + got) != std::string::npos);
  }
  // Every row's range is checked: one case per setting that can hold a bad value (score always
  // names a registered rule).
  std::set<std::string> checked;
  for (const auto& [what, set, got] : cases) checked.insert(what.substr(0, what.find(' ')));
  for (const SparseSetting& s : sparse_settings()) {
    if (s.name != "rule") CHECK(checked.count(std::string(s.name)) == 1);
  }
  // A refused value leaves the field as it was.
  SparseConfig c;
  c.top_k = 5;
  c.rule_settings.set("shortlist", 3);
  CHECK_THROWS(sparse_setting("top_k").set(c, "-1"));
  CHECK_THROWS(sparse_setting("shortlist").set(c, "0"));
  CHECK_THROWS(sparse_setting("scope").set(c, "layer"));
  CHECK(c.top_k == 5);
  CHECK(c.rule_settings.get<std::int64_t>("shortlist") == 3);
  CHECK(c.scope == SelectionScope::per_head);
}

TEST_CASE("the command-line options come from the table, with its names and errors", "[config]") {
  auto parse = [](std::vector<std::string> args, std::initializer_list<std::string_view> omit) {
    CLI::App app;
    cli::SparseOptions options(app, SparseConfig{}, omit);
    std::vector<const char*> argv{"tool"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
    return options.config();
  };
  const SparseConfig c =
      parse({"--block-size", "32", "--top-k", "2", "--rule", "oracle", "--scope", "group",
             "--combine", "max", "--target-eps", "0.05", "--max-k", "9", "--scale", "0.5"},
            {});
  SparseConfig expected;
  expected.block_size = 32;
  expected.top_k = 2;
  expected.rule = RuleName::oracle;
  expected.scope = SelectionScope::per_group;
  expected.combine = GroupCombine::max;
  expected.target_eps = 0.05;
  expected.max_k = 9;
  expected.scale = 0.5f;
  REQUIRE(c == expected);
  REQUIRE(parse({}, {}) == SparseConfig{});  // nothing given: the defaults
  // The former flags still work, as the same options.
  SparseConfig twostage;
  twostage.rule = RuleName::two_stage;
  twostage.rule_settings.set("shortlist_rule", RuleName::channel_bound);
  REQUIRE(parse({"--score", "twostage", "--shortlist-score", "bound"}, {}) == twostage);
  REQUIRE(parse({"--rule", "twostage", "--shortlist-rule", "bound"}, {}) == twostage);
  // Errors are the settings' own.
  CHECK(message_of([&] {
          parse({"--scope", "layer"}, {});
        }).find("scope must be 'head' or 'group'") != std::string::npos);
  // An omitted setting is no option at all.
  REQUIRE_THROWS_AS(parse({"--top-k", "3"}, {"top_k"}), CLI::ParseError);
  // Every setting has its flag.
  CLI::App app;
  cli::SparseOptions options(app, SparseConfig{});
  for (const SparseSetting& s : sparse_settings())
    CHECK(app.get_option(cli::flag_of(s.name)) != nullptr);
  // Only some.
  CLI::App small;
  cli::SparseOptions two(small, SparseConfig{}, cli::SparseOptions::Only{{"sinks", "window"}});
  CHECK(small.get_options().size() == 3);  // --help, --sinks, --window
}

TEST_CASE("the rule registry: names, needs, and each rule as its rule scores", "[config]") {
  std::vector<std::string> names;
  for (const RuleInfo& r : registered_rules()) names.emplace_back(r.name);
  REQUIRE(names == std::vector<std::string>{"mean", "bound", "oracle", "twostage", "submean"});
  REQUIRE(RuleName::named("bound") == RuleName::channel_bound);
  CHECK(message_of([] {
          find_rule("quest");
        }).find("no score rule 'quest' (rules: mean, bound, oracle, twostage, submean)") !=
        std::string::npos);
  CHECK(required_summaries(SparseConfig{}).channel_bounds == false);
  SparseConfig bound;
  bound.rule = RuleName::channel_bound;
  CHECK(required_summaries(bound).channel_bounds);
  CHECK_FALSE(required_summaries(bound).value_norms);
  SparseConfig adaptive;
  adaptive.target_eps = 0.1;
  CHECK(required_summaries(adaptive).channel_bounds);
  CHECK(required_summaries(adaptive).value_norms);
  SparseConfig sub;
  sub.rule = RuleName::sub_block_means;
  CHECK(required_summaries(sub).sub_blocks == 4);
  sub.rule_settings.set("sub_blocks", 8);
  CHECK(required_summaries(sub).sub_blocks == 8);
  CHECK(required_summaries(SparseConfig{}).sub_blocks == 0);

  // RegisteredRule (the registry's rules behind type-erased keys) scores exactly as the
  // template rules do, on every storage type.
  constexpr std::int64_t n = 300, d = 16;
  const auto keys = test::random_floats(n * d);
  const auto bf = test::to_storage<bf16>(keys);
  const KvView<bf16> kv(bf.data(), bf.data(), n, d);
  const auto summaries = BlockSummaries::build(kv, 8, {.channel_bounds = true, .sub_blocks = 4});
  const auto q = test::random_floats(d);
  SparseConfig config;
  config.block_size = 8;
  const CandidateBlocks candidates = candidate_blocks(n, config);
  const BlockScoringInput input{q, summaries, candidates};
  const auto blocks = static_cast<std::size_t>(summaries.blocks());
  auto run = [&](const auto& rule) {
    std::vector<float> scores(blocks, -1.0f);
    rule.score_blocks(input, kv, std::span<float>(scores));
    return scores;
  };
  for (const RuleName rule : {RuleName::mean_pooled, RuleName::channel_bound, RuleName::oracle,
                              RuleName::sub_block_means}) {
    config.rule = rule;
    const std::vector<float> got = run(RegisteredRule(config));
    // The registry makes each name's rule class (used here directly, as a BlockRuleLike).
    const std::vector<float> expected = rule == RuleName::mean_pooled     ? run(MeanPooledRule{})
                                        : rule == RuleName::channel_bound ? run(ChannelBoundRule{})
                                        : rule == RuleName::oracle        ? run(OracleRule{})
                                                                   : run(SubBlockMeansRule{});
    CAPTURE(rule.name());
    REQUIRE(got == expected);
  }
}

TEST_CASE("adaptive selection runs inside BlockSparseDecode, per head and per group", "[config]") {
  constexpr std::int64_t n = 400, d = 8, heads = 3;
  const auto keys = test::random_floats(n * d, 2.0f);
  const auto values = test::random_floats(n * d);
  const KvView<float> kv(keys.data(), values.data(), n, d);
  SparseConfig config;
  config.block_size = 16;
  config.sinks = 1;
  config.window = 16;
  config.target_eps = 0.05;
  const auto summaries = BlockSummaries::build(kv, 16, required_summaries(config));
  const auto q = test::random_floats(heads * d);
  const Eigen::Map<const RowMatrix> queries(q.data(), heads, d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (const auto scope : {SelectionScope::per_head, SelectionScope::per_group}) {
    config.scope = scope;
    BlockSparseDecode<> sparse(config);
    RowMatrix out(heads, d);
    std::vector<HeadResult> results(heads);
    sparse.decode(queries, KvHead<KvView<float>>{kv, &summaries}, out, results);
    std::int64_t largest = 0;
    for (std::int64_t h = 0; h < heads; ++h) {
      // Each head's own search, as adaptive_select runs it on the operator's ranking.
      const std::span<const float> ranking =
          scope == SelectionScope::per_head
              ? sparse.block_scores().subspan(static_cast<std::size_t>(h * summaries.blocks()),
                                              static_cast<std::size_t>(summaries.blocks()))
              : std::span<const float>();
      if (scope == SelectionScope::per_head) {
        const AdaptiveSelection a =
            adaptive_select(std::span<const float>(q.data() + h * d, d), scale, kv, summaries,
                            config, ranking, 0.05, summaries.blocks());
        REQUIRE(sparse.needed_k(h) == a.needed_k);
        REQUIRE(sparse.support(h).ranges().size() == a.support.ranges().size());
        REQUIRE(std::vector<std::int64_t>(sparse.selected_blocks(h).begin(),
                                          sparse.selected_blocks(h).end()) == a.blocks);
      }
      REQUIRE(sparse.target_met(h));
      REQUIRE(sparse.omitted_mass_bound(h) <= 0.05);
      REQUIRE(results[static_cast<std::size_t>(h)].positions_read == sparse.support(h).size());
      largest = std::max(largest, sparse.needed_k(h));
    }
    if (scope == SelectionScope::per_group) {
      for (std::int64_t h = 0; h < heads; ++h) REQUIRE(sparse.needed_k(h) == largest);
    }
  }
  // Summaries without value norms are refused with the reason.
  const auto means = BlockSummaries::build(kv, 16);
  BlockSparseDecode<> sparse(config);
  RowMatrix out(heads, d);
  std::vector<HeadResult> results(heads);
  CHECK(message_of([&] {
          sparse.decode(queries, KvHead<KvView<float>>{kv, &means}, out, results);
        }).find("with target_eps reads summaries with channel_bounds=1 value_norms=1") !=
        std::string::npos);
  // needed_k() is only for adaptive selection.
  SparseConfig top_k;
  BlockSparseDecode<> plain(top_k);
  CHECK(message_of([&] { static_cast<void>(plain.needed_k(0)); }).find("no adaptive selection") !=
        std::string::npos);
}

TEST_CASE("settings are read under their former names, and only once", "[config]") {
  SparseConfig expected;
  expected.rule = RuleName::two_stage;
  expected.rule_settings.set("shortlist_rule", RuleName::channel_bound);
  // Text and JSON written before the renames (score, shortlist_score) read as they meant.
  REQUIRE(parse_sparse_config("score=twostage shortlist_score=bound") == expected);
  REQUIRE(sparse_config_from_json(nlohmann::json::parse(
              R"({"score": "twostage", "shortlist_score": "bound"})")) == expected);
  REQUIRE(sparse_setting("score").name == "rule");
  REQUIRE(sparse_setting("shortlist_score").name == "shortlist_rule");
  // The former name reaches the same value through the rule settings' own accessors.
  REQUIRE(expected.rule_settings.get<RuleName>("shortlist_score") == RuleName::channel_bound);
  // Only the current names are written.
  REQUIRE(to_text(expected).find("score") == std::string::npos);
  REQUIRE(to_json(expected).contains("rule"));
  REQUIRE_FALSE(to_json(expected).contains("score"));
  // A setting given under both names is refused, naming it.
  CHECK(message_of([] {
          parse_sparse_config("rule=mean score=bound");
        }).find("amc::parse_sparse_config: rule is given twice") != std::string::npos);
  CHECK(message_of([] {
          sparse_config_from_json(nlohmann::json::parse(R"({"rule": "mean", "score": "bound"})"));
        }).find("gives the setting rule a second time") != std::string::npos);
}

// A test-only rule with a setting of its own, written as a header of
// include/amc/attention/rules/ would be: the tilted mean ("tilted") scores a block
// c <q, mean key> + tilt * (its index), so a large tilt favours recent blocks. Its setting `tilt`
// (an integer >= 0, default 0) and its cross-check (tilt at most top_k, an arbitrary rule to
// exercise the hook) live here, and nowhere else: test_rule_extension registers it by one line
// added to a copy of src/rule_registry.cpp (tests/CMakeLists.txt), and checks that it is then
// a setting of the text form, JSON and the command-line options.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/rules/mean_pooled.hpp"
#include "amc/attention/selection_input.hpp"

namespace amc::test {

class TiltedRule final : public BlockRule {
 public:
  explicit TiltedRule(std::int64_t tilt) : tilt_(tilt) {}

  static std::span<const RuleSetting> settings() {
    static const RuleSetting rows[] = {
        integer_rule_setting<detail::kNonNegative>(
            "tilt", "rule tilted: added to a block's score per block index (unset: 0)",
            "an integer >= 0", 0),
    };
    return rows;
  }
  static std::int64_t tilt(const SparseConfig& config) {
    return config.rule_settings.get<std::int64_t>("tilt");
  }
  static void check(const SparseConfig& config) {
    AMC_CHECK(tilt(config) <= config.top_k, "amc::SparseConfig::validate", "rule ",
              config.rule.name(), " takes a tilt of at most top_k ", config.top_k, ", got ",
              tilt(config));
  }

  bool scores_each_block_alone() const override { return true; }
  void score(const BlockScoringInput& in, const KeyRows&, std::span<float> scores) const override {
    MeanPooledRule::score_heads(in.query.data(), 1, in.summaries, in.candidates, scores, 0);
    for (std::int64_t b = in.candidates.first; b < in.candidates.last; ++b)
      scores[static_cast<std::size_t>(b)] += static_cast<float>(tilt_ * b);
  }

 private:
  std::int64_t tilt_;
};

inline RuleInfo tilted_rule_info() {
  return {.name = "tilted",
          .description = "c <q, mean key> + tilt x block index (a test rule)",
          .summaries = nullptr,
          .reads_keys = false,
          .make = [](const SparseConfig& config) -> std::unique_ptr<BlockRule> {
            return std::make_unique<TiltedRule>(TiltedRule::tilt(config));
          },
          .settings = TiltedRule::settings(),
          .check = &TiltedRule::check};
}

}  // namespace amc::test

// The two-stage rule ("twostage"): a cheap rule that reads only summaries (mean pooling unless
// its setting shortlist_rule names another) shortlists the shortlist * k best blocks (its
// setting shortlist; k the most blocks one selection keeps), and a second stage scores
// the shortlisted blocks from their keys, by their true log-mass as the oracle computes it.
// Every other block scores -inf, so a selection keeps the k blocks of largest true mass within
// the shortlist.
//
// Why: mean pooling lifts a block by only Delta / block_size for a key that beats the block's
// others by Delta (docs/theory.md section 6), so the block holding the one key a decision needs
// tends to rank just outside the top k, not far outside it; reading the shortlist's keys sees
// that key at full strength. Cost per step: the first stage's, plus the scores of shortlist *
// k * block_size keys (keys only; attending k blocks reads keys and values): per query head
// with per-head scope, and once for the group with per-group scope, where the heads' first-stage
// scores are combined (SparseConfig::combine) into one shortlist whose keys are read once and
// scored for every head.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/rules/oracle.hpp"
#include "amc/attention/selection_input.hpp"
#include "amc/attention/top_k.hpp"

namespace amc {

class TwoStageRule final : public BlockRule {
 public:
  /// \param first_stage      the shortlisting rule
  /// \param shortlist_blocks blocks the first stage keeps (>= 0)
  /// \param scope            per group: one shortlist for the group's heads
  /// \param combine          how per-group scope combines the heads' first-stage scores
  TwoStageRule(std::unique_ptr<BlockRule> first_stage, std::int64_t shortlist_blocks,
               SelectionScope scope, GroupCombine combine)
      : first_stage_(std::move(first_stage)),
        shortlist_blocks_(shortlist_blocks),
        shared_shortlist_(scope == SelectionScope::per_group),
        combine_(combine) {}

  /// Its own settings (SparseConfig::rule_settings): the shortlist factor and the first stage.
  static constexpr std::int64_t kDefaultShortlist = 4;
  static std::span<const RuleSetting> settings() {
    static const RuleSetting rows[] = {
        integer_rule_setting<detail::kAtLeastOne>(
            "shortlist",
            "rule twostage: blocks shortlisted by shortlist_rule per block kept (unset: 4)",
            "an integer >= 1", kDefaultShortlist),
        rule_name_setting<false>(
            "shortlist_rule",
            "rule twostage: the first stage's rule, one that reads only summaries (unset: mean)",
            "a rule that reads only summaries: ", RuleName::mean_pooled, "shortlist_score"),
    };
    return rows;
  }
  /// The shortlist factor of `config` (its default when unset).
  static std::int64_t shortlist_factor(const SparseConfig& config) {
    return config.rule_settings.get<std::int64_t>("shortlist");
  }
  /// The first stage of `config` (mean pooling when unset).
  static RuleName shortlist_rule(const SparseConfig& config) {
    return config.rule_settings.get<RuleName>("shortlist_rule");
  }
  /// The first stage's summaries.
  static SummaryOptions summaries(const SparseConfig& config) {
    const RuleInfo& first = shortlist_rule(config).info();
    return first.summaries ? first.summaries(config) : SummaryOptions{};
  }
  /// The first stage's cross-checks (e.g. sub-block means' sub_blocks against block_size).
  static void check(const SparseConfig& config) {
    const RuleInfo& first = shortlist_rule(config).info();
    if (first.check != nullptr) first.check(config);
  }

  /// shortlist * k for `config`, saturating (adaptive selection without max_k may keep every
  /// block: then every candidate is rescored, as the oracle does).
  static std::int64_t shortlist_blocks(const SparseConfig& config) {
    const std::int64_t factor = shortlist_factor(config);
    const std::int64_t k = config.most_blocks();
    return k > std::numeric_limits<std::int64_t>::max() / factor
               ? std::numeric_limits<std::int64_t>::max()
               : k * factor;
  }

  void score(const BlockScoringInput& in, const KeyRows& keys,
             std::span<float> scores) const override {
    first_stage_->score(in, keys, scores);
    rescore_shortlist(in, keys, scores);
  }

  /// The first stage for all heads (one pass over the summaries where the rule can), then
  /// each head's shortlist.
  void score_group(const GroupScoringInput& in, const KeyRows& keys,
                   std::span<float> scores) const override {
    first_stage_->score_group(in, keys, scores);
    if (shared_shortlist_) return rescore_group_shortlist(in, keys, scores);
    const auto blocks = static_cast<std::size_t>(in.summaries.blocks());
    const auto head_dim = static_cast<std::size_t>(in.summaries.head_dim());
    for (std::int64_t h = 0; h < in.heads; ++h) {
      const BlockScoringInput head{std::span(in.queries + h * in.summaries.head_dim(), head_dim),
                                   in.summaries, in.candidates};
      rescore_shortlist(head, keys, scores.subspan(static_cast<std::size_t>(h) * blocks, blocks));
    }
  }

 private:
  /// One shortlist for the group from the combined first-stage scores; its keys are read once
  /// and scored for every head. scores: [heads, blocks].
  void rescore_group_shortlist(const GroupScoringInput& in, const KeyRows& keys,
                               std::span<float> scores) const {
    thread_local std::vector<std::int64_t> shortlist;
    thread_local std::vector<float> combined, key_scores;
    thread_local CombineScratch scratch;
    const CandidateBlocks& c = in.candidates;
    const std::int64_t blocks = in.summaries.blocks();
    const std::int64_t block_size = in.summaries.block_size();
    combined.resize(static_cast<std::size_t>(blocks));
    combine_group_scores(scores, in.heads, blocks, c, combine_, combined, scratch);
    select_top_k(combined, c, shortlist_blocks_, shortlist);
    for (std::int64_t h = 0; h < in.heads; ++h) {
      std::fill(scores.begin() + h * blocks + c.first, scores.begin() + h * blocks + c.last,
                -std::numeric_limits<float>::infinity());
    }
    key_scores.resize(static_cast<std::size_t>(in.heads * block_size));
    // The shortlisted blocks lie scattered over the cache: each block's keys are asked for
    // while the block before it is scored (KeyRows::log_mass's `next`).
    for (std::size_t i = 0; i < shortlist.size(); ++i) {
      const auto [begin, end] = OracleRule::scored_rows(c, block_size, shortlist[i]);
      keys.log_mass(in.queries, in.heads, begin, end, key_scores.data(),
                    scores.data() + shortlist[i], blocks, next_rows(c, block_size, shortlist, i));
    }
  }

  /// The rows of the block after shortlist[i] ({} after the last).
  static PositionRange next_rows(const CandidateBlocks& c, std::int64_t block_size,
                                 std::span<const std::int64_t> shortlist, std::size_t i) {
    if (i + 1 >= shortlist.size()) return {};
    const auto [begin, end] = OracleRule::scored_rows(c, block_size, shortlist[i + 1]);
    return {begin, end};
  }

  void rescore_shortlist(const BlockScoringInput& in, const KeyRows& keys,
                         std::span<float> scores) const {
    // Scratch per thread: one rule serves every thread, and this runs once per head and step.
    thread_local std::vector<std::int64_t> shortlist;
    thread_local std::vector<float> key_scores;
    const CandidateBlocks& c = in.candidates;
    select_top_k(scores, c, shortlist_blocks_, shortlist);
    key_scores.resize(static_cast<std::size_t>(in.summaries.block_size()));
    std::fill(scores.begin() + c.first, scores.begin() + c.last,
              -std::numeric_limits<float>::infinity());
    const std::int64_t block_size = in.summaries.block_size();
    for (std::size_t i = 0; i < shortlist.size(); ++i) {
      scores[static_cast<std::size_t>(shortlist[i])] = OracleRule::block_log_mass(
          in, keys, shortlist[i], key_scores, next_rows(c, block_size, shortlist, i));
    }
  }

  std::unique_ptr<BlockRule> first_stage_;
  std::int64_t shortlist_blocks_;
  bool shared_shortlist_;
  GroupCombine combine_;
};

inline RuleInfo two_stage_rule_info() {
  return {.name = "twostage",
          .description =
              "shortlist_rule (mean unless set) shortlists shortlist x k blocks; the k "
              "of largest true mass among them, scored from their keys",
          .summaries = &TwoStageRule::summaries,
          .reads_keys = true,
          .make = [](const SparseConfig& config) -> std::unique_ptr<BlockRule> {
            return std::make_unique<TwoStageRule>(
                TwoStageRule::shortlist_rule(config).info().make(config),
                TwoStageRule::shortlist_blocks(config), config.scope, config.combine);
          },
          .settings = TwoStageRule::settings(),
          .check = &TwoStageRule::check};
}

}  // namespace amc

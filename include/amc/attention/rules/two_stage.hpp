// The two-stage rule ("twostage"): mean pooling shortlists the shortlist * k best blocks
// (SparseConfig::shortlist; k the most blocks one selection keeps), and a second stage scores
// the shortlisted blocks from their keys, by their true log-mass as the oracle computes it.
// Every other block scores -inf, so a selection keeps the k blocks of largest true mass within
// the shortlist.
//
// Why: mean pooling lifts a block by only Delta / block_size for a key that beats the block's
// others by Delta (THEORY.md section 4), so the block holding the one key a decision needs
// tends to rank just outside the top k, not far outside it; reading the shortlist's keys sees
// that key at full strength. Cost per head and step: the mean scores, plus the scores of
// shortlist * k * block_size keys (keys only; attending k blocks reads keys and values).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/rules/mean_pooled.hpp"
#include "amc/attention/rules/oracle.hpp"
#include "amc/attention/selection_input.hpp"
#include "amc/attention/top_k.hpp"

namespace amc {

class TwoStageRule final : public BlockRule {
 public:
  /// \param shortlist_blocks blocks the first stage keeps (>= 0)
  explicit TwoStageRule(std::int64_t shortlist_blocks) : shortlist_blocks_(shortlist_blocks) {}

  /// shortlist * k for `config`, saturating (adaptive selection without max_k may keep every
  /// block: then every candidate is rescored, as the oracle does).
  static std::int64_t shortlist_blocks(const SparseConfig& config) {
    const std::int64_t factor = config.shortlist_or_default();
    const std::int64_t k = config.most_blocks();
    return k > std::numeric_limits<std::int64_t>::max() / factor
               ? std::numeric_limits<std::int64_t>::max()
               : k * factor;
  }

  void score(const BlockScoringInput& in, const KeyRows& keys,
             std::span<float> scores) const override {
    MeanPooledSelector::score(in, scores);
    rescore_shortlist(in, keys, scores);
  }

  /// The first stage for all heads in one pass over the mean keys, then each head's shortlist.
  void score_group(const GroupScoringInput& in, const KeyRows& keys,
                   std::span<float> scores) const override {
    MeanPooledSelector::score_group(in, scores);
    const auto blocks = static_cast<std::size_t>(in.summaries.blocks());
    const auto head_dim = static_cast<std::size_t>(in.summaries.head_dim());
    for (std::int64_t h = 0; h < in.heads; ++h) {
      const BlockScoringInput head{std::span(in.queries + h * in.summaries.head_dim(), head_dim),
                                   in.summaries, in.candidates};
      rescore_shortlist(head, keys, scores.subspan(static_cast<std::size_t>(h) * blocks, blocks));
    }
  }

 private:
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
    for (const std::int64_t b : shortlist) {
      scores[static_cast<std::size_t>(b)] = OracleSelector::block_log_mass(in, keys, b, key_scores);
    }
  }

  std::int64_t shortlist_blocks_;
};

inline RuleInfo two_stage_rule_info() {
  return {"twostage",
          "mean pooling shortlists shortlist x k blocks; the k of largest true mass among them, "
          "scored from their keys",
          nullptr, true, [](const SparseConfig& config) -> std::unique_ptr<BlockRule> {
            return std::make_unique<TwoStageRule>(TwoStageRule::shortlist_blocks(config));
          }};
}

}  // namespace amc

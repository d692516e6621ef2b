// The oracle ("oracle"), for evaluation: the log of the true softmax mass (up to the shared
// normaliser) that the block would add to the support, log sum_{j in b, j not always kept}
// exp(s_j). Top-k by it maximises the retained mass exactly. Reads every candidate key: for
// measurement, not speed.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/selection_input.hpp"

namespace amc {

/// A BlockRule; also a BlockRuleLike (BlockSparseDecode<OracleRule>, or called from a user's
/// own rule: BlockRule's score_blocks).
class OracleRule final : public BlockRule {
 public:
  bool scores_each_block_alone() const override { return true; }
  void score(const BlockScoringInput& in, const KeyRows& keys,
             std::span<float> scores) const override {
    const auto& c = in.candidates;
    std::vector<float> block_scores(static_cast<std::size_t>(in.summaries.block_size()));
    for (std::int64_t b = c.first; b < c.last; ++b) {
      scores[static_cast<std::size_t>(b)] = block_log_mass(in, keys, b, block_scores);
    }
  }

  /// Every head of the group block by block, so that each block's keys are read once for all
  /// heads (the same scores as head by head).
  void score_group(const GroupScoringInput& in, const KeyRows& keys,
                   std::span<float> scores) const override {
    const auto& c = in.candidates;
    const std::int64_t blocks = in.summaries.blocks();
    const std::int64_t block_size = in.summaries.block_size();
    std::vector<float> scratch(static_cast<std::size_t>(in.heads * block_size));
    for (std::int64_t b = c.first; b < c.last; ++b) {
      const auto [begin, end] = scored_rows(c, block_size, b);
      keys.log_mass(in.queries, in.heads, begin, end, scratch.data(), scores.data() + b, blocks);
    }
  }

  /// log sum_j exp(c <q, k_j>) over the positions j of block b that are not always kept: the
  /// log of the mass the block adds to the support. `scratch` holds block_size floats; `next`,
  /// the rows the caller scores next, are asked for meanwhile (KeyRows::log_mass).
  static float block_log_mass(const BlockScoringInput& in, const KeyRows& keys, std::int64_t b,
                              std::span<float> scratch, PositionRange next = {}) {
    const auto [begin, end] = scored_rows(in.candidates, in.summaries.block_size(), b);
    float log_mass = 0.0f;
    keys.log_mass(in.query.data(), 1, begin, end, scratch.data(), &log_mass, 1, next);
    return log_mass;
  }

  /// The positions [first, second) of block b that a selection may add: the block less the
  /// sinks and the window, which every support keeps.
  static std::pair<std::int64_t, std::int64_t> scored_rows(const CandidateBlocks& c,
                                                           std::int64_t block_size,
                                                           std::int64_t b) {
    return {std::max(b * block_size, c.kept_prefix),
            std::min((b + 1) * block_size, c.kept_suffix_begin)};
  }
};

inline RuleInfo oracle_rule_info() {
  return {"oracle",
          "the log of the block's true softmax mass (reads every key; the best any rule can do "
          "for retained mass)",
          nullptr, true, [](const SparseConfig&) -> std::unique_ptr<BlockRule> {
            return std::make_unique<OracleRule>();
          }};
}

}  // namespace amc

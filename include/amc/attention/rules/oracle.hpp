// The oracle ("oracle"), for evaluation: the log of the true softmax mass (up to the shared
// normaliser) that the block would add to the support, log sum_{j in b, j not always kept}
// exp(s_j). Top-k by it maximises the retained mass exactly. Reads every candidate key: for
// measurement, not speed.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/selection_input.hpp"

namespace amc {

/// A BlockRule; also a BlockRuleLike (BlockSparseDecode<OracleRule>, or called from a user's
/// selector: BlockRule's score_blocks).
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

  /// log sum_j exp(c <q, k_j>) over the positions j of block b that are not always kept: the
  /// log of the mass the block adds to the support. `scratch` holds block_size floats.
  static float block_log_mass(const BlockScoringInput& in, const KeyRows& keys, std::int64_t b,
                              std::span<float> scratch) {
    const auto& c = in.candidates;
    const std::int64_t block_size = in.summaries.block_size();
    const std::int64_t begin = std::max(b * block_size, c.kept_prefix);
    const std::int64_t end = std::min((b + 1) * block_size, c.kept_suffix_begin);
    keys.score(in.query.data(), 1, begin, end, scratch.data(), 0);
    const std::int64_t count = end - begin;
    const auto& table = kernels::active();
    const float max = table.max(scratch.data(), count);
    return max + std::log(table.exp_sum(scratch.data(), count, max));
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

// The channel-bound rule ("bound"), a Quest-style comparison: ub_b = c sum_i max(q_i kmin_{b,i},
// q_i kmax_{b,i}) >= max_{j in b} s_j. Needs summaries with channel bounds.
#pragma once

#include <memory>
#include <span>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/selection_input.hpp"

namespace amc {

/// As a BlockSelector (a template argument of BlockSparseDecode).
struct ChannelBoundSelector {
  /// Each block's score reads that block alone (BlockSparseDecode::scores_in_parts).
  static constexpr bool scores_each_block_alone() { return true; }

  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& in, const View& /*kv*/,
                    std::span<float> scores) const {
    score(in, scores);
  }

  static void score(const BlockScoringInput& in, std::span<float> scores) {
    const auto& c = in.candidates;
    if (c.count() == 0) return;
    const auto lo = in.summaries.channel_min();
    const auto hi = in.summaries.channel_max();
    kernels::active().channel_bound(in.query.data(), in.summaries.head_dim(),
                                    lo.data() + c.first * lo.outerStride(),
                                    hi.data() + c.first * hi.outerStride(), lo.outerStride(),
                                    c.count(), scores.data() + c.first);
  }
};

/// As a registered rule.
class ChannelBoundRule final : public BlockRule {
 public:
  bool scores_each_block_alone() const override { return true; }
  void score(const BlockScoringInput& in, const KeyRows&, std::span<float> scores) const override {
    ChannelBoundSelector::score(in, scores);
  }
};

inline RuleInfo channel_bound_rule_info() {
  return {"bound",
          "the channel bound c sum_i max(q_i kmin_i, q_i kmax_i) >= the block's largest score "
          "(Quest-style comparison)",
          [](const SparseConfig&) { return SummaryOptions{.channel_bounds = true}; }, false,
          [](const SparseConfig&) -> std::unique_ptr<BlockRule> {
            return std::make_unique<ChannelBoundRule>();
          }};
}

}  // namespace amc

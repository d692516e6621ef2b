// The mean-pooled rule ("mean"), the method under study: shat_b = c <q, kbar_b>, the mean of
// the block's scores (by linearity). A lower bound on log M_b - log|b| (Jensen), so it dilutes
// single high-scoring positions (docs/theory.md section 6).
#pragma once

#include <memory>
#include <span>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/selection_input.hpp"

namespace amc {

/// As a BlockSelector (a template argument of BlockSparseDecode).
struct MeanPooledSelector {
  /// Each block's score reads that block alone (BlockSparseDecode::scores_in_parts).
  static constexpr bool scores_each_block_alone() { return true; }

  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& in, const View& /*kv*/,
                    std::span<float> scores) const {
    score(in, scores);
  }

  /// All heads in one pass over the mean keys: scores is [heads, blocks].
  template <KvViewLike View>
  void score_blocks_group(const GroupScoringInput& in, const View& /*kv*/,
                          std::span<float> scores) const {
    score_group(in, scores);
  }

  static void score(const BlockScoringInput& in, std::span<float> scores) {
    const auto& c = in.candidates;
    if (c.count() == 0) return;
    const auto means = in.summaries.mean_keys();
    kernels::active().score_rows[kernels::index_of(StorageType::f32)](
        in.query.data(), 1, in.summaries.head_dim(), means.data() + c.first * means.outerStride(),
        means.outerStride(), c.count(), scores.data() + c.first, 0);
  }

  static void score_group(const GroupScoringInput& in, std::span<float> scores) {
    const auto& c = in.candidates;
    if (c.count() == 0) return;
    const auto means = in.summaries.mean_keys();
    kernels::active().score_rows[kernels::index_of(StorageType::f32)](
        in.queries, in.heads, in.summaries.head_dim(), means.data() + c.first * means.outerStride(),
        means.outerStride(), c.count(), scores.data() + c.first, in.summaries.blocks());
  }
};

/// As a registered rule.
class MeanPooledRule final : public BlockRule {
 public:
  bool scores_each_block_alone() const override { return true; }
  void score(const BlockScoringInput& in, const KeyRows&, std::span<float> scores) const override {
    MeanPooledSelector::score(in, scores);
  }
  void score_group(const GroupScoringInput& in, const KeyRows&,
                   std::span<float> scores) const override {
    MeanPooledSelector::score_group(in, scores);
  }
};

inline RuleInfo mean_pooled_rule_info() {
  return {"mean", "c <q, mean key of the block> (the method under study)", nullptr, false,
          [](const SparseConfig&) -> std::unique_ptr<BlockRule> {
            return std::make_unique<MeanPooledRule>();
          }};
}

}  // namespace amc

// The channel-bound rule ("bound"), a Quest-style comparison: ub_b = c sum_i max(q_i kmin_{b,i},
// q_i kmax_{b,i}) >= max_{j in b} s_j. Needs summaries with channel bounds.
//
// Since max(q x) over x in [L, U] is min(q, 0) L + max(q, 0) U,
//   c sum_i max(q_i L_i, q_i U_i) = <min(c q, 0), L> + <max(c q, 0), U>,
// one dot product of [min(c q, 0), max(c q, 0)] with the row [L, U]: the kernels' score_rows,
// every head of a group in one pass over the rows. With SummaryPrecision::f32 (the default) the
// rows are the f32 channel bounds (BlockSummaries::channel_bound_rows); with bf16 they are the
// bounds rounded outward to bf16 (channel_bound_rows_bf16: L_i <= kmin_i, U_i >= kmax_i, so the
// score stays >= ub_b), 4 bytes per channel and block instead of 8.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/selection_input.hpp"

namespace amc {

/// A BlockRule; also a BlockRuleLike (BlockSparseDecode<ChannelBoundRule>, or called from a
/// user's own rule: BlockRule's score_blocks).
class ChannelBoundRule final : public BlockRule {
 public:
  explicit ChannelBoundRule(SummaryPrecision precision = SummaryPrecision::f32)
      : precision_(precision) {}

  bool scores_each_block_alone() const override { return true; }
  void score(const BlockScoringInput& in, const KeyRows&, std::span<float> scores) const override {
    score_heads(in.query.data(), 1, in.summaries, in.candidates, scores.data(), 0, precision_);
  }
  /// All heads in one pass over the bound rows: scores is [heads, blocks].
  void score_group(const GroupScoringInput& in, const KeyRows&,
                   std::span<float> scores) const override {
    score_heads(in.queries, in.heads, in.summaries, in.candidates, scores.data(),
                in.summaries.blocks(), precision_);
  }

  /// out[h * out_stride + b] for every candidate block b, the bounds at `precision` (bf16 needs
  /// summaries with bf16 copies); queries: [heads, head_dim], scaled. Needs no keys: callable
  /// on summaries alone.
  static void score_heads(const float* queries, std::int64_t heads, const BlockSummaries& summaries,
                          const CandidateBlocks& c, float* out, std::ptrdiff_t out_stride,
                          SummaryPrecision precision = SummaryPrecision::f32) {
    if (c.count() == 0) return;
    const std::int64_t d = summaries.head_dim();
    // [heads, 2 * head_dim]: each head's negative parts, then its positive parts. Per thread:
    // one rule serves every thread.
    thread_local std::vector<float> split;
    split.resize(static_cast<std::size_t>(heads * 2 * d));
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < d; ++i) {
        const float q = queries[h * d + i];
        split[static_cast<std::size_t>(h * 2 * d + i)] = std::min(q, 0.0f);
        split[static_cast<std::size_t>(h * 2 * d + d + i)] = std::max(q, 0.0f);
      }
    }
    const std::int64_t first_row = c.first * 2 * d;
    if (precision == SummaryPrecision::bf16) {
      kernels::active().score_rows[kernels::index_of(StorageType::bf16)](
          split.data(), heads, 2 * d, summaries.channel_bound_rows_bf16().data() + first_row, 2 * d,
          c.count(), out + c.first, out_stride);
    } else {
      kernels::active().score_rows[kernels::index_of(StorageType::f32)](
          split.data(), heads, 2 * d, summaries.channel_bound_rows().data() + first_row, 2 * d,
          c.count(), out + c.first, out_stride);
    }
  }

 private:
  SummaryPrecision precision_;
};

inline RuleInfo channel_bound_rule_info() {
  return {"bound",
          "the channel bound c sum_i max(q_i kmin_i, q_i kmax_i) >= the block's largest score "
          "(Quest-style comparison)",
          [](const SparseConfig&) { return SummaryOptions{.channel_bounds = true}; }, false,
          [](const SparseConfig& config) -> std::unique_ptr<BlockRule> {
            return std::make_unique<ChannelBoundRule>(config.summary_precision);
          }};
}

}  // namespace amc

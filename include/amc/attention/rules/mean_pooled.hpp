// The mean-pooled rule ("mean"), the method under study: shat_b = c <q, kbar_b>, the mean of
// the block's scores (by linearity). A lower bound on log M_b - log|b| (Jensen), so it dilutes
// single high-scoring positions (docs/theory.md section 6). With SummaryPrecision::f32 (the
// default) it scores the f32 mean keys: the study's rule. With bf16 it scores the mean keys
// rounded to bf16 (BlockSummaries::mean_keys_bf16), half the bytes to read; rounding a mean
// moves its score by at most 2^-8 sum_i |c q_i kbar_i|, enough to reorder near-ties.
#pragma once

#include <memory>
#include <span>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/selection_input.hpp"

namespace amc {

/// A BlockRule; also a BlockRuleLike (BlockSparseDecode<MeanPooledRule>, or called from a
/// user's own rule: BlockRule's score_blocks).
class MeanPooledRule final : public BlockRule {
 public:
  explicit MeanPooledRule(SummaryPrecision precision = SummaryPrecision::f32)
      : precision_(precision) {}

  bool scores_each_block_alone() const override { return true; }
  void score(const BlockScoringInput& in, const KeyRows&, std::span<float> scores) const override {
    score_heads(in.query.data(), 1, in.summaries, in.candidates, scores, 0, precision_);
  }
  /// All heads in one pass over the mean keys: scores is [heads, blocks].
  void score_group(const GroupScoringInput& in, const KeyRows&,
                   std::span<float> scores) const override {
    score_heads(in.queries, in.heads, in.summaries, in.candidates, scores, in.summaries.blocks(),
                precision_);
  }

  /// scores[h * out_stride + b] = <queries[h], mean key of b> for every candidate block b, the
  /// mean keys at `precision` (bf16 needs summaries with bf16 copies); queries [heads,
  /// head_dim], scaled. Needs no keys: callable on summaries alone.
  static void score_heads(const float* queries, std::int64_t heads, const BlockSummaries& summaries,
                          const CandidateBlocks& c, std::span<float> scores,
                          std::ptrdiff_t out_stride,
                          SummaryPrecision precision = SummaryPrecision::f32) {
    if (c.count() == 0) return;
    const std::int64_t head_dim = summaries.head_dim();
    const std::int64_t first_row = c.first * head_dim;
    if (precision == SummaryPrecision::bf16) {
      kernels::active().score_rows[kernels::index_of(StorageType::bf16)](
          queries, heads, head_dim, summaries.mean_keys_bf16().data() + first_row, head_dim,
          c.count(), scores.data() + c.first, out_stride);
    } else {
      kernels::active().score_rows[kernels::index_of(StorageType::f32)](
          queries, heads, head_dim, summaries.mean_keys().data() + first_row, head_dim, c.count(),
          scores.data() + c.first, out_stride);
    }
  }

 private:
  SummaryPrecision precision_;
};

inline RuleInfo mean_pooled_rule_info() {
  return {"mean", "c <q, mean key of the block> (the method under study)", nullptr, false,
          [](const SparseConfig& config) -> std::unique_ptr<BlockRule> {
            return std::make_unique<MeanPooledRule>(config.summary_precision);
          }};
}

}  // namespace amc

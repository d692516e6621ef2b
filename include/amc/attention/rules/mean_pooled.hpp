// The mean-pooled rule ("mean"), the method under study: shat_b = c <q, kbar_b>, the mean of
// the block's scores (by linearity). A lower bound on log M_b - log|b| (Jensen), so it dilutes
// single high-scoring positions (docs/theory.md section 6). It scores kbar_b rounded to bf16
// (BlockSummaries::mean_keys_bf16): a ranking, read in half the bytes.
#pragma once

#include <memory>
#include <span>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/selection_input.hpp"

namespace amc {

/// A BlockRule; also a BlockRuleLike (BlockSparseDecode<MeanPooledRule>, or called from a
/// user's selector: BlockRule's score_blocks).
class MeanPooledRule final : public BlockRule {
 public:
  bool scores_each_block_alone() const override { return true; }
  void score(const BlockScoringInput& in, const KeyRows&, std::span<float> scores) const override {
    score_heads(in.query.data(), 1, in.summaries, in.candidates, scores, 0);
  }
  /// All heads in one pass over the mean keys: scores is [heads, blocks].
  void score_group(const GroupScoringInput& in, const KeyRows&,
                   std::span<float> scores) const override {
    score_heads(in.queries, in.heads, in.summaries, in.candidates, scores, in.summaries.blocks());
  }

  /// scores[h * out_stride + b] = <queries[h], mean key of b rounded to bf16> for every
  /// candidate block b; queries [heads, head_dim], scaled. Needs no keys: callable on summaries
  /// alone. The bf16 means (BlockSummaries::mean_keys_bf16) are half the bytes of the f32 ones
  /// for the scan to stream; rounding a mean moves its score by at most 2^-8 sum_i |q_i kbar_i|.
  static void score_heads(const float* queries, std::int64_t heads, const BlockSummaries& summaries,
                          const CandidateBlocks& c, std::span<float> scores,
                          std::ptrdiff_t out_stride) {
    if (c.count() == 0) return;
    const std::int64_t head_dim = summaries.head_dim();
    kernels::active().score_rows[kernels::index_of(StorageType::bf16)](
        queries, heads, head_dim, summaries.mean_keys_bf16().data() + c.first * head_dim, head_dim,
        c.count(), scores.data() + c.first, out_stride);
  }
};

inline RuleInfo mean_pooled_rule_info() {
  return {"mean", "c <q, mean key of the block> (the method under study)", nullptr, false,
          [](const SparseConfig&) -> std::unique_ptr<BlockRule> {
            return std::make_unique<MeanPooledRule>();
          }};
}

}  // namespace amc

// The sub-block-means rule ("submean"): a richer summary. Each block keeps the mean keys of S
// equal sub-blocks (SparseConfig::sub_blocks; BlockSummaries::sub_block_means), and a block
// scores max_j (c <q, kbar_{b,j}> + log n_j), n_j the positions of sub-block j: the mean rule's
// estimate of log-mass applied to the sub-block that has the most, within log S of their sum
// (a max, not a log-sum-exp, so that scoring stays one dot product and one compare per row).
//
// Why: a key that beats the others by Delta lifts its sub-block's mean score by Delta * S /
// block_size instead of Delta / block_size (docs/theory.md section 6). Cost: S times the mean
// rule's summary bytes (4 * head_dim * S / block_size bytes per position and head, f32) and
// S dot products per block; appending a position updates one more running mean.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/selection_input.hpp"

namespace amc {

/// As a BlockSelector (a template argument of BlockSparseDecode).
struct SubBlockMeansSelector {
  /// Each block's score reads that block alone (BlockSparseDecode::scores_in_parts).
  static constexpr bool scores_each_block_alone() { return true; }

  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& in, const View& /*kv*/,
                    std::span<float> scores) const {
    score(in, scores);
  }

  template <KvViewLike View>
  void score_blocks_group(const GroupScoringInput& in, const View& /*kv*/,
                          std::span<float> scores) const {
    score_group(in, scores);
  }

  static void score(const BlockScoringInput& in, std::span<float> scores) {
    score_heads(in.query.data(), 1, in.summaries, in.candidates, scores);
  }

  static void score_group(const GroupScoringInput& in, std::span<float> scores) {
    score_heads(in.queries, in.heads, in.summaries, in.candidates, scores);
  }

  /// scores [heads, blocks]; queries [heads, head_dim], scaled.
  static void score_heads(const float* queries, std::int64_t heads, const BlockSummaries& summaries,
                          const CandidateBlocks& c, std::span<float> scores) {
    if (c.count() == 0) return;
    const std::int64_t per_block = summaries.options().sub_blocks;
    const std::int64_t sub_size = summaries.sub_block_size();
    const std::int64_t rows = c.count() * per_block;
    const auto means = summaries.sub_block_means();
    thread_local std::vector<float> sub_scores;  // [heads, rows]
    sub_scores.resize(static_cast<std::size_t>(heads * rows));
    kernels::active().score_rows[kernels::index_of(StorageType::f32)](
        queries, heads, summaries.head_dim(),
        means.data() + c.first * per_block * means.outerStride(), means.outerStride(), rows,
        sub_scores.data(), rows);
    const float log_full = std::log(static_cast<float>(sub_size));
    const std::int64_t positions = summaries.positions();
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* sub = sub_scores.data() + h * rows;
      float* out = scores.data() + h * summaries.blocks();
      for (std::int64_t i = 0; i < c.count(); ++i) {
        const std::int64_t b = c.first + i;
        float best = -std::numeric_limits<float>::infinity();
        bool nan = false;
        for (std::int64_t j = 0; j < per_block; ++j) {
          const std::int64_t begin = b * summaries.block_size() + j * sub_size;
          const std::int64_t n = std::min(sub_size, positions - begin);
          if (n <= 0) break;  // the open block's sub-blocks not yet started
          const float s = sub[i * per_block + j];
          nan |= s != s;
          best = std::max(best, s + (n == sub_size ? log_full : std::log(static_cast<float>(n))));
        }
        out[b] = nan ? std::numeric_limits<float>::quiet_NaN() : best;  // NaN ranks last
      }
    }
  }
};

class SubBlockMeansRule final : public BlockRule {
 public:
  bool scores_each_block_alone() const override { return true; }
  void score(const BlockScoringInput& in, const KeyRows&, std::span<float> scores) const override {
    SubBlockMeansSelector::score(in, scores);
  }
  void score_group(const GroupScoringInput& in, const KeyRows&,
                   std::span<float> scores) const override {
    SubBlockMeansSelector::score_group(in, scores);
  }
};

inline RuleInfo sub_block_means_rule_info() {
  return {"submean",
          "max over sub_blocks sub-block means of c <q, sub-block mean> + log(its size): "
          "an outlier key diluted by the sub-block, not the block",
          [](const SparseConfig& config) {
            return SummaryOptions{.sub_blocks = config.sub_blocks_or_default()};
          },
          false,
          [](const SparseConfig&) -> std::unique_ptr<BlockRule> {
            return std::make_unique<SubBlockMeansRule>();
          }};
}

}  // namespace amc

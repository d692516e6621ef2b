// The sub-block-means rule ("submean"): a richer summary. Each block keeps the mean keys of S
// equal sub-blocks (its setting sub_blocks; BlockSummaries::sub_block_means), and a block
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

/// A BlockRule; also a BlockRuleLike (BlockSparseDecode<SubBlockMeansRule>, or called from a
/// user's own rule: BlockRule's score_blocks).
class SubBlockMeansRule final : public BlockRule {
 public:
  /// Its own setting: sub-block means per block (SparseConfig::rule_settings, "sub_blocks").
  static constexpr std::int64_t kDefaultSubBlocks = 4;
  static std::span<const RuleSetting> settings() {
    static const RuleSetting rows[] = {
        integer_rule_setting<detail::kAtLeastOne>(
            "sub_blocks", "rule submean: sub-block means per block, dividing block_size (unset: 4)",
            "an integer >= 1", kDefaultSubBlocks),
    };
    return rows;
  }
  /// The sub_blocks of `config` (its default when unset).
  static std::int64_t sub_blocks(const SparseConfig& config) {
    return config.rule_settings.get<std::int64_t>("sub_blocks");
  }
  /// Its summaries, when `config.rule` names it (or a two-stage rule's first stage does).
  static SummaryOptions summaries(const SparseConfig& config) {
    return SummaryOptions{.sub_blocks = sub_blocks(config)};
  }
  /// The sub-blocks must divide block_size (BlockSummaries builds equal ones).
  static void check(const SparseConfig& config) {
    const std::int64_t count = sub_blocks(config);
    AMC_CHECK(count <= 0 || config.block_size % count == 0, "amc::SparseConfig::validate", "rule ",
              config.rule.name(), " keeps ", count, " sub-blocks per block (sub_blocks), ",
              "which must divide block_size ", config.block_size);
  }

  explicit SubBlockMeansRule(SummaryPrecision precision = SummaryPrecision::f32)
      : precision_(precision) {}

  bool scores_each_block_alone() const override { return true; }
  void score(const BlockScoringInput& in, const KeyRows&, std::span<float> scores) const override {
    score_heads(in.query.data(), 1, in.summaries, in.candidates, scores, precision_);
  }
  void score_group(const GroupScoringInput& in, const KeyRows&,
                   std::span<float> scores) const override {
    score_heads(in.queries, in.heads, in.summaries, in.candidates, scores, precision_);
  }

  /// scores [heads, blocks], the sub-block means at `precision` (bf16 needs summaries with bf16
  /// copies); queries [heads, head_dim], scaled. Needs no keys: callable on summaries alone.
  static void score_heads(const float* queries, std::int64_t heads, const BlockSummaries& summaries,
                          const CandidateBlocks& c, std::span<float> scores,
                          SummaryPrecision precision = SummaryPrecision::f32) {
    if (c.count() == 0) return;
    const std::int64_t per_block = summaries.options().sub_blocks;
    const std::int64_t sub_size = summaries.sub_block_size();
    const std::int64_t rows = c.count() * per_block;
    const std::int64_t d = summaries.head_dim();
    const std::int64_t first_row = c.first * per_block * d;
    thread_local std::vector<float> sub_scores;  // [heads, rows]
    sub_scores.resize(static_cast<std::size_t>(heads * rows));
    if (precision == SummaryPrecision::bf16) {
      kernels::active().score_rows[kernels::index_of(StorageType::bf16)](
          queries, heads, d, summaries.sub_block_means_bf16().data() + first_row, d, rows,
          sub_scores.data(), rows);
    } else {
      kernels::active().score_rows[kernels::index_of(StorageType::f32)](
          queries, heads, d, summaries.sub_block_means().data() + first_row, d, rows,
          sub_scores.data(), rows);
    }
    const float log_full = std::log(static_cast<float>(sub_size));
    const std::int64_t positions = summaries.positions();
    // Blocks [c.first, complete_end) have every sub-block full: their score is the max of their
    // sub-block scores plus one log_full (max_j(s_j + c) == max_j(s_j) + c in floating point,
    // since rounding is monotone), a tight loop with no per-sub-block size or log. Only the
    // open block at the end can have short or unstarted sub-blocks.
    const std::int64_t complete_end =
        std::clamp(positions / summaries.block_size(), c.first, c.last);
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* sub = sub_scores.data() + h * rows;
      float* out = scores.data() + h * summaries.blocks();
      for (std::int64_t b = c.first; b < complete_end; ++b) {
        const float* s = sub + (b - c.first) * per_block;
        float best = s[0];
        bool nan = s[0] != s[0];
        for (std::int64_t j = 1; j < per_block; ++j) {
          nan |= s[j] != s[j];
          best = std::max(best, s[j]);
        }
        out[b] = nan ? std::numeric_limits<float>::quiet_NaN() : best + log_full;  // NaN last
      }
      for (std::int64_t b = complete_end; b < c.last; ++b) {
        const std::int64_t i = b - c.first;
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
        out[b] = nan ? std::numeric_limits<float>::quiet_NaN() : best;
      }
    }
  }

 private:
  SummaryPrecision precision_;
};

inline RuleInfo sub_block_means_rule_info() {
  return {.name = "submean",
          .description =
              "max over sub_blocks sub-block means of c <q, sub-block mean> + log(its "
              "size): an outlier key diluted by the sub-block, not the block",
          .summaries = &SubBlockMeansRule::summaries,
          .reads_keys = false,
          .make = [](const SparseConfig& config) -> std::unique_ptr<BlockRule> {
            return std::make_unique<SubBlockMeansRule>(config.summary_precision);
          },
          .settings = SubBlockMeansRule::settings(),
          .check = &SubBlockMeansRule::check};
}

}  // namespace amc

// Block selectors: rank the blocks of one KV head for one query head, and turn the ranking into
// a support (sinks U window U top-k blocks).
//
// A selector writes one score per block, higher meaning "read this block first". Scores are in
// logit units (they estimate or bound the log of the block's softmax mass up to a shared
// constant), which is what lets per-group scope softmax-normalise and combine them across heads.
// Users plug in their own rule by writing a type that models BlockSelector.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "amc/attention/block_summaries.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/attention/support.hpp"
#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/kv_view.hpp"

namespace amc {

/// Blocks that may be selected: those with at least one position outside the always-kept
/// sinks [0, kept_prefix) and window [kept_suffix_begin, positions). They form the contiguous
/// index range [first, last); empty when sinks and window cover everything.
struct CandidateBlocks {
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::int64_t kept_prefix = 0;        ///< min(sinks, positions)
  std::int64_t kept_suffix_begin = 0;  ///< max(positions - window, kept_prefix)

  std::int64_t count() const { return last - first; }
};

inline CandidateBlocks candidate_blocks(std::int64_t positions, const SparseConfig& config) {
  CandidateBlocks c;
  c.kept_prefix = std::min(config.sinks, positions);
  c.kept_suffix_begin = std::max(positions - config.window, c.kept_prefix);
  if (c.kept_prefix < c.kept_suffix_begin) {
    c.first = c.kept_prefix / config.block_size;
    c.last = (c.kept_suffix_begin + config.block_size - 1) / config.block_size;
  }
  return c;
}

/// What a selector sees for one query head.
struct BlockScoringInput {
  std::span<const float> query;  ///< [head_dim], already multiplied by the attention scale c
  const BlockSummaries& summaries;
  CandidateBlocks candidates;
};

/// What a selector that can score all heads of a group in one pass sees.
struct GroupScoringInput {
  const float* queries;  ///< [heads, head_dim], already multiplied by the attention scale c
  std::int64_t heads;
  const BlockSummaries& summaries;
  CandidateBlocks candidates;
};

/// A block scoring rule: fills scores[b] for every candidate block b (scores has one slot per
/// block of the summaries; slots outside the candidate range are ignored).
template <class S, class View>
concept BlockSelector = KvViewLike<View> &&
    requires(const S& selector, const BlockScoringInput& input, const View& kv,
             std::span<float> scores) {
  { selector.score_blocks(input, kv, scores) } -> std::same_as<void>;
};

/// The method: shat_b = c <q, kbar_b>, the mean of the block's scores (by linearity). A lower
/// bound on log M_b - log|b| (Jensen), so it dilutes single high-scoring positions.
struct MeanPooledSelector {
  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& in, const View& /*kv*/,
                    std::span<float> scores) const {
    const auto& c = in.candidates;
    if (c.count() == 0) return;
    const auto means = in.summaries.mean_keys();
    kernels::active().score_rows[kernels::index_of(StorageType::f32)](
        in.query.data(), 1, in.summaries.head_dim(), means.data() + c.first * means.outerStride(),
        means.outerStride(), c.count(), scores.data() + c.first, 0);
  }

  /// All heads in one pass over the mean keys: scores is [heads, blocks].
  template <KvViewLike View>
  void score_blocks_group(const GroupScoringInput& in, const View& /*kv*/,
                          std::span<float> scores) const {
    const auto& c = in.candidates;
    if (c.count() == 0) return;
    const auto means = in.summaries.mean_keys();
    kernels::active().score_rows[kernels::index_of(StorageType::f32)](
        in.queries, in.heads, in.summaries.head_dim(), means.data() + c.first * means.outerStride(),
        means.outerStride(), c.count(), scores.data() + c.first, in.summaries.blocks());
  }
};

/// Quest-style comparison: ub_b = c sum_i max(q_i kmin_{b,i}, q_i kmax_{b,i}) >= max_{j in b} s_j.
/// Needs summaries built with channel_bounds.
struct ChannelBoundSelector {
  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& in, const View& /*kv*/,
                    std::span<float> scores) const {
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

/// Evaluation oracle: the log of the true softmax mass (up to the shared normaliser) that the
/// block would add to the support, log sum_{j in b, j not always kept} exp(s_j). Top-k by this
/// maximises retained mass exactly. Reads every candidate key: for measurement, not speed.
class OracleSelector {
 public:
  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& in, const View& kv, std::span<float> scores) const {
    using T = typename View::value_type;
    const auto& c = in.candidates;
    const auto& table = kernels::active();
    const std::int64_t block_size = in.summaries.block_size();
    scratch_.resize(static_cast<std::size_t>(block_size));
    for (std::int64_t b = c.first; b < c.last; ++b) {
      const std::int64_t begin = std::max(b * block_size, c.kept_prefix);
      const std::int64_t end = std::min((b + 1) * block_size, c.kept_suffix_begin);
      kv.for_each_run(begin, end,
                      [&](const T* keys, const T*, std::int64_t first, std::int64_t rows) {
                        table.score_rows[kernels::index_of(storage_type_of<T>)](
                            in.query.data(), 1, kv.head_dim(), keys, kv.key_stride(), rows,
                            scratch_.data() + (first - begin), 0);
                      });
      const std::int64_t count = end - begin;
      const float max = table.max(scratch_.data(), count);
      scores[static_cast<std::size_t>(b)] =
          max + std::log(table.exp_sum(scratch_.data(), count, max));
    }
  }

 private:
  mutable std::vector<float> scratch_;  // one block of scores; makes the selector single-threaded
};

/// Runtime choice among the built-in rules, by SparseConfig::score (for tools and configs).
class RuleSelector {
 public:
  RuleSelector() = default;
  explicit RuleSelector(ScoreRule rule) : rule_(rule) {}
  ScoreRule rule() const { return rule_; }

  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& in, const View& kv, std::span<float> scores) const {
    switch (rule_) {
      case ScoreRule::mean_pooled:
        return MeanPooledSelector{}.score_blocks(in, kv, scores);
      case ScoreRule::channel_bound:
        return ChannelBoundSelector{}.score_blocks(in, kv, scores);
      case ScoreRule::oracle:
        return oracle_.score_blocks(in, kv, scores);
    }
  }

  /// Mean pooling scores the whole group in one pass; the other rules go head by head.
  template <KvViewLike View>
  void score_blocks_group(const GroupScoringInput& in, const View& kv,
                          std::span<float> scores) const {
    if (rule_ == ScoreRule::mean_pooled) {
      MeanPooledSelector{}.score_blocks_group(in, kv, scores);
      return;
    }
    const auto blocks = static_cast<std::size_t>(in.summaries.blocks());
    const auto head_dim = static_cast<std::size_t>(in.summaries.head_dim());
    for (std::int64_t h = 0; h < in.heads; ++h) {
      const BlockScoringInput head{std::span(in.queries + h * in.summaries.head_dim(), head_dim),
                                   in.summaries, in.candidates};
      score_blocks(head, kv, scores.subspan(static_cast<std::size_t>(h) * blocks, blocks));
    }
  }

 private:
  ScoreRule rule_ = ScoreRule::mean_pooled;
  OracleSelector oracle_;
};

/// Picks the `k` best candidate blocks by score, ties broken by the lower block index; NaN scores
/// rank last. Writes the chosen block indices to `selected` in increasing order.
///
/// One pass with a k-element heap whose top is the worst block kept so far: with k much smaller
/// than the number of blocks almost every candidate is rejected by a single comparison, which is
/// what makes selection cheap next to the attention it saves at long contexts.
inline void select_top_k(std::span<const float> scores, const CandidateBlocks& candidates,
                         std::int64_t k, std::vector<std::int64_t>& selected) {
  selected.clear();
  if (k >= candidates.count()) {
    for (std::int64_t b = candidates.first; b < candidates.last; ++b) selected.push_back(b);
    return;
  }
  if (k <= 0) return;
  auto key = [&](std::int64_t b) {
    const float s = scores[static_cast<std::size_t>(b)];
    return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
  };
  // "a ranks before b": higher score, or equal score and lower index. A strict total order.
  auto before = [&](std::int64_t a, std::int64_t b) {
    const float ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  };
  // With `before` as the heap's less-than, the heap top is the block that ranks last. Blocks
  // come in increasing index order, so a later block with the same score as the worst kept one
  // ranks after it: only a strictly higher score gets in.
  for (std::int64_t b = candidates.first; b < candidates.first + k; ++b) selected.push_back(b);
  std::make_heap(selected.begin(), selected.end(), before);
  float worst = key(selected.front());
  // The scan for the next block that beats the worst kept one is a vector compare
  // (first_above); NaN never beats it, matching key(NaN) = -inf.
  const auto first_above = kernels::active().first_above;
  for (std::int64_t b = candidates.first + k; b < candidates.last; ++b) {
    b += first_above(scores.data() + b, candidates.last - b, worst);
    if (b == candidates.last) break;
    // b replaces the top (the worst kept block), sifted down to restore the heap: one pass
    // where pop_heap plus push_heap take two.
    std::size_t hole = 0;
    for (;;) {
      std::size_t child = 2 * hole + 1;
      if (child >= selected.size()) break;
      if (child + 1 < selected.size() && before(selected[child], selected[child + 1])) ++child;
      if (!before(b, selected[child])) break;  // b ranks after its later-ranked child
      selected[hole] = selected[child];
      hole = child;
    }
    selected[hole] = b;
    worst = key(selected.front());
  }
  std::sort(selected.begin(), selected.end());
}

/// Support = sinks U window U the selected blocks, deduplicated and in position order.
inline void build_support(std::int64_t positions, const SparseConfig& config,
                          std::span<const std::int64_t> selected_blocks, Support& support) {
  support.clear();
  support.add(0, config.sinks, positions);
  support.add(positions - config.window, positions, positions);
  for (const std::int64_t b : selected_blocks) {
    support.add(b * config.block_size, (b + 1) * config.block_size, positions);
  }
  support.normalize();
}

/// Per-group combination: each row of `head_scores` ([heads, blocks]) becomes a softmax over the
/// candidate blocks; `combined[b]` is their sum or max over heads. NaN scores count as -inf.
/// Scores of non-candidate blocks are left untouched. `scratch` holds one row of candidates.
inline void combine_group_scores(std::span<const float> head_scores, std::int64_t heads,
                                 std::int64_t blocks, const CandidateBlocks& candidates,
                                 GroupCombine combine, std::span<float> combined,
                                 std::vector<float>& scratch) {
  const auto& table = kernels::active();
  const std::int64_t count = candidates.count();
  float* out = combined.data() + candidates.first;
  std::fill(out, out + count, 0.0f);
  scratch.resize(static_cast<std::size_t>(count));
  for (std::int64_t h = 0; h < heads; ++h) {
    const float* row = head_scores.data() + h * blocks + candidates.first;
    float* weights = scratch.data();
    for (std::int64_t b = 0; b < count; ++b) {  // branchless, so it vectorises
      weights[b] = row[b] == row[b] ? row[b] : -std::numeric_limits<float>::infinity();
    }
    const float max = table.max(scratch.data(), count);
    if (!std::isfinite(max)) continue;  // this head prefers nothing: it contributes nothing
    const float inverse_sum = 1.0f / table.exp_sum(scratch.data(), count, max);
    if (combine == GroupCombine::sum) {
      table.axpy[kernels::index_of(StorageType::f32)](inverse_sum, scratch.data(), out, count);
    } else {
      for (std::int64_t b = 0; b < count; ++b)
        out[b] = std::max(out[b], scratch[static_cast<std::size_t>(b)] * inverse_sum);
    }
  }
}

}  // namespace amc

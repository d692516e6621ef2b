// What a block rule sees and writes: the candidate blocks of a step, the (scaled) queries
// and summaries, one score per block; and KeyRows, a type-erased view of one KV head's keys for
// rules that read keys, so that a rule is compiled once rather than per storage and view type.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>

#include "amc/attention/block_summaries.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/attention/support.hpp"
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

/// What a rule sees for one query head.
struct BlockScoringInput {
  std::span<const float> query;  ///< [head_dim], already multiplied by the attention scale c
  const BlockSummaries& summaries;
  CandidateBlocks candidates;
};

/// What a rule that can score all heads of a group in one pass sees.
struct GroupScoringInput {
  const float* queries;  ///< [heads, head_dim], already multiplied by the attention scale c
  std::int64_t heads;
  const BlockSummaries& summaries;
  CandidateBlocks candidates;
};

/// A block scoring rule: fills scores[b] for every candidate block b (scores has one slot per
/// block of the summaries; slots outside the candidate range are ignored).
template <class S, class View>
concept BlockRuleLike = KvViewLike<View> && requires(const S& rule, const BlockScoringInput& input,
                                                     const View& kv, std::span<float> scores) {
  { rule.score_blocks(input, kv, scores) } -> std::same_as<void>;
};

/// BlockRuleLike's former name (kept for users' code; a concept cannot be marked
/// [[deprecated]]).
template <class S, class View>
concept BlockSelector = BlockRuleLike<S, View>;

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

/// The keys of one KV head behind any KvViewLike view, with the storage type erased: what a
/// rule that reads keys (the oracle, a second selection stage) needs. Holds a pointer to the
/// view, so it lives only as long as the call it is made for.
class KeyRows {
 public:
  template <KvViewLike View>
  explicit KeyRows(const View& kv)
      : view_(&kv),
        positions_(kv.positions()),
        head_dim_(kv.head_dim()),
        storage_(storage_type_of<typename View::value_type>),
        score_(&score_view<View>),
        log_mass_(&log_mass_view<View>) {}

  std::int64_t positions() const { return positions_; }
  std::int64_t head_dim() const { return head_dim_; }
  StorageType storage() const { return storage_; }

  /// out[h * out_stride + (p - begin)] = <queries[h], k_p> for h < heads and p in [begin, end),
  /// with the active kernel table (f32 arithmetic, as the operators score).
  /// \param queries [heads, head_dim]
  void score(const float* queries, std::int64_t heads, std::int64_t begin, std::int64_t end,
             float* out, std::ptrdiff_t out_stride) const {
    score_(view_, queries, heads, begin, end, out, out_stride);
  }

  /// out[h * out_stride] = log sum_{p in [begin, end)} exp(<queries[h], k_p>) for h < heads:
  /// the block log-mass the oracle ranks by (KernelTable::log_sum_exp_rows), for every head in
  /// one pass over the keys. -inf when begin == end.
  /// \param queries [heads, head_dim]
  /// \param scratch heads * (end - begin) floats
  /// \param next    the keys the caller scores next, asked for while these are scored
  ///                (kernels::RowsAhead; a hint that changes no result; {} for none)
  void log_mass(const float* queries, std::int64_t heads, std::int64_t begin, std::int64_t end,
                float* scratch, float* out, std::ptrdiff_t out_stride,
                PositionRange next = {}) const {
    log_mass_(view_, queries, heads, begin, end, scratch, out, out_stride, next);
  }

 private:
  template <KvViewLike View>
  static void score_view(const void* view, const float* queries, std::int64_t heads,
                         std::int64_t begin, std::int64_t end, float* out,
                         std::ptrdiff_t out_stride) {
    using T = typename View::value_type;
    const View& kv = *static_cast<const View*>(view);
    const auto& table = kernels::active();
    for_each_key_run(kv, begin, end, [&](const T* keys, std::int64_t first, std::int64_t rows) {
      table.score_rows[kernels::index_of(storage_type_of<T>)](queries, heads, kv.head_dim(), keys,
                                                              kv.key_stride(), rows,
                                                              out + (first - begin), out_stride);
    });
  }

  /// fn(keys, first, rows) over the runs of [begin, end): the view's for_each_key_run where it
  /// has one (a q8_0 view, which then widens no values), else its for_each_run.
  template <KvViewLike View, class Fn>
  static void for_each_key_run(const View& kv, std::int64_t begin, std::int64_t end, Fn&& fn) {
    using T = typename View::value_type;
    if constexpr (requires { kv.for_each_key_run(begin, end, fn); }) {
      kv.for_each_key_run(begin, end, fn);
    } else {
      kv.for_each_run(begin, end,
                      [&](const T* keys, const T*, std::int64_t first, std::int64_t rows) {
                        fn(keys, first, rows);
                      });
    }
  }

  /// The first run of `range`'s keys as kernels::RowsAhead: none for a view that stores its
  /// rows in another form (its for_each_key_run widens them: a q8_0 view), which would be work
  /// rather than a hint.
  template <KvViewLike View>
  static kernels::RowsAhead keys_ahead(const View& kv, PositionRange range) {
    using T = typename View::value_type;
    kernels::RowsAhead ahead;
    if constexpr (!requires { kv.for_each_key_run(range.begin, range.end, [](auto...) {}); }) {
      if (range.begin >= range.end) return ahead;
      kv.for_each_run(
          range.begin, range.end, [&](const T* keys, const T*, std::int64_t, std::int64_t rows) {
            if (ahead.rows > 0) return;  // the first run only
            ahead.first = keys;
            ahead.stride_bytes = kv.key_stride() * static_cast<std::ptrdiff_t>(sizeof(T));
            ahead.rows = rows;
            ahead.row_bytes = kv.head_dim() * static_cast<std::int64_t>(sizeof(T));
          });
    }
    return ahead;
  }

  template <KvViewLike View>
  static void log_mass_view(const void* view, const float* queries, std::int64_t heads,
                            std::int64_t begin, std::int64_t end, float* scratch, float* out,
                            std::ptrdiff_t out_stride, PositionRange next) {
    using T = typename View::value_type;
    const View& kv = *static_cast<const View*>(view);
    const auto& table = kernels::active();
    const std::int64_t count = end - begin;
    if (count == 0) {
      for (std::int64_t h = 0; h < heads; ++h)
        out[h * out_stride] = -std::numeric_limits<float>::infinity();
      return;
    }
    const std::size_t type = kernels::index_of(storage_type_of<T>);
    bool one_run = false;  // the whole range in one run (always, for a KvView): one kernel call
    for_each_key_run(kv, begin, end, [&](const T* keys, std::int64_t first, std::int64_t rows) {
      if (rows == count) {
        one_run = true;
        table.log_sum_exp_rows[type](queries, heads, kv.head_dim(), keys, kv.key_stride(), rows,
                                     scratch, out, out_stride, keys_ahead(kv, next));
      } else {  // several runs (pages, chunks of a q8_0 cache): the scores run by run
        table.score_rows[type](queries, heads, kv.head_dim(), keys, kv.key_stride(), rows,
                               scratch + (first - begin), count);
      }
    });
    if (one_run) return;
    // The kernel's reduction, so the result does not depend on where the runs break.
    table.log_sum_exp(scratch, heads, count, out, out_stride);
  }

  const void* view_;
  std::int64_t positions_, head_dim_;
  StorageType storage_;
  void (*score_)(const void*, const float*, std::int64_t, std::int64_t, std::int64_t, float*,
                 std::ptrdiff_t);
  void (*log_mass_)(const void*, const float*, std::int64_t, std::int64_t, std::int64_t, float*,
                    float*, std::ptrdiff_t, PositionRange);
};

/// A block scoring rule: the one face of every built-in rule (attention/rules/*.hpp), made by
/// the registry (rule_info.hpp) for RegisteredRule, the runtime choice by SparseConfig::score.
/// Implementations are stateless and const, so one rule may serve every thread.
///
/// A rule also models BlockRuleLike through score_blocks / score_blocks_group below (the
/// adapter): BlockSparseDecode<MeanPooledRule> runs a rule with no runtime choice, and a
/// user-written rule calls a built-in rule as `amc::MeanPooledRule{}.score_blocks(in, kv,
/// scores)`.
class BlockRule {
 public:
  virtual ~BlockRule() = default;

  /// As a BlockRuleLike: score() on the keys of `kv`.
  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& in, const View& kv, std::span<float> scores) const {
    score(in, KeyRows(kv), scores);
  }
  /// As a BlockRuleLike that scores a group at once: score_group() on the keys of `kv`.
  template <KvViewLike View>
  void score_blocks_group(const GroupScoringInput& in, const View& kv,
                          std::span<float> scores) const {
    score_group(in, KeyRows(kv), scores);
  }

  /// Fills scores[b] for every candidate block b of one query head.
  virtual void score(const BlockScoringInput& in, const KeyRows& keys,
                     std::span<float> scores) const = 0;

  /// Whether a block's score depends on that block's summaries and keys alone, so that the
  /// candidate range may be scored in parts, on several threads, with the same result
  /// (BlockSparseDecode::score_part). False unless a rule says so.
  virtual bool scores_each_block_alone() const { return false; }

  /// All heads of a group: scores is [heads, blocks]. By default head by head; a rule that can
  /// score the group in one pass over its summaries overrides it.
  virtual void score_group(const GroupScoringInput& in, const KeyRows& keys,
                           std::span<float> scores) const {
    const auto blocks = static_cast<std::size_t>(in.summaries.blocks());
    const auto head_dim = static_cast<std::size_t>(in.summaries.head_dim());
    for (std::int64_t h = 0; h < in.heads; ++h) {
      const BlockScoringInput head{std::span(in.queries + h * in.summaries.head_dim(), head_dim),
                                   in.summaries, in.candidates};
      score(head, keys, scores.subspan(static_cast<std::size_t>(h) * blocks, blocks));
    }
  }
};

}  // namespace amc

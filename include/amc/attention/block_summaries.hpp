// Per-block summaries of one KV head's keys (and value norms), kept as positions are appended.
//
// Positions are grouped into blocks of `block_size` consecutive positions; the last block may be
// partial. For each block b the summaries hold, as f32 rows of [blocks, head_dim]:
//   mean key kbar_b                      (always)
//   channel-wise min and max key          (optional; certified bounds)
// with the means also rounded to bf16 (to nearest), as [blocks, head_dim]: what the mean-pooled
// selector scores, half the bytes of the f32 means it would otherwise stream (the step 14-25%
// shorter, docs/selectors.md's cost table of 2026-12-06 13:28 UTC),
// with channel bounds also, as bf16 rows of [blocks, 2 * head_dim], the same intervals rounded
// outward (lower ends down, upper ends up): what the channel-bound rule reads, half the bytes of
// the f32 minima and maxima (docs/theory.md section 3),
// optionally the means of `sub_blocks` equal sub-blocks of each block, as [blocks * sub_blocks,
// head_dim] (the sub-block-means selector: an outlier key is diluted by block_size / sub_blocks
// positions instead of block_size),
// and, as [blocks], the largest value norm max_j ||v_j||   (optional; certified error bounds).
//
// Memory: blocks * head_dim * 6 bytes for the means (f32 and bf16), 12 more with channel bounds
// (f32 minima and maxima, and both in bf16), 4 bytes per block for value norms, plus
// head_dim * 8 bytes for the running sum of the open block; sub-block means add sub_blocks times
// the f32 means' bytes (4 * head_dim / (block_size / sub_blocks) bytes per position) and one more
// running sum. memory_bytes() reports it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "amc/aligned.hpp"
#include "amc/error.hpp"
#include "amc/kv_view.hpp"
#include "amc/storage.hpp"
#include "amc/tensor.hpp"

namespace amc {

/// Which optional statistics a BlockSummaries keeps besides the mean key.
struct SummaryOptions {
  bool channel_bounds = false;  ///< channel-wise min/max key per block
  bool value_norms = false;     ///< largest value norm per block
  /// Means of this many equal sub-blocks per block (0: none); must divide block_size.
  std::int64_t sub_blocks = 0;

  /// Whether summaries built with these options hold everything `wanted` asks for.
  bool covers(const SummaryOptions& wanted) const {
    return (channel_bounds || !wanted.channel_bounds) && (value_norms || !wanted.value_norms) &&
           (wanted.sub_blocks == 0 || sub_blocks == wanted.sub_blocks);
  }
};

class BlockSummaries {
 public:
  BlockSummaries() = default;

  /// \param block_size positions per block (> 0)
  /// \param head_dim   channels per key (> 0)
  BlockSummaries(std::int64_t block_size, std::int64_t head_dim, SummaryOptions options = {})
      : block_size_(block_size), head_dim_(head_dim), options_(options) {
    AMC_CHECK(block_size > 0, "amc::BlockSummaries", "block_size must be positive, got ",
              block_size);
    AMC_CHECK(head_dim > 0, "amc::BlockSummaries", "head_dim must be positive, got ", head_dim);
    AMC_CHECK(options.sub_blocks >= 0 &&
                  (options.sub_blocks == 0 || block_size % options.sub_blocks == 0),
              "amc::BlockSummaries", "sub_blocks must be 0 or divide block_size ", block_size,
              ", got ", options.sub_blocks);
    open_sum_.assign(static_cast<std::size_t>(head_dim), 0.0);
    if (options.sub_blocks > 0) open_sub_sum_.assign(static_cast<std::size_t>(head_dim), 0.0);
  }

  /// Builds summaries of every position of `kv` (discarding previous contents).
  template <KvViewLike View>
  static BlockSummaries build(const View& kv, std::int64_t block_size,
                              SummaryOptions options = {}) {
    BlockSummaries summaries(block_size, kv.head_dim(), options);
    summaries.rebuild(kv);
    return summaries;
  }

  /// Recomputes from a view: after rebuild, positions() == kv.positions().
  template <KvViewLike View>
  void rebuild(const View& kv) {
    AMC_CHECK(kv.head_dim() == head_dim_, "amc::BlockSummaries::rebuild", "view head_dim ",
              kv.head_dim(), " does not match the summaries' head_dim ", head_dim_);
    clear();
    reserve(kv.positions());
    const auto d = static_cast<std::size_t>(head_dim_);
    for (std::int64_t p = 0; p < kv.positions(); ++p) {
      append_row(std::span(kv.key(p), d), std::span(kv.value(p), d));
    }
  }

  /// Drops every position from `positions` on (a cache cropped to its first `positions`), so
  /// that the summaries equal those built over kv's first `positions`. Whole blocks are
  /// dropped; the positions of a block cut in two are read again from `kv` (at most
  /// block_size - 1 of them), so the cost does not grow with the cache.
  template <KvViewLike View>
  void truncate(const View& kv, std::int64_t positions) {
    constexpr const char* fn = "amc::BlockSummaries::truncate";
    AMC_CHECK(positions >= 0 && positions <= positions_, fn, "positions must be in [0, ",
              positions_, "] (the positions held), got ", positions);
    AMC_CHECK(kv.head_dim() == head_dim_, fn, "view head_dim ", kv.head_dim(),
              " does not match the summaries' head_dim ", head_dim_);
    AMC_CHECK(kv.positions() >= positions, fn, "the view holds ", kv.positions(),
              " positions, fewer than the ", positions, " to keep");
    const std::int64_t whole_blocks = positions / block_size_;
    const auto d = static_cast<std::size_t>(head_dim_);
    const auto rows = static_cast<std::size_t>(whole_blocks);
    means_.resize(rows * d);
    means_bf16_.resize(rows * d);
    if (options_.channel_bounds) {
      channel_min_.resize(rows * d);
      channel_max_.resize(rows * d);
      bound_rows_.resize(rows * 2 * d);
    }
    if (options_.value_norms) value_norm_max_.resize(rows);
    sub_means_.resize(rows * static_cast<std::size_t>(options_.sub_blocks) * d);
    positions_ = whole_blocks * block_size_;
    for (std::int64_t p = positions_; p < positions; ++p) {
      append_row(std::span(kv.key(p), d), std::span(kv.value(p), d));
    }
  }

  /// Appends one position: `key` and `value` of head_dim elements. `value` may be empty when
  /// value norms are not kept.
  template <KvStorage T>
  void append(std::span<const T> key, std::span<const T> value = {}) {
    AMC_CHECK(head_dim_ > 0, "amc::BlockSummaries::append",
              "summaries were default-constructed; construct with block_size and head_dim");
    AMC_CHECK(key.size() == static_cast<std::size_t>(head_dim_), "amc::BlockSummaries::append",
              "key has ", key.size(), " elements, head_dim is ", head_dim_);
    AMC_CHECK(!options_.value_norms || value.size() == static_cast<std::size_t>(head_dim_),
              "amc::BlockSummaries::append", "value has ", value.size(),
              " elements; value norms are kept, so it needs head_dim = ", head_dim_);
    append_row(key, value);
  }

  void clear() {
    positions_ = 0;
    means_.clear();
    means_bf16_.clear();
    channel_min_.clear();
    channel_max_.clear();
    bound_rows_.clear();
    value_norm_max_.clear();
    sub_means_.clear();
    std::fill(open_sum_.begin(), open_sum_.end(), 0.0);
    std::fill(open_sub_sum_.begin(), open_sub_sum_.end(), 0.0);
  }

  void reserve(std::int64_t positions) {
    const auto rows = static_cast<std::size_t>((positions + block_size_ - 1) / block_size_);
    means_.reserve(rows * static_cast<std::size_t>(head_dim_));
    means_bf16_.reserve(rows * static_cast<std::size_t>(head_dim_));
    if (options_.channel_bounds) {
      channel_min_.reserve(rows * static_cast<std::size_t>(head_dim_));
      channel_max_.reserve(rows * static_cast<std::size_t>(head_dim_));
      bound_rows_.reserve(rows * 2 * static_cast<std::size_t>(head_dim_));
    }
    if (options_.value_norms) value_norm_max_.reserve(rows);
    sub_means_.reserve(rows * static_cast<std::size_t>(options_.sub_blocks * head_dim_));
  }

  std::int64_t positions() const { return positions_; }
  std::int64_t blocks() const { return (positions_ + block_size_ - 1) / block_size_; }
  std::int64_t block_size() const { return block_size_; }
  std::int64_t head_dim() const { return head_dim_; }
  const SummaryOptions& options() const { return options_; }

  /// Positions of block b: [b * block_size, min((b + 1) * block_size, positions)).
  std::int64_t block_begin(std::int64_t block) const { return block * block_size_; }
  std::int64_t block_end(std::int64_t block) const {
    return std::min((block + 1) * block_size_, positions_);
  }

  /// [blocks, head_dim] mean key per block.
  auto mean_keys() const { return map_rows(means_.data(), blocks(), head_dim_, head_dim_); }
  /// [blocks, head_dim] row-major: mean_keys() rounded to the nearest bf16 (ties to even), the
  /// rows the mean-pooled rule scores.
  std::span<const bf16> mean_keys_bf16() const { return means_bf16_; }
  /// [blocks, head_dim]; requires options().channel_bounds.
  auto channel_min() const {
    require(options_.channel_bounds, "channel_min", "channel_bounds = true");
    return map_rows(channel_min_.data(), blocks(), head_dim_, head_dim_);
  }
  auto channel_max() const {
    require(options_.channel_bounds, "channel_max", "channel_bounds = true");
    return map_rows(channel_max_.data(), blocks(), head_dim_, head_dim_);
  }
  /// [blocks, 2 * head_dim] bf16: row b is block b's channel minima rounded down to bf16, then
  /// its maxima rounded up (the largest bf16 <= channel_min()(b, i), the smallest >=
  /// channel_max()(b, i)). Requires options().channel_bounds.
  std::span<const bf16> channel_bound_rows() const {
    require(options_.channel_bounds, "channel_bound_rows", "channel_bounds = true");
    return bound_rows_;
  }

  /// Positions per sub-block (block_size / sub_blocks); requires options().sub_blocks > 0.
  std::int64_t sub_block_size() const {
    require(options_.sub_blocks > 0, "sub_block_size", "sub_blocks > 0");
    return block_size_ / options_.sub_blocks;
  }
  /// [blocks * sub_blocks, head_dim]: row b * sub_blocks + j is the mean key of sub-block j of
  /// block b (rows past the last position's sub-block are zero); requires options().sub_blocks.
  auto sub_block_means() const {
    require(options_.sub_blocks > 0, "sub_block_means", "sub_blocks > 0");
    return map_rows(sub_means_.data(), blocks() * options_.sub_blocks, head_dim_, head_dim_);
  }
  /// [blocks] largest ||v_j|| per block; requires options().value_norms.
  std::span<const float> value_norm_max() const {
    require(options_.value_norms, "value_norm_max", "value_norms = true");
    return value_norm_max_;
  }

  /// Bytes of summary data currently held (sizes, not capacities), open-block sum included.
  std::size_t memory_bytes() const {
    return (means_.size() + channel_min_.size() + channel_max_.size() + value_norm_max_.size() +
            sub_means_.size()) *
               sizeof(float) +
           (means_bf16_.size() + bound_rows_.size()) * sizeof(bf16) +
           (open_sum_.size() + open_sub_sum_.size()) * sizeof(double);
  }

 private:
  void require(bool kept, const char* accessor, const char* option) const {
    AMC_CHECK(kept, "amc::BlockSummaries", accessor, "() needs SummaryOptions::", option,
              " when the summaries are built");
  }

  template <KvStorage T>
  void append_row(std::span<const T> key, std::span<const T> value) {
    const auto d = static_cast<std::size_t>(head_dim_);
    const std::int64_t offset = positions_ % block_size_;
    if (offset == 0) {  // open a new block
      means_.resize(means_.size() + d);
      means_bf16_.resize(means_bf16_.size() + d);
      if (options_.channel_bounds) {
        channel_min_.resize(channel_min_.size() + d, std::numeric_limits<float>::infinity());
        channel_max_.resize(channel_max_.size() + d, -std::numeric_limits<float>::infinity());
        bound_rows_.resize(bound_rows_.size() + 2 * d);
      }
      if (options_.value_norms) value_norm_max_.push_back(0.0f);
      sub_means_.resize(sub_means_.size() + static_cast<std::size_t>(options_.sub_blocks) * d);
      std::fill(open_sum_.begin(), open_sum_.end(), 0.0);
    }
    if (options_.sub_blocks > 0) append_sub_block_mean(key, offset);
    const std::size_t row = means_.size() - d;
    // The mean of the open block is recomputed from an f64 running sum, so it carries no drift
    // from incremental updates: it equals the mean of the block's keys rounded once to f32.
    const double inverse_count = 1.0 / static_cast<double>(offset + 1);
    for (std::size_t i = 0; i < d; ++i) {
      open_sum_[i] += to_float(key[i]);
      means_[row + i] = static_cast<float>(open_sum_[i] * inverse_count);
    }
    // A loop of its own, so that it vectorises.
    for (std::size_t i = 0; i < d; ++i) means_bf16_[row + i] = to_bf16(means_[row + i]);
    if (options_.channel_bounds) {
      for (std::size_t i = 0; i < d; ++i) {
        // NaN is sticky (std::min and std::max would drop it): a block holding a NaN key has
        // NaN bounds, so its channel-bound score is NaN (ranked last) and certified bounds over
        // it are NaN rather than a finite number that ignores the NaN position.
        const float k = to_float(key[i]);
        float& lo = channel_min_[row + i];
        float& hi = channel_max_[row + i];
        if (std::isnan(k)) {
          lo = k;
          hi = k;
        } else if (!std::isnan(lo)) {  // lo and hi are NaN together
          lo = std::min(lo, k);
          hi = std::max(hi, k);
        }
      }
      // The same intervals rounded outward to bf16: lower ends down, upper ends up.
      bf16* lower = bound_rows_.data() + 2 * row;
      bf16* upper = lower + d;
      for (std::size_t i = 0; i < d; ++i) {
        lower[i] = to_bf16_downward(channel_min_[row + i]);
        upper[i] = to_bf16_upward(channel_max_[row + i]);
      }
    }
    if (options_.value_norms) {
      double squared = 0.0;
      for (std::size_t i = 0; i < d; ++i) {
        const double v = to_float(value[i]);
        squared += v * v;
      }
      // Rounded up so that the stored maximum never understates the exact norm (certified
      // error bounds rely on it): each square is exact in double, their sum is within
      // d * 2^-53 relative, and sqrt and the conversion to f32 round once more each.
      const double exact_upper =
          std::sqrt(squared * (1.0 + 2.0 * (static_cast<double>(d) + 2.0) * 0x1p-53)) *
          (1.0 + 0x1p-51);
      const auto norm = static_cast<float>(exact_upper);
      const float upper = static_cast<double>(norm) < exact_upper
                              ? std::nextafter(norm, std::numeric_limits<float>::infinity())
                              : norm;
      // NaN is sticky here too: a NaN value makes the block's norm bound NaN, not ignored.
      float& block_max = value_norm_max_.back();
      if (std::isnan(upper)) {
        block_max = upper;
      } else if (!std::isnan(block_max)) {
        block_max = std::max(block_max, upper);
      }
    }
    ++positions_;
  }

  /// Folds `key` (at `offset` in the open block) into its sub-block's mean, which, like the
  /// block mean, is recomputed from an f64 running sum.
  template <KvStorage T>
  void append_sub_block_mean(std::span<const T> key, std::int64_t offset) {
    const auto d = static_cast<std::size_t>(head_dim_);
    const std::int64_t sub_size = block_size_ / options_.sub_blocks;
    const std::int64_t sub_offset = offset % sub_size;
    if (sub_offset == 0) std::fill(open_sub_sum_.begin(), open_sub_sum_.end(), 0.0);
    const std::size_t row =
        sub_means_.size() - static_cast<std::size_t>(options_.sub_blocks - offset / sub_size) * d;
    const double inverse_count = 1.0 / static_cast<double>(sub_offset + 1);
    for (std::size_t i = 0; i < d; ++i) {
      open_sub_sum_[i] += to_float(key[i]);
      sub_means_[row + i] = static_cast<float>(open_sub_sum_[i] * inverse_count);
    }
  }

  std::int64_t block_size_ = 0;
  std::int64_t head_dim_ = 0;
  SummaryOptions options_;
  std::int64_t positions_ = 0;
  // Cache-line aligned: the selectors read them row by row with vector loads.
  AlignedVector<float> means_;         // [blocks, head_dim]
  AlignedVector<bf16> means_bf16_;     // [blocks, head_dim]: means_ rounded to nearest
  AlignedVector<float> channel_min_;   // [blocks, head_dim] if channel_bounds
  AlignedVector<float> channel_max_;   // [blocks, head_dim] if channel_bounds
  AlignedVector<bf16> bound_rows_;     // [blocks, 2 * head_dim] if channel_bounds
  std::vector<float> value_norm_max_;  // [blocks] if value_norms
  AlignedVector<float> sub_means_;     // [blocks * sub_blocks, head_dim] if sub_blocks > 0
  std::vector<double> open_sum_;       // [head_dim] running key sum of the last block
  std::vector<double> open_sub_sum_;   // [head_dim] running key sum of the last sub-block
};

}  // namespace amc

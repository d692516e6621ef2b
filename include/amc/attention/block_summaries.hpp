// Per-block summaries of one KV head's keys (and value norms), kept as positions are appended.
//
// Positions are grouped into blocks of `block_size` consecutive positions; the last block may be
// partial. For each block b the summaries hold, as f32:
//   mean key kbar_b, [blocks, head_dim]                                  (always)
//   channel-wise min and max key, one row [min | max] per block,
//     [blocks, 2 * head_dim]                                              (optional; certified
//                                                                          bounds, the bound rule)
//   the means of `sub_blocks` equal sub-blocks, [blocks * sub_blocks, head_dim]   (optional; an
//     outlier key is diluted by block_size / sub_blocks positions instead of block_size)
//   the largest value norm max_j ||v_j||, [blocks]                        (optional; certified
//                                                                          error bounds)
// and, with SummaryOptions::bf16_copies, each of the first three also rounded to bf16, in the
// same shapes: the means to nearest, the channel bounds outward (minima down, maxima up, so that
// the bound rule's score stays an upper bound). A rule scores the f32 rows or, with
// SparseConfig::summary_precision bf16, the bf16 copies: half the bytes for its scan to stream,
// and a ranking that can differ from the f32 one where two blocks' scores nearly tie.
//
// Memory per block: 4 * head_dim bytes for the means, 8 * head_dim more with channel bounds,
// 4 * head_dim * sub_blocks with sub-block means, 4 with value norms; the bf16 copies add half
// of the first three. Plus head_dim * 8 bytes for the running sum of the open block (and of its
// open sub-block). memory_bytes() reports it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "amc/aligned.hpp"
#include "amc/error.hpp"
#include "amc/kv_view.hpp"
#include "amc/storage.hpp"
#include "amc/tensor.hpp"

namespace amc {

/// Which summaries the rules score: the exact f32 rows (the default), or their bf16 copies.
enum class SummaryPrecision : std::uint8_t {
  f32,   ///< the f32 summaries: mean pooling is the study's rule exactly
  bf16,  ///< the bf16 copies (SummaryOptions::bf16_copies): half the bytes to scan
};

constexpr std::string_view to_string(SummaryPrecision precision) {
  return precision == SummaryPrecision::f32 ? "f32" : "bf16";
}

/// Which optional statistics a BlockSummaries keeps besides the mean key.
struct SummaryOptions {
  bool channel_bounds = false;  ///< channel-wise min/max key per block
  bool value_norms = false;     ///< largest value norm per block
  /// Means of this many equal sub-blocks per block (0: none); must divide block_size.
  std::int64_t sub_blocks = 0;
  /// The means, channel bounds and sub-block means also rounded to bf16, what rules read with
  /// SummaryPrecision::bf16.
  bool bf16_copies = false;

  /// Whether summaries built with these options hold everything `wanted` asks for.
  bool covers(const SummaryOptions& wanted) const {
    return (channel_bounds || !wanted.channel_bounds) && (value_norms || !wanted.value_norms) &&
           (wanted.sub_blocks == 0 || sub_blocks == wanted.sub_blocks) &&
           (bf16_copies || !wanted.bf16_copies);
  }

  /// What both ask for: every statistic either keeps. Sub-block counts do not merge: the
  /// larger is kept, and a caller that needs both must check that they agree.
  SummaryOptions merged(const SummaryOptions& other) const {
    return {.channel_bounds = channel_bounds || other.channel_bounds,
            .value_norms = value_norms || other.value_norms,
            .sub_blocks = std::max(sub_blocks, other.sub_blocks),
            .bf16_copies = bf16_copies || other.bf16_copies};
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
    resize_blocks(static_cast<std::size_t>(whole_blocks));
    positions_ = whole_blocks * block_size_;
    const auto d = static_cast<std::size_t>(head_dim_);
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
    resize_blocks(0);
    std::fill(open_sum_.begin(), open_sum_.end(), 0.0);
    std::fill(open_sub_sum_.begin(), open_sub_sum_.end(), 0.0);
  }

  void reserve(std::int64_t positions) {
    for_each_kept_array(static_cast<std::size_t>((positions + block_size_ - 1) / block_size_),
                        [](auto& array, std::size_t size) { array.reserve(size); });
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

  /// [blocks, head_dim] mean key per block: the mean of the block's keys, rounded once to f32.
  auto mean_keys() const { return map_rows(means_.data(), blocks(), head_dim_, head_dim_); }
  /// [blocks, head_dim] row-major: mean_keys() rounded to the nearest bf16 (ties to even);
  /// requires options().bf16_copies.
  std::span<const bf16> mean_keys_bf16() const {
    require(options_.bf16_copies, "mean_keys_bf16", "bf16_copies = true");
    return means_bf16_;
  }
  /// [blocks, head_dim] channel minima (rows 2 * head_dim apart in channel_bound_rows());
  /// requires options().channel_bounds.
  auto channel_min() const {
    require(options_.channel_bounds, "channel_min", "channel_bounds = true");
    return map_rows(bound_rows_.data(), blocks(), head_dim_, 2 * head_dim_);
  }
  /// [blocks, head_dim] channel maxima; requires options().channel_bounds.
  auto channel_max() const {
    require(options_.channel_bounds, "channel_max", "channel_bounds = true");
    return map_rows(bound_rows_.data() + head_dim_, blocks(), head_dim_, 2 * head_dim_);
  }
  /// [blocks, 2 * head_dim] row-major: row b is block b's channel minima, then its maxima (the
  /// rows the bound rule scores in one pass). Requires options().channel_bounds.
  std::span<const float> channel_bound_rows() const {
    require(options_.channel_bounds, "channel_bound_rows", "channel_bounds = true");
    return bound_rows_;
  }
  /// [blocks, 2 * head_dim] bf16: channel_bound_rows() rounded outward, the minima down and the
  /// maxima up (the largest bf16 <= channel_min()(b, i), the smallest >= channel_max()(b, i)).
  /// Requires options().channel_bounds and options().bf16_copies.
  std::span<const bf16> channel_bound_rows_bf16() const {
    require(options_.channel_bounds && options_.bf16_copies, "channel_bound_rows_bf16",
            "channel_bounds = true and bf16_copies = true");
    return bound_rows_bf16_;
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
  /// [blocks * sub_blocks, head_dim] row-major: sub_block_means() rounded to the nearest bf16;
  /// requires options().sub_blocks > 0 and options().bf16_copies.
  std::span<const bf16> sub_block_means_bf16() const {
    require(options_.sub_blocks > 0 && options_.bf16_copies, "sub_block_means_bf16",
            "sub_blocks > 0 and bf16_copies = true");
    return sub_means_bf16_;
  }
  /// [blocks] largest ||v_j|| per block; requires options().value_norms.
  std::span<const float> value_norm_max() const {
    require(options_.value_norms, "value_norm_max", "value_norms = true");
    return value_norm_max_;
  }

  /// Bytes of summary data currently held (sizes, not capacities), open-block sums included.
  std::size_t memory_bytes() const {
    return (means_.size() + bound_rows_.size() + value_norm_max_.size() + sub_means_.size()) *
               sizeof(float) +
           (means_bf16_.size() + bound_rows_bf16_.size() + sub_means_bf16_.size()) * sizeof(bf16) +
           (open_sum_.size() + open_sub_sum_.size()) * sizeof(double);
  }

 private:
  void require(bool kept, const char* accessor, const char* option) const {
    AMC_CHECK(kept, "amc::BlockSummaries", accessor, "() needs SummaryOptions::", option,
              " when the summaries are built");
  }

  /// Every array sized for `rows` blocks (the kept ones; the others stay empty).
  void resize_blocks(std::size_t rows) {
    for_each_kept_array(rows, [](auto& array, std::size_t size) { array.resize(size); });
  }

  /// f(array, its size for `rows` blocks) for every array the options keep.
  template <class F>
  void for_each_kept_array(std::size_t rows, F f) {
    const auto d = static_cast<std::size_t>(head_dim_);
    const auto sub = static_cast<std::size_t>(options_.sub_blocks);
    const bool copies = options_.bf16_copies;
    f(means_, rows * d);
    if (copies) f(means_bf16_, rows * d);
    if (options_.channel_bounds) {
      f(bound_rows_, rows * 2 * d);
      if (copies) f(bound_rows_bf16_, rows * 2 * d);
    }
    if (options_.value_norms) f(value_norm_max_, rows);
    if (sub > 0) f(sub_means_, rows * sub * d);
    if (sub > 0 && copies) f(sub_means_bf16_, rows * sub * d);
  }

  template <KvStorage T>
  void append_row(std::span<const T> key, std::span<const T> value) {
    const auto d = static_cast<std::size_t>(head_dim_);
    const std::int64_t offset = positions_ % block_size_;
    const std::size_t block = static_cast<std::size_t>(positions_ / block_size_);
    if (offset == 0) {  // open a new block
      resize_blocks(block + 1);
      if (options_.channel_bounds) {
        float* bounds = bound_rows_.data() + block * 2 * d;
        std::fill(bounds, bounds + d, std::numeric_limits<float>::infinity());
        std::fill(bounds + d, bounds + 2 * d, -std::numeric_limits<float>::infinity());
      }
      if (options_.value_norms) value_norm_max_[block] = 0.0f;
      std::fill(open_sum_.begin(), open_sum_.end(), 0.0);
    }
    if (options_.sub_blocks > 0) append_sub_block_mean(key, offset);
    const std::size_t row = block * d;
    // The mean of the open block is recomputed from an f64 running sum, so it carries no drift
    // from incremental updates: it equals the mean of the block's keys rounded once to f32.
    const double inverse_count = 1.0 / static_cast<double>(offset + 1);
    for (std::size_t i = 0; i < d; ++i) {
      open_sum_[i] += to_float(key[i]);
      means_[row + i] = static_cast<float>(open_sum_[i] * inverse_count);
    }
    if (options_.bf16_copies) {
      // A loop of its own, so that it vectorises.
      for (std::size_t i = 0; i < d; ++i) means_bf16_[row + i] = to_bf16(means_[row + i]);
    }
    if (options_.channel_bounds) append_channel_bounds(key, block);
    if (options_.value_norms) append_value_norm(value, block);
    ++positions_;
  }

  template <KvStorage T>
  void append_channel_bounds(std::span<const T> key, std::size_t block) {
    const auto d = static_cast<std::size_t>(head_dim_);
    float* lower = bound_rows_.data() + block * 2 * d;
    float* upper = lower + d;
    for (std::size_t i = 0; i < d; ++i) {
      // NaN is sticky (std::min and std::max would drop it): a block holding a NaN key has NaN
      // bounds, so its channel-bound score is NaN (ranked last) and certified bounds over it
      // are NaN rather than a finite number that ignores the NaN position.
      const float k = to_float(key[i]);
      float& lo = lower[i];
      float& hi = upper[i];
      if (std::isnan(k)) {
        lo = k;
        hi = k;
      } else if (!std::isnan(lo)) {  // lo and hi are NaN together
        lo = std::min(lo, k);
        hi = std::max(hi, k);
      }
    }
    if (options_.bf16_copies) {
      // The same intervals rounded outward to bf16: lower ends down, upper ends up.
      bf16* lower_bf16 = bound_rows_bf16_.data() + block * 2 * d;
      bf16* upper_bf16 = lower_bf16 + d;
      for (std::size_t i = 0; i < d; ++i) {
        lower_bf16[i] = to_bf16_downward(lower[i]);
        upper_bf16[i] = to_bf16_upward(upper[i]);
      }
    }
  }

  template <KvStorage T>
  void append_value_norm(std::span<const T> value, std::size_t block) {
    const auto d = static_cast<std::size_t>(head_dim_);
    double squared = 0.0;
    for (std::size_t i = 0; i < d; ++i) {
      const double v = to_float(value[i]);
      squared += v * v;
    }
    // Rounded up so that the stored maximum never understates the exact norm (certified error
    // bounds rely on it): each square is exact in double, their sum is within d * 2^-53
    // relative, and sqrt and the conversion to f32 round once more each.
    const double exact_upper =
        std::sqrt(squared * (1.0 + 2.0 * (static_cast<double>(d) + 2.0) * 0x1p-53)) *
        (1.0 + 0x1p-51);
    const auto norm = static_cast<float>(exact_upper);
    const float upper = static_cast<double>(norm) < exact_upper
                            ? std::nextafter(norm, std::numeric_limits<float>::infinity())
                            : norm;
    // NaN is sticky here too: a NaN value makes the block's norm bound NaN, not ignored.
    float& block_max = value_norm_max_[block];
    if (std::isnan(upper)) {
      block_max = upper;
    } else if (!std::isnan(block_max)) {
      block_max = std::max(block_max, upper);
    }
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
    if (options_.bf16_copies) {
      for (std::size_t i = 0; i < d; ++i) sub_means_bf16_[row + i] = to_bf16(sub_means_[row + i]);
    }
  }

  std::int64_t block_size_ = 0;
  std::int64_t head_dim_ = 0;
  SummaryOptions options_;
  std::int64_t positions_ = 0;
  // Cache-line aligned: the rules read them row by row with vector loads.
  AlignedVector<float> means_;           // [blocks, head_dim]
  AlignedVector<bf16> means_bf16_;       // [blocks, head_dim] if bf16_copies
  AlignedVector<float> bound_rows_;      // [blocks, 2 * head_dim] if channel_bounds: min | max
  AlignedVector<bf16> bound_rows_bf16_;  // [blocks, 2 * head_dim] if both, rounded outward
  std::vector<float> value_norm_max_;    // [blocks] if value_norms
  AlignedVector<float> sub_means_;       // [blocks * sub_blocks, head_dim] if sub_blocks > 0
  AlignedVector<bf16> sub_means_bf16_;   // [blocks * sub_blocks, head_dim] if both
  std::vector<double> open_sum_;         // [head_dim] running key sum of the last block
  std::vector<double> open_sub_sum_;     // [head_dim] running key sum of the last sub-block
};

}  // namespace amc

// Keys and values in 8 bits, q8_0 style (llama.cpp's `--cache-type-k q8_0`): per row of head_dim
// channels (a multiple of 32), per block of 32 channels one f16 scale d and 32 int8 quants q,
// the stored value d * q. That is 34 bytes per 32 values, 53% of bf16's 64, so a long cache
// streams about half the bytes.
//
// The operators read such a head through Q8KvView, a KvViewLike view whose rows are the stored
// values widened to f32: d * q is an f16 times an integer of at most 8 bits, exact in f32, so
// dense and sparse decode, the block summaries and the certified bounds all work on exactly the
// values the cache holds. Attention proper reads the int8 rows in place (bind_q8_0_rows and
// KernelTable::attend_q8_0), widening them in registers, with the same results bit for bit. What
// the bounds then bound is attention over the stored cache; the quantization's own error (each
// value within d / 2 of what was written, plus the scale's f16 rounding: q8_0_error_bound) is a
// separate, measured difference from a cache kept in f32.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <span>
#include <vector>

#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/kv_view.hpp"
#include "amc/storage.hpp"

namespace amc {

/// Channels per q8_0 block.
inline constexpr std::int64_t kQ8Block = 32;

/// One side (keys or values) of a KV head in q8_0: row p's quants at quants + p * quant_stride
/// ([head_dim] int8) and its scales at scales + p * scale_stride ([head_dim / 32] f16).
struct Q8Rows {
  const std::int8_t* quants = nullptr;
  const f16* scales = nullptr;
  std::ptrdiff_t quant_stride = 0;  ///< int8 elements between consecutive rows (>= head_dim)
  std::ptrdiff_t scale_stride = 0;  ///< scales between consecutive rows (>= head_dim / 32)
};

/// Quantizes one row (row.size() a multiple of 32) as ggml's quantize_row_q8_0_ref does: per
/// block d = max|x| / 127, q = roundf(x * (1 / d)) (0 when d is 0), the scale stored as f16(d).
/// A block holding a NaN or an infinity stores a NaN scale and zero quants, so its values read
/// NaN, as a bf16 cache would keep them non-finite.
/// \param quants [row.size()]; scales [row.size() / 32]
/// Throws amc::error when row.size() is not a multiple of 32.
inline void quantize_q8_0_row(std::span<const float> row, std::int8_t* quants, f16* scales) {
  AMC_CHECK(row.size() % kQ8Block == 0, "amc::quantize_q8_0_row",
            "row length must be a multiple of 32, got ", row.size());
  for (std::size_t b = 0; b * kQ8Block < row.size(); ++b) {
    const float* x = row.data() + b * kQ8Block;
    std::int8_t* q = quants + b * kQ8Block;
    float amax = 0.0f;
    bool finite = true;
    for (std::int64_t j = 0; j < kQ8Block; ++j) {
      finite = finite && std::isfinite(x[j]);
      amax = std::max(amax, std::fabs(x[j]));
    }
    if (!finite) {
      scales[b] = to_f16(std::numeric_limits<float>::quiet_NaN());
      std::fill(q, q + kQ8Block, std::int8_t{0});
      continue;
    }
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    scales[b] = to_f16(d);
    // |x * inverse| <= 127 (up to its rounding, which roundf keeps within [-127, 127]).
    for (std::int64_t j = 0; j < kQ8Block; ++j)
      q[j] = static_cast<std::int8_t>(std::roundf(x[j] * inverse));
  }
}

/// The largest |x - stored value| quantize_q8_0_row can leave in a block whose largest |x| is
/// `amax`: half a step of the exact scale d = amax / 127, plus up to 127 quants times the
/// scale's f16 rounding (half an f16 ulp of d, or of the smallest subnormal), plus the rounding
/// of x * (1 / d) in f32. The bound the tests hold the quantization to.
inline double q8_0_error_bound(double amax) {
  const double d = amax / 127.0;
  // f16: 11 significant bits; below 2^-14 the spacing is that of the subnormals, 2^-24.
  const double ulp =
      std::max(std::ldexp(1.0, -24), d > 0 ? std::ldexp(1.0, std::ilogb(d) - 10) : 0.0);
  return d / 2 + 127 * (ulp / 2) + amax * 0x1p-22;
}

/// One KV head stored in q8_0, as a KvViewLike view of its values widened to f32 (exact).
///
/// The widened rows live in per-thread buffers: key(p) and value(p) each return a pointer that
/// stays valid until the same thread's next key() (value()) call on any Q8KvView, and
/// for_each_run hands its callback chunks of up to kernels::kAttendChunk rows that are valid
/// during that call. The operators use a view within one call, one row or run at a time, which
/// is what this allows. Non-owning, like KvView.
class Q8KvView {
 public:
  using value_type = float;

  /// \param keys, values  the stored rows of positions [0, positions)
  /// Throws amc::error when head_dim is not a positive multiple of 32, positions is negative, or
  /// (with positions > 0) a pointer is null or a stride too small for head_dim.
  Q8KvView(Q8Rows keys, Q8Rows values, std::int64_t positions, std::int64_t head_dim)
      : keys_(keys), values_(values), positions_(positions), head_dim_(head_dim) {
    constexpr const char* where = "amc::Q8KvView";
    AMC_CHECK(head_dim > 0 && head_dim % kQ8Block == 0, where,
              "head_dim must be a positive multiple of 32, got ", head_dim);
    AMC_CHECK(positions >= 0, where, "positions must be >= 0, got ", positions);
    for (const Q8Rows* side : {&keys_, &values_}) {
      const char* name = side == &keys_ ? "keys" : "values";
      if (positions == 0) continue;  // no rows: nothing is read
      AMC_CHECK(side->quants != nullptr && side->scales != nullptr, where, name,
                ": null quants or scales for ", positions, " positions");
      AMC_CHECK(side->quant_stride >= head_dim, where, name, ".quant_stride must be >= head_dim (",
                head_dim, "), got ", side->quant_stride);
      AMC_CHECK(side->scale_stride >= head_dim / kQ8Block, where, name,
                ".scale_stride must be >= head_dim / 32 (", head_dim / kQ8Block, "), got ",
                side->scale_stride);
    }
  }

  std::int64_t positions() const { return positions_; }
  std::int64_t head_dim() const { return head_dim_; }
  /// Strides of the widened rows the view hands out (packed).
  std::ptrdiff_t key_stride() const { return head_dim_; }
  std::ptrdiff_t value_stride() const { return head_dim_; }
  const Q8Rows& stored_keys() const { return keys_; }
  const Q8Rows& stored_values() const { return values_; }

  /// Key row p widened to f32 (valid until this thread's next key() call).
  const float* key(std::int64_t p) const { return widen_row(keys_, p, row_buffer<0>()); }
  /// Value row p widened to f32 (valid until this thread's next value() call).
  const float* value(std::int64_t p) const { return widen_row(values_, p, row_buffer<1>()); }

  /// fn(keys, values, first, rows) over [begin, end) in chunks of at most kAttendChunk rows,
  /// widened to f32 ([rows, head_dim] each). The next chunk's stored rows are asked for (a
  /// prefetch) before a chunk is widened, so their misses overlap the chunk's work.
  template <class Fn>
  void for_each_run(std::int64_t begin, std::int64_t end, Fn&& fn) const {
    for_each_widened<true>(begin, end, fn);
  }

  /// fn(keys, first, rows) as for_each_run, the keys alone: what a rule that reads keys needs
  /// (amc::KeyRows), without widening values it would not read.
  template <class Fn>
  void for_each_key_run(std::int64_t begin, std::int64_t end, Fn&& fn) const {
    for_each_widened<false>(
        begin, end, [&](const float* keys, const float*, std::int64_t first, std::int64_t rows) {
          fn(keys, first, rows);
        });
  }

  /// Points args' keys and values (and their scales) at the stored rows from `first` on, for
  /// KernelTable::attend_q8_0, which reads them without widening them into memory: what the
  /// attention operators use in place of for_each_run (decode.hpp's attend_support).
  void bind_q8_0_rows(kernels::AttendArgs& args, std::int64_t first) const {
    AMC_DASSERT(0 <= first && first <= positions_);
    args.keys = keys_.quants + first * keys_.quant_stride;
    args.key_stride = keys_.quant_stride;
    args.key_scales = keys_.scales + first * keys_.scale_stride;
    args.key_scale_stride = keys_.scale_stride;
    args.values = values_.quants + first * values_.quant_stride;
    args.value_stride = values_.quant_stride;
    args.value_scales = values_.scales + first * values_.scale_stride;
    args.value_scale_stride = values_.scale_stride;
  }

  /// Reads one byte of every cache line of the stored rows [begin, end) (keys and values,
  /// quants and scales): the sparse operator's read-ahead of its next range (decode.hpp's
  /// touch_range_start), without widening anything.
  void touch_rows(std::int64_t begin, std::int64_t end) const {
    unsigned seen = 0;
    for (std::int64_t p = begin; p < end; ++p) {
      for (const Q8Rows* side : {&keys_, &values_}) {
        const auto* q =
            reinterpret_cast<const unsigned char*>(side->quants + p * side->quant_stride);
        for (std::int64_t i = 0; i < head_dim_; i += 64) seen |= q[i];
        seen |= *reinterpret_cast<const unsigned char*>(side->scales + p * side->scale_stride);
      }
    }
    detail::keep_loads(seen);
  }

 private:
  template <bool kValues, class Fn>
  void for_each_widened(std::int64_t begin, std::int64_t end, Fn&& fn) const {
    AMC_DASSERT(0 <= begin && begin <= end && end <= positions_);
    std::vector<float>& keys = chunk_buffer<0>();
    std::vector<float>& values = chunk_buffer<1>();
    const auto widen = kernels::active().load_q8_0_rows;
    const auto widen_chunk = [&](const Q8Rows& side, std::int64_t first, std::int64_t rows,
                                 std::vector<float>& out) {
      widen(side.quants + first * side.quant_stride, side.quant_stride,
            side.scales + first * side.scale_stride, side.scale_stride, rows, head_dim_,
            out.data());
    };
    for (std::int64_t first = begin; first < end; first += kernels::kAttendChunk) {
      const std::int64_t rows = std::min(kernels::kAttendChunk, end - first);
      const std::int64_t next = first + rows;
      prefetch_rows<kValues>(next, std::min(next + kernels::kAttendChunk, end));
      widen_chunk(keys_, first, rows, keys);
      if constexpr (kValues) widen_chunk(values_, first, rows, values);
      fn(static_cast<const float*>(keys.data()), static_cast<const float*>(values.data()), first,
         rows);
    }
  }

  const float* widen_row(const Q8Rows& side, std::int64_t p, std::vector<float>& out) const {
    AMC_DASSERT(0 <= p && p < positions_);
    kernels::active().load_q8_0_rows(side.quants + p * side.quant_stride, side.quant_stride,
                                     side.scales + p * side.scale_stride, side.scale_stride, 1,
                                     head_dim_, out.data());
    return out.data();
  }

  /// Asks for the stored rows [begin, end) of the keys, and of the values with kValues.
  template <bool kValues>
  void prefetch_rows(std::int64_t begin, std::int64_t end) const {
#if defined(__GNUC__)
    for (std::int64_t p = begin; p < end; ++p) {
      for (const Q8Rows* side : {&keys_, &values_}) {
        if (!kValues && side == &values_) continue;
        const std::int8_t* q = side->quants + p * side->quant_stride;
        for (std::int64_t i = 0; i < head_dim_; i += 64) __builtin_prefetch(q + i);
        __builtin_prefetch(side->scales + p * side->scale_stride);
      }
    }
#else
    static_cast<void>(begin);
    static_cast<void>(end);
#endif
  }

  // Per-thread buffers, one per side: a row for key()/value(), a chunk for for_each_run.
  template <int kSide>
  std::vector<float>& row_buffer() const {
    thread_local std::vector<float> row;
    if (std::ssize(row) < head_dim_) row.resize(static_cast<std::size_t>(head_dim_));
    return row;
  }
  template <int kSide>
  std::vector<float>& chunk_buffer() const {
    thread_local std::vector<float> chunk;
    const std::int64_t size = kernels::kAttendChunk * head_dim_;
    if (std::ssize(chunk) < size) chunk.resize(static_cast<std::size_t>(size));
    return chunk;
  }

  Q8Rows keys_, values_;
  std::int64_t positions_ = 0;
  std::int64_t head_dim_ = kQ8Block;
};

}  // namespace amc

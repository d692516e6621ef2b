// The compiled SIMD kernels behind amc's operators, one table per instruction set.
//
// Operators are header templates; the loops they spend their time in live in src/, compiled
// once per instruction set (scalar, SSE2, AVX2+FMA+F16C, AVX-512) and chosen at run time from
// what the CPU reports. Storage-typed entries are indexed by StorageType (f32, bf16, f16); the
// `const void*` arguments point at elements of that type. Every kernel accumulates in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "amc/storage.hpp"

namespace amc::kernels {

/// Rows per chunk of the fused attention kernel: scores of a chunk are kept in scratch. The
/// kernel prefetches a chunk's values and the next chunk's keys when it starts a chunk; with
/// 32 rows that is 16 KiB of f32 in flight at head_dim 64, which L1 holds next to the chunk in
/// use (64 rows asked for 32 KiB and measured 13-33% slower on cold caches; 16 rows was not
/// clearly better: docs/performance.md).
inline constexpr std::int64_t kAttendChunk = 32;

/// Floats of scratch that `attend`, `attend_bf16_products` and `attend_q8_0` need for `heads`
/// query heads of width `head_dim`: the chunk's scores [heads, kAttendChunk], one chunk of rows
/// converted to f32 [kAttendChunk, head_dim] (8 KiB at head_dim 64, so it stays in L1) and one
/// rescale factor per head; then either, for attend_bf16_products, the query in bf16
/// [heads, head_dim] and the chunk's weights in bf16 [heads, kAttendChunk] (half a float each),
/// or, for attend_q8_0, the chunk's value scales in f32 [kAttendChunk, head_dim / 32 + 1].
constexpr std::int64_t attend_scratch_floats(std::int64_t heads, std::int64_t head_dim) {
  const std::int64_t bf16_products = (heads * (head_dim + kAttendChunk) + 1) / 2;
  const std::int64_t q8_0 = kAttendChunk * (head_dim / 32 + 1);
  return heads * kAttendChunk + kAttendChunk * head_dim + heads +
         (bf16_products > q8_0 ? bf16_products : q8_0);
}

/// Rows a kernel may ask for while it computes: the rows its caller reads next (the two-stage
/// rule's next shortlisted block), asked towards L2 a few lines at a time over the call's
/// arithmetic, so that their misses overlap it rather than following it. A hint: it changes
/// no result, and tables that do not prefetch ignore it. Asked for all at once instead, the
/// lines exhaust the core's line fill buffers and stall it (AheadLines in src/kernels_simd.hpp).
struct RowsAhead {
  const void* first = nullptr;      ///< the first row (nothing to ask for when rows == 0)
  std::ptrdiff_t stride_bytes = 0;  ///< bytes from one row to the next
  std::int64_t rows = 0;
  std::int64_t row_bytes = 0;  ///< bytes of each row to ask for
};

/// One run of rows for the fused online-softmax attention kernel.
struct AttendArgs {
  const float* queries = nullptr;  ///< [heads, head_dim], already multiplied by the scale
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  const void* keys = nullptr;     ///< [rows, key_stride] of the storage type (attend_q8_0: int8)
  std::ptrdiff_t key_stride = 0;  ///< elements between consecutive key rows
  const void* values = nullptr;   ///< [rows, value_stride] of the storage type (attend_q8_0: int8)
  std::ptrdiff_t value_stride = 0;
  std::int64_t rows = 0;
  float* running_max = nullptr;  ///< [heads], updated in place (-inf when nothing read yet)
  float* running_sum = nullptr;  ///< [heads], sum of exp(s - running_max)
  float* accumulator = nullptr;  ///< [heads, head_dim], unnormalised output
  float* scratch = nullptr;      ///< attend_scratch_floats(heads, head_dim) floats
  // The first rows the caller attends next (the next range of a sparse support), with the
  // strides above: the SIMD kernels ask for them during their last chunk, as for a chunk of
  // their own (RowsAhead); the scalar one and attend_bf16_products read a byte of each line
  // before their work. A hint that changes no result; attend_q8_0 ignores it. None by default.
  const void* next_keys = nullptr;
  const void* next_values = nullptr;
  std::int64_t next_rows = 0;
  // attend_q8_0 only: the rows' q8_0 scales, [rows, scale_stride] f16, one per 32 channels.
  const f16* key_scales = nullptr;
  std::ptrdiff_t key_scale_stride = 0;
  const f16* value_scales = nullptr;
  std::ptrdiff_t value_scale_stride = 0;
};

/// Function pointers of one instruction set. All pointers are non-null except
/// attend_bf16_products.
struct KernelTable {
  std::string_view name;  ///< "scalar", "sse2", "avx2", "avx512"
  int f32_lanes = 1;      ///< floats per vector register

  /// <q, x> over n elements; x of the indexed storage type.
  float (*dot[kStorageTypes])(const float* q, const void* x, std::int64_t n) = {};
  /// dot, the same bits, that also asks for the n elements at `ahead` (another row; null:
  /// none) towards L2, a line at a time as the product goes, instead of all at once: a
  /// matrix-vector product streams its weights so (the scalar table only computes the dot).
  float (*dot_ahead[kStorageTypes])(const float* q, const void* x, std::int64_t n,
                                    const void* ahead) = {};
  /// out[t] = dot_ahead(q + t * q_stride, x, n, ahead) for t < count, bit for bit, with x read
  /// once for all `count` vectors: a matrix-vector product over several positions (a verify
  /// pass of speculative decoding) whose every product is the one-position product's.
  void (*dot_positions[kStorageTypes])(const float* q, std::int64_t q_stride, std::int64_t count,
                                       const void* x, std::int64_t n, const void* ahead,
                                       float* out) = {};
  /// y += alpha * x over n elements; x of the indexed storage type.
  void (*axpy[kStorageTypes])(float alpha, const void* x, float* y, std::int64_t n) = {};
  /// y = float(x) over n elements.
  void (*load[kStorageTypes])(const void* x, float* y, std::int64_t n) = {};
  /// max of n floats; -inf when n == 0.
  float (*max)(const float* x, std::int64_t n) = nullptr;
  /// x_i = exp(x_i - shift) in place; returns the sum of the new x_i.
  float (*exp_sum)(float* x, std::int64_t n, float shift) = nullptr;
  /// exp_sum over n floats of which only x[listed[0..count)] (increasing, < n) can be above
  /// -inf: the listed x_i = exp(x_i - shift) in place, the others left as they are; returns the
  /// bits exp_sum would return (its lanes and order; the others add exact zeros). A row that
  /// scores a few blocks and -inf elsewhere (two-stage selection) is summed at the cost of its
  /// few.
  float (*exp_sum_listed)(float* x, std::int64_t n, float shift, const std::int64_t* listed,
                          std::int64_t count) = nullptr;
  /// y *= alpha over n elements.
  void (*scale)(float* y, float alpha, std::int64_t n) = nullptr;
  /// The first i < n with x[i] > threshold (false for NaN), or n when there is none.
  std::int64_t (*first_above)(const float* x, std::int64_t n, float threshold) = nullptr;
  /// The i < n with x[i] > threshold (false for NaN), increasing, into listed[0..capacity);
  /// returns how many there are, or capacity + 1 once there are more (it stops there).
  std::int64_t (*list_above)(const float* x, std::int64_t n, float threshold, std::int64_t* listed,
                             std::int64_t capacity) = nullptr;
  /// Sum of n floats with independent accumulators: a plain streaming read, the memory
  /// bandwidth baseline of the benchmarks (the sum only keeps the reads from being elided).
  float (*stream_sum)(const float* x, std::int64_t n) = nullptr;

  /// Online-softmax update of `heads` states over `rows` key/value rows (see AttendArgs).
  void (*attend[kStorageTypes])(const AttendArgs& args) = {};
  /// The same update over bf16 keys and values with AVX512_BF16 dot products: the query and the
  /// softmax weights rounded to bf16, products summed in f32 (AttentionArithmetic::bf16_products,
  /// amc/attention/arithmetic.hpp). head_dim must be a multiple of 32. Null unless this is the
  /// avx512 table and the CPU has AVX512_BF16.
  void (*attend_bf16_products)(const AttendArgs& args) = nullptr;
  /// out[r * head_dim + c] = f32(scales[r * scale_stride + c / 32]) * quants[r * quant_stride + c]
  /// for r < rows, c < head_dim (a multiple of 32): q8_0 rows widened to f32, exactly
  /// (amc/q8_kv.hpp).
  void (*load_q8_0_rows)(const std::int8_t* quants, std::ptrdiff_t quant_stride, const f16* scales,
                         std::ptrdiff_t scale_stride, std::int64_t rows, std::int64_t head_dim,
                         float* out) = nullptr;
  /// The same update as attend[f32] over the rows' stored q8_0 values d * q widened to f32
  /// (exact), without writing them out: keys and values point at int8 quants, key_scales and
  /// value_scales at their f16 scales (AttendArgs); head_dim a multiple of 32. Bit for bit
  /// attend[f32] of this table on the widened rows.
  void (*attend_q8_0)(const AttendArgs& args) = nullptr;
  /// out[h * out_stride + r] = <queries[h], rows[r]> for h < heads, r < count.
  void (*score_rows[kStorageTypes])(const float* queries, std::int64_t heads, std::int64_t head_dim,
                                    const void* rows, std::ptrdiff_t row_stride, std::int64_t count,
                                    float* out, std::ptrdiff_t out_stride) = {};
  /// out[h * out_stride] = m_h + log(sum_r exp(s_hr - m_h)) over r < count, where s_hr =
  /// scores[h * count + r] and m_h = max_r s_hr, for h < heads: each head's log-sum-exp (-inf
  /// when count == 0). The scores may be overwritten. Summed in an order fixed per table: the
  /// scalar, SSE2, AVX2 and NEON tables reduce head by head (max, exp_sum, std::log); AVX-512
  /// reduces 16 heads at once, each in one lane of a transposing sum, and takes one vector log
  /// (up to 4 heads one by one in that lane order: a head's result never depends on the others).
  void (*log_sum_exp)(float* scores, std::int64_t heads, std::int64_t count, float* out,
                      std::ptrdiff_t out_stride) = nullptr;
  /// score_rows into scratch [heads, count] followed by log_sum_exp, in one call (bit for bit
  /// the two in turn): each head's log-sum-exp of its scores over one run of rows, the block
  /// log-mass that the oracle and the two-stage rule's second stage rank by. `ahead`: rows to
  /// ask for while scoring (the caller's next block; RowsAhead{} for none).
  void (*log_sum_exp_rows[kStorageTypes])(const float* queries, std::int64_t heads,
                                          std::int64_t head_dim, const void* rows,
                                          std::ptrdiff_t row_stride, std::int64_t count,
                                          float* scratch, float* out, std::ptrdiff_t out_stride,
                                          const RowsAhead& ahead) = {};
};

/// The table used by amc's operators: the best instruction set this CPU supports, unless the
/// environment variable AMC_KERNELS names another available one ("scalar", "sse2", "avx2",
/// "avx512"; an unknown or unsupported name makes the first call throw amc::error).
/// Chosen once, on first use.
const KernelTable& active();

/// Every table compiled into this build that this CPU can run, scalar first.
std::span<const KernelTable* const> available();

/// The available table with this name, or nullptr.
const KernelTable* find(std::string_view name);

constexpr std::size_t index_of(StorageType type) { return static_cast<std::size_t>(type); }

}  // namespace amc::kernels

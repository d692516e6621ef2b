// SIMD primitives over xsimd batches, with the scalar loops of ScalarOps as tails.
// Included by the per-instruction-set translation units only; each one compiles it with its own
// target flags (see cmake/AmcSimd.cmake).
//
// This file is portable xsimd code. What xsimd does not cover, or covers too slowly, is in one
// header per architecture, each giving the same names: load_f32<Arch>(const bf16*) and
// load_f32<Arch>(const f16*) (widening loads), prefetch_line(p), prefetch_line_l2(p) and
// transpose_sum<Arch>(rows);
// x86 adds the AVX-512 fold of chunk scores (fold_chunk_scores_wide, AMC_SIMD_WIDE_FOLD).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels_registry.hpp"
#include "kernels_simd_batch.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels_simd_x86.hpp"
#elif defined(__aarch64__)
#include "kernels_simd_neon.hpp"
#else
#error \
    "amc: kernels_simd.hpp has no per-architecture part for this target (build the scalar kernels only)"
#endif

namespace amc::kernels {
namespace {

/// A bf16 of this translation unit's own (an anonymous namespace's) type. A std::vector<bf16>
/// instantiated here would be compiled with this unit's instruction set and merged by the
/// linker with the copies of units built for other CPUs, one copy serving all: an AVX-512 one
/// then ran in portable code and stopped an AVX2 machine (SIGILL). A vector of LocalBf16 is
/// this unit's alone.
struct LocalBf16 {
  bf16 value;
};
static_assert(sizeof(LocalBf16) == sizeof(bf16) && alignof(LocalBf16) == alignof(bf16));

template <class Arch>
struct SimdOps {
  using Batch = FloatBatch<Arch>;
  static constexpr int kLanes = static_cast<int>(Batch::size);
  static constexpr std::int64_t W = kLanes;

  template <KvStorage T>
  static float dot(const float* q, const T* x, std::int64_t n) {
    return dot_ahead<T>(q, x, n, nullptr);
  }

  /// KernelTable::dot_ahead: dot's loop, asking for the line of `ahead` at the same byte offset
  /// as each line of x it starts. One matrix row ahead in the transformer's matvec: bursts of a
  /// whole row's prefetches there stalled the core as they do in attention (AheadLines).
  template <KvStorage T>
  static float dot_ahead(const float* q, const T* x, std::int64_t n, const void* ahead) {
    constexpr std::int64_t kStepBytes = 2 * W * static_cast<std::int64_t>(sizeof(T));
    const auto* ahead_bytes = static_cast<const char*>(ahead);
    // Two accumulators hide the FMA latency on the short rows (head_dim 64) of decode.
    Batch acc0(0.0f), acc1(0.0f);
    std::int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      if (ahead_bytes != nullptr) {
        const std::int64_t offset = i * static_cast<std::int64_t>(sizeof(T));
        if constexpr (kStepBytes >= 64) {
          for (std::int64_t b = 0; b < kStepBytes; b += 64)
            prefetch_line_l2(ahead_bytes + offset + b);
        } else if (offset % 64 == 0) {
          prefetch_line_l2(ahead_bytes + offset);
        }
      }
      acc0 = xsimd::fma(Batch::load_unaligned(q + i), load_f32<Arch>(x + i), acc0);
      acc1 = xsimd::fma(Batch::load_unaligned(q + i + W), load_f32<Arch>(x + i + W), acc1);
    }
    if (ahead_bytes != nullptr) {  // the lines the loop did not reach, and a line-crossing end
      const auto end = n * static_cast<std::int64_t>(sizeof(T));
      for (std::int64_t b = i * static_cast<std::int64_t>(sizeof(T)); b < end; b += 64)
        prefetch_line_l2(ahead_bytes + b);
      if (end > 0) prefetch_line_l2(ahead_bytes + end - 1);
    }
    for (; i + W <= n; i += W) {
      acc0 = xsimd::fma(Batch::load_unaligned(q + i), load_f32<Arch>(x + i), acc0);
    }
    return horizontal_sum<Arch>(acc0 + acc1) + ScalarOps::dot<T>(q + i, x + i, n - i);
  }

  /// Most positions dot_positions multiplies at once: 2 accumulators each, 12 registers of 16
  /// on AVX2 beside the two x vectors.
  static constexpr std::int64_t kPositionGroup = 6;

  /// dot_ahead for P vectors q + p * q_stride sharing x: the same operations per position in
  /// the same order, interleaved.
  template <KvStorage T, int P>
  static void dot_group(const float* q, std::int64_t q_stride, const T* x, std::int64_t n,
                        const void* ahead, float* out) {
    constexpr std::int64_t kStepBytes = 2 * W * static_cast<std::int64_t>(sizeof(T));
    const auto* ahead_bytes = static_cast<const char*>(ahead);
    Batch acc0[P], acc1[P];
    for (int p = 0; p < P; ++p) acc0[p] = acc1[p] = Batch(0.0f);
    std::int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      if (ahead_bytes != nullptr) {
        const std::int64_t offset = i * static_cast<std::int64_t>(sizeof(T));
        if constexpr (kStepBytes >= 64) {
          for (std::int64_t b = 0; b < kStepBytes; b += 64)
            prefetch_line_l2(ahead_bytes + offset + b);
        } else if (offset % 64 == 0) {
          prefetch_line_l2(ahead_bytes + offset);
        }
      }
      const Batch x0 = load_f32<Arch>(x + i), x1 = load_f32<Arch>(x + i + W);
      for (int p = 0; p < P; ++p) {
        const float* qp = q + p * q_stride;
        acc0[p] = xsimd::fma(Batch::load_unaligned(qp + i), x0, acc0[p]);
        acc1[p] = xsimd::fma(Batch::load_unaligned(qp + i + W), x1, acc1[p]);
      }
    }
    if (ahead_bytes != nullptr) {
      const auto end = n * static_cast<std::int64_t>(sizeof(T));
      for (std::int64_t b = i * static_cast<std::int64_t>(sizeof(T)); b < end; b += 64)
        prefetch_line_l2(ahead_bytes + b);
      if (end > 0) prefetch_line_l2(ahead_bytes + end - 1);
    }
    for (; i + W <= n; i += W) {
      const Batch x0 = load_f32<Arch>(x + i);
      for (int p = 0; p < P; ++p) {
        acc0[p] = xsimd::fma(Batch::load_unaligned(q + p * q_stride + i), x0, acc0[p]);
      }
    }
    for (int p = 0; p < P; ++p) {
      const float* qp = q + p * q_stride;
      out[p] = horizontal_sum<Arch>(acc0[p] + acc1[p]) + ScalarOps::dot<T>(qp + i, x + i, n - i);
    }
  }

  /// KernelTable::dot_positions: dot_ahead's loop for up to kPositionGroup vectors at once,
  /// each x vector loaded (and widened) once and multiplied with every position's q. Each
  /// position keeps dot_ahead's two accumulators, steps, tail and final sums, so its result is
  /// dot_ahead's bit for bit; the positions' independent FMA chains fill the pipeline that one
  /// dot's two chains leave idle.
  template <KvStorage T>
  static void dot_positions(const float* q, std::int64_t q_stride, std::int64_t count, const T* x,
                            std::int64_t n, const void* ahead, float* out) {
    // Groups of nearly equal size (7 = 4 + 3, not 6 + 1: a group of one runs at one dot's
    // latency-bound pace).
    for (std::int64_t t = 0; t < count;) {
      const std::int64_t groups_left = (count - t + kPositionGroup - 1) / kPositionGroup;
      const std::int64_t size = (count - t + groups_left - 1) / groups_left;
      const float* qt = q + t * q_stride;
      const void* row_ahead = t == 0 ? ahead : nullptr;
      switch (size) {
        case 6:
          dot_group<T, 6>(qt, q_stride, x, n, row_ahead, out + t);
          break;
        case 5:
          dot_group<T, 5>(qt, q_stride, x, n, row_ahead, out + t);
          break;
        case 4:
          dot_group<T, 4>(qt, q_stride, x, n, row_ahead, out + t);
          break;
        case 3:
          dot_group<T, 3>(qt, q_stride, x, n, row_ahead, out + t);
          break;
        case 2:
          dot_group<T, 2>(qt, q_stride, x, n, row_ahead, out + t);
          break;
        default:
          out[t] = dot_ahead<T>(qt, x, n, row_ahead);
          break;
      }
      t += size;
    }
  }

  static void axpy(float alpha, const float* x, float* y, std::int64_t n) {
    const Batch a(alpha);
    std::int64_t i = 0;
    for (; i + W <= n; i += W) {
      xsimd::fma(a, Batch::load_unaligned(x + i), Batch::load_unaligned(y + i))
          .store_unaligned(y + i);
    }
    ScalarOps::axpy(alpha, x + i, y + i, n - i);
  }

  template <KvStorage T>
  static void load(const T* x, float* y, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + W <= n; i += W) load_f32<Arch>(x + i).store_unaligned(y + i);
    ScalarOps::load<T>(x + i, y + i, n - i);
  }

  static float max(const float* x, std::int64_t n) {
    std::int64_t i = 0;
    float m = -std::numeric_limits<float>::infinity();
    if (n >= W) {
      Batch acc = Batch::load_unaligned(x);
      for (i = W; i + W <= n; i += W) acc = xsimd::max(acc, Batch::load_unaligned(x + i));
      m = horizontal_max<Arch>(acc);
    }
    return std::max(m, ScalarOps::max(x + i, n - i));
  }

  static std::int64_t first_above(const float* x, std::int64_t n, float threshold) {
    // One compare per W elements; a top-k scan rejects almost every block, so it mostly runs
    // here rather than in the scalar tail.
    const Batch t(threshold);
    std::int64_t i = 0;
    for (; i + W <= n; i += W) {
      const auto above = Batch::load_unaligned(x + i) > t;  // false for NaN, as in the tail
      if (xsimd::any(above)) break;
    }
    return i + ScalarOps::first_above(x + i, n - i, threshold);
  }

  static std::int64_t list_above(const float* x, std::int64_t n, float threshold,
                                 std::int64_t* listed, std::int64_t capacity) {
    // One compare per W elements, then one step per element above: the rows listed are mostly
    // below the threshold, and testing each lane again would mispredict at every one above.
    std::int64_t found = 0;
    std::int64_t i = 0;
    for (; i + W <= n; i += W) {
      for (std::uint32_t bits = lanes_above<Arch>(x + i, threshold); bits != 0; bits &= bits - 1) {
        if (found == capacity) return capacity + 1;
        listed[found++] = i + std::countr_zero(bits);
      }
    }
    return ScalarOps::list_above_from(x, i, n, threshold, listed, found, capacity);
  }

  static float exp_sum(float* x, std::int64_t n, float shift) {
    const Batch s(shift);
    Batch acc(0.0f);
    std::int64_t i = 0;
    for (; i + W <= n; i += W) {
      const Batch e = xsimd::exp(Batch::load_unaligned(x + i) - s);
      e.store_unaligned(x + i);
      acc += e;
    }
    return horizontal_sum<Arch>(acc) + ScalarOps::exp_sum(x + i, n - i, shift);
  }

  /// exp_sum where only the listed x can be above -inf (KernelTable::exp_sum_listed): each
  /// listed exp lands in exp_sum's lane (index mod W) or scalar tail, in increasing index order,
  /// and exp_sum's lanes add only exact zeros besides, so the sum has exp_sum's bits.
  static float exp_sum_listed(float* x, std::int64_t n, float shift, const std::int64_t* listed,
                              std::int64_t count) {
    const Batch s(shift);
    const std::int64_t vector_end = n - n % W;  // exp_sum's vector part: [0, vector_end)
    alignas(64) float lanes[W] = {};
    alignas(64) float values[W];
    std::int64_t j = 0;
    while (j < count && listed[j] < vector_end) {
      std::int64_t m = 0;  // up to W listed values of the vector part, exp'd as one batch
      for (; m < W && j + m < count && listed[j + m] < vector_end; ++m)
        values[m] = x[listed[j + m]];
      std::fill(values + m, values + W, -std::numeric_limits<float>::infinity());
      xsimd::exp(Batch::load_aligned(values) - s).store_aligned(values);
      for (std::int64_t t = 0; t < m; ++t) {
        const std::int64_t index = listed[j + t];
        x[index] = values[t];
        lanes[index % W] += values[t];
      }
      j += m;
    }
    return horizontal_sum<Arch>(Batch::load_aligned(lanes)) +
           ScalarOps::exp_sum_listed(x, n, shift, listed + j, count - j);
  }

  static void scale(float* y, float alpha, std::int64_t n) {
    const Batch a(alpha);
    std::int64_t i = 0;
    for (; i + W <= n; i += W) (Batch::load_unaligned(y + i) * a).store_unaligned(y + i);
    ScalarOps::scale(y + i, alpha, n - i);
  }

  static float stream_sum(const float* x, std::int64_t n) {
    Batch a0(0.0f), a1(0.0f), a2(0.0f), a3(0.0f);
    std::int64_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W) {
      a0 += Batch::load_unaligned(x + i);
      a1 += Batch::load_unaligned(x + i + W);
      a2 += Batch::load_unaligned(x + i + 2 * W);
      a3 += Batch::load_unaligned(x + i + 3 * W);
    }
    return horizontal_sum<Arch>((a0 + a1) + (a2 + a3)) + ScalarOps::stream_sum(x + i, n - i);
  }
};

}  // namespace
}  // namespace amc::kernels

namespace amc::kernels {
namespace {

/// Register-blocked fused kernels for head_dim a multiple of the vector width (64 and 128 in
/// practice); other widths take the generic path of kernels_generic.hpp.
///
/// Scores: W rows at a time (W = lanes), one accumulator per row, reduced together by a
/// transposing horizontal add: one reduction per W scores instead of W. Narrow keys are widened
/// to f32 once per chunk (into L1 scratch) and reused by every head.
/// Values: the accumulators of up to kHeadGroup heads over a slab of 2W channels stay in
/// registers while the chunk's rows stream past; each value row is loaded (and widened) once
/// per slab for all heads, then one broadcast and two FMAs per head.
template <class Arch>
struct BlockedOps : SimdOps<Arch> {
  using Base = SimdOps<Arch>;
  using Batch = typename Base::Batch;
  static constexpr std::int64_t W = Base::W;
  static constexpr std::int64_t kHeadGroup = 8;

  template <KvStorage T>
  static void prefetch_rows(const T* rows, std::ptrdiff_t stride, std::int64_t count,
                            std::int64_t head_dim) {
    constexpr std::int64_t kLine = 64 / static_cast<std::int64_t>(sizeof(T));  // elements per line
    for (std::int64_t r = 0; r < count; ++r) {
      for (std::int64_t i = 0; i < head_dim; i += kLine) {
        prefetch_line(rows + r * stride + i);
      }
    }
  }

  /// The cache lines of a few row ranges (a chunk's keys, values and their scales), asked
  /// towards L2 a few lines at a time: attention spreads its next chunk's lines over the rows of
  /// this chunk's value loop, so the misses overlap the arithmetic. Asked for all at once at
  /// the top of a chunk, as before, they exhaust the core's line fill buffers and stall it until
  /// most have arrived: dense bf16 decode at 131072 positions took 4.8-4.9 ms cold that way
  /// against 4.1-4.3 spread, f32 6.4-6.6 against 5.9-6.2 (two rounds, docs/performance.md,
  /// "Reading ahead while computing"); two or four chunks ahead, or bursts towards L2, were
  /// slower in exploratory runs.
  class AheadLines {
   public:
    /// Adds `rows` rows of `row_bytes` bytes, `stride` bytes apart, after the ranges added
    /// (at most four). Rows that follow each other are one run.
    void add(const void* first, std::ptrdiff_t stride, std::int64_t rows, std::int64_t row_bytes) {
      if (rows <= 0 || row_bytes <= 0) return;
      if (stride == row_bytes) {
        row_bytes *= rows;
        rows = 1;
      }
      ranges_[count_++] = {static_cast<const char*>(first), stride, rows, row_bytes};
      const bool aligned = reinterpret_cast<std::uintptr_t>(first) % 64 == 0 && stride % 64 == 0;
      lines_ += rows * ((row_bytes + 63) / 64 + (aligned ? 0 : 1));  // a row may straddle one more
      if (count_ == 1) start_row();
    }
    /// Makes each of the next `steps` calls of step() ask for an equal share of the lines.
    void pace(std::int64_t steps) { per_step_ = steps > 0 ? (lines_ + steps - 1) / steps : lines_; }
    /// Asks for the next share of lines (pace()).
    void step() { ask(per_step_); }
    /// Asks for every line not yet asked for.
    void finish() { ask(std::numeric_limits<std::int64_t>::max()); }

   private:
    struct Range {
      const char* first;
      std::ptrdiff_t stride;
      std::int64_t rows, row_bytes;
    };
    /// Points next_ at the first line of row row_ of range range_, end_ past the row's last byte.
    void start_row() {
      const Range& r = ranges_[range_];
      const char* row = r.first + row_ * r.stride;
      next_ = row - reinterpret_cast<std::uintptr_t>(row) % 64;
      end_ = row + r.row_bytes;
    }
    void ask(std::int64_t lines) {
      while (lines > 0 && range_ < count_) {
        for (; lines > 0 && next_ < end_; --lines, next_ += 64) prefetch_line_l2(next_);
        if (next_ < end_) return;
        if (++row_ == ranges_[range_].rows) {
          row_ = 0;
          if (++range_ == count_) return;
        }
        start_row();
      }
    }
    Range ranges_[4];  // only [0, count_) is read; not zeroed, as attention builds one per chunk
    int count_ = 0, range_ = 0;
    std::int64_t row_ = 0, lines_ = 0, per_step_ = 0;
    const char* next_ = nullptr;  // the next line to ask for
    const char* end_ = nullptr;   // past the current row
  };

  /// Adds to `ahead` the chunk after the current one: `rows` rows of keys and values from
  /// `keys`, `values` in this call; after its last chunk, the caller's next rows (AttendArgs::
  /// next_keys), so that a sparse support's next range is on its way while this one ends.
  template <KvStorage T>
  static void ask_next_chunk(const AttendArgs& a, const T* keys, const T* values, std::int64_t rows,
                             AheadLines& ahead) {
    constexpr auto kBytes = static_cast<std::ptrdiff_t>(sizeof(T));
    const std::int64_t row_bytes = a.head_dim * kBytes;
    if (rows == 0) {
      keys = static_cast<const T*>(a.next_keys);
      values = static_cast<const T*>(a.next_values);
      rows = std::min(kAttendChunk, a.next_rows);
    }
    ahead.add(keys, a.key_stride * kBytes, rows, row_bytes);
    ahead.add(values, a.value_stride * kBytes, rows, row_bytes);
  }

  /// AheadLines paced over one chunk's value loop: one step per row and slab of 2W channels.
  static void pace_over_values(AheadLines& ahead, std::int64_t rows, std::int64_t head_dim) {
    ahead.pace(rows * ((head_dim + 2 * W - 1) / (2 * W)));
  }

  /// Vector registers of the instruction set (AVX-512: 32, AVX/SSE: 16).
  static constexpr int kRegisters = W == 16 ? 32 : 16;

  /// Scores of `group` (<= W) rows for one query, reduced by one transposing sum. kDim > 0 fixes
  /// head_dim at compile time so the query stays in registers and each row is a straight run of
  /// FMAs with memory operands; kDim == 0 handles any multiple of W. Missing rows (group < W)
  /// stay zero and go through the same reduction, so equal rows score bitwise equal wherever
  /// they fall.
  template <std::int64_t kDim, KvStorage T>
  static Batch score_group(const float* q, std::int64_t head_dim, const T* rows,
                           std::ptrdiff_t row_stride, std::int64_t group) {
    Batch acc[W];
#pragma GCC unroll 16
    for (std::int64_t r = 0; r < W; ++r) acc[r] = Batch(0.0f);
    if constexpr (kDim > 0) {
      constexpr std::int64_t kChunks = kDim / W;
      Batch qs[kChunks];
#pragma GCC unroll 16
      for (std::int64_t c = 0; c < kChunks; ++c) qs[c] = Batch::load_unaligned(q + c * W);
      const T* row = rows;
      if (group == W) {
#pragma GCC unroll 16
        for (std::int64_t r = 0; r < W; ++r, row += row_stride) {
#pragma GCC unroll 16
          for (std::int64_t c = 0; c < kChunks; ++c)
            acc[r] = xsimd::fma(qs[c], load_f32<Arch>(row + c * W), acc[r]);
        }
      } else {
        for (std::int64_t r = 0; r < group; ++r, row += row_stride) {
#pragma GCC unroll 16
          for (std::int64_t c = 0; c < kChunks; ++c)
            acc[r] = xsimd::fma(qs[c], load_f32<Arch>(row + c * W), acc[r]);
        }
      }
    } else {
      for (std::int64_t i = 0; i < head_dim; i += W) {
        const Batch qi = Batch::load_unaligned(q + i);
        const T* row = rows + i;
        for (std::int64_t r = 0; r < group; ++r, row += row_stride) {
          acc[r] = xsimd::fma(qi, load_f32<Arch>(row), acc[r]);
        }
      }
    }
    return transpose_sum<Arch>(acc);
  }

  /// Scans of at least this many rows (the mean keys or bound rows of a long cache: 1024 rows
  /// are 32768 positions at blocks of 32) stream from memory; score_rows_fixed asks for their
  /// rows kStreamGroupsAhead groups ahead, towards L2, a few lines per head scored.
  static constexpr std::int64_t kStreamMinRows = 1024;
  /// score_rows_bf16_words streams from fewer rows: the channel bound's 512 bf16 rows at
  /// 16384 positions.
  static constexpr std::int64_t kWordsStreamMinRows = 256;
  static constexpr std::int64_t kStreamGroupsAhead = 4;

  template <std::int64_t kDim, KvStorage T>
  static void score_rows_fixed(const float* queries, std::int64_t heads, std::int64_t head_dim,
                               const T* rows, std::ptrdiff_t row_stride, std::int64_t count,
                               float* out, std::ptrdiff_t out_stride, const RowsAhead& rows_ahead) {
    // Row groups outside, heads inside: a group of W rows is read from memory once and stays
    // in L1 while every head scores it (the mean keys of a long cache are read in one pass).
    // Narrow rows scored for several heads are widened to f32 once per group, not once per
    // head, as attend does per chunk (the widening is exact, so the scores are the same bits):
    // the two-stage rule's shortlisted keys and the channel bound's bf16 rows, scored for 7
    // heads each in the benchmarks' group.
    constexpr bool kWiden = !std::same_as<T, float> && kDim > 0;
    alignas(64) float widened[kWiden ? W * kDim : 1];
    const auto score_group_of_rows = [&](std::int64_t r0, std::int64_t group, AheadLines* ahead,
                                         auto&& store) {
      const float* group_rows = nullptr;
      if constexpr (kWiden) {
        if (heads > 1) {
          widen_rows(rows + r0 * row_stride, row_stride, group, kDim, widened);
          group_rows = widened;
        }
      }
      for (std::int64_t h = 0; h < heads; ++h) {
        if (ahead != nullptr) ahead->step();
        const float* q = queries + h * head_dim;
        store(h,
              group_rows != nullptr
                  ? score_group<kDim, float>(q, head_dim, group_rows, kDim, group)
                  : score_group<kDim, T>(q, head_dim, rows + r0 * row_stride, row_stride, group));
      }
    };
    // A long scan asks for the group kStreamGroupsAhead ahead while the heads score this one,
    // spread over the heads (AheadLines); before, it read 256-row tiles ahead with plain loads,
    // which the core waited for: twostage/bound's selection at 131072 took 355 us cold that
    // way, 259 streamed, the mean rule's 181 against 132 (averages of two rounds,
    // docs/performance.md). Short scans (attention's chunks, the shortlisted blocks) ask two
    // groups ahead into L1.
    const bool stream = count >= kStreamMinRows;
    const std::int64_t row_bytes = head_dim * static_cast<std::int64_t>(sizeof(T));
    if (stream) prefetch_rows(rows, row_stride, kStreamGroupsAhead * W, head_dim);
    // A short scan asks for its caller's next rows (RowsAhead) a share at each head of each
    // group: the two-stage rule's next shortlisted block, while this one is scored.
    AheadLines next_rows;
    if (!stream) {
      next_rows.add(rows_ahead.first, rows_ahead.stride_bytes, rows_ahead.rows,
                    rows_ahead.row_bytes);
      next_rows.pace((count + W - 1) / W * heads);
    }
    std::int64_t r0 = 0;
    for (; r0 + W <= count; r0 += W) {
      const auto store = [&](std::int64_t h, Batch scores) {
        scores.store_unaligned(out + h * out_stride + r0);
      };
      if (stream) {
        AheadLines ahead;
        const std::int64_t next = r0 + kStreamGroupsAhead * W;
        ahead.add(rows + next * row_stride, row_stride * static_cast<std::ptrdiff_t>(sizeof(T)),
                  std::clamp<std::int64_t>(count - next, 0, W), row_bytes);
        ahead.pace(heads);
        score_group_of_rows(r0, W, &ahead, store);
        ahead.finish();
      } else {
        if (r0 + 3 * W <= count)
          prefetch_rows(rows + (r0 + 2 * W) * row_stride, row_stride, W, head_dim);
        score_group_of_rows(r0, W, &next_rows, store);
      }
    }
    if (r0 < count) {
      score_group_of_rows(r0, count - r0, stream ? nullptr : &next_rows,
                          [&](std::int64_t h, Batch scores) {
                            alignas(64) float lanes[W];
                            scores.store_aligned(lanes);
                            std::copy_n(lanes, count - r0, out + h * out_stride + r0);
                          });
    }
    if (!stream) next_rows.finish();
  }

  /// out[h * out_stride + r] = <q_h, row_r>; rows of storage type T.
  template <KvStorage T>
  static void score_rows(const float* queries, std::int64_t heads, std::int64_t head_dim,
                         const void* rows, std::ptrdiff_t row_stride, std::int64_t count,
                         float* out, std::ptrdiff_t out_stride) {
    score_rows_asking_ahead<T>(queries, heads, head_dim, rows, row_stride, count, out, out_stride,
                               RowsAhead{});
  }

  /// score_rows, asking for `next` while scoring (short scans only: a long one asks for its
  /// own rows ahead). The same scores whatever `next` is.
  template <KvStorage T>
  static void score_rows_asking_ahead(const float* queries, std::int64_t heads,
                                      std::int64_t head_dim, const void* rows_ptr,
                                      std::ptrdiff_t row_stride, std::int64_t count, float* out,
                                      std::ptrdiff_t out_stride, const RowsAhead& next) {
    const T* rows = static_cast<const T*>(rows_ptr);
#if AMC_SIMD_WIDE_FOLD && AMC_KERNELS_AVX512
    if constexpr (W == 16 && std::same_as<T, bf16>) {
      if (head_dim % 16 == 0) {  // score_rows_bf16_words, in its own unit
        detail::score_rows_bf16_words_avx512(queries, heads, head_dim, rows, row_stride, count, out,
                                             out_stride, next);
        return;
      }
    }
#endif
    if (head_dim % W != 0) {
      score_rows_entry<Base, T>(queries, heads, head_dim, rows, row_stride, count, out, out_stride);
    } else if (head_dim == 64 && 64 / W + W + 2 <= kRegisters) {
      score_rows_fixed<64, T>(queries, heads, head_dim, rows, row_stride, count, out, out_stride,
                              next);
    } else if (head_dim == 128 && 128 / W + W + 2 <= kRegisters) {
      score_rows_fixed<128, T>(queries, heads, head_dim, rows, row_stride, count, out, out_stride,
                               next);
    } else {
      score_rows_fixed<0, T>(queries, heads, head_dim, rows, row_stride, count, out, out_stride,
                             next);
    }
  }

  /// Rows as accumulate_values and widen_q8_0_rows read them: load(r, c) is channels [c, c + W)
  /// of row r in f32. Rows stored in a storage type T:
  template <KvStorage T>
  struct StoredRows {
    const T* first;         ///< [rows, stride]
    std::ptrdiff_t stride;  ///< elements between rows
    Batch load(std::int64_t r, std::int64_t c) const {
      return load_f32<Arch>(first + r * stride + c);
    }
  };
  /// Rows stored in q8_0, widened in registers: the quants times their block's scale, exact
  /// (an f16 times an 8-bit integer), so the same f32 values as widened rows in memory. c is a
  /// multiple of W, which divides 32, so [c, c + W) lies in one block of 32 channels.
  struct Q8BlockRows {
    const std::int8_t* quants;  ///< [rows, stride]
    std::ptrdiff_t stride;      ///< int8 elements between rows
    const float* scales;        ///< [rows, blocks]: the rows' f16 scales already in f32
    std::int64_t blocks;        ///< head_dim / 32
    Batch load(std::int64_t r, std::int64_t c) const {
      return load_f32<Arch>(quants + r * stride + c) * Batch(scales[r * blocks + c / 32]);
    }
  };

  /// accumulator[h] = rescale[h] * accumulator[h] + sum_r weights[h, r] * values[r] for kHeads
  /// heads (rescale == nullptr: no rescaling). The rescale of the online softmax rides on the
  /// loads of the accumulators into registers instead of taking a pass of its own.
  template <int kHeads, class Rows>
  static void accumulate_values(const float* weights, const float* rescale, const Rows& values,
                                std::int64_t rows, std::int64_t head_dim, float* accumulator,
                                AheadLines* ahead) {
    auto load_accumulator = [&](int h, std::int64_t c) {
      const Batch acc = Batch::load_unaligned(accumulator + h * head_dim + c);
      return rescale == nullptr ? acc : acc * Batch(rescale[h]);
    };
    std::int64_t c = 0;
    for (; c + 2 * W <= head_dim; c += 2 * W) {
      Batch lo[kHeads], hi[kHeads];
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) {
        lo[h] = load_accumulator(h, c);
        hi[h] = load_accumulator(h, c + W);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        if (ahead != nullptr) ahead->step();
        const Batch v0 = values.load(r, c);
        const Batch v1 = values.load(r, c + W);
#pragma GCC unroll 8
        for (int h = 0; h < kHeads; ++h) {
          const Batch p(weights[h * kAttendChunk + r]);
          lo[h] = xsimd::fma(p, v0, lo[h]);
          hi[h] = xsimd::fma(p, v1, hi[h]);
        }
      }
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) {
        lo[h].store_unaligned(accumulator + h * head_dim + c);
        hi[h].store_unaligned(accumulator + h * head_dim + c + W);
      }
    }
    for (; c < head_dim; c += W) {  // one last slab of W channels
      Batch acc[kHeads];
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) acc[h] = load_accumulator(h, c);
      for (std::int64_t r = 0; r < rows; ++r) {
        if (ahead != nullptr) ahead->step();
        const Batch v = values.load(r, c);
#pragma GCC unroll 8
        for (int h = 0; h < kHeads; ++h)
          acc[h] = xsimd::fma(Batch(weights[h * kAttendChunk + r]), v, acc[h]);
      }
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) acc[h].store_unaligned(accumulator + h * head_dim + c);
    }
  }

  /// accumulate_values for any number of heads, kHeadGroup at a time; `ahead` (may be null)
  /// steps through the first group's value loop.
  template <class Rows>
  static void accumulate_values_any(std::int64_t heads, const float* weights, const float* rescale,
                                    const Rows& values, std::int64_t rows, std::int64_t head_dim,
                                    float* accumulator, AheadLines* ahead) {
    for (std::int64_t h0 = 0; h0 < heads; h0 += kHeadGroup) {
      const float* w = weights + h0 * kAttendChunk;
      const float* r = rescale == nullptr ? nullptr : rescale + h0;
      float* acc = accumulator + h0 * head_dim;
      AheadLines* steps = h0 == 0 ? ahead : nullptr;
      switch (std::min(kHeadGroup, heads - h0)) {
        case 1:
          accumulate_values<1>(w, r, values, rows, head_dim, acc, steps);
          break;
        case 2:
          accumulate_values<2>(w, r, values, rows, head_dim, acc, steps);
          break;
        case 3:
          accumulate_values<3>(w, r, values, rows, head_dim, acc, steps);
          break;
        case 4:
          accumulate_values<4>(w, r, values, rows, head_dim, acc, steps);
          break;
        case 5:
          accumulate_values<5>(w, r, values, rows, head_dim, acc, steps);
          break;
        case 6:
          accumulate_values<6>(w, r, values, rows, head_dim, acc, steps);
          break;
        case 7:
          accumulate_values<7>(w, r, values, rows, head_dim, acc, steps);
          break;
        default:
          accumulate_values<8>(w, r, values, rows, head_dim, acc, steps);
          break;
      }
    }
  }

  /// Widens `rows` rows of narrow storage to packed f32 [rows, head_dim] (head_dim % W == 0).
  template <KvStorage T>
  static void widen_rows(const T* source, std::ptrdiff_t stride, std::int64_t rows,
                         std::int64_t head_dim, float* target) {
    for (std::int64_t r = 0; r < rows; ++r, source += stride, target += head_dim) {
      std::int64_t i = 0;
      for (; i + 4 * W <= head_dim; i += 4 * W) {
        const Batch a = load_f32<Arch>(source + i), b = load_f32<Arch>(source + i + W);
        const Batch c = load_f32<Arch>(source + i + 2 * W), d = load_f32<Arch>(source + i + 3 * W);
        a.store_unaligned(target + i);
        b.store_unaligned(target + i + W);
        c.store_unaligned(target + i + 2 * W);
        d.store_unaligned(target + i + 3 * W);
      }
      for (; i < head_dim; i += W) load_f32<Arch>(source + i).store_unaligned(target + i);
    }
  }

  /// KernelTable::log_sum_exp: AVX-512 reduces 16 heads at once (log_sum_exp_wide); the other
  /// widths head by head.
  static void log_sum_exp(float* scores, std::int64_t heads, std::int64_t count, float* out,
                          std::ptrdiff_t out_stride) {
#if AMC_SIMD_WIDE_FOLD
    if constexpr (W == 16) {
      log_sum_exp_wide<Arch>(scores, heads, count, out, out_stride);
      return;
    }
#endif
    log_sum_exp_entry<Base>(scores, heads, count, out, out_stride);
  }

  template <KvStorage T>
  static void attend(const AttendArgs& a) {
    if (a.head_dim % W != 0) {
      attend_entry<Base, T>(a);
      return;
    }
#if AMC_SIMD_WIDE_FOLD && AMC_KERNELS_AVX512
    if constexpr (W == 16 && std::same_as<T, bf16>) {
      if (a.head_dim % 32 == 0) {
        detail::attend_bf16_words_avx512(a);  // attend_bf16_words, in its own unit
        return;
      }
    }
#endif
    const T* keys = static_cast<const T*>(a.keys);
    const T* values = static_cast<const T*>(a.values);
    float* scores = a.scratch;                              // [heads, kAttendChunk]
    float* converted = a.scratch + a.heads * kAttendChunk;  // [kAttendChunk, head_dim]
    [[maybe_unused]] float* rescale = converted + kAttendChunk * a.head_dim;  // [heads]: wide fold
    // The first chunk's values are needed only after its scores: asked for now, their latency
    // overlaps the scoring. Every later chunk's keys and values are asked for during the chunk
    // before it (AheadLines).
    prefetch_rows(values, a.value_stride, std::min(kAttendChunk, a.rows), a.head_dim);
    for (std::int64_t first = 0; first < a.rows; first += kAttendChunk) {
      const std::int64_t rows = std::min(kAttendChunk, a.rows - first);
      const T* chunk_keys = keys + first * a.key_stride;
      const T* chunk_values = values + first * a.value_stride;
      const std::int64_t next_rows = std::min(kAttendChunk, a.rows - first - rows);
      AheadLines ahead;
      ask_next_chunk(a, chunk_keys + rows * a.key_stride, chunk_values + rows * a.value_stride,
                     next_rows, ahead);
      pace_over_values(ahead, rows, a.head_dim);
      // Narrow keys are widened once per chunk rather than once per head; a single head
      // widens them on the fly instead.
      if (std::same_as<T, float> || a.heads == 1) {
        score_rows<T>(a.queries, a.heads, a.head_dim, chunk_keys, a.key_stride, rows, scores,
                      kAttendChunk);
      } else {
        widen_rows(chunk_keys, a.key_stride, rows, a.head_dim, converted);
        score_rows<float>(a.queries, a.heads, a.head_dim, converted, a.head_dim, rows, scores,
                          kAttendChunk);
      }
#if AMC_SIMD_WIDE_FOLD
      if constexpr (W == 16) {
        fold_chunk_scores_wide<Arch>(a, scores, rows, rescale);
        accumulate_values_any(a.heads, scores, rescale, StoredRows<T>{chunk_values, a.value_stride},
                              rows, a.head_dim, a.accumulator, &ahead);
        ahead.finish();
        continue;
      }
#endif
      fold_chunk_scores<Base>(a, scores, rows);  // rescales the accumulators itself
      accumulate_values_any(a.heads, scores, nullptr, StoredRows<T>{chunk_values, a.value_stride},
                            rows, a.head_dim, a.accumulator, &ahead);
      ahead.finish();
    }
  }

#if AMC_SIMD_WIDE_FOLD
  /// attend<bf16> on AVX-512 for head_dim a multiple of 32, reading the bf16 rows as 32-bit
  /// words of two channels. The keys of each 16 rows are transposed in registers and scored for
  /// up to kHeadGroup heads at a time with rows in lanes (score16_bf16_words): no widened copy
  /// in L1 and no horizontal sums, which with the widening took half the hot kernel (12.3 of
  /// 24.7 ns per position, docs/performance.md). The values widen 32 channels in two
  /// operations into even and odd channels, so the accumulator is kept in word order for the
  /// call (accumulator_to_word_order); each channel's sum of products is the same sequence of
  /// FMAs as in accumulate_values, so the same bits. A head's results do not depend on how
  /// many heads share the call: per-head selection attends one head at a time, dense decode
  /// the whole group, and a support covering every position must give dense's result.
  static void attend_bf16_words(const AttendArgs& a) {
    // Only a sparse support's ranges ask for the next one (AttendArgs::next_keys): an
    // instantiation of their own leaves dense decode's code as it was, whose cold time moved
    // by 4-10% with the ask in the same loop (records/dense-2026-12-06/).
    if (a.next_rows > 0) return attend_bf16_words_any_heads<true>(a);
    return attend_bf16_words_any_heads<false>(a);
  }

  template <bool kAsksNext>
  static void attend_bf16_words_any_heads(const AttendArgs& a) {
    switch (a.heads) {
      case 1:
        return attend_bf16_words<1, kAsksNext>(a);
      case 2:
        return attend_bf16_words<2, kAsksNext>(a);
      case 3:
        return attend_bf16_words<3, kAsksNext>(a);
      case 4:
        return attend_bf16_words<4, kAsksNext>(a);
      case 5:
        return attend_bf16_words<5, kAsksNext>(a);
      case 6:
        return attend_bf16_words<6, kAsksNext>(a);
      case 7:
        return attend_bf16_words<7, kAsksNext>(a);
      case 8:
        return attend_bf16_words<8, kAsksNext>(a);
      default:
        return attend_bf16_words<0, kAsksNext>(a);
    }
  }

  /// attend_bf16_words for kHeads heads (1 to kHeadGroup: the scores' and values' registers
  /// per head fixed at compile time), or (kHeads == 0) any number, kHeadGroup at a time.
  template <int kHeads, bool kAsksNext>
  static void attend_bf16_words(const AttendArgs& a) {
    const bf16* keys = static_cast<const bf16*>(a.keys);
    const bf16* values = static_cast<const bf16*>(a.values);
    float* scores = a.scratch;  // [heads, kAttendChunk]
    // [16, head_dim] bf16: a last group of fewer than 16 rows, padded with zero rows.
    auto* padded = reinterpret_cast<bf16*>(a.scratch + a.heads * kAttendChunk);
    float* rescale = a.scratch + a.heads * kAttendChunk + kAttendChunk * a.head_dim;  // [heads]
    const std::int64_t head_groups = kHeads > 0 ? 1 : (a.heads + kHeadGroup - 1) / kHeadGroup;
    // Scores of 16 rows for every head, one head group at a time.
    const auto score16 = [&](const bf16* rows, std::ptrdiff_t stride, float* out,
                             AheadLines& ahead) {
      if constexpr (kHeads > 0) {
        score16_words<kHeads>(a.queries, a.head_dim, rows, stride, out, kAttendChunk, ahead);
      } else {
        for (std::int64_t h0 = 0; h0 < a.heads; h0 += kHeadGroup) {
          score16_words_any(std::min(kHeadGroup, a.heads - h0), a.queries + h0 * a.head_dim,
                            a.head_dim, rows, stride, out + h0 * kAttendChunk, kAttendChunk, ahead);
        }
      }
    };
    accumulator_to_word_order<Arch>(a.accumulator, a.heads * a.head_dim);
    prefetch_rows(values, a.value_stride, std::min(kAttendChunk, a.rows), a.head_dim);
    for (std::int64_t first = 0; first < a.rows; first += kAttendChunk) {
      const std::int64_t rows = std::min(kAttendChunk, a.rows - first);
      const bf16* chunk_keys = keys + first * a.key_stride;
      const bf16* chunk_values = values + first * a.value_stride;
      const std::int64_t next_rows = std::min(kAttendChunk, a.rows - first - rows);
      // The next chunk's keys and values are asked for while this chunk's keys are scored, a
      // share at each 16 channels of a group of rows (16 lines at head_dim 64): asked during
      // the value loop instead, as attend does, the memory sat idle through the scoring, and
      // the cold kernel was markedly slower in exploratory builds (output not kept); so were
      // finer shares (a line or two per word) and bigger bursts.
      AheadLines ahead;
      if constexpr (kAsksNext) {
        ask_next_chunk(a, chunk_keys + rows * a.key_stride, chunk_values + rows * a.value_stride,
                       next_rows, ahead);
      } else {
        // ask_next_chunk without the caller's rows, written out: routing this branch through
        // ask_next_chunk (a kAsksNext parameter there) changes GCC's inlining across this unit,
        // dense decode's loop included, whose cold time moves by 4-10% with such changes
        // (records/dense-2026-12-06/).
        constexpr auto kBytes = static_cast<std::ptrdiff_t>(sizeof(bf16));
        const std::int64_t row_bytes = a.head_dim * kBytes;
        ahead.add(chunk_keys + rows * a.key_stride, a.key_stride * kBytes, next_rows, row_bytes);
        ahead.add(chunk_values + rows * a.value_stride, a.value_stride * kBytes, next_rows,
                  row_bytes);
      }
      ahead.pace((rows + 15) / 16 * (a.head_dim / 16) * head_groups);
      for (std::int64_t r0 = 0; r0 < rows; r0 += 16) {
        const bf16* group = chunk_keys + r0 * a.key_stride;
        if (const std::int64_t count = rows - r0; count < 16) {
          pad_rows16(group, a.key_stride, count, a.head_dim, padded);
          score16(padded, a.head_dim, scores + r0, ahead);  // lanes past `count`: the fold's -inf
        } else {
          score16(group, a.key_stride, scores + r0, ahead);
        }
      }
      fold_chunk_scores_wide<Arch>(a, scores, rows, rescale);
      if constexpr (kHeads > 0) {
        accumulate_value_words<kHeads>(scores, rescale, chunk_values, a.value_stride, rows,
                                       a.head_dim, a.accumulator);
      } else {
        for (std::int64_t h0 = 0; h0 < a.heads; h0 += kHeadGroup) {
          accumulate_value_words_any(std::min(kHeadGroup, a.heads - h0), scores + h0 * kAttendChunk,
                                     rescale + h0, chunk_values, a.value_stride, rows, a.head_dim,
                                     a.accumulator + h0 * a.head_dim);
        }
      }
      ahead.finish();
    }
    accumulator_to_natural_order<Arch>(a.accumulator, a.heads * a.head_dim);
  }

  /// padded [16, head_dim] = the `live` (< 16) rows, then zero rows: a last group of rows for
  /// score16_bf16_words, which reads 16 (zero rows score 0, in lanes the caller ignores).
  static void pad_rows16(const bf16* rows, std::ptrdiff_t stride, std::int64_t live,
                         std::int64_t head_dim, bf16* padded) {
    std::fill_n(padded, 16 * head_dim, bf16{});
    for (std::int64_t r = 0; r < live; ++r)
      std::copy_n(rows + r * stride, head_dim, padded + r * head_dim);
  }

  /// score16_bf16_words for 1 to kHeadGroup heads (one register per head makes the count a
  /// template parameter), head_dim 64 and 128 and packed rows (a KvView's usual layout: the 16
  /// rows' addresses are constant offsets) fixed at compile time. Scores to
  /// out[h * out_stride + r] (attend: kAttendChunk; score_rows: its caller's stride).
  template <int kHeads>
  static void score16_words(const float* queries, std::int64_t head_dim, const bf16* rows,
                            std::ptrdiff_t stride, float* out, std::ptrdiff_t out_stride,
                            AheadLines& ahead) {
    const auto ask_share = [&ahead] { ahead.step(); };
    if (head_dim == 64 && stride == 64) {
      score16_bf16_words<Arch, kHeads, 64>(queries, 64, rows, 64, out, out_stride, ask_share);
    } else if (head_dim == 64) {
      score16_bf16_words<Arch, kHeads, 64>(queries, 64, rows, stride, out, out_stride, ask_share);
    } else if (head_dim == 128 && stride == 128) {
      score16_bf16_words<Arch, kHeads, 128>(queries, 128, rows, 128, out, out_stride, ask_share);
    } else if (head_dim == 128) {
      score16_bf16_words<Arch, kHeads, 128>(queries, 128, rows, stride, out, out_stride, ask_share);
    } else {
      score16_bf16_words<Arch, kHeads, 0>(queries, head_dim, rows, stride, out, out_stride,
                                          ask_share);
    }
  }

  static void score16_words_any(std::int64_t heads, const float* queries, std::int64_t head_dim,
                                const bf16* rows, std::ptrdiff_t stride, float* out,
                                std::ptrdiff_t out_stride, AheadLines& ahead) {
    switch (heads) {
      case 1:
        return score16_words<1>(queries, head_dim, rows, stride, out, out_stride, ahead);
      case 2:
        return score16_words<2>(queries, head_dim, rows, stride, out, out_stride, ahead);
      case 3:
        return score16_words<3>(queries, head_dim, rows, stride, out, out_stride, ahead);
      case 4:
        return score16_words<4>(queries, head_dim, rows, stride, out, out_stride, ahead);
      case 5:
        return score16_words<5>(queries, head_dim, rows, stride, out, out_stride, ahead);
      case 6:
        return score16_words<6>(queries, head_dim, rows, stride, out, out_stride, ahead);
      case 7:
        return score16_words<7>(queries, head_dim, rows, stride, out, out_stride, ahead);
      default:
        return score16_words<8>(queries, head_dim, rows, stride, out, out_stride, ahead);
    }
  }

  /// score_rows<bf16> for head_dim a multiple of 16, scored as attend_bf16_words scores its
  /// keys (score16_bf16_words: 16 rows in lanes, kHeadGroup heads at a time), so that the
  /// block log-mass of the oracle and of the two-stage rule's second stage (7 heads of 32
  /// keys, widened and reduced by transposing sums before) and the channel bound's rows cost
  /// fewer operations per product. A last group of fewer than 16 rows is scored from a
  /// zero-padded copy in the same lanes' order, so a row's score does not depend on where it
  /// falls. Long scans ask for their rows ahead as score_rows_fixed does.
  static void score_rows_bf16_words(const float* queries, std::int64_t heads, std::int64_t head_dim,
                                    const bf16* rows, std::ptrdiff_t row_stride, std::int64_t count,
                                    float* out, std::ptrdiff_t out_stride,
                                    const RowsAhead& rows_ahead) {
    const bool stream = count >= kWordsStreamMinRows;
    const std::int64_t row_bytes = head_dim * static_cast<std::int64_t>(sizeof(bf16));
    const std::int64_t head_groups = (heads + kHeadGroup - 1) / kHeadGroup;
    // A short scan (a block of 32 keys, scored cold by the oracle and the second stage) asks
    // for its first two groups at once: the transposes read each group's lines 16 channels at
    // a time, so without it their misses came a few at a time, and the oracle's block-by-block
    // scan of every key took 1.19x and 1.30x as long cold (16K, 128K) as with the widening it
    // replaces (records/rules-cost-words-2026-12-06/no-prefetch/). With the rows in cache the
    // requests are overhead: one head's 64 blocks took 7.8-8.9 us against 6.5-6.6 (hot.txt
    // there; 7 heads 18.0-20.4 against 23.1-23.3). Cold, per-head selection (one head per
    // call) was not slower but for the oracle at 16384, by 1-6% (per-head/ there).
    prefetch_rows(rows, row_stride, std::min(count, (stream ? kStreamGroupsAhead : 2) * W),
                  head_dim);
    // A short scan asks for its caller's next rows (RowsAhead) a share at each 16 channels
    // scored: the two-stage rule's next shortlisted block, while this one is scored.
    AheadLines next_rows;
    if (!stream) {
      next_rows.add(rows_ahead.first, rows_ahead.stride_bytes, rows_ahead.rows,
                    rows_ahead.row_bytes);
      next_rows.pace((count + W - 1) / W * (head_dim / 16) * head_groups);
    }
    // One group of W rows scored for every head, asking for `ahead`'s lines as it goes.
    const auto score_group = [&](std::int64_t r0, AheadLines& ahead) {
      const std::int64_t live = std::min<std::int64_t>(W, count - r0);
      if (live == W) {
        for (std::int64_t h0 = 0; h0 < heads; h0 += kHeadGroup) {
          score16_words_any(std::min(kHeadGroup, heads - h0), queries + h0 * head_dim, head_dim,
                            rows + r0 * row_stride, row_stride, out + h0 * out_stride + r0,
                            out_stride, ahead);
        }
        return;
      }
      thread_local std::vector<LocalBf16> padded_cells;
      padded_cells.resize(static_cast<std::size_t>(W * head_dim));
      bf16* padded = &padded_cells.data()->value;
      pad_rows16(rows + r0 * row_stride, row_stride, live, head_dim, padded);
      alignas(64) float lanes[kHeadGroup * W];
      for (std::int64_t h0 = 0; h0 < heads; h0 += kHeadGroup) {
        const std::int64_t group = std::min(kHeadGroup, heads - h0);
        score16_words_any(group, queries + h0 * head_dim, head_dim, padded, head_dim, lanes, W,
                          ahead);
        for (std::int64_t h = 0; h < group; ++h)
          std::copy_n(lanes + h * W, live, out + (h0 + h) * out_stride + r0);
      }
    };
    for (std::int64_t r0 = 0; r0 < count; r0 += W) {
      if (stream) {  // the group kStreamGroupsAhead ahead, asked for while this one is scored
        AheadLines own_rows;
        const std::int64_t next = r0 + kStreamGroupsAhead * W;
        own_rows.add(rows + next * row_stride,
                     row_stride * static_cast<std::ptrdiff_t>(sizeof(bf16)),
                     std::clamp<std::int64_t>(count - next, 0, W), row_bytes);
        own_rows.pace(head_dim / 16 * head_groups);
        score_group(r0, own_rows);
        own_rows.finish();
      } else {
        if (r0 + 3 * W <= count)
          prefetch_rows(rows + (r0 + 2 * W) * row_stride, row_stride, W, head_dim);
        score_group(r0, next_rows);
      }
    }
    if (!stream) next_rows.finish();
  }

  static void accumulate_value_words_any(std::int64_t heads, const float* weights,
                                         const float* rescale, const bf16* values,
                                         std::ptrdiff_t stride, std::int64_t rows,
                                         std::int64_t head_dim, float* accumulator) {
    switch (heads) {
      case 1:
        return accumulate_value_words<1>(weights, rescale, values, stride, rows, head_dim,
                                         accumulator);
      case 2:
        return accumulate_value_words<2>(weights, rescale, values, stride, rows, head_dim,
                                         accumulator);
      case 3:
        return accumulate_value_words<3>(weights, rescale, values, stride, rows, head_dim,
                                         accumulator);
      case 4:
        return accumulate_value_words<4>(weights, rescale, values, stride, rows, head_dim,
                                         accumulator);
      case 5:
        return accumulate_value_words<5>(weights, rescale, values, stride, rows, head_dim,
                                         accumulator);
      case 6:
        return accumulate_value_words<6>(weights, rescale, values, stride, rows, head_dim,
                                         accumulator);
      case 7:
        return accumulate_value_words<7>(weights, rescale, values, stride, rows, head_dim,
                                         accumulator);
      default:
        return accumulate_value_words<8>(weights, rescale, values, stride, rows, head_dim,
                                         accumulator);
    }
  }

  /// accumulate_values over bf16 rows for an accumulator in word order: each row's 32 channels
  /// of a slab are one load, widened to the even channels (words shifted up) and the odd ones
  /// (high halves masked).
  template <int kHeads>
  static void accumulate_value_words(const float* weights, const float* rescale, const bf16* values,
                                     std::ptrdiff_t stride, std::int64_t rows,
                                     std::int64_t head_dim, float* accumulator) {
    const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (std::int64_t c = 0; c < head_dim; c += 32) {
      __m512 even[kHeads], odd[kHeads];
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) {
        const __m512 factor = _mm512_set1_ps(rescale[h]);
        even[h] = _mm512_mul_ps(_mm512_loadu_ps(accumulator + h * head_dim + c), factor);
        odd[h] = _mm512_mul_ps(_mm512_loadu_ps(accumulator + h * head_dim + c + 16), factor);
      }
      const bf16* row = values + c;
      for (std::int64_t r = 0; r < rows; ++r, row += stride) {
        const __m512i words = _mm512_loadu_si512(row);
        const __m512 low = _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
        const __m512 high = _mm512_castsi512_ps(_mm512_and_si512(words, high_half));
#pragma GCC unroll 8
        for (int h = 0; h < kHeads; ++h) {
          const __m512 p = _mm512_set1_ps(weights[h * kAttendChunk + r]);
          even[h] = _mm512_fmadd_ps(p, low, even[h]);
          odd[h] = _mm512_fmadd_ps(p, high, odd[h]);
        }
      }
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) {
        _mm512_storeu_ps(accumulator + h * head_dim + c, even[h]);
        _mm512_storeu_ps(accumulator + h * head_dim + c + 16, odd[h]);
      }
    }
  }
#endif

  /// Asks for every cache line of `count` rows of `row_bytes` bytes, `stride` bytes apart: one
  /// run when the rows are packed (the q8_0 scales: 4 bytes a row at head_dim 64).
  static void prefetch_bytes(const void* first, std::ptrdiff_t stride, std::int64_t count,
                             std::int64_t row_bytes) {
    const auto* bytes = static_cast<const char*>(first);
    if (stride == row_bytes) {
      for (std::int64_t i = 0; i < count * row_bytes; i += 64) prefetch_line(bytes + i);
      if (count > 0) prefetch_line(bytes + count * row_bytes - 1);  // a run not line-aligned
      return;
    }
    for (std::int64_t r = 0; r < count; ++r) {
      for (std::int64_t i = 0; i < row_bytes; i += 64) prefetch_line(bytes + r * stride + i);
    }
  }

  /// q8_0 rows widened to packed f32 [rows, head_dim] (head_dim % 32 == 0), the scales first
  /// widened into scales_f32 [rows, head_dim / 32].
  static void widen_q8_0_rows(const std::int8_t* quants, std::ptrdiff_t quant_stride,
                              const f16* scales, std::ptrdiff_t scale_stride, std::int64_t rows,
                              std::int64_t head_dim, float* scales_f32, float* target) {
    const std::int64_t blocks = head_dim / 32;
    widen_q8_0_scales(scales, scale_stride, rows, blocks, scales_f32);
    const Q8BlockRows source{quants, quant_stride, scales_f32, blocks};
    for (std::int64_t r = 0; r < rows; ++r, target += head_dim) {
      for (std::int64_t i = 0; i < head_dim; i += W) source.load(r, i).store_unaligned(target + i);
    }
  }

  /// KernelTable::load_q8_0_rows: widen_q8_0_rows over groups of rows whose scales fit a
  /// buffer on the stack (so a packed run of scales converts by vector, as in attend_q8_0).
  static void load_q8_0_rows(const std::int8_t* quants, std::ptrdiff_t quant_stride,
                             const f16* scales, std::ptrdiff_t scale_stride, std::int64_t rows,
                             std::int64_t head_dim, float* out) {
    constexpr std::int64_t kScales = 256;
    const std::int64_t blocks = head_dim / 32;
    if (head_dim % 32 != 0 || blocks > kScales) {
      load_q8_0_rows_entry(quants, quant_stride, scales, scale_stride, rows, head_dim, out);
      return;
    }
    alignas(64) float scales_f32[kScales];
    const std::int64_t group = kScales / blocks;  // rows per pass
    for (std::int64_t r0 = 0; r0 < rows; r0 += group) {
      widen_q8_0_rows(quants + r0 * quant_stride, quant_stride, scales + r0 * scale_stride,
                      scale_stride, std::min(group, rows - r0), head_dim, scales_f32,
                      out + r0 * head_dim);
    }
  }

  static void widen_q8_0_scales(const f16* scales, std::ptrdiff_t stride, std::int64_t rows,
                                std::int64_t blocks, float* out) {
    if (stride == blocks) {  // packed: one vector conversion (F16C, FCVTL) per W scales
      Base::template load<f16>(scales, out, rows * blocks);
      return;
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t b = 0; b < blocks; ++b)
        out[r * blocks + b] = to_float(scales[r * stride + b]);
    }
  }

  /// attend<float> over q8_0 rows (KernelTable::attend_q8_0), never writing the values out:
  /// each chunk's keys are widened into L1 scratch once for all heads, as attend does for
  /// narrow keys; its values are widened in registers as accumulate_values reads them.
  static void attend_q8_0(const AttendArgs& a) {
    if (a.head_dim % 32 != 0) {  // W divides 32, so the blocked loops fit any multiple of 32
      attend_q8_0_entry<Base>(a);
      return;
    }
    const auto* keys = static_cast<const std::int8_t*>(a.keys);
    const auto* values = static_cast<const std::int8_t*>(a.values);
    const std::int64_t blocks = a.head_dim / 32;
    constexpr auto kScaleBytes = static_cast<std::int64_t>(sizeof(f16));
    float* scores = a.scratch;                               // [heads, kAttendChunk]
    float* converted = a.scratch + a.heads * kAttendChunk;   // [kAttendChunk, head_dim]
    float* rescale = converted + kAttendChunk * a.head_dim;  // [heads]: wide fold
    float* scales = rescale + a.heads;                       // [kAttendChunk, blocks]
    // As attend: the first chunk's values now, each later chunk during the one before it.
    const std::int64_t first_rows = std::min(kAttendChunk, a.rows);
    prefetch_bytes(values, a.value_stride, first_rows, a.head_dim);
    prefetch_bytes(a.value_scales, a.value_scale_stride * kScaleBytes, first_rows,
                   blocks * kScaleBytes);
    for (std::int64_t first = 0; first < a.rows; first += kAttendChunk) {
      const std::int64_t rows = std::min(kAttendChunk, a.rows - first);
      const std::int8_t* chunk_keys = keys + first * a.key_stride;
      const std::int8_t* chunk_values = values + first * a.value_stride;
      const f16* chunk_value_scales = a.value_scales + first * a.value_scale_stride;
      const std::int64_t next = first + rows;
      const std::int64_t next_rows = std::min(kAttendChunk, a.rows - next);
      AheadLines ahead;
      ahead.add(keys + next * a.key_stride, a.key_stride, next_rows, a.head_dim);
      ahead.add(a.key_scales + next * a.key_scale_stride, a.key_scale_stride * kScaleBytes,
                next_rows, blocks * kScaleBytes);
      ahead.add(values + next * a.value_stride, a.value_stride, next_rows, a.head_dim);
      ahead.add(a.value_scales + next * a.value_scale_stride, a.value_scale_stride * kScaleBytes,
                next_rows, blocks * kScaleBytes);
      pace_over_values(ahead, rows, a.head_dim);
      widen_q8_0_rows(chunk_keys, a.key_stride, a.key_scales + first * a.key_scale_stride,
                      a.key_scale_stride, rows, a.head_dim, scales, converted);
      score_rows<float>(a.queries, a.heads, a.head_dim, converted, a.head_dim, rows, scores,
                        kAttendChunk);
      widen_q8_0_scales(chunk_value_scales, a.value_scale_stride, rows, blocks, scales);
      const Q8BlockRows chunk{chunk_values, a.value_stride, scales, blocks};
#if AMC_SIMD_WIDE_FOLD
      if constexpr (W == 16) {
        fold_chunk_scores_wide<Arch>(a, scores, rows, rescale);
        accumulate_values_any(a.heads, scores, rescale, chunk, rows, a.head_dim, a.accumulator,
                              &ahead);
        ahead.finish();
        continue;
      }
#endif
      fold_chunk_scores<Base>(a, scores, rows);
      accumulate_values_any(a.heads, scores, nullptr, chunk, rows, a.head_dim, a.accumulator,
                            &ahead);
      ahead.finish();
    }
  }
};

}  // namespace
}  // namespace amc::kernels

// SIMD primitives over xsimd batches, with the scalar loops of ScalarOps as tails.
// Included by the per-instruction-set translation units only; each one compiles it with its own
// target flags (see cmake/AmcSimd.cmake).
#pragma once

#include <immintrin.h>

#include <xsimd/xsimd.hpp>

#include "kernels_generic.hpp"

namespace amc::kernels {
namespace {

template <class Arch>
using FloatBatch = xsimd::batch<float, Arch>;

// Horizontal sum: xsimd 8 calls it hadd, later versions reduce_add.
template <class Arch>
inline float horizontal_sum(const FloatBatch<Arch>& x) {
#if XSIMD_VERSION_MAJOR >= 9
  return xsimd::reduce_add(x);
#else
  return xsimd::hadd(x);
#endif
}

template <class Arch>
inline float horizontal_max(const FloatBatch<Arch>& x) {
  alignas(64) float lanes[FloatBatch<Arch>::size];
  x.store_aligned(lanes);
  float m = lanes[0];
  for (std::size_t i = 1; i < FloatBatch<Arch>::size; ++i) m = std::max(m, lanes[i]);
  return m;
}

// Widening loads: one batch of f32 from batch-size elements of the storage type. bf16 is the
// top half of an f32, so a zero-extend and a 16-bit shift; f16 uses the F16C conversion where
// the instruction set has it.
template <class Arch>
inline FloatBatch<Arch> load_f32(const float* p) {
  return FloatBatch<Arch>::load_unaligned(p);
}

template <class Arch>
inline FloatBatch<Arch> load_f32(const bf16* p) {
  if constexpr (FloatBatch<Arch>::size == 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (FloatBatch<Arch>::size == 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    static_assert(FloatBatch<Arch>::size == 4, "amc: unsupported vector width for bf16 loads");
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
  }
}

template <class Arch>
inline FloatBatch<Arch> load_f32(const f16* p) {
  if constexpr (FloatBatch<Arch>::size == 16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else if constexpr (FloatBatch<Arch>::size == 8) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    // SSE2 has no half-precision conversion: convert the four lanes in scalar code.
    alignas(16) float lanes[4];
    for (int i = 0; i < 4; ++i) lanes[i] = to_float(p[i]);
    return FloatBatch<Arch>::load_aligned(lanes);
  }
}

template <class Arch>
struct SimdOps {
  using Batch = FloatBatch<Arch>;
  static constexpr int kLanes = static_cast<int>(Batch::size);
  static constexpr std::int64_t W = kLanes;

  template <KvStorage T>
  static float dot(const float* q, const T* x, std::int64_t n) {
    // Two accumulators hide the FMA latency on the short rows (head_dim 64) of decode.
    Batch acc0(0.0f), acc1(0.0f);
    std::int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      acc0 = xsimd::fma(Batch::load_unaligned(q + i), load_f32<Arch>(x + i), acc0);
      acc1 = xsimd::fma(Batch::load_unaligned(q + i + W), load_f32<Arch>(x + i + W), acc1);
    }
    for (; i + W <= n; i += W) {
      acc0 = xsimd::fma(Batch::load_unaligned(q + i), load_f32<Arch>(x + i), acc0);
    }
    return horizontal_sum<Arch>(acc0 + acc1) + ScalarOps::dot<T>(q + i, x + i, n - i);
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

  static float channel_bound_row(const float* q, const float* lo, const float* hi, std::int64_t n) {
    Batch acc(0.0f);
    std::int64_t i = 0;
    for (; i + W <= n; i += W) {
      const Batch qi = Batch::load_unaligned(q + i);
      acc += xsimd::max(qi * Batch::load_unaligned(lo + i), qi * Batch::load_unaligned(hi + i));
    }
    return horizontal_sum<Arch>(acc) + ScalarOps::channel_bound_row(q + i, lo + i, hi + i, n - i);
  }
};

}  // namespace
}  // namespace amc::kernels

namespace amc::kernels {
namespace {

/// Lane r of the result is `op` folded over the lanes of rows[r], for 16 rows at once (op
/// associative and commutative: add or max): fold 256-bit halves, then 128-bit quarters, then
/// within 128-bit lanes, and finally undo the 4 x 4 transpose that leaves. Two shuffles and one
/// op per step, 15 steps for 16 results.
template <class Op>
inline __m512 transpose_reduce16(const __m512* rows, Op op) {
  __m512 halves[8];
  for (int i = 0; i < 8; ++i) {
    const __m512 a = rows[2 * i], b = rows[2 * i + 1];
    halves[i] = op(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                   _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 quarters[4];  // 128-bit lane k of quarters[j] holds 4 partial results of row 4j + k
  for (int j = 0; j < 4; ++j) {
    const __m512 a = halves[2 * j], b = halves[2 * j + 1];
    quarters[j] = op(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                     _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  const __m512 pairs01 = op(_mm512_shuffle_ps(quarters[0], quarters[1], _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_ps(quarters[0], quarters[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 pairs23 = op(_mm512_shuffle_ps(quarters[2], quarters[3], _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_ps(quarters[2], quarters[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Element 4k + j now holds the result of row 4j + k.
  const __m512 folded = op(_mm512_shuffle_ps(pairs01, pairs23, _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_ps(pairs01, pairs23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, folded);
}

/// Lane r of the result is the sum of the lanes of rows[r], for W rows at once.
/// xsimd::haddp does this, but xsimd 8.1's AVX-512 version returns the sums permuted
/// (0 1 4 5 2 3 6 7 ...), so the 16-lane case is written out.
template <class Arch>
inline FloatBatch<Arch> transpose_sum(const FloatBatch<Arch>* rows) {
  if constexpr (FloatBatch<Arch>::size == 16) {
    __m512 raw[16];
    for (int i = 0; i < 16; ++i) raw[i] = rows[i];
    return transpose_reduce16(raw, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
  } else {
    return xsimd::haddp(rows);
  }
}

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
        _mm_prefetch(reinterpret_cast<const char*>(rows + r * stride + i), _MM_HINT_T0);
      }
    }
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

  /// Rows per tile of a long scan (the mean keys of a long cache): 256 rows of f32 at head_dim
  /// 64 are 64 KiB, which L2 holds next to the tile being scored. Scans of at least four tiles
  /// are tiled: measured faster cold at 2048 and 4096 rows (65536 and 131072 positions at block
  /// 32); 128-row tiles gained nothing at 512 rows, and on rows already in cache the extra read
  /// costs about 1.1 us per 512 rows (docs/performance.md).
  static constexpr std::int64_t kTouchRows = 256;
  static constexpr std::int64_t kTouchMinRows = 4 * kTouchRows;

  /// Reads every cache line of `count` rows with plain vector loads (integer ORs, so no
  /// floating-point assist on whatever bits the rows hold). A tight run of independent loads
  /// keeps many misses in flight and the hardware prefetcher at full rate, where the scoring
  /// loop, dense in arithmetic, has few loads in its window at a time.
  template <KvStorage T>
  static void touch_rows(const T* rows, std::ptrdiff_t stride, std::int64_t count,
                         std::int64_t head_dim) {
    using Bits = xsimd::batch<std::int32_t, Arch>;
    constexpr std::int64_t kLine = 64 / static_cast<std::int64_t>(sizeof(T));  // elements per line
    const auto line = [](const T* p) {
      return Bits::load_unaligned(reinterpret_cast<const std::int32_t*>(p));
    };
    Bits a(0), b(0), c(0), d(0);
    if (stride == head_dim) {  // one run of count * head_dim elements: four lines per step
      const std::int64_t n = count * head_dim;
      std::int64_t i = 0;
      for (; i + 4 * kLine <= n; i += 4 * kLine) {
        a = a | line(rows + i);
        b = b | line(rows + i + kLine);
        c = c | line(rows + i + 2 * kLine);
        d = d | line(rows + i + 3 * kLine);
      }
      for (; i + kLine <= n; i += kLine) a = a | line(rows + i);
    } else {
      for (std::int64_t r = 0; r < count; ++r) {
        for (std::int64_t i = 0; i + kLine <= head_dim; i += kLine)
          a = a | line(rows + r * stride + i);
      }
    }
    alignas(64) std::int32_t lanes[Bits::size];
    ((a | b) | (c | d)).store_aligned(lanes);
    asm volatile("" : : "r"(lanes[0]) : "memory");  // the loads must happen
  }

  template <std::int64_t kDim, KvStorage T>
  static void score_rows_fixed(const float* queries, std::int64_t heads, std::int64_t head_dim,
                               const T* rows, std::ptrdiff_t row_stride, std::int64_t count,
                               float* out, std::ptrdiff_t out_stride) {
    // Row groups outside, heads inside: a group of W rows is read from memory once and stays
    // in L1 while every head scores it (the mean keys of a long cache are read in one pass).
    std::int64_t r0 = 0;
    for (; r0 + W <= count; r0 += W) {
      // Long scans (the mean keys of a long cache) stream from memory: ask two groups ahead.
      if (r0 + 3 * W <= count)
        prefetch_rows(rows + (r0 + 2 * W) * row_stride, row_stride, W, head_dim);
      for (std::int64_t h = 0; h < heads; ++h) {
        score_group<kDim, T>(queries + h * head_dim, head_dim, rows + r0 * row_stride, row_stride,
                             W)
            .store_unaligned(out + h * out_stride + r0);
      }
    }
    if (r0 < count) {
      alignas(64) float lanes[W];
      for (std::int64_t h = 0; h < heads; ++h) {
        score_group<kDim, T>(queries + h * head_dim, head_dim, rows + r0 * row_stride, row_stride,
                             count - r0)
            .store_aligned(lanes);
        std::copy_n(lanes, count - r0, out + h * out_stride + r0);
      }
    }
  }

  /// score_rows_fixed over a long scan from cold memory: read tile t + 1 with plain loads, then
  /// score tile t out of L2. Selection at 131072 positions (4096 rows of mean keys, 7 heads)
  /// took 69-73 us cold this way against 82-92 us scored straight from memory with prefetching.
  /// A separate function so that the short scans of the attention kernel keep their code.
  template <std::int64_t kDim, KvStorage T>
  static void score_rows_tiled(const float* queries, std::int64_t heads, std::int64_t head_dim,
                               const T* rows, std::ptrdiff_t row_stride, std::int64_t count,
                               float* out, std::ptrdiff_t out_stride) {
    touch_rows(rows, row_stride, std::min(kTouchRows, count), head_dim);
    for (std::int64_t t0 = 0; t0 < count; t0 += kTouchRows) {
      const std::int64_t t1 = std::min(t0 + kTouchRows, count);
      if (t1 < count)
        touch_rows(rows + t1 * row_stride, row_stride, std::min(kTouchRows, count - t1), head_dim);
      score_rows_fixed<kDim, T>(queries, heads, head_dim, rows + t0 * row_stride, row_stride,
                                t1 - t0, out + t0, out_stride);
    }
  }

  template <std::int64_t kDim, KvStorage T>
  static void score_rows_any_length(const float* queries, std::int64_t heads, std::int64_t head_dim,
                                    const T* rows, std::ptrdiff_t row_stride, std::int64_t count,
                                    float* out, std::ptrdiff_t out_stride) {
    if (count >= kTouchMinRows && head_dim * static_cast<std::int64_t>(sizeof(T)) >= 64) {
      score_rows_tiled<kDim, T>(queries, heads, head_dim, rows, row_stride, count, out, out_stride);
    } else {
      score_rows_fixed<kDim, T>(queries, heads, head_dim, rows, row_stride, count, out, out_stride);
    }
  }

  /// out[h * out_stride + r] = <q_h, row_r>; rows of storage type T.
  template <KvStorage T>
  static void score_rows(const float* queries, std::int64_t heads, std::int64_t head_dim,
                         const void* rows_ptr, std::ptrdiff_t row_stride, std::int64_t count,
                         float* out, std::ptrdiff_t out_stride) {
    const T* rows = static_cast<const T*>(rows_ptr);
    if (head_dim % W != 0) {
      score_rows_entry<Base, T>(queries, heads, head_dim, rows, row_stride, count, out, out_stride);
    } else if (head_dim == 64 && 64 / W + W + 2 <= kRegisters) {
      score_rows_any_length<64, T>(queries, heads, head_dim, rows, row_stride, count, out,
                                   out_stride);
    } else if (head_dim == 128 && 128 / W + W + 2 <= kRegisters) {
      score_rows_any_length<128, T>(queries, heads, head_dim, rows, row_stride, count, out,
                                    out_stride);
    } else {
      score_rows_any_length<0, T>(queries, heads, head_dim, rows, row_stride, count, out,
                                  out_stride);
    }
  }

  /// accumulator[h] = rescale[h] * accumulator[h] + sum_r weights[h, r] * values[r] for kHeads
  /// heads (rescale == nullptr: no rescaling). The rescale of the online softmax rides on the
  /// loads of the accumulators into registers instead of taking a pass of its own.
  template <int kHeads, KvStorage T>
  static void accumulate_values(const float* weights, const float* rescale, const T* values,
                                std::ptrdiff_t stride, std::int64_t rows, std::int64_t head_dim,
                                float* accumulator) {
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
      const T* row = values + c;
      for (std::int64_t r = 0; r < rows; ++r, row += stride) {
        const Batch v0 = load_f32<Arch>(row);
        const Batch v1 = load_f32<Arch>(row + W);
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
      const T* row = values + c;
      for (std::int64_t r = 0; r < rows; ++r, row += stride) {
        const Batch v = load_f32<Arch>(row);
#pragma GCC unroll 8
        for (int h = 0; h < kHeads; ++h)
          acc[h] = xsimd::fma(Batch(weights[h * kAttendChunk + r]), v, acc[h]);
      }
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) acc[h].store_unaligned(accumulator + h * head_dim + c);
    }
  }

  template <KvStorage T>
  static void accumulate_values_any(std::int64_t heads, const float* weights, const float* rescale,
                                    const T* values, std::ptrdiff_t stride, std::int64_t rows,
                                    std::int64_t head_dim, float* accumulator) {
    for (std::int64_t h0 = 0; h0 < heads; h0 += kHeadGroup) {
      const float* w = weights + h0 * kAttendChunk;
      const float* r = rescale == nullptr ? nullptr : rescale + h0;
      float* acc = accumulator + h0 * head_dim;
      switch (std::min(kHeadGroup, heads - h0)) {
        case 1:
          accumulate_values<1>(w, r, values, stride, rows, head_dim, acc);
          break;
        case 2:
          accumulate_values<2>(w, r, values, stride, rows, head_dim, acc);
          break;
        case 3:
          accumulate_values<3>(w, r, values, stride, rows, head_dim, acc);
          break;
        case 4:
          accumulate_values<4>(w, r, values, stride, rows, head_dim, acc);
          break;
        case 5:
          accumulate_values<5>(w, r, values, stride, rows, head_dim, acc);
          break;
        case 6:
          accumulate_values<6>(w, r, values, stride, rows, head_dim, acc);
          break;
        case 7:
          accumulate_values<7>(w, r, values, stride, rows, head_dim, acc);
          break;
        default:
          accumulate_values<8>(w, r, values, stride, rows, head_dim, acc);
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

  /// The AVX-512 fold of one chunk's scores ([heads, kAttendChunk], `rows` used) into the
  /// running states, 16 heads at a time: each head's chunk max and chunk sum land in one lane of
  /// a transposing reduction, where fold_chunk_scores reduces every head horizontally in a
  /// serial chain (max, then exp, then sum; 22% of the hot dense kernel's profile, and the hot
  /// kernel about 5% faster without it: docs/performance.md). Scores past
  /// `rows` are set to -inf, which changes no max and adds exp(-inf) = 0 to no sum. The
  /// accumulators' rescale factors (1 where a head's max did not grow) go to rescale[heads], for
  /// accumulate_values to apply as it loads them.
  static void fold_chunk_scores_wide(const AttendArgs& a, float* scores, std::int64_t rows,
                                     float* rescale) requires(W == 16) {
    constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
    static_assert(kAttendChunk == 2 * W, "the fold reads each head's chunk as two vectors");
    if (rows < kAttendChunk) {
      for (std::int64_t h = 0; h < a.heads; ++h)
        std::fill(scores + h * kAttendChunk + rows, scores + (h + 1) * kAttendChunk, kMinusInf);
    }
    const auto add = [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); };
    const auto max = [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); };
    for (std::int64_t h0 = 0; h0 < a.heads; h0 += W) {
      const int n = static_cast<int>(std::min<std::int64_t>(W, a.heads - h0));
      const auto live = static_cast<__mmask16>((1u << n) - 1u);
      float* chunk = scores + h0 * kAttendChunk;
      __m512 lanes[W];
      for (int h = 0; h < W; ++h) {
        lanes[h] = h < n ? _mm512_max_ps(_mm512_loadu_ps(chunk + h * kAttendChunk),
                                         _mm512_loadu_ps(chunk + h * kAttendChunk + W))
                         : _mm512_set1_ps(kMinusInf);
      }
      const __m512 old_max =
          _mm512_mask_loadu_ps(_mm512_set1_ps(kMinusInf), live, a.running_max + h0);
      // max_ps(x, y) is x > y ? x : y, which for (chunk, old) is std::max(old, chunk) of the
      // scalar fold, NaN cases included.
      const __m512 new_max = _mm512_max_ps(transpose_reduce16(lanes, max), old_max);
      alignas(64) float shift[W];
      _mm512_store_ps(shift, new_max);
      for (int h = 0; h < W; ++h) {
        if (h >= n) {
          lanes[h] = _mm512_setzero_ps();
          continue;
        }
        float* head = chunk + h * kAttendChunk;
        const Batch s(shift[h]);
        const Batch e0 = xsimd::exp(Batch::load_unaligned(head) - s);
        const Batch e1 = xsimd::exp(Batch::load_unaligned(head + W) - s);
        e0.store_unaligned(head);
        e1.store_unaligned(head + W);
        lanes[h] = e0 + e1;
      }
      const __m512 chunk_sum = transpose_reduce16(lanes, add);
      const __m512 old_sum = _mm512_maskz_loadu_ps(live, a.running_sum + h0);
      // As the scalar fold: rescale only where the max grew and something was accumulated.
      const __mmask16 grew = _mm512_cmp_ps_mask(new_max, old_max, _CMP_GT_OQ) &
                             _mm512_cmp_ps_mask(old_sum, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      const __m512 factor = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), grew,
                                               xsimd::exp(Batch(_mm512_sub_ps(old_max, new_max))));
      _mm512_mask_storeu_ps(a.running_sum + h0, live,
                            _mm512_add_ps(_mm512_mul_ps(old_sum, factor), chunk_sum));
      _mm512_mask_storeu_ps(a.running_max + h0, live, new_max);
      _mm512_mask_storeu_ps(rescale + h0, live, factor);
    }
  }

  template <KvStorage T>
  static void attend(const AttendArgs& a) {
    if (a.head_dim % W != 0) {
      attend_entry<Base, T>(a);
      return;
    }
    const T* keys = static_cast<const T*>(a.keys);
    const T* values = static_cast<const T*>(a.values);
    float* scores = a.scratch;                               // [heads, kAttendChunk]
    float* converted = a.scratch + a.heads * kAttendChunk;   // [kAttendChunk, head_dim]
    float* rescale = converted + kAttendChunk * a.head_dim;  // [heads]
    for (std::int64_t first = 0; first < a.rows; first += kAttendChunk) {
      const std::int64_t rows = std::min(kAttendChunk, a.rows - first);
      const T* chunk_keys = keys + first * a.key_stride;
      const T* chunk_values = values + first * a.value_stride;
      // The chunk's values are needed only after its scores, and the next chunk's keys after
      // that: asking for both now overlaps their memory latency with this chunk's arithmetic.
      prefetch_rows(chunk_values, a.value_stride, rows, a.head_dim);
      const std::int64_t next_rows = std::min(kAttendChunk, a.rows - first - rows);
      prefetch_rows(chunk_keys + rows * a.key_stride, a.key_stride, next_rows, a.head_dim);
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
      if constexpr (W == 16) {
        fold_chunk_scores_wide(a, scores, rows, rescale);
        accumulate_values_any(a.heads, scores, rescale, chunk_values, a.value_stride, rows,
                              a.head_dim, a.accumulator);
      } else {
        fold_chunk_scores<Base>(a, scores, rows);  // rescales the accumulators itself
        accumulate_values_any(a.heads, scores, nullptr, chunk_values, a.value_stride, rows,
                              a.head_dim, a.accumulator);
      }
    }
  }
};

}  // namespace
}  // namespace amc::kernels

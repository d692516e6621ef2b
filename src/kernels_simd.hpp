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
      xsimd::fma(a, Batch::load_unaligned(x + i), Batch::load_unaligned(y + i)).store_unaligned(y + i);
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

  static float channel_bound_row(const float* q, const float* lo, const float* hi,
                                 std::int64_t n) {
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

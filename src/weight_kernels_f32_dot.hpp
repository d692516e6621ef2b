// The dot products of stored blocks with f32 activations (amc::QuantizedDotKernel), the decode's
// matrix-vector products with --activations f32: every type that dequantizes has one, the
// dequantization into a chunk of 256 values then products (dot_by_chunks), and fused kernels
// decode Q8_0, Q4_0 and Q4_1 in registers with AVX2, AVX-512 and NEON. Included by
// weight_kernels_make_table.hpp, so compiled once per instruction set.
#pragma once

#include "ggml_types.hpp"
#include "weight_kernels_dequantize.hpp"

namespace amc::weight_kernels {
namespace {

#if defined(__AVX2__) && defined(__FMA__)
// --- Dot products with f32 activations, AVX2 ---------------------------------------------------
// Each block decoded in registers exactly as the dequantization decodes it
// (weight_kernels_dequantize.hpp), then multiplied with x and summed
// in four 8-lane accumulators (element i of a block of 32 into accumulator i / 8, lane i % 8),
// which are added pairwise at the end. No dequantized row is ever written to memory.

/// A block of 32 as four 8-float vectors (elements 0-7, 8-15, 16-23, 24-31), signed quants
/// times d.
struct Block32 {
  __m256 w[4];
};

inline Block32 signed32_times(__m256i q, __m256 d) {
  const __m128i low = _mm256_castsi256_si128(q);
  const __m128i high = _mm256_extracti128_si256(q, 1);
  return {{_mm256_mul_ps(i8x8_to_ps(low), d), _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(low, 8)), d),
           _mm256_mul_ps(i8x8_to_ps(high), d),
           _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(high, 8)), d)}};
}

inline Block32 unsigned32_fma(__m256i q, __m256 d, __m256 m) {
  const __m128i low = _mm256_castsi256_si128(q);
  const __m128i high = _mm256_extracti128_si256(q, 1);
  return {{_mm256_fmadd_ps(u8x8_to_ps(low), d, m),
           _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(low, 8)), d, m),
           _mm256_fmadd_ps(u8x8_to_ps(high), d, m),
           _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(high, 8)), d, m)}};
}

/// The dot product over `blocks` blocks of 32 of `Bytes` bytes each, decode(in) giving one
/// block's values.
template <std::size_t Bytes, class Decode>
inline float dot32_avx2(const float* __restrict x, const std::byte* in_bytes, std::size_t blocks,
                        const Decode& decode) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (std::size_t b = 0; b < blocks; ++b, in += Bytes, x += 32) {
    const Block32 w = decode(in);
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(w.w[k], _mm256_loadu_ps(x + 8 * k), acc[k]);
  }
  return sum_accumulators(acc[0], acc[1], acc[2], acc[3]);
}

[[maybe_unused]] float q8_0_dot_avx2(const float* x, const std::byte* in, std::size_t blocks) {
  return dot32_avx2<34>(x, in, blocks, [](const u8* block) {
    return signed32_times(load32(block + 2), _mm256_set1_ps(scale_f16(block)));
  });
}

[[maybe_unused]] float q4_0_dot_avx2(const float* x, const std::byte* in, std::size_t blocks) {
  return dot32_avx2<18>(x, in, blocks, [](const u8* block) {
    return signed32_times(_mm256_sub_epi8(nibbles32(block + 2), _mm256_set1_epi8(8)),
                          _mm256_set1_ps(scale_f16(block)));
  });
}

[[maybe_unused]] float q4_1_dot_avx2(const float* x, const std::byte* in, std::size_t blocks) {
  return dot32_avx2<20>(x, in, blocks, [](const u8* block) {
    return unsigned32_fma(nibbles32(block + 4), _mm256_set1_ps(scale_f16(block)),
                          _mm256_set1_ps(scale_f16(block + 2)));
  });
}
#endif  // __AVX2__ && __FMA__

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__)
// --- Dot products with f32 activations, AVX-512 ----------------------------------------------
// As the AVX2 ones at twice the width: a block of 32 is two 16-float vectors, blocks taken in
// pairs, so four accumulators (element i of block b into accumulator 2 (b % 2) + i / 16, lane
// i % 16), added pairwise at the end. The f16 scales through F16C (exact, as half_to_float).

/// ((a0 + a1) + (a2 + a3)), then its 16 lanes (the compiler's reduction order, fixed per build).
inline float sum_accumulators(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

struct Block32x16 {
  __m512 w[2];
};

/// Bytes 0-15 of a Q4 block's nibbles, low nibbles (elements 0-15) and high (16-31), as ints.
inline void nibbles16x2(const u8* qs, __m512i& low, __m512i& high) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  low = _mm512_cvtepu8_epi32(_mm_and_si128(raw, mask));
  high = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), mask));
}

template <std::size_t Bytes, class Decode>
inline float dot32_avx512(const float* __restrict x, const std::byte* in_bytes, std::size_t blocks,
                          const Decode& decode) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  std::size_t b = 0;
  for (; b + 2 <= blocks; b += 2, in += 2 * Bytes, x += 64) {
    const Block32x16 w0 = decode(in), w1 = decode(in + Bytes);
    acc[0] = _mm512_fmadd_ps(w0.w[0], _mm512_loadu_ps(x), acc[0]);
    acc[1] = _mm512_fmadd_ps(w0.w[1], _mm512_loadu_ps(x + 16), acc[1]);
    acc[2] = _mm512_fmadd_ps(w1.w[0], _mm512_loadu_ps(x + 32), acc[2]);
    acc[3] = _mm512_fmadd_ps(w1.w[1], _mm512_loadu_ps(x + 48), acc[3]);
  }
  if (b < blocks) {
    const Block32x16 w0 = decode(in);
    acc[0] = _mm512_fmadd_ps(w0.w[0], _mm512_loadu_ps(x), acc[0]);
    acc[1] = _mm512_fmadd_ps(w0.w[1], _mm512_loadu_ps(x + 16), acc[1]);
  }
  return sum_accumulators(acc[0], acc[1], acc[2], acc[3]);
}

float q8_0_dot_avx512(const float* x, const std::byte* in, std::size_t blocks) {
  return dot32_avx512<34>(x, in, blocks, [](const u8* block) {
    const __m512 d = _mm512_set1_ps(scale_f16(block));
    const __m512i q0 =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)));
    const __m512i q1 =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 18)));
    return Block32x16{
        {_mm512_mul_ps(_mm512_cvtepi32_ps(q0), d), _mm512_mul_ps(_mm512_cvtepi32_ps(q1), d)}};
  });
}

float q4_0_dot_avx512(const float* x, const std::byte* in, std::size_t blocks) {
  return dot32_avx512<18>(x, in, blocks, [](const u8* block) {
    const __m512 d = _mm512_set1_ps(scale_f16(block));
    __m512i low, high;
    nibbles16x2(block + 2, low, high);
    const __m512i eight = _mm512_set1_epi32(8);
    return Block32x16{{_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(low, eight)), d),
                       _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(high, eight)), d)}};
  });
}

float q4_1_dot_avx512(const float* x, const std::byte* in, std::size_t blocks) {
  return dot32_avx512<20>(x, in, blocks, [](const u8* block) {
    const __m512 d = _mm512_set1_ps(scale_f16(block));
    const __m512 m = _mm512_set1_ps(scale_f16(block + 2));
    __m512i low, high;
    nibbles16x2(block + 4, low, high);
    return Block32x16{{_mm512_fmadd_ps(_mm512_cvtepi32_ps(low), d, m),
                       _mm512_fmadd_ps(_mm512_cvtepi32_ps(high), d, m)}};
  });
}
#endif  // __AVX512F__ && __AVX512BW__ && __F16C__

#if AMC_WEIGHT_NEON_KERNELS
// --- Dot products with f32 activations, NEON -------------------------------------------------
// As the AVX2 ones with 4-float vectors: a block of 32 decoded in registers into eight vectors
// (each value exact, as the dequantization's), multiplied with x and summed in eight
// accumulators (element i of a block into accumulator i / 4, lane i % 4), added pairwise at
// the end: each lane sums one product per block, then 3 + 2 additions, as the AVX2 order.

/// A block of 32 as eight 4-float vectors (elements 0-3, 4-7, ..., 28-31).
struct Block32x4 {
  float32x4_t w[8];
};

/// The block's 32 quants (two vectors of 16, signed or unsigned) times d; block_fma adds m.
template <class Bytes16>
inline Block32x4 block_times(Bytes16 q0, Bytes16 q1, float d) {
  const float32x4_t dv = vdupq_n_f32(d);
  const auto times = [&](float32x4_t q) { return vmulq_f32(q, dv); };
  Block32x4 block;
  widen16(q0, block.w, times);
  widen16(q1, block.w + 4, times);
  return block;
}

inline Block32x4 block_fma(uint8x16_t q0, uint8x16_t q1, float d, float m) {
  const float32x4_t dv = vdupq_n_f32(d), mv = vdupq_n_f32(m);
  // q * d is exact, so the fused form rounds once, as q * d + m does.
  const auto fma = [&](float32x4_t q) { return vfmaq_f32(mv, q, dv); };
  Block32x4 block;
  widen16(q0, block.w, fma);
  widen16(q1, block.w + 4, fma);
  return block;
}

template <std::size_t Bytes, class Decode>
inline float dot32_neon(const float* __restrict x, const std::byte* in_bytes, std::size_t blocks,
                        const Decode& decode) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  float32x4_t acc[8];
  for (float32x4_t& a : acc) a = vdupq_n_f32(0.0f);
  for (std::size_t b = 0; b < blocks; ++b, in += Bytes, x += 32) {
    const Block32x4 w = decode(in);
    for (int k = 0; k < 8; ++k) acc[k] = vfmaq_f32(acc[k], w.w[k], vld1q_f32(x + 4 * k));
  }
  const float32x4_t low = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
  const float32x4_t high = vaddq_f32(vaddq_f32(acc[4], acc[5]), vaddq_f32(acc[6], acc[7]));
  return vaddvq_f32(vaddq_f32(low, high));
}

float q8_0_dot_neon(const float* x, const std::byte* in, std::size_t blocks) {
  return dot32_neon<34>(x, in, blocks, [](const u8* block) {
    return block_times(vld1q_s8(reinterpret_cast<const std::int8_t*>(block + 2)),
                       vld1q_s8(reinterpret_cast<const std::int8_t*>(block + 18)),
                       scale_f16(block));
  });
}

float q4_0_dot_neon(const float* x, const std::byte* in, std::size_t blocks) {
  return dot32_neon<18>(x, in, blocks, [](const u8* block) {
    const uint8x16_t raw = vld1q_u8(block + 2);
    const int8x16_t eight = vdupq_n_s8(8);
    return block_times(vsubq_s8(vreinterpretq_s8_u8(low_nibbles(raw)), eight),
                       vsubq_s8(vreinterpretq_s8_u8(high_nibbles(raw)), eight), scale_f16(block));
  });
}

float q4_1_dot_neon(const float* x, const std::byte* in, std::size_t blocks) {
  return dot32_neon<20>(x, in, blocks, [](const u8* block) {
    const uint8x16_t raw = vld1q_u8(block + 4);
    return block_fma(low_nibbles(raw), high_nibbles(raw), scale_f16(block), scale_f16(block + 2));
  });
}
#endif  // AMC_WEIGHT_NEON_KERNELS

/// The dot product of any type: the table's dequantization into a chunk of 256 values in L1,
/// then products summed in 32 lanes (element i of the chunk into lane i % 32), added pairwise
/// at the end. Every table has it; the SIMD ones replace it where a fused kernel exists.
template <GgmlType K>
float dot_by_chunks(const float* __restrict x, const std::byte* in, std::size_t blocks) {
  constexpr std::size_t kElements = block_elements(K), kBytes = block_bytes(K);
  constexpr std::size_t kBlocksPerChunk = 256 / kElements;
  constexpr DequantizeKernel<float> decode = dequantize_kernel<K, float>();
  alignas(64) float w[256];
  float acc[32] = {};
  for (std::size_t b = 0; b < blocks; b += kBlocksPerChunk) {
    const std::size_t count = std::min(kBlocksPerChunk, blocks - b);
    decode(in + b * kBytes, w, count);
    const float* __restrict xb = x + b * kElements;
    const std::size_t n = count * kElements;
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      for (int l = 0; l < 32; ++l) acc[l] += w[i + l] * xb[i + l];
    }
    // A plain type's last partial chunk: fewer than 32 values, lane t for value i + t.
    for (std::size_t t = 0; t < n - i && t < 32; ++t) acc[t] += w[i + t] * xb[i + t];
  }
  for (int width = 16; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

/// The instruction set's fused kernel of a type (decoded in registers; else std::nullptr_t,
/// is_kernel).
template <GgmlType T>
inline constexpr std::nullptr_t fused_dot = nullptr;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__)
template <>
inline constexpr QuantizedDotKernel fused_dot<GgmlType::Q8_0> = q8_0_dot_avx512;
template <>
inline constexpr QuantizedDotKernel fused_dot<GgmlType::Q4_0> = q4_0_dot_avx512;
template <>
inline constexpr QuantizedDotKernel fused_dot<GgmlType::Q4_1> = q4_1_dot_avx512;
#elif defined(__AVX2__) && defined(__FMA__)
template <>
inline constexpr QuantizedDotKernel fused_dot<GgmlType::Q8_0> = q8_0_dot_avx2;
template <>
inline constexpr QuantizedDotKernel fused_dot<GgmlType::Q4_0> = q4_0_dot_avx2;
template <>
inline constexpr QuantizedDotKernel fused_dot<GgmlType::Q4_1> = q4_1_dot_avx2;
#elif AMC_WEIGHT_NEON_KERNELS
template <>
inline constexpr QuantizedDotKernel fused_dot<GgmlType::Q8_0> = q8_0_dot_neon;
template <>
inline constexpr QuantizedDotKernel fused_dot<GgmlType::Q4_0> = q4_0_dot_neon;
template <>
inline constexpr QuantizedDotKernel fused_dot<GgmlType::Q4_1> = q4_1_dot_neon;
#endif

/// The table's dot with f32 activations for T: its fused kernel where it has one, else by chunks.
template <GgmlType T>
consteval QuantizedDotKernel f32_dot_kernel() {
  if constexpr (is_kernel<decltype(fused_dot<T>)>) {
    return fused_dot<T>;
  } else {
    return dot_by_chunks<T>;
  }
}

}  // namespace
}  // namespace amc::weight_kernels

// The activations quantized for the int8 dot products (amc::quantize_activations): per block of
// 32, a scale and 32 int8 quants, the same bits on every instruction set. Included by
// weight_kernels_make_table.hpp, so compiled once per instruction set.
#pragma once

#include "weight_kernels.hpp"
#include "weight_kernels_common.hpp"

namespace amc::weight_kernels {
namespace {

// --- Activations quantized to int8 (amc::quantize_activations) --------------------------------
// Per block of 32: d = max|x| / 127, q = round(x * (1 / d)) with ties away from zero (std::round;
// the product x * (1 / d), not x / d: the two can round differently), and the sum of the q.
// Two kinds of block have all quants 0: one holding a NaN or an infinity gets a NaN scale, so
// that every product with it is NaN (no number that looks valid, and no float-to-integer
// conversion out of range); one whose 1 / d is not finite (all zeros, or max|x| below 127 *
// 2^-128, where d is subnormal and 1 / d overflows) gets scale 0: its values are zero to within
// 4e-37. Elsewhere d has at least 22 significant bits, so |x / d| <= 127.0001 and every q is in
// [-127, 127]. The SIMD versions compute the same three roundings (d, 1 / d, x * (1 / d), the
// first two by the shared block_scale) and so give the same bits: the largest magnitude is
// exact in any order (taken as the maximum of the values' bits with the sign cleared, which
// orders non-negative floats as integers and puts inf and NaN above every finite one), the
// rounding to an integer is exact, and so is the integer sum.

/// A block's scale d and the factor its values are multiplied by before rounding; factor 0 for
/// a block whose quants are all 0.
struct BlockScale {
  float d;
  float inverse;
};

/// From the largest magnitude's bits (sign cleared): what every version shares.
inline BlockScale block_scale(u32 largest_bits) {
  if (largest_bits >= 0x7F800000u) return {std::numeric_limits<float>::quiet_NaN(), 0.0f};
  const float d = std::bit_cast<float>(largest_bits) / 127.0f;
  const float inverse = 1.0f / d;
  if (!std::isfinite(inverse)) return {0.0f, 0.0f};
  return {d, inverse};
}

inline u32 magnitude_bits(float x) { return std::bit_cast<u32>(x) & 0x7FFFFFFFu; }

/// The loop every version shares: per block of 32, `largest(x)` gives the bits of the largest
/// magnitude (sign cleared), and unless the block's quants are all 0, `round(x, inverse, q)`
/// writes its 32 quants round(x * inverse) and returns their sum.
template <class Largest, class Round>
inline void quantize_blocks(const float* x, std::size_t blocks, std::int8_t* q, float* scale,
                            std::int32_t* sum, const Largest& largest, const Round& round) {
  for (std::size_t b = 0; b < blocks; ++b, x += 32, q += 32) {
    const BlockScale s = block_scale(largest(x));
    scale[b] = s.d;
    if (s.inverse == 0.0f) {
      std::fill_n(q, 32, std::int8_t{0});
      sum[b] = 0;
    } else {
      sum[b] = round(x, s.inverse, q);
    }
  }
}

/// The scalar version: the reference the others equal bit for bit.
[[maybe_unused]] void quantize_generic(const float* x, std::size_t blocks, std::int8_t* q,
                                       float* scale, std::int32_t* sum) {
  quantize_blocks(
      x, blocks, q, scale, sum,
      [](const float* __restrict v) {
        u32 largest = 0;
        for (int j = 0; j < 32; ++j) largest = std::max(largest, magnitude_bits(v[j]));
        return largest;
      },
      [](const float* __restrict v, float inverse, std::int8_t* __restrict out) {
        std::int32_t total = 0;
        for (int j = 0; j < 32; ++j) {
          out[j] = static_cast<std::int8_t>(std::round(v[j] * inverse));
          total += out[j];
        }
        return total;
      });
}

#if defined(__AVX2__) && defined(__FMA__)
/// round(y) with ties away from zero, for |y| < 2^31, as int32: truncated, then one step away
/// from zero where the (exact) remainder is at least a half.
inline __m256i round_away_epi32(__m256 y) {
  const __m256i t = _mm256_cvttps_epi32(y);
  const __m256 rest = _mm256_sub_ps(y, _mm256_cvtepi32_ps(t));
  const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(rest, _mm256_set1_ps(0.5f), _CMP_GE_OQ));
  const __m256i down = _mm256_castps_si256(_mm256_cmp_ps(rest, _mm256_set1_ps(-0.5f), _CMP_LE_OQ));
  return _mm256_add_epi32(_mm256_sub_epi32(t, up), down);  // the masks are -1 where true
}

inline std::int32_t sum_epi32(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i h = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  return _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 1)));
}

inline u32 max_epu32(__m256i v) {
  const __m128i s = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i h = _mm_max_epu32(s, _mm_unpackhi_epi64(s, s));
  return static_cast<u32>(_mm_cvtsi128_si32(_mm_max_epu32(h, _mm_shuffle_epi32(h, 1))));
}

[[maybe_unused]] void quantize_avx2(const float* x, std::size_t blocks, std::int8_t* q,
                                    float* scale, std::int32_t* sum) {
  quantize_blocks(
      x, blocks, q, scale, sum,
      [](const float* v) {
        const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
        __m256i largest = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
          const __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(v + 8 * k));
          largest = _mm256_max_epu32(largest, _mm256_and_si256(bits, magnitude));
        }
        return max_epu32(largest);
      },
      [](const float* v, float inverse, std::int8_t* out) {
        __m256i r[4];
        for (int k = 0; k < 4; ++k) {
          r[k] =
              round_away_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * k), _mm256_set1_ps(inverse)));
        }
        // The packs work within 128-bit halves: the 32-bit groups come out as elements 0-3 of
        // r0, r1, r2, r3, then 4-7 of each; the permute puts them back in element order.
        const __m256i packed =
            _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
        const __m256i ordered =
            _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
        return sum_epi32(
            _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3])));
      });
}
#endif  // __AVX2__ && __FMA__

#if defined(__AVX512F__) && defined(__AVX512BW__)
[[maybe_unused]] void quantize_avx512(const float* x, std::size_t blocks, std::int8_t* q,
                                      float* scale, std::int32_t* sum) {
  quantize_blocks(
      x, blocks, q, scale, sum,
      [](const float* v) {
        const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
        return _mm512_reduce_max_epu32(_mm512_max_epu32(
            _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(v)), magnitude),
            _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(v + 16)), magnitude)));
      },
      [](const float* v, float inverse, std::int8_t* out) {
        const __m512i one = _mm512_set1_epi32(1);
        __m512i total = _mm512_setzero_si512();
        for (int k = 0; k < 2; ++k) {
          // round_away_epi32 at 16 lanes: truncated, then one step away from zero where the
          // exact remainder is at least a half.
          const __m512 y = _mm512_mul_ps(_mm512_loadu_ps(v + 16 * k), _mm512_set1_ps(inverse));
          const __m512i t = _mm512_cvttps_epi32(y);
          const __m512 rest = _mm512_sub_ps(y, _mm512_cvtepi32_ps(t));
          const __mmask16 up = _mm512_cmp_ps_mask(rest, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
          const __mmask16 down = _mm512_cmp_ps_mask(rest, _mm512_set1_ps(-0.5f), _CMP_LE_OQ);
          const __m512i r =
              _mm512_mask_sub_epi32(_mm512_mask_add_epi32(t, up, t, one), down, t, one);
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * k), _mm512_cvtepi32_epi8(r));
          total = _mm512_add_epi32(total, r);
        }
        return _mm512_reduce_add_epi32(total);
      });
}
#endif  // __AVX512F__ && __AVX512BW__

#if AMC_WEIGHT_NEON_KERNELS
[[maybe_unused]] void quantize_neon(const float* x, std::size_t blocks, std::int8_t* q,
                                    float* scale, std::int32_t* sum) {
  quantize_blocks(
      x, blocks, q, scale, sum,
      [](const float* v) {
        uint32x4_t largest = vdupq_n_u32(0);
        for (int k = 0; k < 8; ++k) {
          const uint32x4_t bits = vreinterpretq_u32_f32(vld1q_f32(v + 4 * k));
          largest = vmaxq_u32(largest, vandq_u32(bits, vdupq_n_u32(0x7FFFFFFFu)));
        }
        return vmaxvq_u32(largest);
      },
      [](const float* v, float inverse, std::int8_t* out) {
        // FCVTAS rounds to nearest with ties away from zero: std::round's rule in one instruction.
        int32x4_t r[8];
        int32x4_t total = vdupq_n_s32(0);
        for (int k = 0; k < 8; ++k) {
          r[k] = vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(v + 4 * k), inverse));
          total = vaddq_s32(total, r[k]);
        }
        for (int k = 0; k < 8; k += 4) {  // every q is in [-127, 127]: the narrowings are exact
          const int16x8_t low = vcombine_s16(vmovn_s32(r[k]), vmovn_s32(r[k + 1]));
          const int16x8_t high = vcombine_s16(vmovn_s32(r[k + 2]), vmovn_s32(r[k + 3]));
          vst1q_s8(out + 4 * k, vcombine_s8(vmovn_s16(low), vmovn_s16(high)));
        }
        return vaddvq_s32(total);
      });
}
#endif  // AMC_WEIGHT_NEON_KERNELS

#if defined(__AVX512F__) && defined(__AVX512BW__)
constexpr QuantizeKernel quantize_kernel = quantize_avx512;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr QuantizeKernel quantize_kernel = quantize_avx2;
#elif AMC_WEIGHT_NEON_KERNELS
constexpr QuantizeKernel quantize_kernel = quantize_neon;
#else
constexpr QuantizeKernel quantize_kernel = quantize_generic;
#endif

}  // namespace
}  // namespace amc::weight_kernels

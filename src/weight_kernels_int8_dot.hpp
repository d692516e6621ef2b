// The dot products of stored blocks with int8 activations (amc::Int8DotKernel): per block of
// 32 activations (amc::quantize_activations, weight_kernels_int8_activations.hpp) the integer sum
// of their quants times the weight's, exact, then the scales in f32. For each type whose row in
// src/ggml_types.hpp says kInt8Dot: plain loops, AVX2's maddubs and AVX-512 VNNI, NEON's widening
// products and the Armv8.2 dot product. Included by weight_kernels_make_table.hpp, so compiled
// once per instruction set (weight_kernels_scalar.cpp, _avx2.cpp, _avx512.cpp, _neon.cpp).
#pragma once

#include "ggml_types.hpp"
#include "weight_kernels_common.hpp"

namespace amc::weight_kernels {
namespace {

// --- Dot products over int8 activations (Int8Activations) --------------------------------------
// Per block the exact integer sum of the weight's quants times the activations' quants, then
// the scales in f32. Q8_0: d_w d_x S. Q4_0 (quants q - 8): d_w d_x (S - 8 sum_x). Q4_1 (q d + m):
// d_w d_x S + m d_x sum_x. Q5_0 and Q5_1 are Q4_0 and Q4_1 with 5-bit quants (the fifth bit of
// element j is bit j of the block's qh): Q5_0 d_w d_x (S - 16 sum_x), Q5_1 d_w d_x S + m d_x
// sum_x, with S = sum q x_q over q in 0..31. The integer sums are exact and so are their
// conversions to f32: |S| <= 32 * 31 * 127 = 125984, |S - 16 sum_x| <= 32 * 16 * 127 = 65024
// (|q - 16| <= 16), |sum_x| <= 4064, all below 2^24. The plain loops sum the blocks' terms in 8
// lanes (block b into lane b % 8), added pairwise; the x86 kernels below keep the block's 8
// partial integer sums of S apart and scale each (one vector FMA per block, four accumulators),
// the offset terms (Q4_0's -8 and Q5_0's -16 times d_w d_x sum_x, Q4_1's and Q5_1's m d_x sum_x)
// summed apart; the NEON ones form S (minus 8 or 16 sum_x) as the plain loops do, four blocks to
// a vector.
//
// The k-quants against the activations' blocks of 32 (block j of a super-block's 256 values):
// Q4_K and Q5_K are Q4_1 with decoded scales, sub-block j's values dl_j q - ml_j (dl_j = d sc_j,
// ml_j = dmin m_j, exact in f32: 11 and 6 significant bits), so their term is
// S_j (dl_j d_x) - ml_j (d_x sum_x) with S_j = sum q x_q. Q6_K's sub-blocks of 16 have their own
// int8 scale, values dl_k (q - 32) with dl_k = d sc_k (exact: 11 + 8 bits): two sums S_k of 16
// products per activation block, each times (dl_k d_x). The integer sums are exact: |S_j| <= 32 *
// 31 * 127 = 125984 (Q5_K; 60960 for Q4_K), |S_k| <= 16 * 32 * 127 = 65024, |sum_x| <= 32 * 127
// = 4064, all below 2^24, so their conversions to f32 are exact too. The plain loop sums the
// terms of activation block j of every super-block into lane j of 8 (Q6_K: its two, in order),
// added pairwise; the x86 kernels scale 8 partial integer sums per activation block (one FMA,
// accumulator j % 4) and sum the min terms apart, lane j; the NEON ones form the sums S four to
// a vector as the plain loop does (accumulator v % 2 for the v-th vector of a super-block), the
// min terms in two accumulators of their own.

/// Whether `type` has super-blocks of 256 (the k-quants).
constexpr bool k_quant(GgmlType type) { return block_elements(type) == 256; }

// The layout of the 4- and 5-bit blocks of 32 (q4_0 ... q5_1 of weight_kernels_dequantize.hpp): d
// at byte 0, Q4_1's and Q5_1's min m at byte 2, then Q5_0's and Q5_1's 32 fifth bits qh, then the
// 16 bytes of nibbles. Q4_0 and Q5_0 store their quants plus 8 and 16 (the zero point), Q4_1 and
// Q5_1 have m instead.
constexpr bool has_min(GgmlType type) { return type == GgmlType::Q4_1 || type == GgmlType::Q5_1; }
constexpr bool has_fifth_bits(GgmlType type) {
  return type == GgmlType::Q5_0 || type == GgmlType::Q5_1;
}
constexpr int zero_point(GgmlType type) {
  return type == GgmlType::Q4_0 ? 8 : type == GgmlType::Q5_0 ? 16 : 0;
}
constexpr std::size_t qh_offset(GgmlType type) { return has_min(type) ? 4 : 2; }
constexpr std::size_t nibbles_offset(GgmlType type) {
  return qh_offset(type) + (has_fifth_bits(type) ? 4 : 0);
}

/// The fifth bits qh of a Q5_0/Q5_1 block (0 for Q4_0/Q4_1: none).
template <GgmlType K>
inline u32 fifth_bits_of(const u8* block) {
  u32 qh = 0;
  if constexpr (has_fifth_bits(K)) std::memcpy(&qh, block + qh_offset(K), sizeof qh);
  return qh;
}

template <GgmlType K>
float int8_dot_k_generic(const Int8Activations& x, const std::byte* in_bytes, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  float lanes[8] = {};
  for (std::size_t b = 0; b < blocks; ++b, in += kBytes) {
    const std::int8_t* __restrict xq = x.q.data() + 256 * b;
    const float* dx = x.scale.data() + 8 * b;
    if constexpr (K == GgmlType::Q6_K) {
      const float d = half_to_float(load_u16(in + 208));
      std::int8_t q[256];
      unpack_q6_k(in, q);
      for (int k = 0; k < 16; ++k) {
        std::int32_t sum = 0;
        for (int i = 0; i < 16; ++i) sum += q[16 * k + i] * xq[16 * k + i];
        const float dl = d * static_cast<float>(static_cast<std::int8_t>(in[192 + k]));
        lanes[k / 2] += static_cast<float>(sum) * (dl * dx[k / 2]);
      }
    } else {
      float dl[8], ml[8];
      k4_scales(in, dl, ml);
      u8 q[256];
      if constexpr (K == GgmlType::Q4_K) {
        unpack_k_nibbles(in + 16, q);
      } else {
        unpack_k5(in, q);
      }
      const std::int32_t* sum_x = x.sum.data() + 8 * b;
      for (int j = 0; j < 8; ++j) {
        std::int32_t sum = 0;
        for (int l = 0; l < 32; ++l) sum += q[32 * j + l] * xq[32 * j + l];
        lanes[j] += static_cast<float>(sum) * (dl[j] * dx[j]) -
                    ml[j] * (dx[j] * static_cast<float>(sum_x[j]));
      }
    }
  }
  for (int width = 4; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

template <GgmlType K>
float int8_dot_generic32(const Int8Activations& x, const std::byte* in_bytes, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  float lanes[8] = {};
  for (std::size_t b = 0; b < blocks; ++b, in += kBytes) {
    const std::int8_t* __restrict xq = x.q.data() + 32 * b;
    const float dx = x.scale[b];
    const float d = half_to_float(load_u16(in));
    std::int32_t sum = 0;
    float term = 0.0f;
    if constexpr (K == GgmlType::Q8_0) {
      for (int j = 0; j < 32; ++j) sum += static_cast<std::int8_t>(in[2 + j]) * xq[j];
      term = static_cast<float>(sum) * (d * dx);
    } else {
      const u8* __restrict qs = in + nibbles_offset(K);
      const u32 qh = fifth_bits_of<K>(in);
      for (u32 j = 0; j < 16; ++j) {
        // Bits j and j + 16 of qh: the fifth bits of elements j and j + 16, as bit 4.
        const u32 q0 = (qs[j] & 0x0Fu) | (((qh >> j) << 4) & 0x10u);
        const u32 q1 = (u32{qs[j]} >> 4) | ((qh >> (j + 12)) & 0x10u);
        sum += static_cast<std::int32_t>(q0) * xq[j] + static_cast<std::int32_t>(q1) * xq[j + 16];
      }
      if constexpr (!has_min(K)) {
        term = static_cast<float>(sum - zero_point(K) * x.sum[b]) * (d * dx);
      } else {
        const float m = half_to_float(load_u16(in + 2));
        term = static_cast<float>(sum) * (d * dx) + m * (dx * static_cast<float>(x.sum[b]));
      }
    }
    lanes[b % 8] += term;
  }
  for (int width = 4; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

/// The plain int8 kernel of any type that has one.
template <GgmlType K>
float int8_dot_generic(const Int8Activations& x, const std::byte* in, std::size_t blocks) {
  if constexpr (k_quant(K)) {
    return int8_dot_k_generic<K>(x, in, blocks);
  } else {
    return int8_dot_generic32<K>(x, in, blocks);
  }
}

#if defined(__AVX2__) && defined(__FMA__)
/// The int8 dot products with AVX2: maddubs (unsigned weight quants times signed activations into
/// 16-bit pairs, which cannot saturate: at most 2 * 128 * 127) and madd into 8 32-bit partial
/// sums per block, scaled in f32 and accumulated in one 8-lane vector; the offset terms (Q4_1's
/// and Q5_1's m, Q4_0's -8 and Q5_0's -16) in a vector of their own, 8 blocks a lane. Q4_0's and
/// Q5_0's quants go in unsigned (0..15, 0..31: with the zero point, not minus it), so they need
/// no sign trick as Q8_0's do. `Dot(q, x)` gives the 8 partial sums of unsigned q and signed x.
// always_inline: the VNNI kernel inlines this loop into its own target, where the VNNI `dot`
// can be inlined in turn (a call per block otherwise).
template <GgmlType K, class Dot>
__attribute__((always_inline)) inline float int8_dot_simd(const Int8Activations& x,
                                                          const std::byte* in_bytes,
                                                          std::size_t blocks, const Dot& dot) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  constexpr std::size_t kScaleChunk = 64;  // blocks whose scales are converted ahead
  // Four accumulators (block i of a chunk into accumulator i % 4): one FMA chain would wait
  // its latency on every block.
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  __m256 rest = _mm256_setzero_ps();  // the offset terms, 8 blocks a lane
  float rest_tail = 0.0f;
  alignas(32) float scales[kScaleChunk];
  alignas(32) u16 d16[kScaleChunk], m16[kScaleChunk];
  for (std::size_t first = 0; first < blocks; first += kScaleChunk) {
    const std::size_t count = std::min(kScaleChunk, blocks - first);
    // The blocks' scales d_w d_x first, eight at a time, so that the main loop broadcasts each
    // from memory (a load) instead of converting and shuffling one per block.
    for (std::size_t i = 0; i < count; ++i) {
      d16[i] = load_u16(in + (first + i) * kBytes);
      if constexpr (has_min(K)) m16[i] = load_u16(in + (first + i) * kBytes + 2);
    }
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      const std::size_t b = first + i;
      const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d16 + i)));
      const __m256 scale = _mm256_mul_ps(d, _mm256_loadu_ps(x.scale.data() + b));
      _mm256_store_ps(scales + i, scale);
      if constexpr (K != GgmlType::Q8_0) {
        const __m256 sum = _mm256_cvtepi32_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.sum.data() + b)));
        if constexpr (!has_min(K)) {
          rest = _mm256_fmadd_ps(
              _mm256_mul_ps(sum, _mm256_set1_ps(static_cast<float>(-zero_point(K)))), scale, rest);
        } else {
          const __m256 m =
              _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m16 + i)));
          rest = _mm256_fmadd_ps(m, _mm256_mul_ps(_mm256_loadu_ps(x.scale.data() + b), sum), rest);
        }
      }
    }
    for (; i < count; ++i) {
      const std::size_t b = first + i;
      scales[i] = _cvtsh_ss(d16[i]) * x.scale[b];
      if constexpr (zero_point(K) != 0) {
        rest_tail +=
            (static_cast<float>(-zero_point(K)) * static_cast<float>(x.sum[b])) * scales[i];
      } else if constexpr (has_min(K)) {
        rest_tail += _cvtsh_ss(m16[i]) * (x.scale[b] * static_cast<float>(x.sum[b]));
      }
    }
    for (i = 0; i < count; ++i) {
      const u8* block = in + (first + i) * kBytes;
      const __m256i xq = load32(reinterpret_cast<const u8*>(x.q.data() + 32 * (first + i)));
      __m256i partial;
      if constexpr (K == GgmlType::Q8_0) {
        const __m256i w = load32(block + 2);  // signed: |w| times x with w's sign
        partial = dot(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xq, w));
      } else {
        __m256i q = nibbles32(block + nibbles_offset(K));
        if constexpr (has_fifth_bits(K))
          q = _mm256_or_si256(q, fifth_bits32(fifth_bits_of<K>(block)));
        partial = dot(q, xq);
      }
      acc[i % 4] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(partial), _mm256_broadcast_ss(scales + i), acc[i % 4]);
    }
  }
  const __m256 z = _mm256_setzero_ps();
  return sum_accumulators(acc[0], acc[1], acc[2], acc[3]) +
         (sum_accumulators(rest, z, z, z) + rest_tail);
}

/// acc + (partial sums, converted) * scale: one activation block's terms.
inline __m256 add_scaled(__m256 acc, __m256i partial, __m256 scale) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(partial), scale, acc);
}

/// Q4_K, Q5_K and Q6_K: per activation block j of a super-block, `dot` gives 8 exact partial
/// sums (lane i: elements 4i..4i+3), scaled by one FMA into accumulator j % 4. Q4_K and Q5_K:
/// every lane's scale is dl_j d_x, and the min terms ml_j (d_x sum_x) are summed in a vector of
/// their own (lane j), subtracted at the end (maddubs' 16-bit pairs cannot saturate: at most
/// 2 * 31 * 127). Q6_K: its quants minus 32 are signed, so, as Q8_0's in int8_dot_simd, |w| times
/// x with w's sign (pairs at most 2 * 32 * 127); lanes 0-3 (elements 0-15) take sub-block 2j's
/// scale and lanes 4-7 sub-block 2j + 1's.
template <GgmlType K, class Dot>
__attribute__((always_inline)) inline float int8_dot_k_simd(const Int8Activations& x,
                                                            const std::byte* in_bytes,
                                                            std::size_t blocks, const Dot& dot) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  __m256 mins = _mm256_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b, in += kBytes) {
    const auto* xq = reinterpret_cast<const u8*>(x.q.data() + 256 * b);
    const __m256 dx = _mm256_loadu_ps(x.scale.data() + 8 * b);
    if constexpr (K == GgmlType::Q6_K) {
      // dl_k d_x of sub-block k (activation block k / 2): k < 8 in scale[0], the rest in scale[1].
      const __m256 d = _mm256_set1_ps(scale_f16(in + 208));
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 192));
      const __m256 scale[2] = {
          _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), d),
                        _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))),
          _mm256_mul_ps(
              _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))), d),
              _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)))};
      for (int h = 0; h < 2; ++h) {  // the layout of q6_k_avx2
        const __m256i ql0 = load32(in + 64 * h);
        const __m256i ql1 = load32(in + 64 * h + 32);
        const __m256i qh = load32(in + 128 + 32 * h);
        const __m256i nibble[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                                   _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                   _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
        for (int k = 0; k < 4; ++k) {  // activation block 4h + k
          const __m256i top = _mm256_slli_epi16(
              _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3)),
              4);
          const __m256i w = _mm256_sub_epi8(_mm256_or_si256(nibble[k], top), _mm256_set1_epi8(32));
          const __m256i xv = load32(xq + 128 * h + 32 * k);
          const __m256i partial = dot(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
          const __m256 block_scale = _mm256_permutevar8x32_ps(
              scale[h], _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1,
                                          2 * k + 1, 2 * k + 1));
          acc[k] = add_scaled(acc[k], partial, block_scale);
        }
      }
    } else {
      std::uint64_t scale_bytes, min_bytes;
      k4_scale_bytes(in + 4, scale_bytes, min_bytes);
      const auto widen = [](std::uint64_t bytes) {
        return _mm256_cvtepi32_ps(
            _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(bytes))));
      };
      const __m256 dl = _mm256_mul_ps(widen(scale_bytes), _mm256_set1_ps(scale_f16(in)));
      const __m256 ml = _mm256_mul_ps(widen(min_bytes), _mm256_set1_ps(scale_f16(in + 2)));
      // Each activation block's scale broadcast from memory (a load) rather than shuffled out.
      alignas(32) float scale[8];
      _mm256_store_ps(scale, _mm256_mul_ps(dl, dx));
      const __m256 sum_x = _mm256_cvtepi32_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.sum.data() + 8 * b)));
      mins = _mm256_fmadd_ps(ml, _mm256_mul_ps(dx, sum_x), mins);
      const u8* qs = in + (K == GgmlType::Q4_K ? 16 : 48);
      for (int g = 0; g < 4; ++g) {  // sub-blocks 2g (low nibbles) and 2g + 1 (high)
        const __m256i raw = load32(qs + 32 * g);
        __m256i q0 = _mm256_and_si256(raw, low4);
        __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if constexpr (K == GgmlType::Q5_K) {
          const __m256i qh = load32(in + 16);
          q0 = _mm256_or_si256(q0, k5_fifth_bits(qh, 2 * g));
          q1 = _mm256_or_si256(q1, k5_fifth_bits(qh, 2 * g + 1));
        }
        acc[(2 * g) % 4] = add_scaled(acc[(2 * g) % 4], dot(q0, load32(xq + 64 * g)),
                                      _mm256_broadcast_ss(scale + 2 * g));
        acc[(2 * g + 1) % 4] = add_scaled(acc[(2 * g + 1) % 4], dot(q1, load32(xq + 64 * g + 32)),
                                          _mm256_broadcast_ss(scale + 2 * g + 1));
      }
    }
  }
  const __m256 z = _mm256_setzero_ps();
  return sum_accumulators(acc[0], acc[1], acc[2], acc[3]) - sum_accumulators(mins, z, z, z);
}

/// The x86 int8 kernel of K with the integer dot product `dot`: int8_dot_k_simd for the k-quants,
/// int8_dot_simd for the blocks of 32.
template <GgmlType K, class Dot>
__attribute__((always_inline)) inline float int8_dot_x86(const Int8Activations& x,
                                                         const std::byte* in, std::size_t blocks,
                                                         const Dot& dot) {
  if constexpr (k_quant(K)) {
    return int8_dot_k_simd<K>(x, in, blocks, dot);
  } else {
    return int8_dot_simd<K>(x, in, blocks, dot);
  }
}

inline __m256i dot_maddubs(__m256i q, __m256i xq) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), _mm256_set1_epi16(1));
}

template <GgmlType K>
float int8_dot_avx2(const Int8Activations& x, const std::byte* in, std::size_t blocks) {
  return int8_dot_x86<K>(x, in, blocks, dot_maddubs);
}
#endif  // __AVX2__ && __FMA__

#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__)
/// With AVX-512 VNNI (vpdpbusd: four u8 x s8 products summed into each 32-bit lane in one
/// instruction); compiled for it here, chosen at run time only where the CPU has it.
template <GgmlType K>
__attribute__((target("avx512vl,avx512vnni"))) float int8_dot_vnni(const Int8Activations& x,
                                                                   const std::byte* in,
                                                                   std::size_t blocks) {
  return int8_dot_x86<K>(
      x, in, blocks, [](__m256i q, __m256i xq) __attribute__((target("avx512vl,avx512vnni"))) {
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, xq);
      });
}
#endif

#if AMC_WEIGHT_NEON_KERNELS
/// The fifth bits qh of a Q5_0/Q5_1 block at bit 4 of each byte (0x10 or 0): elements 0-15 in
/// `low`, 16-31 in `high`. Byte j takes byte j / 8 of qh and tests bit j % 8 of it.
inline void fifth_bits16x2(u32 qh, uint8x16_t& low, uint8x16_t& high) {
  const uint8x8_t bytes = vcreate_u8(qh);
  const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ULL));
  const uint8x16_t fifth = vdupq_n_u8(0x10);
  low = vandq_u8(vtstq_u8(vcombine_u8(vdup_lane_u8(bytes, 0), vdup_lane_u8(bytes, 1)), bit), fifth);
  high =
      vandq_u8(vtstq_u8(vcombine_u8(vdup_lane_u8(bytes, 2), vdup_lane_u8(bytes, 3)), bit), fifth);
}

/// The int8 dot products with NEON, four blocks at a time: each block's 32 products summed
/// exactly in four 32-bit lanes by `dot(w0, w1, x0, x1)` (quants 0-15 and 16-31 of the weight
/// and of x; Q4's and Q5's unsigned, 0..31 fitting int8), the four blocks' lanes added pairwise
/// into one vector of their integer sums S (the generic kernel's, exactly), Q4_0's -8 sum_x and
/// Q5_0's -16 sum_x subtracted in integers, then scaled in f32 with one FMA per four blocks. Block
/// b lands in lane b % 8 of two accumulators, as in the generic kernel's lanes; the sum over lanes
/// is vaddv's.
// always_inline: the dot-product kernel inlines this loop into its own target, where the SDOT
// `dot` can be inlined in turn (as int8_dot_simd for VNNI).
template <GgmlType K, class Dot>
__attribute__((always_inline)) inline int32x4_t int8_block_sums(const u8* block,
                                                                const std::int8_t* xq,
                                                                const Dot& dot) {
  const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
  if constexpr (K == GgmlType::Q8_0) {
    const auto* w = reinterpret_cast<const std::int8_t*>(block + 2);
    return dot(vld1q_s8(w), vld1q_s8(w + 16), x0, x1);
  } else {
    const uint8x16_t raw = vld1q_u8(block + nibbles_offset(K));
    uint8x16_t q0 = low_nibbles(raw), q1 = high_nibbles(raw);
    if constexpr (has_fifth_bits(K)) {
      uint8x16_t f0, f1;
      fifth_bits16x2(fifth_bits_of<K>(block), f0, f1);
      q0 = vorrq_u8(q0, f0);
      q1 = vorrq_u8(q1, f1);
    }
    return dot(vreinterpretq_s8_u8(q0), vreinterpretq_s8_u8(q1), x0, x1);
  }
}

/// Adds the terms of `count` (1-4) consecutive blocks at `in` to acc; dx and sx point at four
/// readable activation scales and sums (zeros past count).
template <GgmlType K, class Dot>
__attribute__((always_inline)) inline float32x4_t int8_group(float32x4_t acc, const u8* in,
                                                             const std::int8_t* xq, const float* dx,
                                                             const std::int32_t* sx,
                                                             std::size_t count, const Dot& dot) {
  constexpr std::size_t kBytes = block_bytes(K);
  int32x4_t partial[4];
  alignas(8) u16 d16[4] = {}, m16[4] = {};
  for (std::size_t i = 0; i < 4; ++i) {
    if (i >= count) {  // a missing block: S = 0 and scale 0 add +0
      partial[i] = vdupq_n_s32(0);
      continue;
    }
    const u8* block = in + i * kBytes;
    partial[i] = int8_block_sums<K>(block, xq + 32 * i, dot);
    d16[i] = load_u16(block);
    if constexpr (has_min(K)) m16[i] = load_u16(block + 2);
  }
  int32x4_t sums = vpaddq_s32(vpaddq_s32(partial[0], partial[1]),
                              vpaddq_s32(partial[2], partial[3]));  // lane i: block i's S
  const float32x4_t x_scale = vld1q_f32(dx);
  const float32x4_t scale = vmulq_f32(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(d16))), x_scale);
  const int32x4_t x_sum = vld1q_s32(sx);
  if constexpr (zero_point(K) != 0) sums = vmlsq_n_s32(sums, x_sum, zero_point(K));
  acc = vfmaq_f32(acc, vcvtq_f32_s32(sums), scale);
  if constexpr (has_min(K)) {
    const float32x4_t m = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(m16)));
    acc = vfmaq_f32(acc, m, vmulq_f32(x_scale, vcvtq_f32_s32(x_sum)));
  }
  return acc;
}

template <GgmlType K, class Dot>
__attribute__((always_inline)) inline float int8_dot_neon_loop(const Int8Activations& x,
                                                               const std::byte* in_bytes,
                                                               std::size_t blocks, const Dot& dot) {
  const auto* in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  std::size_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    float32x4_t& a = acc[(b / 4) % 2];
    a = int8_group<K>(a, in + b * kBytes, x.q.data() + 32 * b, x.scale.data() + b, x.sum.data() + b,
                      4, dot);
  }
  if (b < blocks) {  // the last 1-3 blocks, their scales and sums padded with zeros
    float dx[4] = {};
    std::int32_t sx[4] = {};
    std::copy(x.scale.data() + b, x.scale.data() + blocks, dx);
    std::copy(x.sum.data() + b, x.sum.data() + blocks, sx);
    float32x4_t& a = acc[(b / 4) % 2];
    a = int8_group<K>(a, in + b * kBytes, x.q.data() + 32 * b, dx, sx, blocks - b, dot);
  }
  return vaddvq_f32(vaddq_f32(acc[0], acc[1]));
}

/// Q4_K, Q5_K and Q6_K with NEON, per super-block: the exact integer sums of its sub-blocks,
/// four to a vector (lane t: sub-block 4v + t; Q4_K's and Q5_K's of 32 through `dot`, Q6_K's of
/// 16 through `dot.half`), equal to the generic kernel's, then scaled in f32 by one FMA per
/// vector into accumulator v % 2; Q4_K's and Q5_K's min terms ml_j (d_x sum_x) into two
/// accumulators of their own, subtracted at the end. The quants are small enough (0..31, or
/// -32..31 for Q6_K) to be int8 as they are.
template <GgmlType K, class Dot>
__attribute__((always_inline)) inline float int8_dot_k_neon_loop(const Int8Activations& x,
                                                                 const std::byte* in_bytes,
                                                                 std::size_t blocks,
                                                                 const Dot& dot) {
  const auto* in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  const auto s8 = [](uint8x16_t q) { return vreinterpretq_s8_u8(q); };
  float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  float32x4_t mins[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (std::size_t b = 0; b < blocks; ++b, in += kBytes) {
    const std::int8_t* xq = x.q.data() + 256 * b;
    const float* dx = x.scale.data() + 8 * b;
    if constexpr (K == GgmlType::Q6_K) {
      const float32x4_t d = vdupq_n_f32(scale_f16(in + 208));
      float32x4_t scale[4];  // dl_k = d sc_k, sub-blocks 4v..4v+3 in scale[v]
      widen16(vld1q_s8(reinterpret_cast<const std::int8_t*>(in + 192)), scale,
              [&](float32x4_t sc) { return vmulq_f32(sc, d); });
      for (int h = 0; h < 2; ++h) {  // the layout of q6_k: sub-blocks 8h..8h+7
        const u8* ql = in + 64 * h;
        const u8* qh = in + 128 + 32 * h;
        int32x4_t partial[8];  // sub-block 8h + 2k + p: elements 16p..16p+15 of activation block
                               // 4h + k
        for (int p = 0; p < 2; ++p) {
          const uint8x16_t l0 = vld1q_u8(ql + 16 * p), l1 = vld1q_u8(ql + 32 + 16 * p);
          const uint8x16_t high = vld1q_u8(qh + 16 * p);
          const uint8x16_t nibble[4] = {low_nibbles(l0), low_nibbles(l1), high_nibbles(l0),
                                        high_nibbles(l1)};
          for (int k = 0; k < 4; ++k) {
            // Bits 2k, 2k + 1 of qh to bits 4, 5 (a shift by a negative count shifts right).
            const uint8x16_t top =
                vshlq_n_u8(vandq_u8(vshlq_u8(high, vdupq_n_s8(static_cast<std::int8_t>(-2 * k))),
                                    vdupq_n_u8(3)),
                           4);
            const int8x16_t w = vsubq_s8(s8(vorrq_u8(nibble[k], top)), vdupq_n_s8(32));
            partial[2 * k + p] = dot.half(w, vld1q_s8(xq + 128 * h + 32 * k + 16 * p));
          }
        }
        const float32x4_t dxh = vld1q_f32(dx + 4 * h);
        for (int v = 0; v < 2; ++v) {  // sub-blocks 8h + 4v + t, activation block 4h + 2v + t / 2
          const int32x4_t sums = vpaddq_s32(vpaddq_s32(partial[4 * v], partial[4 * v + 1]),
                                            vpaddq_s32(partial[4 * v + 2], partial[4 * v + 3]));
          const float32x4_t dxv = v == 0 ? vzip1q_f32(dxh, dxh) : vzip2q_f32(dxh, dxh);
          acc[v] = vfmaq_f32(acc[v], vcvtq_f32_s32(sums), vmulq_f32(scale[2 * h + v], dxv));
        }
      }
    } else {
      // dl and ml of sub-blocks 4v..4v+3 in dl[v] and ml[v].
      std::uint64_t scale_bytes, min_bytes;
      k4_scale_bytes(in + 4, scale_bytes, min_bytes);
      const float32x4_t d = vdupq_n_f32(scale_f16(in)), dmin = vdupq_n_f32(scale_f16(in + 2));
      const uint16x8_t sc = vmovl_u8(vcreate_u8(scale_bytes)), mn = vmovl_u8(vcreate_u8(min_bytes));
      const float32x4_t dl[2] = {vmulq_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(sc))), d),
                                 vmulq_f32(vcvtq_f32_u32(vmovl_high_u16(sc)), d)};
      const float32x4_t ml[2] = {vmulq_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(mn))), dmin),
                                 vmulq_f32(vcvtq_f32_u32(vmovl_high_u16(mn)), dmin)};
      const u8* qs = in + (K == GgmlType::Q4_K ? 16 : 48);
      for (int v = 0; v < 2; ++v) {  // sub-blocks 4v..4v+3
        int32x4_t partial[4];
        for (int i = 0; i < 2; ++i) {  // sub-blocks 2g (low nibbles) and 2g + 1 (high)
          const int g = 2 * v + i;
          const uint8x16_t r0 = vld1q_u8(qs + 32 * g), r1 = vld1q_u8(qs + 32 * g + 16);
          uint8x16_t q[4] = {low_nibbles(r0), low_nibbles(r1), high_nibbles(r0), high_nibbles(r1)};
          if constexpr (K ==
                        GgmlType::Q5_K) {  // bit j of qh[l] to bit 4 of element l of sub-block j
            const uint8x16_t h0 = vld1q_u8(in + 16), h1 = vld1q_u8(in + 32);
            const uint8x16_t fifth = vdupq_n_u8(0x10);
            for (int t = 0; t < 2; ++t) {
              const uint8x16_t bit = vdupq_n_u8(static_cast<u8>(1u << (2 * g + t)));
              q[2 * t] = vorrq_u8(q[2 * t], vandq_u8(vtstq_u8(h0, bit), fifth));
              q[2 * t + 1] = vorrq_u8(q[2 * t + 1], vandq_u8(vtstq_u8(h1, bit), fifth));
            }
          }
          const std::int8_t* xg = xq + 64 * g;
          partial[2 * i] = dot(s8(q[0]), s8(q[1]), vld1q_s8(xg), vld1q_s8(xg + 16));
          partial[2 * i + 1] = dot(s8(q[2]), s8(q[3]), vld1q_s8(xg + 32), vld1q_s8(xg + 48));
        }
        const int32x4_t sums =
            vpaddq_s32(vpaddq_s32(partial[0], partial[1]), vpaddq_s32(partial[2], partial[3]));
        const float32x4_t dxv = vld1q_f32(dx + 4 * v);
        const float32x4_t sum_x = vcvtq_f32_s32(vld1q_s32(x.sum.data() + 8 * b + 4 * v));
        acc[v] = vfmaq_f32(acc[v], vcvtq_f32_s32(sums), vmulq_f32(dl[v], dxv));
        mins[v] = vfmaq_f32(mins[v], ml[v], vmulq_f32(dxv, sum_x));
      }
    }
  }
  return vaddvq_f32(vaddq_f32(acc[0], acc[1])) - vaddvq_f32(vaddq_f32(mins[0], mins[1]));
}

/// The NEON int8 kernel of K with the integer dot product `dot`.
template <GgmlType K, class Dot>
__attribute__((always_inline)) inline float int8_dot_neon_of(const Int8Activations& x,
                                                             const std::byte* in,
                                                             std::size_t blocks, const Dot& dot) {
  if constexpr (k_quant(K)) {
    return int8_dot_k_neon_loop<K>(x, in, blocks, dot);
  } else {
    return int8_dot_neon_loop<K>(x, in, blocks, dot);
  }
}

/// Baseline NEON: SMULL into 16-bit products (|w x| <= 128 * 128 fits), SADALP adding their
/// pairs into the 32-bit lanes. `half`: the same over 16 quants (Q6_K's sub-blocks).
struct DotWidening {
  int32x4_t operator()(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) const {
    return vpadalq_s16(vpadalq_s16(half(w0, x0), vmull_s8(vget_low_s8(w1), vget_low_s8(x1))),
                       vmull_high_s8(w1, x1));
  }
  int32x4_t half(int8x16_t w, int8x16_t x) const {
    return vpadalq_s16(vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(x))), vmull_high_s8(w, x));
  }
};

template <GgmlType K>
float int8_dot_neon(const Int8Activations& x, const std::byte* in, std::size_t blocks) {
  return int8_dot_neon_of<K>(x, in, blocks, DotWidening{});
}

/// With the Armv8.2 dot product (SDOT: four products summed into each 32-bit lane in one
/// instruction); compiled for it here, chosen at run time only where the CPU has it. GCC: the
/// target names Armv8.2 too, since arm_neon.h declares vdotq_s32 for "armv8.2-a+dotprod" and
/// GCC 12 inlines it only into functions whose target includes that ("+dotprod" alone fails
/// to compile); a CPU with the dot product implements Armv8.2 or later (the extension is
/// optional in 8.2 and 8.3), so nothing else the target allows can reach a CPU without it.
/// Where the whole build already targets the dot product (__ARM_FEATURE_DOTPROD, e.g. Apple's
/// arm64), no attribute is needed. clang before 16 declares vdotq_s32 only then, so other clang
/// builds have no dot-product kernels and run the baseline ones.
#if defined(__ARM_FEATURE_DOTPROD)
#define AMC_DOTPROD_KERNELS 1
#define AMC_DOTPROD_TARGET
#elif defined(__GNUC__) && !defined(__clang__)
#define AMC_DOTPROD_KERNELS 1
#define AMC_DOTPROD_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))
#else
#define AMC_DOTPROD_KERNELS 0
#endif

#if AMC_DOTPROD_KERNELS
struct DotSdot {
  AMC_DOTPROD_TARGET int32x4_t operator()(int8x16_t w0, int8x16_t w1, int8x16_t x0,
                                          int8x16_t x1) const {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
  }
  AMC_DOTPROD_TARGET int32x4_t half(int8x16_t w, int8x16_t x) const {
    return vdotq_s32(vdupq_n_s32(0), w, x);
  }
};

template <GgmlType K>
AMC_DOTPROD_TARGET float int8_dot_dotprod(const Int8Activations& x, const std::byte* in,
                                          std::size_t blocks) {
  return int8_dot_neon_of<K>(x, in, blocks, DotSdot{});
}
#undef AMC_DOTPROD_TARGET
#endif  // AMC_DOTPROD_KERNELS
#endif  // AMC_WEIGHT_NEON_KERNELS

/// The table's baseline int8 kernel for K: AVX2 maddubs, NEON's widening products, or generic.
template <GgmlType K>
struct Int8Baseline {
#if defined(__AVX2__) && defined(__FMA__)
  static constexpr Int8DotKernel kernel = int8_dot_avx2<K>;
#elif AMC_WEIGHT_NEON_KERNELS
  static constexpr Int8DotKernel kernel = int8_dot_neon<K>;
#else
  static constexpr Int8DotKernel kernel = int8_dot_generic<K>;
#endif
};

/// The table's int8 kernel for K with its integer dot-product extension (AVX-512 VNNI, Armv8.2
/// SDOT), null where it has none; `int8_extension` names it.
template <GgmlType K>
struct Int8Extension {
#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__)
  static constexpr Int8DotKernel kernel = int8_dot_vnni<K>;
#elif AMC_WEIGHT_NEON_KERNELS && AMC_DOTPROD_KERNELS
  static constexpr Int8DotKernel kernel = int8_dot_dotprod<K>;
#else
  static constexpr Int8DotKernel kernel = nullptr;
#endif
};

#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__)
constexpr std::string_view int8_extension = "avx512vnni";
#elif AMC_WEIGHT_NEON_KERNELS && AMC_DOTPROD_KERNELS
constexpr std::string_view int8_extension = "dotprod";
#else
constexpr std::string_view int8_extension = {};
#endif

}  // namespace
}  // namespace amc::weight_kernels

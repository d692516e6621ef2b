// The dequantization of the GGUF block types and the plain types, to f32 and to bf16, bit for bit
// as ggml's dequantize_row_* define it (ggml-quants.c): plain loops for every type whose row in
// src/ggml_types.hpp says kDequantize, and AVX2 kernels for most of them. Included by
// weight_kernels_make_table.hpp, so compiled once per instruction set (weight_kernels_scalar.cpp,
// _avx2.cpp, _avx512.cpp, _neon.cpp).
//
// The loops are written for the auto-vectoriser: restrict pointers (the input is bytes, which
// may alias anything), inner loops of fixed trip count over one block, no branches on the data
// (selects instead), the f16 scales converted once per block. Exactness needs no care about
// evaluation order or contraction: a block's scale is an f16 (11 significant bits) and the
// quants small integers, so every product below is exact in f32 (at most 11 + 7 + 5 = 23 bits,
// for Q6_K's d * scale * q), and each value is either such a product or one rounding of the
// difference or sum of two of them, whether fused into an FMA or not. The same holds for inf
// and NaN scales (inf * 0 is NaN either way).
#pragma once

#include "weight_kernels_common.hpp"

namespace amc::weight_kernels {
namespace {

/// A dequantization over whole blocks (elements, for the plain types): `blocks` in, the block
/// size times as many values out. The input may have any alignment.
template <class Out>
using DequantizeKernel = void (*)(const std::byte* in, Out* out, std::size_t blocks);

/// f32 -> bf16, to nearest with ties to even, NaN kept NaN (quiet): amc::to_bf16 without the
/// branch.
inline bf16 round_bf16(float x) {
  const u32 u = std::bit_cast<u32>(x);
  const u32 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const u32 quiet = (u >> 16) | 0x40u;
  return bf16{static_cast<u16>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded)};
}

inline float emit_one(float x, float*) { return x; }
inline bf16 emit_one(float x, bf16*) { return round_bf16(x); }

/// Writes out[i] = value(i) for i < N: directly for f32; for bf16 through an f32 scratch block
/// in L1, so that both the arithmetic loop and the rounding loop are simple enough to
/// vectorise at full width.
template <int N, class Out, class Value>
inline void emit(Out* __restrict out, const Value& value) {
  if constexpr (std::is_same_v<Out, float>) {
    for (int i = 0; i < N; ++i) out[i] = value(i);
  } else {
    float scratch[N];
    for (int i = 0; i < N; ++i) scratch[i] = value(i);
    for (int i = 0; i < N; ++i) out[i] = round_bf16(scratch[i]);
  }
}

/// Plain types are processed in chunks of this many elements (the bf16 scratch block).
constexpr std::size_t kChunk = 256;

template <class Out>
void plain_f32(const std::byte* in_bytes, Out* __restrict out, std::size_t n) {
  if constexpr (std::is_same_v<Out, float>) {
    std::memcpy(out, in_bytes, n * sizeof(float));
  } else {
    const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
    for (std::size_t i = 0; i < n; ++i) {
      float x;
      std::memcpy(&x, in + 4 * i, sizeof x);
      out[i] = round_bf16(x);
    }
  }
}

template <class Out>
void plain_f16(const std::byte* in_bytes, Out* __restrict out, std::size_t n) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  std::size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    emit<static_cast<int>(kChunk)>(out + i, [&](int k) {
      return half_to_float(load_u16(in + 2 * (i + static_cast<std::size_t>(k))));
    });
  }
  for (; i < n; ++i) out[i] = emit_one(half_to_float(load_u16(in + 2 * i)), out);
}

template <class Out>
void plain_bf16(const std::byte* in_bytes, Out* __restrict out, std::size_t n) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t i = 0; i < n; ++i) {
    const u32 bits = load_u16(in + 2 * i);
    if constexpr (std::is_same_v<Out, float>) {
      out[i] = std::bit_cast<float>(bits << 16);
    } else {
      // bf16 -> f32 is exact and rounding it back changes nothing but a signalling NaN,
      // which to_bf16 quietens.
      const bool nan = (bits & 0x7FFFu) > 0x7F80u;
      out[i] = bf16{static_cast<u16>(nan ? bits | 0x40u : bits)};
    }
  }
}

// Q8_0: d (f16), 32 x int8. y = q * d.
template <class Out>
void q8_0(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 34, out += 32) {
    const float d = half_to_float(load_u16(in));
    const auto* __restrict qs = in + 2;
    emit<32>(out, [&](int j) { return static_cast<float>(static_cast<std::int8_t>(qs[j])) * d; });
  }
}

// Q4_0: d, 16 bytes of nibbles; element j is the low nibble of byte j, element j + 16 its high
// nibble. y = (q - 8) * d. (Written with two stores per byte, not through emit(): a scratch
// array of unpacked bytes read back at another width stalls store forwarding.)
template <class Out>
void q4_0(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 18, out += 32) {
    const float d = half_to_float(load_u16(in));
    const auto* __restrict qs = in + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = emit_one(static_cast<float>((qs[j] & 0x0F) - 8) * d, out);
      out[j + 16] = emit_one(static_cast<float>((qs[j] >> 4) - 8) * d, out);
    }
  }
}

// Q4_1: d, m, 16 bytes of nibbles. y = q * d + m.
template <class Out>
void q4_1(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 20, out += 32) {
    const float d = half_to_float(load_u16(in));
    const float m = half_to_float(load_u16(in + 2));
    const auto* __restrict qs = in + 4;
    for (int j = 0; j < 16; ++j) {
      out[j] = emit_one(static_cast<float>(qs[j] & 0x0F) * d + m, out);
      out[j + 16] = emit_one(static_cast<float>(qs[j] >> 4) * d + m, out);
    }
  }
}

// Q5_0: d, qh (32 fifth bits, bit j for element j), 16 bytes of nibbles. y = (q - 16) * d.
template <class Out>
void q5_0(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 22, out += 32) {
    const float d = half_to_float(load_u16(in));
    u32 qh;
    std::memcpy(&qh, in + 2, sizeof qh);
    const auto* __restrict qs = in + 6;
    for (u32 j = 0; j < 16; ++j) {
      const u32 high0 = ((qh >> j) << 4) & 0x10u;
      const u32 high1 = (qh >> (j + 12)) & 0x10u;
      const int x0 = static_cast<int>((qs[j] & 0x0Fu) | high0) - 16;
      const int x1 = static_cast<int>((u32{qs[j]} >> 4) | high1) - 16;
      out[j] = emit_one(static_cast<float>(x0) * d, out);
      out[j + 16] = emit_one(static_cast<float>(x1) * d, out);
    }
  }
}

// Q5_1: d, m, qh, 16 bytes of nibbles. y = q * d + m.
template <class Out>
void q5_1(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 24, out += 32) {
    const float d = half_to_float(load_u16(in));
    const float m = half_to_float(load_u16(in + 2));
    u32 qh;
    std::memcpy(&qh, in + 4, sizeof qh);
    const auto* __restrict qs = in + 8;
    for (u32 j = 0; j < 16; ++j) {
      const u32 high0 = ((qh >> j) << 4) & 0x10u;
      const u32 high1 = (qh >> (j + 12)) & 0x10u;
      out[j] = emit_one(static_cast<float>((qs[j] & 0x0Fu) | high0) * d + m, out);
      out[j + 16] = emit_one(static_cast<float>((u32{qs[j]} >> 4) | high1) * d + m, out);
    }
  }
}

/// out[32 j + i] = dl[j] * q[32 j + i] - ml[j] over a super-block's 8 sub-blocks.
template <class Out>
inline void emit_k4(const u8* __restrict q, const float* dl, const float* ml, Out* __restrict out) {
  for (int j = 0; j < 8; ++j) {
    const float d = dl[j], m = ml[j];
    const u8* __restrict qj = q + 32 * j;
    emit<32>(out + 32 * j, [&](int i) { return d * static_cast<float>(qj[i]) - m; });
  }
}

// Q4_K: d, dmin, 12 bytes of scales and mins, 128 bytes of nibbles.
// y = d * scale * q - dmin * min.
template <class Out>
void q4_k(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 144, out += 256) {
    float dl[8], ml[8];
    k4_scales(in, dl, ml);
    u8 q[256];
    unpack_k_nibbles(in + 16, q);
    emit_k4(q, dl, ml, out);
  }
}

// Q5_K: as Q4_K with a fifth bit per element from qh[32]: bit 2g of byte l for element l of
// sub-block 2g, bit 2g + 1 for element l of sub-block 2g + 1.
template <class Out>
void q5_k(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 176, out += 256) {
    float dl[8], ml[8];
    k4_scales(in, dl, ml);
    u8 q[256];
    unpack_k5(in, q);
    emit_k4(q, dl, ml, out);
  }
}

// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), 16 int8 scales, d. Two halves of 128
// elements; in half h, element l + 32k (l < 32, k < 4) takes the low (k < 2) or high nibble of
// ql[64h + l + 32 (k & 1)] and bits 2k, 2k + 1 of qh[32h + l]; element e of the super-block has
// scale e / 16. y = d * scale * (q - 32).
template <class Out>
void q6_k(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 210, out += 256) {
    const float d = half_to_float(load_u16(in + 208));
    float s[16];
    for (int k = 0; k < 16; ++k) {
      s[k] = d * static_cast<float>(static_cast<std::int8_t>(in[192 + k]));
    }
    std::int8_t q[256];
    unpack_q6_k(in, q);
    for (int k = 0; k < 16; ++k) {
      const float scale = s[k];
      const std::int8_t* __restrict qk = q + 16 * k;
      emit<16>(out + 16 * k, [&](int i) { return scale * static_cast<float>(qk[i]); });
    }
  }
}

/// The plain loops of each type that has a dequantization (std::nullptr_t for the others,
/// is_kernel): a row of src/ggml_types.hpp says kDequantize exactly when its type has one here
/// (checked by weight_kernels_make_table.hpp).
template <GgmlType T, class Out>
inline constexpr std::nullptr_t plain_dequantize = nullptr;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::F32, Out> = plain_f32<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::F16, Out> = plain_f16<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::BF16, Out> = plain_bf16<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::Q4_0, Out> = q4_0<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::Q4_1, Out> = q4_1<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::Q5_0, Out> = q5_0<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::Q5_1, Out> = q5_1<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::Q8_0, Out> = q8_0<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::Q4_K, Out> = q4_k<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::Q5_K, Out> = q5_k<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<GgmlType::Q6_K, Out> = q6_k<Out>;

/// The instruction set's own kernel of a type where it has one (the AVX2 ones below; else
/// std::nullptr_t, is_kernel).
template <GgmlType T, class Out>
inline constexpr std::nullptr_t simd_dequantize = nullptr;

#if defined(__AVX2__) && defined(__FMA__)
// --- AVX2 ------------------------------------------------------------------------------------
// The block types and F16 with AVX2 intrinsics (the avx2 and avx512 translation units): GCC 12
// vectorises the loops above only at 16-byte width or with store-forwarding stalls (Q4_1 to
// f32 at 1.4 G elements/s; these run several times faster, bench/bench_gguf.cpp). Same
// arithmetic, same results: each product is exact, so the FMAs round once as the plain code
// does.

/// 8 floats -> 8 bf16 in the low 16 bits of each 32-bit lane (round_bf16 lane by lane).
inline __m256i round_bf16_lanes(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                         _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

/// Stores 16 values (a: elements 0-7, b: 8-15) as f32 or bf16.
inline void store16(float* out, __m256 a, __m256 b) {
  _mm256_storeu_ps(out, a);
  _mm256_storeu_ps(out + 8, b);
}
inline void store16(bf16* out, __m256 a, __m256 b) {
  // packus interleaves the 128-bit lanes (a0-3 b0-3 a4-7 b4-7); the permute restores order.
  const __m256i packed = _mm256_packus_epi32(round_bf16_lanes(a), round_bf16_lanes(b));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute4x64_epi64(packed, 0xD8));
}

/// 32 unsigned quants (bytes 0-31 of q) as f32: y = q * d + m, stored to out[0..32).
template <class Out>
inline void emit32_fma(__m256i q, __m256 d, __m256 m, Out* out) {
  const __m128i low = _mm256_castsi256_si128(q);
  const __m128i high = _mm256_extracti128_si256(q, 1);
  store16(out, _mm256_fmadd_ps(u8x8_to_ps(low), d, m),
          _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(low, 8)), d, m));
  store16(out + 16, _mm256_fmadd_ps(u8x8_to_ps(high), d, m),
          _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(high, 8)), d, m));
}

/// 32 signed quants as f32: y = q * d.
template <class Out>
inline void emit32_mul_signed(__m256i q, __m256 d, Out* out) {
  const __m128i low = _mm256_castsi256_si128(q);
  const __m128i high = _mm256_extracti128_si256(q, 1);
  store16(out, _mm256_mul_ps(i8x8_to_ps(low), d),
          _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(low, 8)), d));
  store16(out + 16, _mm256_mul_ps(i8x8_to_ps(high), d),
          _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(high, 8)), d));
}

template <class Out>
void q8_0_avx2(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 34, out += 32) {
    emit32_mul_signed(load32(in + 2), _mm256_set1_ps(half_to_float(load_u16(in))), out);
  }
}

template <class Out>
void q4_0_avx2(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 18, out += 32) {
    const __m256i q = _mm256_sub_epi8(nibbles32(in + 2), _mm256_set1_epi8(8));
    emit32_mul_signed(q, _mm256_set1_ps(half_to_float(load_u16(in))), out);
  }
}

template <class Out>
void q4_1_avx2(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 20, out += 32) {
    emit32_fma(nibbles32(in + 4), _mm256_set1_ps(half_to_float(load_u16(in))),
               _mm256_set1_ps(half_to_float(load_u16(in + 2))), out);
  }
}

template <class Out>
void q5_0_avx2(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 22, out += 32) {
    u32 qh;
    std::memcpy(&qh, in + 2, sizeof qh);
    const __m256i q =
        _mm256_sub_epi8(_mm256_or_si256(nibbles32(in + 6), fifth_bits32(qh)), _mm256_set1_epi8(16));
    emit32_mul_signed(q, _mm256_set1_ps(half_to_float(load_u16(in))), out);
  }
}

template <class Out>
void q5_1_avx2(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 24, out += 32) {
    u32 qh;
    std::memcpy(&qh, in + 4, sizeof qh);
    const __m256i q = _mm256_or_si256(nibbles32(in + 8), fifth_bits32(qh));
    emit32_fma(q, _mm256_set1_ps(half_to_float(load_u16(in))),
               _mm256_set1_ps(half_to_float(load_u16(in + 2))), out);
  }
}

/// Q4_K and Q5_K: sub-block j's 32 quants in `q` (bytes), y = dl * q - ml with one rounding
/// (the product is exact, so fmsub rounds as d1 * q - m1 does).
template <class Out>
inline void emit32_k4(__m256i q, float dl, float ml, Out* out) {
  const __m256 d = _mm256_set1_ps(dl), m = _mm256_set1_ps(ml);
  const __m128i low = _mm256_castsi256_si128(q);
  const __m128i high = _mm256_extracti128_si256(q, 1);
  store16(out, _mm256_fmsub_ps(u8x8_to_ps(low), d, m),
          _mm256_fmsub_ps(u8x8_to_ps(_mm_srli_si128(low, 8)), d, m));
  store16(out + 16, _mm256_fmsub_ps(u8x8_to_ps(high), d, m),
          _mm256_fmsub_ps(u8x8_to_ps(_mm_srli_si128(high, 8)), d, m));
}

template <class Out>
void q4_k_avx2(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (std::size_t b = 0; b < blocks; ++b, in += 144, out += 256) {
    float dl[8], ml[8];
    k4_scales(in, dl, ml);
    for (int g = 0; g < 4; ++g) {
      const __m256i raw = load32(in + 16 + 32 * g);
      emit32_k4(_mm256_and_si256(raw, mask), dl[2 * g], ml[2 * g], out + 64 * g);
      emit32_k4(_mm256_and_si256(_mm256_srli_epi16(raw, 4), mask), dl[2 * g + 1], ml[2 * g + 1],
                out + 64 * g + 32);
    }
  }
}

template <class Out>
void q5_k_avx2(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (std::size_t b = 0; b < blocks; ++b, in += 176, out += 256) {
    float dl[8], ml[8];
    k4_scales(in, dl, ml);
    const __m256i qh = load32(in + 16);
    for (int g = 0; g < 4; ++g) {
      const __m256i raw = load32(in + 48 + 32 * g);
      emit32_k4(_mm256_or_si256(_mm256_and_si256(raw, mask), k5_fifth_bits(qh, 2 * g)), dl[2 * g],
                ml[2 * g], out + 64 * g);
      emit32_k4(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), mask),
                                k5_fifth_bits(qh, 2 * g + 1)),
                dl[2 * g + 1], ml[2 * g + 1], out + 64 * g + 32);
    }
  }
}

template <class Out>
void q6_k_avx2(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low2 = _mm256_set1_epi8(0x03);
  const __m256i bias = _mm256_set1_epi8(32);
  for (std::size_t b = 0; b < blocks; ++b, in += 210, out += 256) {
    const float d = half_to_float(load_u16(in + 208));
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load32(in + 64 * h);
      const __m256i ql1 = load32(in + 64 * h + 32);
      const __m256i qh = load32(in + 128 + 32 * h);
      const __m256i nibble[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                                 _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                 _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
      for (int k = 0; k < 4; ++k) {
        const __m256i top = _mm256_slli_epi16(
            _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), low2), 4);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibble[k], top), bias);
        const int scale = 8 * h + 2 * k;  // elements 0-15 of the 32; scale + 1 for 16-31
        const __m256 s0 =
            _mm256_set1_ps(d * static_cast<float>(static_cast<std::int8_t>(in[192 + scale])));
        const __m256 s1 =
            _mm256_set1_ps(d * static_cast<float>(static_cast<std::int8_t>(in[192 + scale + 1])));
        const __m128i low = _mm256_castsi256_si128(q);
        const __m128i high = _mm256_extracti128_si256(q, 1);
        Out* y = out + 128 * h + 32 * k;
        store16(y, _mm256_mul_ps(i8x8_to_ps(low), s0),
                _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(low, 8)), s0));
        store16(y + 16, _mm256_mul_ps(i8x8_to_ps(high), s1),
                _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(high, 8)), s1));
      }
    }
  }
}

/// 8 f16 (in the low 16 bits of 32-bit lanes) -> f32, as half_to_float.
inline __m256 half8_to_ps(__m256i h) {
  const __m256i rest = _mm256_and_si256(h, _mm256_set1_epi32(0x7FFF));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
  const __m256i normal =
      _mm256_add_epi32(_mm256_slli_epi32(rest, 13), _mm256_set1_epi32(0x38000000));
  const __m256i special = _mm256_cmpgt_epi32(rest, _mm256_set1_epi32(0x7BFF));
  const __m256i big =
      _mm256_add_epi32(normal, _mm256_and_si256(special, _mm256_set1_epi32(0x38000000)));
  const __m256i small =
      _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(rest), _mm256_set1_ps(0x1p-24f)));
  const __m256i subnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x0400), rest);
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_blendv_epi8(big, small, subnormal), sign));
}

template <class Out>
void plain_f16_avx2(const std::byte* in_bytes, Out* __restrict out, std::size_t n) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i + 16));
    store16(out + i, half8_to_ps(_mm256_cvtepu16_epi32(a)), half8_to_ps(_mm256_cvtepu16_epi32(b)));
  }
  for (; i < n; ++i) out[i] = emit_one(half_to_float(load_u16(in + 2 * i)), out);
}

template <class Out>
inline constexpr DequantizeKernel<Out> simd_dequantize<GgmlType::F16, Out> = plain_f16_avx2<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> simd_dequantize<GgmlType::Q4_0, Out> = q4_0_avx2<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> simd_dequantize<GgmlType::Q4_1, Out> = q4_1_avx2<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> simd_dequantize<GgmlType::Q5_0, Out> = q5_0_avx2<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> simd_dequantize<GgmlType::Q5_1, Out> = q5_1_avx2<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> simd_dequantize<GgmlType::Q8_0, Out> = q8_0_avx2<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> simd_dequantize<GgmlType::Q4_K, Out> = q4_k_avx2<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> simd_dequantize<GgmlType::Q5_K, Out> = q5_k_avx2<Out>;
template <class Out>
inline constexpr DequantizeKernel<Out> simd_dequantize<GgmlType::Q6_K, Out> = q6_k_avx2<Out>;
#endif  // __AVX2__ && __FMA__

/// The table's dequantization of T: the instruction set's own kernel where it has one, else the
/// plain loops (compiled with the set's flags).
template <GgmlType T, class Out>
consteval DequantizeKernel<Out> dequantize_kernel() {
  if constexpr (is_kernel<decltype(simd_dequantize<T, Out>)>) {
    return simd_dequantize<T, Out>;
  } else {
    return plain_dequantize<T, Out>;
  }
}

}  // namespace
}  // namespace amc::weight_kernels

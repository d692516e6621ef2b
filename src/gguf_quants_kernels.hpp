// The dequantization loops, included once by each per-instruction-set translation unit
// (gguf_quants_scalar.cpp, _avx2.cpp, _avx512.cpp, _neon.cpp) and compiled there with that set's
// flags.
// Everything here has internal linkage (an anonymous namespace), so the copies built with
// different flags never meet at link time.
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

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

// The NEON kernels, in the neon translation unit only: Advanced SIMD is baseline on AArch64, so
// the scalar one is compiled with the same flags and must not get them (AMC_DEQUANT_NEON is
// defined by gguf_quants_neon.cpp).
#if defined(AMC_DEQUANT_NEON) && defined(__aarch64__) && defined(__ARM_NEON)
#define AMC_DEQUANT_NEON_KERNELS 1
#include <arm_neon.h>
#else
#define AMC_DEQUANT_NEON_KERNELS 0
#endif

#include "gguf_quants_registry.hpp"

namespace amc::dequant {
namespace {

using u8 = std::uint8_t;
using u16 = std::uint16_t;
using u32 = std::uint32_t;

inline u16 load_u16(const u8* p) {
  u16 value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

/// Exact binary16 -> binary32: normals rebiased, subnormals as (mantissa) * 2^-24 (an integer
/// times a power of two: exact, and no f32 subnormal is ever formed, so a flush-to-zero mode
/// would not change it), inf and NaN with their payload (as amc::to_float(f16)). Branch-free
/// so that the F16 loop vectorises.
inline float half_to_float(u16 h) {
  const u32 sign = (u32{h} & 0x8000u) << 16;
  const u32 rest = u32{h} & 0x7FFFu;
  const u32 normal = (rest << 13) + 0x38000000u;  // exponent + (127 - 15)
  const u32 special = (rest << 13) | 0x7F800000u;
  const u32 small = std::bit_cast<u32>(static_cast<float>(static_cast<int>(rest)) * 0x1p-24f);
  const u32 bits = rest >= 0x7C00u ? special : rest >= 0x0400u ? normal : small;
  return std::bit_cast<float>(bits | sign);
}

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

/// The 6-bit scale and min of sub-block j (0..7) of a Q4_K or Q5_K super-block, as ggml's
/// get_scale_min_k4: sub-blocks 0-3 in the low 6 bits of bytes j and j + 4; 4-7 in the nibbles
/// of byte j + 4 with their top 2 bits in the top bits of bytes j - 4 and j.
inline void scale_min_k4(int j, const u8* __restrict q, u8& scale, u8& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<u8>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    min = static_cast<u8>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/// The same for all 8 sub-blocks at once, a 32-bit word at a time (ggml's way): sub-block j's
/// scale in byte j of `scales`, its min in byte j of `mins`.
inline void k4_scale_bytes(const u8* __restrict q, std::uint64_t& scales, std::uint64_t& mins) {
  u32 w[3];
  std::memcpy(w, q, sizeof w);
  constexpr u32 low6 = 0x3F3F3F3Fu, low4 = 0x0F0F0F0Fu, top2 = 0x03030303u;
  const u32 high_scales = (w[2] & low4) | (((w[0] >> 6) & top2) << 4);
  const u32 high_mins = ((w[2] >> 4) & low4) | (((w[1] >> 6) & top2) << 4);
  scales = (w[0] & low6) | (std::uint64_t{high_scales} << 32);
  mins = (w[1] & low6) | (std::uint64_t{high_mins} << 32);
}

/// The 8 sub-block scales d * scale and offsets dmin * min of a Q4_K/Q5_K super-block.
inline void k4_scales(const u8* __restrict block, float* __restrict dl, float* __restrict ml) {
  const float d = half_to_float(load_u16(block));
  const float dmin = half_to_float(load_u16(block + 2));
  for (int j = 0; j < 8; ++j) {
    u8 sc = 0, mn = 0;
    scale_min_k4(j, block + 4, sc, mn);
    dl[j] = d * static_cast<float>(sc);
    ml[j] = dmin * static_cast<float>(mn);
  }
}

/// The 256 low nibbles of a Q4_K/Q5_K super-block in element order: 4 groups of 64, the low
/// nibbles of 32 bytes (sub-block 2g) then their high nibbles (sub-block 2g + 1).
inline void unpack_k_nibbles(const u8* __restrict qs, u8* __restrict q) {
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      q[64 * g + l] = qs[32 * g + l] & 0x0F;
      q[64 * g + 32 + l] = static_cast<u8>(qs[32 * g + l] >> 4);
    }
  }
}

/// The 256 quants (0..31) of the Q5_K super-block at `in` in element order: its nibbles with
/// the fifth bits of qh[32] (bit j of byte l for element l of sub-block j).
inline void unpack_k5(const u8* __restrict in, u8* __restrict q) {
  const auto* __restrict qh = in + 16;
  unpack_k_nibbles(in + 48, q);
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) {
      q[32 * j + l] = static_cast<u8>(q[32 * j + l] | (((qh[l] >> j) & 1) << 4));
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

/// The 256 quants minus 32 (-32..31) of the Q6_K super-block at `in`, in element order (the
/// layout: q6_k below).
inline void unpack_q6_k(const u8* __restrict in, std::int8_t* __restrict q) {
  for (int h = 0; h < 2; ++h) {
    const auto* __restrict ql = in + 64 * h;
    const auto* __restrict qh = in + 128 + 32 * h;
    std::int8_t* __restrict y = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const u32 high = qh[l];
      y[l] = static_cast<std::int8_t>(((ql[l] & 0xFu) | ((high & 3u) << 4)) - 32u);
      y[l + 32] = static_cast<std::int8_t>(((ql[l + 32] & 0xFu) | (((high >> 2) & 3u) << 4)) - 32u);
      y[l + 64] = static_cast<std::int8_t>(((u32{ql[l]} >> 4) | (((high >> 4) & 3u) << 4)) - 32u);
      y[l + 96] =
          static_cast<std::int8_t>(((u32{ql[l + 32]} >> 4) | (((high >> 6) & 3u) << 4)) - 32u);
    }
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

#if defined(__AVX2__) && defined(__FMA__)
// --- AVX2 ------------------------------------------------------------------------------------
// The block types and F16 with AVX2 intrinsics (the avx2 and avx512 translation units): GCC 12
// vectorises the loops above only at 16-byte width or with store-forwarding stalls (Q4_1 to
// f32 at 1.4 G elements/s; these run several times faster, bench/bench_gguf.cpp). Same
// arithmetic, same results: each product is exact, so the FMAs round once as the plain code
// does.

/// Eight bytes at p (unsigned or signed) as floats.
inline __m256 u8x8_to_ps(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }
inline __m256 i8x8_to_ps(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)); }

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

/// The 32 nibbles of a Q4/Q5 block's 16 bytes in element order (low nibbles, then high).
inline __m256i nibbles32(const u8* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), _mm_and_si128(raw, mask));
}

/// Bit j of qh, moved to bit 4 of byte j (j < 32): the fifth bits of a Q5_0/Q5_1 block.
inline __m256i fifth_bits32(u32 qh) {
  // Byte j takes byte j / 8 of qh, then keeps bit j % 8 of it.
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

inline __m256i load32(const u8* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
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

/// Bit j of each of Q5_K's 32 qh bytes moved to bit 4: the fifth bits of sub-block j (16-bit
/// shifts: only bit 0 of each byte is kept after the first).
inline __m256i k5_fifth_bits(__m256i qh, int j) {
  const __m256i bit =
      _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
  return _mm256_slli_epi16(bit, 4);
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
#endif  // __AVX2__ && __FMA__

#if defined(__AVX2__) && defined(__FMA__)
// --- Dot products with f32 activations, AVX2 ---------------------------------------------------
// The decode's matrix-vector products on stored blocks (issue 35): each block decoded in
// registers exactly as the dequantization above decodes it, then multiplied with x and summed
// in four 8-lane accumulators (element i of a block of 32 into accumulator i / 8, lane i % 8),
// which are added pairwise at the end. No dequantized row is ever written to memory.

/// An f16 scale as f32: F16C's conversion (exact, as half_to_float, in one instruction).
inline float scale_f16(const u8* p) { return _cvtsh_ss(load_u16(p)); }

/// (a0 + a1) + (a2 + a3), then its 8 lanes pairwise: the fixed end of every AVX2 dot kernel.
inline float sum_accumulators(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

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

#if AMC_DEQUANT_NEON_KERNELS
// --- Dot products with f32 activations, NEON -------------------------------------------------
// As the AVX2 ones with 4-float vectors: a block of 32 decoded in registers into eight vectors
// (each value exact, as the dequantization's), multiplied with x and summed in eight
// accumulators (element i of a block into accumulator i / 4, lane i % 4), added pairwise at
// the end: each lane sums one product per block, then 3 + 2 additions, as the AVX2 order.

/// An f16 scale as f32 through the hardware conversion (FCVT: exact, as half_to_float).
inline float scale_f16(const u8* p) {
  __fp16 h;
  std::memcpy(&h, p, sizeof h);
  return static_cast<float>(h);
}

/// A block of 32 as eight 4-float vectors (elements 0-3, 4-7, ..., 28-31).
struct Block32x4 {
  float32x4_t w[8];
};

/// The 16 quants of q (signed or unsigned bytes) as four f32 vectors, each through `finish`
/// (the scale, and Q4_1's offset): elements 0-3, 4-7, 8-11, 12-15 into w[0..4).
template <class Finish>
inline void widen16(int8x16_t q, float32x4_t* w, const Finish& finish) {
  const int16x8_t low = vmovl_s8(vget_low_s8(q)), high = vmovl_high_s8(q);
  w[0] = finish(vcvtq_f32_s32(vmovl_s16(vget_low_s16(low))));
  w[1] = finish(vcvtq_f32_s32(vmovl_high_s16(low)));
  w[2] = finish(vcvtq_f32_s32(vmovl_s16(vget_low_s16(high))));
  w[3] = finish(vcvtq_f32_s32(vmovl_high_s16(high)));
}

template <class Finish>
inline void widen16(uint8x16_t q, float32x4_t* w, const Finish& finish) {
  const uint16x8_t low = vmovl_u8(vget_low_u8(q)), high = vmovl_high_u8(q);
  w[0] = finish(vcvtq_f32_u32(vmovl_u16(vget_low_u16(low))));
  w[1] = finish(vcvtq_f32_u32(vmovl_high_u16(low)));
  w[2] = finish(vcvtq_f32_u32(vmovl_u16(vget_low_u16(high))));
  w[3] = finish(vcvtq_f32_u32(vmovl_high_u16(high)));
}

/// The 32 nibbles of a Q4 block's 16 bytes: elements 0-15 (low nibbles) and 16-31 (high).
inline uint8x16_t low_nibbles(uint8x16_t raw) { return vandq_u8(raw, vdupq_n_u8(0x0F)); }
inline uint8x16_t high_nibbles(uint8x16_t raw) { return vshrq_n_u8(raw, 4); }

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
#endif  // AMC_DEQUANT_NEON_KERNELS

template <class Out>
using Kernel = void (*)(const std::byte*, Out*, std::size_t);

template <class Out>
constexpr Kernel<Out> kernel_for(Kind kind) {
#if defined(__AVX2__) && defined(__FMA__)
  constexpr bool avx2 = true;
#else
  constexpr bool avx2 = false;
#endif
  switch (kind) {
    case Kind::F32:
      return plain_f32<Out>;
    case Kind::BF16:
      return plain_bf16<Out>;
    default:
      break;
  }
  if constexpr (avx2) {
#if defined(__AVX2__) && defined(__FMA__)
    switch (kind) {
      case Kind::F16:
        return plain_f16_avx2<Out>;
      case Kind::Q4_0:
        return q4_0_avx2<Out>;
      case Kind::Q4_1:
        return q4_1_avx2<Out>;
      case Kind::Q5_0:
        return q5_0_avx2<Out>;
      case Kind::Q5_1:
        return q5_1_avx2<Out>;
      case Kind::Q8_0:
        return q8_0_avx2<Out>;
      case Kind::Q4_K:
        return q4_k_avx2<Out>;
      case Kind::Q5_K:
        return q5_k_avx2<Out>;
      case Kind::Q6_K:
        return q6_k_avx2<Out>;
      default:
        break;
    }
#endif
  }
  switch (kind) {
    case Kind::F16:
      return plain_f16<Out>;
    case Kind::Q4_0:
      return q4_0<Out>;
    case Kind::Q4_1:
      return q4_1<Out>;
    case Kind::Q5_0:
      return q5_0<Out>;
    case Kind::Q5_1:
      return q5_1<Out>;
    case Kind::Q8_0:
      return q8_0<Out>;
    case Kind::Q4_K:
      return q4_k<Out>;
    case Kind::Q5_K:
      return q5_k<Out>;
    case Kind::Q6_K:
      return q6_k<Out>;
    default:
      break;
  }
  return nullptr;
}

/// Elements and bytes of one block of `kind` (1 element for the plain types).
constexpr std::size_t block_elements(Kind kind) {
  switch (kind) {
    case Kind::F32:
    case Kind::F16:
    case Kind::BF16:
      return 1;
    case Kind::Q4_K:
    case Kind::Q5_K:
    case Kind::Q6_K:
      return 256;
    default:
      return 32;
  }
}

constexpr std::size_t block_bytes(Kind kind) {
  switch (kind) {
    case Kind::F32:
      return 4;
    case Kind::F16:
    case Kind::BF16:
      return 2;
    case Kind::Q4_0:
      return 18;
    case Kind::Q4_1:
      return 20;
    case Kind::Q5_0:
      return 22;
    case Kind::Q5_1:
      return 24;
    case Kind::Q8_0:
      return 34;
    case Kind::Q4_K:
      return 144;
    case Kind::Q5_K:
      return 176;
    case Kind::Q6_K:
      return 210;
  }
  return 0;
}

// --- Dot products over 8-bit activations (Q8Activations) -------------------------------------
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

/// Whether `kind` has super-blocks of 256 (the k-quants).
constexpr bool k_quant(Kind kind) { return block_elements(kind) == 256; }

// The layout of the 4- and 5-bit blocks of 32 (q4_0 ... q5_1 above): d at byte 0, Q4_1's and
// Q5_1's min m at byte 2, then Q5_0's and Q5_1's 32 fifth bits qh, then the 16 bytes of nibbles.
// Q4_0 and Q5_0 store their quants plus 8 and 16 (the zero point), Q4_1 and Q5_1 have m instead.
constexpr bool has_min(Kind kind) { return kind == Kind::Q4_1 || kind == Kind::Q5_1; }
constexpr bool has_fifth_bits(Kind kind) { return kind == Kind::Q5_0 || kind == Kind::Q5_1; }
constexpr int zero_point(Kind kind) { return kind == Kind::Q4_0 ? 8 : kind == Kind::Q5_0 ? 16 : 0; }
constexpr std::size_t qh_offset(Kind kind) { return has_min(kind) ? 4 : 2; }
constexpr std::size_t nibbles_offset(Kind kind) {
  return qh_offset(kind) + (has_fifth_bits(kind) ? 4 : 0);
}

/// The fifth bits qh of a Q5_0/Q5_1 block (0 for Q4_0/Q4_1: none).
template <Kind K>
inline u32 fifth_bits_of(const u8* block) {
  u32 qh = 0;
  if constexpr (has_fifth_bits(K)) std::memcpy(&qh, block + qh_offset(K), sizeof qh);
  return qh;
}

template <Kind K>
float q8_dot_k_generic(const Q8Activations& x, const std::byte* in_bytes, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  float lanes[8] = {};
  for (std::size_t b = 0; b < blocks; ++b, in += kBytes) {
    const std::int8_t* __restrict xq = x.q.data() + 256 * b;
    const float* dx = x.scale.data() + 8 * b;
    if constexpr (K == Kind::Q6_K) {
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
      if constexpr (K == Kind::Q4_K) {
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

template <Kind K>
float q8_dot_generic32(const Q8Activations& x, const std::byte* in_bytes, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  float lanes[8] = {};
  for (std::size_t b = 0; b < blocks; ++b, in += kBytes) {
    const std::int8_t* __restrict xq = x.q.data() + 32 * b;
    const float dx = x.scale[b];
    const float d = half_to_float(load_u16(in));
    std::int32_t sum = 0;
    float term = 0.0f;
    if constexpr (K == Kind::Q8_0) {
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

/// The plain Q8 kernel of any type that has one.
template <Kind K>
float q8_dot_generic(const Q8Activations& x, const std::byte* in, std::size_t blocks) {
  if constexpr (k_quant(K)) {
    return q8_dot_k_generic<K>(x, in, blocks);
  } else {
    return q8_dot_generic32<K>(x, in, blocks);
  }
}

#if defined(__AVX2__) && defined(__FMA__)
/// The Q8 dot products with AVX2: maddubs (unsigned weight quants times signed activations into
/// 16-bit pairs, which cannot saturate: at most 2 * 128 * 127) and madd into 8 32-bit partial
/// sums per block, scaled in f32 and accumulated in one 8-lane vector; the offset terms (Q4_1's
/// and Q5_1's m, Q4_0's -8 and Q5_0's -16) in a vector of their own, 8 blocks a lane. Q4_0's and
/// Q5_0's quants go in unsigned (0..15, 0..31: with the zero point, not minus it), so they need
/// no sign trick as Q8_0's do. `Dot(q, x)` gives the 8 partial sums of unsigned q and signed x.
// always_inline: the VNNI kernel inlines this loop into its own target, where the VNNI `dot`
// can be inlined in turn (a call per block otherwise).
template <Kind K, class Dot>
__attribute__((always_inline)) inline float q8_dot_simd(const Q8Activations& x,
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
      if constexpr (K != Kind::Q8_0) {
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
      if constexpr (K == Kind::Q8_0) {
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
/// 2 * 31 * 127). Q6_K: its quants minus 32 are signed, so, as Q8_0's in q8_dot_simd, |w| times
/// x with w's sign (pairs at most 2 * 32 * 127); lanes 0-3 (elements 0-15) take sub-block 2j's
/// scale and lanes 4-7 sub-block 2j + 1's.
template <Kind K, class Dot>
__attribute__((always_inline)) inline float q8_dot_k_simd(const Q8Activations& x,
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
    if constexpr (K == Kind::Q6_K) {
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
      const u8* qs = in + (K == Kind::Q4_K ? 16 : 48);
      for (int g = 0; g < 4; ++g) {  // sub-blocks 2g (low nibbles) and 2g + 1 (high)
        const __m256i raw = load32(qs + 32 * g);
        __m256i q0 = _mm256_and_si256(raw, low4);
        __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if constexpr (K == Kind::Q5_K) {
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

/// The x86 Q8 kernel of K with the integer dot product `dot`: q8_dot_k_simd for the k-quants,
/// q8_dot_simd for the blocks of 32.
template <Kind K, class Dot>
__attribute__((always_inline)) inline float q8_dot_x86(const Q8Activations& x, const std::byte* in,
                                                       std::size_t blocks, const Dot& dot) {
  if constexpr (k_quant(K)) {
    return q8_dot_k_simd<K>(x, in, blocks, dot);
  } else {
    return q8_dot_simd<K>(x, in, blocks, dot);
  }
}

inline __m256i dot_maddubs(__m256i q, __m256i xq) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), _mm256_set1_epi16(1));
}

template <Kind K>
float q8_dot_avx2(const Q8Activations& x, const std::byte* in, std::size_t blocks) {
  return q8_dot_x86<K>(x, in, blocks, dot_maddubs);
}
#endif  // __AVX2__ && __FMA__

#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__)
/// With AVX-512 VNNI (vpdpbusd: four u8 x s8 products summed into each 32-bit lane in one
/// instruction); compiled for it here, chosen at run time only where the CPU has it.
template <Kind K>
__attribute__((target("avx512vl,avx512vnni"))) float q8_dot_vnni(const Q8Activations& x,
                                                                 const std::byte* in,
                                                                 std::size_t blocks) {
  return q8_dot_x86<K>(
      x, in, blocks, [](__m256i q, __m256i xq) __attribute__((target("avx512vl,avx512vnni"))) {
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, xq);
      });
}
#endif

#if AMC_DEQUANT_NEON_KERNELS
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

/// The Q8 dot products with NEON, four blocks at a time: each block's 32 products summed
/// exactly in four 32-bit lanes by `dot(w0, w1, x0, x1)` (quants 0-15 and 16-31 of the weight
/// and of x; Q4's and Q5's unsigned, 0..31 fitting int8), the four blocks' lanes added pairwise
/// into one vector of their integer sums S (the generic kernel's, exactly), Q4_0's -8 sum_x and
/// Q5_0's -16 sum_x subtracted in integers, then scaled in f32 with one FMA per four blocks. Block
/// b lands in lane b % 8 of two accumulators, as in the generic kernel's lanes; the sum over lanes
/// is vaddv's.
// always_inline: the dot-product kernel inlines this loop into its own target, where the SDOT
// `dot` can be inlined in turn (as q8_dot_simd for VNNI).
template <Kind K, class Dot>
__attribute__((always_inline)) inline int32x4_t q8_block_sums(const u8* block,
                                                              const std::int8_t* xq,
                                                              const Dot& dot) {
  const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
  if constexpr (K == Kind::Q8_0) {
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
template <Kind K, class Dot>
__attribute__((always_inline)) inline float32x4_t q8_group(float32x4_t acc, const u8* in,
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
    partial[i] = q8_block_sums<K>(block, xq + 32 * i, dot);
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

template <Kind K, class Dot>
__attribute__((always_inline)) inline float q8_dot_neon_loop(const Q8Activations& x,
                                                             const std::byte* in_bytes,
                                                             std::size_t blocks, const Dot& dot) {
  const auto* in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  std::size_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    float32x4_t& a = acc[(b / 4) % 2];
    a = q8_group<K>(a, in + b * kBytes, x.q.data() + 32 * b, x.scale.data() + b, x.sum.data() + b,
                    4, dot);
  }
  if (b < blocks) {  // the last 1-3 blocks, their scales and sums padded with zeros
    float dx[4] = {};
    std::int32_t sx[4] = {};
    std::copy(x.scale.data() + b, x.scale.data() + blocks, dx);
    std::copy(x.sum.data() + b, x.sum.data() + blocks, sx);
    float32x4_t& a = acc[(b / 4) % 2];
    a = q8_group<K>(a, in + b * kBytes, x.q.data() + 32 * b, dx, sx, blocks - b, dot);
  }
  return vaddvq_f32(vaddq_f32(acc[0], acc[1]));
}

/// Q4_K, Q5_K and Q6_K with NEON, per super-block: the exact integer sums of its sub-blocks,
/// four to a vector (lane t: sub-block 4v + t; Q4_K's and Q5_K's of 32 through `dot`, Q6_K's of
/// 16 through `dot.half`), equal to the generic kernel's, then scaled in f32 by one FMA per
/// vector into accumulator v % 2; Q4_K's and Q5_K's min terms ml_j (d_x sum_x) into two
/// accumulators of their own, subtracted at the end. The quants are small enough (0..31, or
/// -32..31 for Q6_K) to be int8 as they are.
template <Kind K, class Dot>
__attribute__((always_inline)) inline float q8_dot_k_neon_loop(const Q8Activations& x,
                                                               const std::byte* in_bytes,
                                                               std::size_t blocks, const Dot& dot) {
  const auto* in = reinterpret_cast<const u8*>(in_bytes);
  constexpr std::size_t kBytes = block_bytes(K);
  const auto s8 = [](uint8x16_t q) { return vreinterpretq_s8_u8(q); };
  float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  float32x4_t mins[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (std::size_t b = 0; b < blocks; ++b, in += kBytes) {
    const std::int8_t* xq = x.q.data() + 256 * b;
    const float* dx = x.scale.data() + 8 * b;
    if constexpr (K == Kind::Q6_K) {
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
      const u8* qs = in + (K == Kind::Q4_K ? 16 : 48);
      for (int v = 0; v < 2; ++v) {  // sub-blocks 4v..4v+3
        int32x4_t partial[4];
        for (int i = 0; i < 2; ++i) {  // sub-blocks 2g (low nibbles) and 2g + 1 (high)
          const int g = 2 * v + i;
          const uint8x16_t r0 = vld1q_u8(qs + 32 * g), r1 = vld1q_u8(qs + 32 * g + 16);
          uint8x16_t q[4] = {low_nibbles(r0), low_nibbles(r1), high_nibbles(r0), high_nibbles(r1)};
          if constexpr (K == Kind::Q5_K) {  // bit j of qh[l] to bit 4 of element l of sub-block j
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

/// The NEON Q8 kernel of K with the integer dot product `dot`.
template <Kind K, class Dot>
__attribute__((always_inline)) inline float q8_dot_neon_of(const Q8Activations& x,
                                                           const std::byte* in, std::size_t blocks,
                                                           const Dot& dot) {
  if constexpr (k_quant(K)) {
    return q8_dot_k_neon_loop<K>(x, in, blocks, dot);
  } else {
    return q8_dot_neon_loop<K>(x, in, blocks, dot);
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

template <Kind K>
float q8_dot_neon(const Q8Activations& x, const std::byte* in, std::size_t blocks) {
  return q8_dot_neon_of<K>(x, in, blocks, DotWidening{});
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

template <Kind K>
AMC_DOTPROD_TARGET float q8_dot_dotprod(const Q8Activations& x, const std::byte* in,
                                        std::size_t blocks) {
  return q8_dot_neon_of<K>(x, in, blocks, DotSdot{});
}
#undef AMC_DOTPROD_TARGET
#endif  // AMC_DOTPROD_KERNELS
#endif  // AMC_DEQUANT_NEON_KERNELS

/// Pick<K>::kernel for the eight types with 8-bit activation kernels (Q8_0, Q4_0, Q4_1, Q5_0,
/// Q5_1, Q4_K, Q5_K, Q6_K), null for the others.
template <template <Kind> class Pick>
constexpr Q8Kernel q8_kernel_of(Kind kind) {
  switch (kind) {
    case Kind::Q8_0:
      return Pick<Kind::Q8_0>::kernel;
    case Kind::Q4_0:
      return Pick<Kind::Q4_0>::kernel;
    case Kind::Q4_1:
      return Pick<Kind::Q4_1>::kernel;
    case Kind::Q5_0:
      return Pick<Kind::Q5_0>::kernel;
    case Kind::Q5_1:
      return Pick<Kind::Q5_1>::kernel;
    case Kind::Q4_K:
      return Pick<Kind::Q4_K>::kernel;
    case Kind::Q5_K:
      return Pick<Kind::Q5_K>::kernel;
    case Kind::Q6_K:
      return Pick<Kind::Q6_K>::kernel;
    default:
      return nullptr;
  }
}

/// The table's baseline Q8 kernel for K: AVX2 maddubs, NEON's widening products, or generic.
template <Kind K>
struct Q8Baseline {
#if defined(__AVX2__) && defined(__FMA__)
  static constexpr Q8Kernel kernel = q8_dot_avx2<K>;
#elif AMC_DEQUANT_NEON_KERNELS
  static constexpr Q8Kernel kernel = q8_dot_neon<K>;
#else
  static constexpr Q8Kernel kernel = q8_dot_generic<K>;
#endif
};

/// The table's Q8 kernel for K with its integer dot-product extension (AVX-512 VNNI, Armv8.2
/// SDOT), null where it has none; `q8_extension` names it.
template <Kind K>
struct Q8Extension {
#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__)
  static constexpr Q8Kernel kernel = q8_dot_vnni<K>;
#elif AMC_DEQUANT_NEON_KERNELS && AMC_DOTPROD_KERNELS
  static constexpr Q8Kernel kernel = q8_dot_dotprod<K>;
#else
  static constexpr Q8Kernel kernel = nullptr;
#endif
};

#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__)
constexpr std::string_view q8_extension = "avx512vnni";
#elif AMC_DEQUANT_NEON_KERNELS && AMC_DOTPROD_KERNELS
constexpr std::string_view q8_extension = "dotprod";
#else
constexpr std::string_view q8_extension = {};
#endif

/// The dot product of any type: the table's dequantization into a chunk of 256 values in L1,
/// then products summed in 32 lanes (element i of the chunk into lane i % 32), added pairwise
/// at the end. Every table has it; the SIMD ones replace it where a fused kernel exists.
template <Kind K>
float dot_by_chunks(const float* __restrict x, const std::byte* in, std::size_t blocks) {
  constexpr std::size_t kElements = block_elements(K), kBytes = block_bytes(K);
  constexpr std::size_t kBlocksPerChunk = 256 / kElements;
  constexpr Kernel<float> decode = kernel_for<float>(K);
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

template <std::size_t... I>
constexpr std::array<DotKernel, kKinds> chunk_dots(std::index_sequence<I...>) {
  return {&dot_by_chunks<static_cast<Kind>(I)>...};
}

constexpr DotKernel dot_for(Kind kind) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__)
  switch (kind) {
    case Kind::Q8_0:
      return q8_0_dot_avx512;
    case Kind::Q4_0:
      return q4_0_dot_avx512;
    case Kind::Q4_1:
      return q4_1_dot_avx512;
    default:
      break;
  }
#elif defined(__AVX2__) && defined(__FMA__)
  switch (kind) {
    case Kind::Q8_0:
      return q8_0_dot_avx2;
    case Kind::Q4_0:
      return q4_0_dot_avx2;
    case Kind::Q4_1:
      return q4_1_dot_avx2;
    default:
      break;
  }
#elif AMC_DEQUANT_NEON_KERNELS
  switch (kind) {
    case Kind::Q8_0:
      return q8_0_dot_neon;
    case Kind::Q4_0:
      return q4_0_dot_neon;
    case Kind::Q4_1:
      return q4_1_dot_neon;
    default:
      break;
  }
#endif
  return chunk_dots(std::make_index_sequence<kKinds>{})[static_cast<std::size_t>(kind)];
}

// --- Activations quantized to 8 bits (amc::quantize_activations) ------------------------------
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

#if AMC_DEQUANT_NEON_KERNELS
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
#endif  // AMC_DEQUANT_NEON_KERNELS

#if defined(__AVX512F__) && defined(__AVX512BW__)
constexpr QuantizeKernel quantize_kernel = quantize_avx512;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr QuantizeKernel quantize_kernel = quantize_avx2;
#elif AMC_DEQUANT_NEON_KERNELS
constexpr QuantizeKernel quantize_kernel = quantize_neon;
#else
constexpr QuantizeKernel quantize_kernel = quantize_generic;
#endif

}  // namespace
}  // namespace amc::dequant

#include "gguf_quants_interleaved.hpp"

namespace amc::dequant {
namespace {

DequantTable make_table(std::string_view name) {
  DequantTable table;
  table.name = name;
  for (std::size_t k = 0; k < kKinds; ++k) {
    table.to_f32[k] = kernel_for<float>(static_cast<Kind>(k));
    table.to_bf16[k] = kernel_for<bf16>(static_cast<Kind>(k));
    table.dot[k] = dot_for(static_cast<Kind>(k));
    table.q8_dot[k] = q8_kernel_of<Q8Baseline>(static_cast<Kind>(k));
    table.q8_dot_extension[k] = q8_kernel_of<Q8Extension>(static_cast<Kind>(k));
    table.q8_rows[k] = q8_rows_kernel_of(static_cast<Kind>(k));
    table.q8_rows_extension[k] = q8_rows_extension_of(static_cast<Kind>(k));
  }
  table.extension = q8_extension;
  table.quantize = quantize_kernel;
  return table;
}

}  // namespace
}  // namespace amc::dequant

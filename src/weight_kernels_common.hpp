// What the weight kernels share: the f16 and integer loads, the decoding of the k-quants' scales
// and quants, and the loads and conversions of the AVX2 and NEON kernels. Every weight kernel
// header (weight_kernels_dequantize.hpp, _f32_dot.hpp, _int8_activations.hpp, _int8_dot.hpp,
// _interleaved.hpp) includes it, and each is included once by each per-instruction-set
// translation unit (weight_kernels_scalar.cpp, _avx2.cpp, _avx512.cpp, _neon.cpp) and compiled
// there with that set's flags. Everything here and there has internal linkage (an anonymous
// namespace), so the copies built with different flags never meet at link time.
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
// the scalar one is compiled with the same flags and must not get them (AMC_WEIGHT_KERNELS_NEON
// is defined by weight_kernels_neon.cpp).
#if defined(AMC_WEIGHT_KERNELS_NEON) && defined(__aarch64__) && defined(__ARM_NEON)
#define AMC_WEIGHT_NEON_KERNELS 1
#include <arm_neon.h>
#else
#define AMC_WEIGHT_NEON_KERNELS 0
#endif

#include "amc/io/gguf.hpp"
#include "amc/io/gguf_quants.hpp"
#include "amc/storage.hpp"

namespace amc::weight_kernels {

/// Whether a kernel variable template's specialization (decltype of it) names a kernel: those
/// without one keep the primary template's type, std::nullptr_t. A type, not a comparison with
/// null: the address of a function is no constant expression to GCC under UBSan.
template <class Kernel>
inline constexpr bool is_kernel = !std::is_null_pointer_v<std::remove_cv_t<Kernel>>;
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

// --- The block layouts' fields, decoded one super-block at a time -----------------------------

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

/// The 256 quants minus 32 (-32..31) of the Q6_K super-block at `in`, in element order (the
/// layout: q6_k in weight_kernels_dequantize.hpp).
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

#if defined(__AVX2__) && defined(__FMA__)
// --- AVX2: loads and conversions every AVX2 kernel shares ---------------------------------------

/// Eight bytes at p (unsigned or signed) as floats.
inline __m256 u8x8_to_ps(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }
inline __m256 i8x8_to_ps(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)); }

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

/// Bit j of each of Q5_K's 32 qh bytes moved to bit 4: the fifth bits of sub-block j (16-bit
/// shifts: only bit 0 of each byte is kept after the first).
inline __m256i k5_fifth_bits(__m256i qh, int j) {
  const __m256i bit =
      _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
  return _mm256_slli_epi16(bit, 4);
}

/// An f16 scale as f32: F16C's conversion (exact, as half_to_float, in one instruction).
inline float scale_f16(const u8* p) { return _cvtsh_ss(load_u16(p)); }

/// (a0 + a1) + (a2 + a3), then its 8 lanes pairwise: the fixed end of every AVX2 dot kernel.
inline float sum_accumulators(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
#endif  // __AVX2__ && __FMA__

#if AMC_WEIGHT_NEON_KERNELS
// --- NEON: loads and conversions every NEON kernel shares --------------------------------------

/// An f16 scale as f32 through the hardware conversion (FCVT: exact, as half_to_float).
inline float scale_f16(const u8* p) {
  __fp16 h;
  std::memcpy(&h, p, sizeof h);
  return static_cast<float>(h);
}

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
#endif  // AMC_WEIGHT_NEON_KERNELS

}  // namespace
}  // namespace amc::weight_kernels

// The dequantization loops, included once by each per-instruction-set translation unit
// (gguf_quants_scalar.cpp, _avx2.cpp, _avx512.cpp) and compiled there with that set's flags.
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

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

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

inline float put(float x, float*) { return x; }
inline bf16 put(float x, bf16*) { return round_bf16(x); }

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
  for (std::size_t i = 0; i < n; ++i) out[i] = put(half_to_float(load_u16(in + 2 * i)), out);
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
    for (int j = 0; j < 32; ++j) {
      out[j] = put(static_cast<float>(static_cast<std::int8_t>(qs[j])) * d, out);
    }
  }
}

// Q4_0: d, 16 bytes of nibbles; element j is the low nibble of byte j, element j + 16 the high
// one. y = (q - 8) * d.
template <class Out>
void q4_0(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 18, out += 32) {
    const float d = half_to_float(load_u16(in));
    const auto* __restrict qs = in + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = put(static_cast<float>((qs[j] & 0x0F) - 8) * d, out);
      out[j + 16] = put(static_cast<float>((qs[j] >> 4) - 8) * d, out);
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
      out[j] = put(static_cast<float>(qs[j] & 0x0F) * d + m, out);
      out[j + 16] = put(static_cast<float>(qs[j] >> 4) * d + m, out);
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
      const int x1 = static_cast<int>((qs[j] >> 4) | high1) - 16;
      out[j] = put(static_cast<float>(x0) * d, out);
      out[j + 16] = put(static_cast<float>(x1) * d, out);
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
      out[j] = put(static_cast<float>((qs[j] & 0x0Fu) | high0) * d + m, out);
      out[j + 16] = put(static_cast<float>((qs[j] >> 4) | high1) * d + m, out);
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

// Q4_K: d, dmin, 12 bytes of scales and mins, 128 bytes of nibbles; 4 groups of 64 elements,
// the low nibbles of 32 bytes (sub-block 2g) then their high nibbles (sub-block 2g + 1).
// y = d * scale * q - dmin * min.
template <class Out>
void q4_k(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 144, out += 256) {
    const float d = half_to_float(load_u16(in));
    const float dmin = half_to_float(load_u16(in + 2));
    const auto* __restrict scales = in + 4;
    const auto* __restrict q = in + 16;
    for (int g = 0; g < 4; ++g, q += 32) {
      u8 sc = 0, mn = 0;
      scale_min_k4(2 * g, scales, sc, mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      scale_min_k4(2 * g + 1, scales, sc, mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      Out* __restrict y = out + 64 * g;
      for (int l = 0; l < 32; ++l) y[l] = put(d1 * static_cast<float>(q[l] & 0xF) - m1, out);
      for (int l = 0; l < 32; ++l) y[32 + l] = put(d2 * static_cast<float>(q[l] >> 4) - m2, out);
    }
  }
}

// Q5_K: as Q4_K with a fifth bit per element: qh[32], bit 2g of byte l for element l of
// sub-block 2g, bit 2g + 1 for sub-block 2g + 1.
template <class Out>
void q5_k(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 176, out += 256) {
    const float d = half_to_float(load_u16(in));
    const float dmin = half_to_float(load_u16(in + 2));
    const auto* __restrict scales = in + 4;
    const auto* __restrict qh = in + 16;
    const auto* __restrict ql = in + 48;
    for (int g = 0; g < 4; ++g, ql += 32) {
      u8 sc = 0, mn = 0;
      scale_min_k4(2 * g, scales, sc, mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      scale_min_k4(2 * g + 1, scales, sc, mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      const u32 shift1 = 2u * static_cast<u32>(g), shift2 = shift1 + 1u;
      Out* __restrict y = out + 64 * g;
      for (int l = 0; l < 32; ++l) {
        const u32 q = (ql[l] & 0xFu) | (((u32{qh[l]} >> shift1) & 1u) << 4);
        y[l] = put(d1 * static_cast<float>(q) - m1, out);
      }
      for (int l = 0; l < 32; ++l) {
        const u32 q = (u32{ql[l]} >> 4) | (((u32{qh[l]} >> shift2) & 1u) << 4);
        y[32 + l] = put(d2 * static_cast<float>(q) - m2, out);
      }
    }
  }
}

// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), 16 int8 scales, d. Two halves of 128
// elements; in each, element l + 32k (l < 32, k < 4) takes the low (k < 2) or high nibble of
// ql[l + 32 (k & 1)] and bits 2k, 2k + 1 of qh[l], scale 2k + l / 16 of the half's 8.
// y = d * scale * (q - 32).
template <class Out>
void q6_k(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 210, out += 256) {
    const float d = half_to_float(load_u16(in + 208));
    for (int half = 0; half < 2; ++half) {
      const auto* __restrict ql = in + 64 * half;
      const auto* __restrict qh = in + 128 + 32 * half;
      const auto* __restrict sc = in + 192 + 8 * half;
      Out* __restrict y = out + 128 * half;
      float s[8];
      for (int k = 0; k < 8; ++k) s[k] = d * static_cast<float>(static_cast<std::int8_t>(sc[k]));
      for (int part = 0; part < 2; ++part) {  // l in [16 part, 16 part + 16): scale index part
        for (int i = 0; i < 16; ++i) {
          const int l = 16 * part + i;
          const u32 h = qh[l];
          const int q1 = static_cast<int>((ql[l] & 0xFu) | ((h & 3u) << 4)) - 32;
          const int q2 = static_cast<int>((ql[l + 32] & 0xFu) | (((h >> 2) & 3u) << 4)) - 32;
          const int q3 = static_cast<int>((u32{ql[l]} >> 4) | (((h >> 4) & 3u) << 4)) - 32;
          const int q4 = static_cast<int>((u32{ql[l + 32]} >> 4) | (((h >> 6) & 3u) << 4)) - 32;
          y[l] = put(s[part] * static_cast<float>(q1), out);
          y[l + 32] = put(s[part + 2] * static_cast<float>(q2), out);
          y[l + 64] = put(s[part + 4] * static_cast<float>(q3), out);
          y[l + 96] = put(s[part + 6] * static_cast<float>(q4), out);
        }
      }
    }
  }
}

template <class Out>
using Kernel = void (*)(const std::byte*, Out*, std::size_t);

template <class Out>
constexpr Kernel<Out> kernel_for(Kind kind) {
  switch (kind) {
    case Kind::F32:
      return plain_f32<Out>;
    case Kind::F16:
      return plain_f16<Out>;
    case Kind::BF16:
      return plain_bf16<Out>;
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
  }
  return nullptr;
}

DequantTable make_table(std::string_view name) {
  DequantTable table;
  table.name = name;
  for (std::size_t k = 0; k < kKinds; ++k) {
    table.to_f32[k] = kernel_for<float>(static_cast<Kind>(k));
    table.to_bf16[k] = kernel_for<bf16>(static_cast<Kind>(k));
  }
  return table;
}

}  // namespace
}  // namespace amc::dequant

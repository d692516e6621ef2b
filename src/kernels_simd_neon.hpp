// The AArch64 parts of kernels_simd.hpp (xsimd::neon64, 4 f32 lanes): narrow-storage loads
// and prefetch. Advanced SIMD (NEON), including the f16 <-> f32 conversions FCVTL/FCVTN, is
// part of the AArch64 baseline, so this needs no target flags and no run-time check.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels_simd_batch.hpp"

namespace amc::kernels {
namespace {

// Widening loads: one batch of f32 from four elements of the storage type. bf16 is the top
// half of an f32, so one widening shift left by 16 (SHLL); f16 is one FCVTL.
template <class Arch>
inline FloatBatch<Arch> load_f32(const bf16* p) {
  static_assert(FloatBatch<Arch>::size == 4, "amc: NEON batches hold four floats");
  const uint16x4_t h = vld1_u16(reinterpret_cast<const std::uint16_t*>(p));
  return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

template <class Arch>
inline FloatBatch<Arch> load_f32(const f16* p) {
  static_assert(FloatBatch<Arch>::size == 4, "amc: NEON batches hold four floats");
  const uint16x4_t h = vld1_u16(reinterpret_cast<const std::uint16_t*>(p));
  return vcvt_f32_f16(vreinterpret_f16_u16(h));
}

/// One batch of f32 from four int8 values (q8_0 quants): two widening moves (SXTL) and a
/// conversion, exact.
template <class Arch>
inline FloatBatch<Arch> load_f32(const std::int8_t* p) {
  static_assert(FloatBatch<Arch>::size == 4, "amc: NEON batches hold four floats");
  std::int32_t word = 0;
  std::memcpy(&word, p, sizeof word);
  const int16x8_t wide = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(word)));
  return vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide)));
}

/// Bit j set where x[j] > threshold (an ordered compare: false for NaN), for four floats at x:
/// list_above walks the set bits instead of testing every lane again.
template <class Arch>
inline std::uint32_t lanes_above(const float* x, float threshold) {
  static_assert(FloatBatch<Arch>::size == 4, "amc: NEON batches hold four floats");
  const uint32x4_t above = vcgtq_f32(vld1q_f32(x), vdupq_n_f32(threshold));
  static const std::uint32_t kBits[4] = {1, 2, 4, 8};
  return vaddvq_u32(vandq_u32(above, vld1q_u32(kBits)));
}

/// One cache line towards L1, for reading (PRFM PLDL1KEEP).
inline void prefetch_line(const void* p) { __builtin_prefetch(p, 0, 3); }

/// One cache line towards L2, for reading (PRFM PLDL2KEEP; measured on x86 only).
inline void prefetch_line_l2(const void* p) { __builtin_prefetch(p, 0, 2); }

/// Lane r of the result is the sum of the lanes of rows[r], for four rows at once (pairwise
/// adds; xsimd's neon64 haddp returns the sums in row order).
template <class Arch>
inline FloatBatch<Arch> transpose_sum(const FloatBatch<Arch>* rows) {
  return xsimd::haddp(rows);
}

}  // namespace
}  // namespace amc::kernels

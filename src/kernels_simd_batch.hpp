// The xsimd batch type of the kernels and the operations on it that every architecture shares:
// horizontal sum and max, and the f32 load. Part of kernels_simd.hpp.
#pragma once

#include <algorithm>
#include <cstddef>

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

template <class Arch>
inline FloatBatch<Arch> load_f32(const float* p) {
  return FloatBatch<Arch>::load_unaligned(p);
}

}  // namespace
}  // namespace amc::kernels

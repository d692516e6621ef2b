// Entry points of the per-instruction-set kernel translation units (see cmake/AmcSimd.cmake).
#pragma once

#include "amc/kernels/kernel_table.hpp"

namespace amc::kernels::detail {

const KernelTable& scalar_table();
#if AMC_KERNELS_SSE2
const KernelTable& sse2_table();
#endif
#if AMC_KERNELS_AVX2
const KernelTable& avx2_table();
#endif
#if AMC_KERNELS_AVX512
const KernelTable& avx512_table();
#endif
#if AMC_KERNELS_NEON
const KernelTable& neon_table();
#endif

}  // namespace amc::kernels::detail

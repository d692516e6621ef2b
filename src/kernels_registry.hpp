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
/// BlockedOps<avx512bw>::attend_bf16_words, compiled in a translation unit of its own
/// (src/kernels_avx512_words.cpp), so that its code does not change how the rest of the
/// AVX-512 table compiles: in the same unit, GCC stopped inlining AheadLines::ask in the
/// rules' scans, and the mean rule's selection at 131072 took 175 us against 143
/// (records/bf16-words-2026-12-06/one-unit/).
void attend_bf16_words_avx512(const AttendArgs& args);
/// BlockedOps<avx512bw>::score_rows_bf16_words (score_rows<bf16> for head_dim a multiple of
/// 16), in a unit of its own too (src/kernels_avx512_word_scans.cpp), so that a change to the
/// attention kernel cannot change how these scans compile (in one unit, GCC's clones of
/// score16_words followed the attention kernel's instantiations). Each path keeps its
/// read-ahead state of its own: behind a reference chosen at run time, the bound's scan ran
/// 12% slower at 131072.
void score_rows_bf16_words_avx512(const float* queries, std::int64_t heads, std::int64_t head_dim,
                                  const bf16* rows, std::ptrdiff_t row_stride, std::int64_t count,
                                  float* out, std::ptrdiff_t out_stride, const RowsAhead& next);
#endif
#if AMC_KERNELS_NEON
const KernelTable& neon_table();
#endif

}  // namespace amc::kernels::detail

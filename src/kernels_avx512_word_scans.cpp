// score_rows<bf16> by 32-bit words (BlockedOps::score_rows_bf16_words) for the avx512 table: the
// rules' scans (the channel bound's rows, the two-stage rule's shortlisted keys, the
// oracle's blocks), in a translation unit of their own with the avx512 flags
// (cmake/AmcSimd.cmake): see detail::score_rows_bf16_words_avx512 in kernels_registry.hpp.
#include "kernels_registry.hpp"
#include "kernels_simd.hpp"

namespace amc::kernels::detail {

void score_rows_bf16_words_avx512(const float* queries, std::int64_t heads, std::int64_t head_dim,
                                  const bf16* rows, std::ptrdiff_t row_stride, std::int64_t count,
                                  float* out, std::ptrdiff_t out_stride, const RowsAhead& next) {
  BlockedOps<xsimd::avx512bw>::score_rows_bf16_words(queries, heads, head_dim, rows, row_stride,
                                                     count, out, out_stride, next);
}

}  // namespace amc::kernels::detail

// attend<bf16> by 32-bit words (BlockedOps::attend_bf16_words) for the avx512 table, in a
// translation unit of its own with the avx512 flags (cmake/AmcSimd.cmake): see
// detail::attend_bf16_words_avx512 in kernels_registry.hpp for why it is apart.
#include "kernels_registry.hpp"
#include "kernels_simd.hpp"

namespace amc::kernels::detail {

void attend_bf16_words_avx512(const AttendArgs& args) {
  BlockedOps<xsimd::avx512bw>::attend_bf16_words(args);
}

}  // namespace amc::kernels::detail

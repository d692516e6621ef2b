// The weight kernels compiled for neon. Advanced SIMD is baseline on AArch64, so the flags are
// the scalar translation unit's; this macro is what turns on the NEON kernels of the
// weight_kernels_*.hpp headers here and not there (the scalar table stays the plain loops).
#define AMC_WEIGHT_KERNELS_NEON 1
#include "weight_kernels_make_table.hpp"

namespace amc::weight_kernels {

const Table& neon_table() {
  static const Table table = make_table("neon");
  return table;
}

}  // namespace amc::weight_kernels

// Dequantization kernels compiled for neon. Advanced SIMD is baseline on AArch64, so the flags
// are the scalar translation unit's; this macro is what turns on the NEON kernels of
// gguf_quants_kernels.hpp here and not there (the scalar table stays the plain loops).
#define AMC_DEQUANT_NEON 1
#include "gguf_quants_kernels.hpp"

namespace amc::dequant {

const DequantTable& dequant_neon_table() {
  static const DequantTable table = make_table("neon");
  return table;
}

}  // namespace amc::dequant

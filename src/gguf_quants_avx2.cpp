// Dequantization kernels compiled for avx2 (flags in cmake/AmcSimd.cmake).
#include "gguf_quants_kernels.hpp"

namespace amc::dequant {

const DequantTable& dequant_avx2_table() {
  static const DequantTable table = make_table("avx2");
  return table;
}

}  // namespace amc::dequant

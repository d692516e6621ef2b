// Dequantization kernels compiled for avx512 (flags in cmake/AmcSimd.cmake).
#include "gguf_quants_kernels.hpp"

namespace amc::dequant {

const DequantTable& dequant_avx512_table() {
  static const DequantTable table = make_table("avx512");
  return table;
}

}  // namespace amc::dequant

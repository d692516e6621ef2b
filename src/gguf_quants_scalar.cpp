// Dequantization kernels compiled for scalar (the target's baseline flags).
#include "gguf_quants_kernels.hpp"

namespace amc::dequant {

const DequantTable& dequant_scalar_table() {
  static const DequantTable table = make_table("scalar");
  return table;
}

}  // namespace amc::dequant

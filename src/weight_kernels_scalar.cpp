// The weight kernels compiled with the target's baseline flags.
#include "weight_kernels_make_table.hpp"

namespace amc::weight_kernels {

const Table& scalar_table() {
  static const Table table = make_table("scalar");
  return table;
}

}  // namespace amc::weight_kernels

// The weight kernels compiled for avx2 (flags in cmake/AmcSimd.cmake).
#include "weight_kernels_make_table.hpp"

namespace amc::weight_kernels {

const Table& avx2_table() {
  static const Table table = make_table("avx2");
  return table;
}

}  // namespace amc::weight_kernels

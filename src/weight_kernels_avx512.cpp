// The weight kernels compiled for avx512 (flags in cmake/AmcSimd.cmake).
#include "weight_kernels_make_table.hpp"

namespace amc::weight_kernels {

const Table& avx512_table() {
  static const Table table = make_table("avx512");
  return table;
}

}  // namespace amc::weight_kernels

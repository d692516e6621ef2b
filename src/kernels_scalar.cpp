// Portable kernels: plain loops, built everywhere.
#include "kernels_generic.hpp"
#include "kernels_registry.hpp"

namespace amc::kernels::detail {

const KernelTable& scalar_table() {
  static const KernelTable table = make_table<ScalarOps>();
  return table;
}

}  // namespace amc::kernels::detail

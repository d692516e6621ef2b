// Kernels compiled for AArch64 Advanced SIMD (NEON is baseline there: no extra flags, see
// cmake/AmcSimd.cmake).
#include "kernels_registry.hpp"
#include "kernels_simd.hpp"

namespace amc::kernels {
namespace {

struct NeonOps : BlockedOps<xsimd::neon64> {
  static constexpr std::string_view name = "neon";
};

}  // namespace

namespace detail {

const KernelTable& neon_table() {
  static const KernelTable table = make_table<NeonOps>();
  return table;
}

}  // namespace detail
}  // namespace amc::kernels

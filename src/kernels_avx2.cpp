// Kernels compiled for avx2 (flags in cmake/AmcSimd.cmake).
#include "kernels_registry.hpp"
#include "kernels_simd.hpp"

namespace amc::kernels {
namespace {

struct Avx2Ops : BlockedOps<xsimd::fma3<xsimd::avx2>> {
  static constexpr std::string_view name = "avx2";
};

}  // namespace

namespace detail {

const KernelTable& avx2_table() {
  static const KernelTable table = make_table<Avx2Ops>();
  return table;
}

}  // namespace detail
}  // namespace amc::kernels

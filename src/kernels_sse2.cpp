// Kernels compiled for sse2 (flags in cmake/AmcSimd.cmake).
#include "kernels_registry.hpp"
#include "kernels_simd.hpp"

namespace amc::kernels {
namespace {

struct Sse2Ops : BlockedOps<xsimd::sse2> {
  static constexpr std::string_view name = "sse2";
};

}  // namespace

namespace detail {

const KernelTable& sse2_table() {
  static const KernelTable table = make_table<Sse2Ops>();
  return table;
}

}  // namespace detail
}  // namespace amc::kernels

// Kernels compiled for avx512 (flags in cmake/AmcSimd.cmake).
#include "kernels_bf16_products.hpp"
#include "kernels_registry.hpp"
#include "kernels_simd.hpp"

namespace amc::kernels {
namespace {

struct Avx512Ops : BlockedOps<xsimd::avx512bw> {
  static constexpr std::string_view name = "avx512";
};

}  // namespace

namespace detail {

const KernelTable& avx512_table() {
  static const KernelTable table = [] {
    KernelTable t = make_table<Avx512Ops>();
    if (cpu_has_avx512_bf16()) t.attend_bf16_products = &Bf16Products::attend;
    return t;
  }();
  return table;
}

}  // namespace detail
}  // namespace amc::kernels

// Run-time choice of the kernel table: the best instruction set the CPU reports, or the one
// named by AMC_KERNELS (for tests and for comparing instruction sets on one machine).
#include <cstdlib>
#include <string>
#include <vector>

#include "amc/error.hpp"
#include "kernels_registry.hpp"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

namespace amc::kernels {
namespace {

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
/// F16C from CPUID leaf 1 (ECX bit 29). Not through __builtin_cpu_supports: clang before 16
/// does not know the "f16c" feature name there and refuses to compile it. The OS support for
/// the YMM state these VEX instructions need is implied by the AVX2 check it is paired with.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

[[maybe_unused]] bool cpu_supports([[maybe_unused]] std::string_view name) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  if (name == "sse2") return __builtin_cpu_supports("sse2");
  if (name == "avx2") {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  }
  if (name == "avx512") {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  }
#endif
  return false;
}

std::vector<const KernelTable*> detect() {
  std::vector<const KernelTable*> tables{&detail::scalar_table()};
#if AMC_KERNELS_SSE2
  if (cpu_supports("sse2")) tables.push_back(&detail::sse2_table());
#endif
#if AMC_KERNELS_AVX2
  if (cpu_supports("avx2")) tables.push_back(&detail::avx2_table());
#endif
#if AMC_KERNELS_AVX512
  if (cpu_supports("avx512")) tables.push_back(&detail::avx512_table());
#endif
#if AMC_KERNELS_NEON
  // Advanced SIMD is part of the AArch64 baseline: every aarch64 CPU runs this table.
  tables.push_back(&detail::neon_table());
#endif
  return tables;
}

const KernelTable& choose() {
  const auto tables = available();
  const char* requested = std::getenv("AMC_KERNELS");
  if (requested == nullptr || *requested == '\0') return *tables.back();
  if (const KernelTable* table = find(requested)) return *table;
  std::string names;
  for (const KernelTable* table : tables)
    names += (names.empty() ? "" : ", ") + std::string(table->name);
  ::amc::detail::throw_error(
      "amc::kernels::active", "AMC_KERNELS='", requested,
      "' is not an instruction set this build and CPU support (available: ", names, ")");
}

}  // namespace

std::span<const KernelTable* const> available() {
  static const std::vector<const KernelTable*> tables = detect();
  return tables;
}

const KernelTable* find(std::string_view name) {
  for (const KernelTable* table : available()) {
    if (table->name == name) return table;
  }
  return nullptr;
}

const KernelTable& active() {
  // A function-local static that failed to initialise is retried on the next call, so a bad
  // AMC_KERNELS keeps throwing instead of silently falling back.
  static const KernelTable& table = choose();
  return table;
}

}  // namespace amc::kernels

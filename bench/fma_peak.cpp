#include "fma_peak.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace amc::bench {
namespace {

// Enough independent chains to hide the FMA latency on both FMA ports of current cores
// (4-5 cycles x 2 ports = 8-10 in flight); more costs nothing as long as they fit in registers
// (16 of 32 zmm, 12 of 16 ymm).
constexpr int kChains512 = 16;
constexpr int kChains256 = 12;
constexpr int kChainsScalar = 16;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) std::int64_t fma_avx512(std::int64_t rounds, float* sink) {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c)
    acc[c] = _mm512_set1_ps(1.0f + 0.001f * static_cast<float>(c));
  // |a| < 1 with an addend keeps every chain finite and away from denormals for any count.
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (std::int64_t r = 0; r < rounds; ++r) {
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains512; ++c) sum = _mm512_add_ps(sum, acc[c]);
  // Stored and added here: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized in its header.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (const float x : lanes) total += x;
  *sink = total;
  return rounds * kChains512 * 16;
}

__attribute__((target("avx2,fma"))) std::int64_t fma_avx2(std::int64_t rounds, float* sink) {
  __m256 acc[kChains256];
  for (int c = 0; c < kChains256; ++c)
    acc[c] = _mm256_set1_ps(1.0f + 0.001f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (std::int64_t r = 0; r < rounds; ++r) {
    for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains256; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (const float x : lanes) total += x;
  *sink = total;
  return rounds * kChains256 * 8;
}
#endif

std::int64_t fma_scalar(std::int64_t rounds, float* sink) {
  float acc[kChainsScalar];
  for (int c = 0; c < kChainsScalar; ++c) acc[c] = 1.0f + 0.001f * static_cast<float>(c);
  for (std::int64_t r = 0; r < rounds; ++r) {
    for (float& x : acc) x = x * 0.999f + 0.001f;
  }
  float total = 0.0f;
  for (const float x : acc) total += x;
  *sink = total;
  return rounds * kChainsScalar;
}

}  // namespace

const char* fma_peak_isa() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
#endif
  return "scalar";
}

std::int64_t fma_peak(std::int64_t rounds, float* sink) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return fma_avx512(rounds, sink);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return fma_avx2(rounds, sink);
#endif
  return fma_scalar(rounds, sink);
}

}  // namespace amc::bench

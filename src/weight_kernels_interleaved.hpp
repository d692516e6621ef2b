// The kernels over rows interleaved 16 to a group (amc::Int8InterleavedKernel; the layout is
// described in include/amc/io/gguf_quants.hpp): plain loops for every table, and AVX-512 VNNI,
// where one VPDPBUSD multiplies a 4-byte word of every row of the group by the same 4 activation
// quants. Lane r of every vector is row r, so no sum crosses lanes, and each activation word is
// broadcast once for 16 rows. For each type whose row in src/ggml_types.hpp says kInterleaved.
// Included by weight_kernels_make_table.hpp, so compiled once per instruction set.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "weight_kernels.hpp"
#include "weight_kernels_common.hpp"

namespace amc::weight_kernels {
namespace {

/// The plain loops: per block, each row's integer sum, then the f32 steps of the VNNI kernel
/// in the same order (fused multiply-adds as std::fma), so both give the same bits.
template <GgmlType K>
void interleaved_generic(const Int8Activations& x, const std::byte* group, std::size_t blocks,
                         float* out) {
  constexpr std::size_t kBytes = interleaved_block_bytes(K);
  constexpr std::size_t kQuants = interleaved_quants_offset(K);
  float acc[16] = {}, mins[16] = {};
  const auto* in = reinterpret_cast<const u8*>(group);
  for (std::size_t b = 0; b < blocks; ++b, in += kBytes) {
    const std::int8_t* xq = x.q.data() + 32 * b;
    std::int32_t sums[16] = {};
    for (int r = 0; r < 16; ++r) {
      std::int32_t s = 0;
      if constexpr (K == GgmlType::Q8_0) {
        for (int j = 0; j < 8; ++j) {
          for (int t = 0; t < 4; ++t) s += in[kQuants + 64 * j + 4 * r + t] * xq[4 * j + t];
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          for (int t = 0; t < 4; ++t) {
            const u8 byte = in[kQuants + 64 * j + 4 * r + t];
            s += (byte & 15) * xq[4 * j + t] + (byte >> 4) * xq[16 + 4 * j + t];
          }
        }
      }
      sums[r] = s - interleaved_offset(K) * x.sum[b];
    }
    const float dx = x.scale[b];
    for (int r = 0; r < 16; ++r) {
      const float scale = half_to_float(load_u16(in + 2 * r)) * dx;
      acc[r] = std::fma(static_cast<float>(sums[r]), scale, acc[r]);
    }
    if constexpr (K == GgmlType::Q4_1) {
      const float min_scale = dx * static_cast<float>(x.sum[b]);
      for (int r = 0; r < 16; ++r) {
        mins[r] = std::fma(half_to_float(load_u16(in + 32 + 2 * r)), min_scale, mins[r]);
      }
    }
  }
  for (int r = 0; r < 16; ++r) out[r] = K == GgmlType::Q4_1 ? acc[r] + mins[r] : acc[r];
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__) && defined(__GNUC__)
/// AVX-512 VNNI: per block, 8 VPDPBUSD into two independent sums (Q4: the low nibbles' and the
/// high nibbles'; Q8_0: words 0-3 and 4-7), each activation word broadcast to the 16 rows.
template <GgmlType K>
__attribute__((target("avx512vnni"))) void interleaved_vnni(const Int8Activations& x,
                                                            const std::byte* group,
                                                            std::size_t blocks, float* out) {
  constexpr std::size_t kBytes = interleaved_block_bytes(K);
  constexpr std::size_t kQuants = interleaved_quants_offset(K);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc = _mm512_setzero_ps(), mins = _mm512_setzero_ps();
  const auto* in = reinterpret_cast<const u8*>(group);
  const auto word = [&](std::size_t b, int i) {  // activation quants 4i..4i+3 of block b
    std::int32_t w;
    std::memcpy(&w, x.q.data() + 32 * b + 4 * i, sizeof w);
    return _mm512_set1_epi32(w);
  };
  for (std::size_t b = 0; b < blocks; ++b, in += kBytes) {
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    const u8* quants = in + kQuants;
    // The same block of the next group (the next 16 rows, a group's bytes ahead), asked for
    // towards L2 while this one is multiplied. Without it, the hardware prefetcher alone,
    // SmolLM2-135M's Q4_1 decode took 227 tokens/s against 331 with it towards L1 (medians of
    // 8 rounds); towards L2 was faster again on SmolLM2 and on the Qwen2-0.5B-shaped Q8_0
    // file (docs/performance.md, "Rows interleaved"). Past a matrix's last group it asks for
    // the next matrix's first bytes, which decode reads next (prefetches do not fault).
    for (std::size_t line = 0; line < kBytes; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(in + blocks * kBytes + line), _MM_HINT_T2);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i w = _mm512_loadu_si512(quants + 64 * j);
      if constexpr (K == GgmlType::Q8_0) {
        s0 = _mm512_dpbusd_epi32(s0, w, word(b, j));
        s1 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512(quants + 64 * (4 + j)), word(b, 4 + j));
      } else {
        s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(w, low4), word(b, j));
        s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(_mm512_srli_epi16(w, 4), low4),
                                 word(b, 4 + j));
      }
    }
    __m512i sums = _mm512_add_epi32(s0, s1);
    if constexpr (interleaved_offset(K) != 0) {
      sums = _mm512_sub_epi32(sums, _mm512_set1_epi32(interleaved_offset(K) * x.sum[b]));
    }
    const float dx = x.scale[b];
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc);
    if constexpr (K == GgmlType::Q4_1) {
      const __m512 m =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 32)));
      mins = _mm512_fmadd_ps(m, _mm512_set1_ps(dx * static_cast<float>(x.sum[b])), mins);
    }
  }
  _mm512_storeu_ps(out, K == GgmlType::Q4_1 ? _mm512_add_ps(acc, mins) : acc);
}
#endif

/// The table's interleaved kernel of K with its extension: AVX-512 VNNI in the avx512 table,
/// null elsewhere.
template <GgmlType K>
struct InterleavedExtension {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__) && defined(__GNUC__)
  static constexpr Int8InterleavedKernel kernel = interleaved_vnni<K>;
#else
  static constexpr Int8InterleavedKernel kernel = nullptr;
#endif
};

}  // namespace
}  // namespace amc::weight_kernels

// The opt-in reduced-precision attention kernel (AttentionArithmetic::bf16_products): the
// online-softmax attention of BlockedOps::attend over bf16 keys and values, with the products
// done by AVX512_BF16's VDPBF16PS, which multiplies 32 bf16 pairs and adds them pairwise into
// 16 f32 lanes: twice the products of an f32 FMA per instruction, and the keys and values are
// used as stored, without widening.
//
// What it rounds (and exact_f32 does not): the scaled query to bf16 before the scores, and the
// softmax weights to bf16 before the values (round to nearest even, unit roundoff 2^-8). The
// keys and values are bf16 already. Products of two bf16 are exact in f32; sums are f32. The
// running max, the running sum of the weights and the rescaling are the f32 code of the exact
// kernel (fold_chunk_scores_wide). VDPBF16PS and VCVTNE2PS2BF16 treat subnormal inputs as zero
// and flush subnormal results (|x| < 2^-126), where exact_f32 keeps them.
//
// Included by kernels_avx512.cpp only; the functions carry the avx512bf16 target themselves,
// so the rest of that translation unit keeps running on AVX-512 CPUs without BF16, and the
// table offers the kernel only when CPUID reports AVX512_BF16.
#pragma once

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels_simd.hpp"

#define AMC_BF16_PRODUCTS_TARGET __attribute__((target("avx512bf16")))

namespace amc::kernels {
namespace {

/// AVX512_BF16: CPUID leaf 7, sub-leaf 1, EAX bit 5. The ZMM state it needs is the AVX-512
/// table's own requirement, checked before this table is offered at all.
inline bool cpu_has_avx512_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
}

struct Bf16Products {
  using Arch = xsimd::avx512bw;
  static constexpr std::int64_t kPair = 32;      ///< bf16 elements per VDPBF16PS operand
  static constexpr std::int64_t kHeadGroup = 8;  ///< heads per pass (the tables below list 8)

  /// 32 f32 to 32 bf16 (round to nearest even): element i of the result is x[i].
  AMC_BF16_PRODUCTS_TARGET static __m512bh round_to_bf16(const float* x) {
    // cvtne2ps_pbh(a, b) puts b in the low half and a in the high half.
    return _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
  }

  /// Transposes 16 rows of 16 32-bit words (rows[r]: row r) so that out[w] holds word w of
  /// every row, row r in lane r: 32-bit then 64-bit unpacks within 128-bit lanes, then two
  /// rounds of 128-bit lane shuffles; 64 shuffles for 256 words.
  AMC_BF16_PRODUCTS_TARGET static void transpose16(const __m512i* rows, __m512i* out) {
    __m512i u[16];  // u[4g + k], 128-bit lane L: word 4L + k of rows 4g .. 4g + 3
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i* r = rows + 4 * g;
      const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
      const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
      u[4 * g + 0] = _mm512_unpacklo_epi64(t0, t2);
      u[4 * g + 1] = _mm512_unpackhi_epi64(t0, t2);
      u[4 * g + 2] = _mm512_unpacklo_epi64(t1, t3);
      u[4 * g + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      // a: words k and 8 + k of rows 0-7; b: words 4 + k and 12 + k; c, d: the same, rows 8-15.
      const __m512i a = _mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(2, 0, 2, 0));
      const __m512i b = _mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(3, 1, 3, 1));
      const __m512i c = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], _MM_SHUFFLE(2, 0, 2, 0));
      const __m512i d = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], _MM_SHUFFLE(3, 1, 3, 1));
      out[k] = _mm512_shuffle_i32x4(a, c, _MM_SHUFFLE(2, 0, 2, 0));
      out[8 + k] = _mm512_shuffle_i32x4(a, c, _MM_SHUFFLE(3, 1, 3, 1));
      out[4 + k] = _mm512_shuffle_i32x4(b, d, _MM_SHUFFLE(2, 0, 2, 0));
      out[12 + k] = _mm512_shuffle_i32x4(b, d, _MM_SHUFFLE(3, 1, 3, 1));
    }
  }

  /// acc[h] (lane r: row r) += the products of 16 words of kHeads queries (`words`: head h's
  /// words at words + h * words_per_head) with 16 transposed words of 16 rows. Words outside,
  /// heads inside: kHeads independent accumulation chains, each query word broadcast from memory.
  template <int kHeads>
  AMC_BF16_PRODUCTS_TARGET static void add_word_products(const __m512i* transposed,
                                                         const std::uint32_t* words,
                                                         std::int64_t words_per_head, __m512* acc) {
#pragma GCC unroll 16
    for (int w = 0; w < 16; ++w) {
      const auto column = reinterpret_cast<__m512bh>(transposed[w]);
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) {
        // The broadcast operand last, where VDPBF16PS can take it from memory ({1to16}).
        const auto q = reinterpret_cast<__m512bh>(
            _mm512_set1_epi32(static_cast<int>(words[h * words_per_head + w])));
        acc[h] = _mm512_dpbf16_ps(acc[h], column, q);
      }
    }
  }

  /// scores[h * kAttendChunk + r0 + r] for kHeads heads and `group` (1 to 16) rows from `rows`:
  /// each 32-channel slice of the 16 rows is transposed once (scores come out one row per lane,
  /// with no horizontal sums), then every head's query words multiply it. Missing rows repeat
  /// the last one and are not stored.
  template <int kHeads, std::int64_t kDim>
  AMC_BF16_PRODUCTS_TARGET static void score_group(const std::uint32_t* words, std::int64_t dim,
                                                   const bf16* rows, std::ptrdiff_t stride,
                                                   std::int64_t group, float* scores) {
    // head_dim fixed at compile time (kDim > 0) makes every query word's address a constant
    // offset; at run time the address arithmetic outnumbered the products.
    const std::int64_t head_dim = kDim > 0 ? kDim : dim;
    const std::int64_t words_per_head = head_dim / 2;
    __m512 acc[kHeads];
#pragma GCC unroll 8
    for (int h = 0; h < kHeads; ++h) acc[h] = _mm512_setzero_ps();
    for (std::int64_t c = 0; c < head_dim; c += kPair) {
      __m512i slice[16], transposed[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r)
        slice[r] = _mm512_loadu_si512(rows + std::min<std::int64_t>(r, group - 1) * stride + c);
      transpose16(slice, transposed);
      add_word_products<kHeads>(transposed, words + c / 2, words_per_head, acc);
    }
    const auto live = static_cast<__mmask16>((1u << group) - 1u);
#pragma GCC unroll 8
    for (int h = 0; h < kHeads; ++h) _mm512_mask_storeu_ps(scores + h * kAttendChunk, live, acc[h]);
  }

  /// score_group for 1 to kHeadGroup heads, by head count - 1: one register per head makes the
  /// count a template parameter, and this picks the instantiation for a run-time count.
  template <std::int64_t kDim>
  static constexpr decltype(&score_group<1, kDim>) kScoreGroup[kHeadGroup] = {
      &score_group<1, kDim>, &score_group<2, kDim>, &score_group<3, kDim>, &score_group<4, kDim>,
      &score_group<5, kDim>, &score_group<6, kDim>, &score_group<7, kDim>, &score_group<8, kDim>};

  template <std::int64_t kDim>
  AMC_BF16_PRODUCTS_TARGET static void score_heads(const std::uint32_t* words, std::int64_t heads,
                                                   std::int64_t head_dim, const bf16* rows,
                                                   std::ptrdiff_t stride, std::int64_t group,
                                                   float* scores) {
    for (std::int64_t h0 = 0; h0 < heads; h0 += kHeadGroup) {
      const std::uint32_t* w = words + h0 * head_dim / 2;
      float* out = scores + h0 * kAttendChunk;
      kScoreGroup<kDim>[std::min(kHeadGroup, heads - h0) - 1](w, head_dim, rows, stride, group,
                                                              out);
    }
  }

  /// scores[h * kAttendChunk + r] for every head and the chunk's `rows` rows (<= kAttendChunk),
  /// in groups of 16 rows and up to 8 heads.
  AMC_BF16_PRODUCTS_TARGET static void score_chunk(const std::uint16_t* query, std::int64_t heads,
                                                   std::int64_t head_dim, const bf16* keys,
                                                   std::ptrdiff_t stride, std::int64_t rows,
                                                   float* scores) {
    const auto* words = reinterpret_cast<const std::uint32_t*>(query);
    for (std::int64_t r0 = 0; r0 < rows; r0 += 16) {
      const std::int64_t group = std::min<std::int64_t>(16, rows - r0);
      const bf16* group_rows = keys + r0 * stride;
      float* out = scores + r0;
      if (head_dim == 64) {
        score_heads<64>(words, heads, head_dim, group_rows, stride, group, out);
      } else if (head_dim == 128) {
        score_heads<128>(words, heads, head_dim, group_rows, stride, group, out);
      } else {
        score_heads<0>(words, heads, head_dim, group_rows, stride, group, out);
      }
    }
  }

  /// accumulator[h] = rescale[h] * accumulator[h] + sum_r weights[h, r] * values[r] for kHeads
  /// heads, two rows per VDPBF16PS. pairs[h * 16 + m] holds the bf16 weights of rows 2m
  /// (low half) and 2m + 1 (high half); rows past `rows` have weight 0 and are not read.
  template <int kHeads>
  AMC_BF16_PRODUCTS_TARGET static void accumulate_values(const std::uint32_t* pairs,
                                                         const float* rescale, const bf16* values,
                                                         std::ptrdiff_t stride, std::int64_t rows,
                                                         std::int64_t head_dim,
                                                         float* accumulator) {
    // Interleave two rows of 32 channels so that each 32-bit lane holds one channel of both:
    // lane i of `low` is (a[i], b[i]) for channels 0-15, of `high` for channels 16-31.
    const __m512i low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                         8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
    for (std::int64_t c = 0; c < head_dim; c += kPair) {
      __m512 lo[kHeads], hi[kHeads];
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) {
        lo[h] = _mm512_loadu_ps(accumulator + h * head_dim + c);
        hi[h] = _mm512_loadu_ps(accumulator + h * head_dim + c + 16);
        const __m512 factor = _mm512_set1_ps(rescale[h]);
        lo[h] = _mm512_mul_ps(lo[h], factor);
        hi[h] = _mm512_mul_ps(hi[h], factor);
      }
      const bf16* row = values + c;
      for (std::int64_t r = 0; r < rows; r += 2, row += 2 * stride) {
        const __m512i a = _mm512_loadu_si512(row);
        const __m512i b = r + 1 < rows ? _mm512_loadu_si512(row + stride) : _mm512_setzero_si512();
        const auto x0 = reinterpret_cast<__m512bh>(_mm512_permutex2var_epi16(a, low, b));
        const auto x1 = reinterpret_cast<__m512bh>(_mm512_permutex2var_epi16(a, high, b));
#pragma GCC unroll 8
        for (int h = 0; h < kHeads; ++h) {
          const auto p = reinterpret_cast<__m512bh>(
              _mm512_set1_epi32(static_cast<int>(pairs[h * (kAttendChunk / 2) + r / 2])));
          lo[h] = _mm512_dpbf16_ps(lo[h], p, x0);
          hi[h] = _mm512_dpbf16_ps(hi[h], p, x1);
        }
      }
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) {
        _mm512_storeu_ps(accumulator + h * head_dim + c, lo[h]);
        _mm512_storeu_ps(accumulator + h * head_dim + c + 16, hi[h]);
      }
    }
  }

  /// accumulate_values for 1 to kHeadGroup heads, by head count - 1 (as kScoreGroup).
  static constexpr decltype(&accumulate_values<1>) kAccumulateValues[kHeadGroup] = {
      &accumulate_values<1>, &accumulate_values<2>, &accumulate_values<3>, &accumulate_values<4>,
      &accumulate_values<5>, &accumulate_values<6>, &accumulate_values<7>, &accumulate_values<8>};

  AMC_BF16_PRODUCTS_TARGET static void accumulate_values_any(
      std::int64_t heads, const std::uint32_t* pairs, const float* rescale, const bf16* values,
      std::ptrdiff_t stride, std::int64_t rows, std::int64_t head_dim, float* accumulator) {
    for (std::int64_t h0 = 0; h0 < heads; h0 += kHeadGroup) {
      const std::uint32_t* p = pairs + h0 * (kAttendChunk / 2);
      const float* r = rescale + h0;
      float* acc = accumulator + h0 * head_dim;
      kAccumulateValues[std::min(kHeadGroup, heads - h0) - 1](p, r, values, stride, rows, head_dim,
                                                              acc);
    }
  }

  /// Asks for every cache line of `count` rows. Contiguous rows (a KvView's usual layout) are
  /// one run of bytes, prefetched four lines per step: the exact kernel's loop over rows and
  /// lines costs about as many instructions per chunk as this kernel's dot products. Prefetches
  /// past the end are harmless (a prefetch never faults).
  static void prefetch_rows(const bf16* rows, std::ptrdiff_t stride, std::int64_t count,
                            std::int64_t head_dim) {
    if (stride != head_dim) {
      BlockedOps<Arch>::prefetch_rows(rows, stride, count, head_dim);
      return;
    }
    const char* line = reinterpret_cast<const char*>(rows);
    const char* end = line + count * head_dim * static_cast<std::int64_t>(sizeof(bf16));
    for (; line < end; line += 4 * 64) {
      prefetch_line(line);
      prefetch_line(line + 64);
      prefetch_line(line + 2 * 64);
      prefetch_line(line + 3 * 64);
    }
  }

  /// The table entry. head_dim must be a multiple of 32 (the operators check before calling).
  AMC_BF16_PRODUCTS_TARGET static void attend(const AttendArgs& a) {
    static_assert(kAttendChunk == 32, "weight pairs and the wide fold assume 32-row chunks");
    read_next_rows(a, sizeof(bf16));
    const bf16* keys = static_cast<const bf16*>(a.keys);
    const bf16* values = static_cast<const bf16*>(a.values);
    // Scratch (attend_scratch_floats): the exact kernel's [heads, kAttendChunk] scores, its
    // widened rows (unused here) and [heads] rescale factors, then this kernel's bf16 query
    // [heads, head_dim] and weight pairs [heads, kAttendChunk / 2].
    float* scores = a.scratch;
    float* rescale = a.scratch + a.heads * kAttendChunk + kAttendChunk * a.head_dim;
    auto* query = reinterpret_cast<std::uint16_t*>(rescale + a.heads);
    auto* pairs = reinterpret_cast<std::uint32_t*>(query + a.heads * a.head_dim);
    // The query is rounded once per call.
    for (std::int64_t h = 0; h < a.heads; ++h) {
      for (std::int64_t c = 0; c < a.head_dim; c += kPair) {
        _mm512_storeu_si512(
            query + h * a.head_dim + c,
            reinterpret_cast<__m512i>(round_to_bf16(a.queries + h * a.head_dim + c)));
      }
    }
    for (std::int64_t first = 0; first < a.rows; first += kAttendChunk) {
      const std::int64_t rows = std::min(kAttendChunk, a.rows - first);
      const bf16* chunk_keys = keys + first * a.key_stride;
      const bf16* chunk_values = values + first * a.value_stride;
      // As the exact kernel: this chunk's values and the next chunk's keys on their way now.
      prefetch_rows(chunk_values, a.value_stride, rows, a.head_dim);
      const std::int64_t next_rows = std::min(kAttendChunk, a.rows - first - rows);
      prefetch_rows(chunk_keys + rows * a.key_stride, a.key_stride, next_rows, a.head_dim);
      score_chunk(query, a.heads, a.head_dim, chunk_keys, a.key_stride, rows, scores);
      fold_chunk_scores_wide<Arch>(a, scores, rows, rescale);  // weights past `rows` are 0
      for (std::int64_t h = 0; h < a.heads; ++h) {
        _mm512_storeu_si512(pairs + h * (kAttendChunk / 2),
                            reinterpret_cast<__m512i>(round_to_bf16(scores + h * kAttendChunk)));
      }
      accumulate_values_any(a.heads, pairs, rescale, chunk_values, a.value_stride, rows, a.head_dim,
                            a.accumulator);
    }
  }
};

}  // namespace
}  // namespace amc::kernels

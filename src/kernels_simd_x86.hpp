// The x86 parts of kernels_simd.hpp (SSE2, AVX2, AVX-512): narrow-storage loads through the
// SSE/AVX integer unpacks and F16C, prefetch, and the AVX-512 transposing reductions that
// xsimd 8 gets wrong or does not have.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels_simd_batch.hpp"

/// fold_chunk_scores_wide exists (used by BlockedOps::attend when the batch has 16 lanes).
#define AMC_SIMD_WIDE_FOLD 1

namespace amc::kernels {
namespace {

// Widening loads: one batch of f32 from batch-size elements of the storage type. bf16 is the
// top half of an f32, so a zero-extend and a 16-bit shift; f16 uses the F16C conversion where
// the instruction set has it.
template <class Arch>
inline FloatBatch<Arch> load_f32(const bf16* p) {
  if constexpr (FloatBatch<Arch>::size == 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (FloatBatch<Arch>::size == 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    static_assert(FloatBatch<Arch>::size == 4, "amc: unsupported vector width for bf16 loads");
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
  }
}

template <class Arch>
inline FloatBatch<Arch> load_f32(const f16* p) {
  if constexpr (FloatBatch<Arch>::size == 16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else if constexpr (FloatBatch<Arch>::size == 8) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    // SSE2 has no half-precision conversion: convert the four lanes in scalar code.
    alignas(16) float lanes[4];
    for (int i = 0; i < 4; ++i) lanes[i] = to_float(p[i]);
    return FloatBatch<Arch>::load_aligned(lanes);
  }
}

/// One batch of f32 from batch-size int8 values (q8_0 quants): a sign extension and an integer
/// conversion, exact.
template <class Arch>
inline FloatBatch<Arch> load_f32(const std::int8_t* p) {
  if constexpr (FloatBatch<Arch>::size == 16) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
  } else if constexpr (FloatBatch<Arch>::size == 8) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
  } else {
    static_assert(FloatBatch<Arch>::size == 4, "amc: unsupported vector width for int8 loads");
    // SSE2 has no sign-extending load: put each byte at the top of its 32-bit lane, then shift
    // it down arithmetically.
    std::int32_t word = 0;
    std::memcpy(&word, p, sizeof word);
    __m128i q = _mm_cvtsi32_si128(word);
    q = _mm_unpacklo_epi8(q, q);
    q = _mm_unpacklo_epi16(q, q);
    return _mm_cvtepi32_ps(_mm_srai_epi32(q, 24));
  }
}

/// Bit j set where x[j] > threshold (an ordered compare: false for NaN), for the batch-size
/// floats at x: list_above walks the set bits instead of testing every lane again.
template <class Arch>
inline std::uint32_t lanes_above(const float* x, float threshold) {
  if constexpr (FloatBatch<Arch>::size == 16) {
    return _mm512_cmp_ps_mask(_mm512_loadu_ps(x), _mm512_set1_ps(threshold), _CMP_GT_OQ);
  } else if constexpr (FloatBatch<Arch>::size == 8) {
    return static_cast<std::uint32_t>(_mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_loadu_ps(x), _mm256_set1_ps(threshold), _CMP_GT_OQ)));
  } else {
    static_assert(FloatBatch<Arch>::size == 4, "amc: unsupported vector width for lanes_above");
    return static_cast<std::uint32_t>(
        _mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(x), _mm_set1_ps(threshold))));
  }
}

/// One cache line towards L1, for reading.
inline void prefetch_line(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

/// One cache line towards L2, for reading (T2: L2 on current Intel and AMD cores). Dense
/// attention asks for its next chunk this way, a few lines at a time (BlockedOps::AheadLines).
inline void prefetch_line_l2(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T2);
}

/// Lane r of the result is `op` folded over the lanes of rows[r], for 16 rows at once (op
/// associative and commutative: add or max): fold 256-bit halves, then 128-bit quarters, then
/// within 128-bit lanes, and finally undo the 4 x 4 transpose that leaves. Two shuffles and one
/// op per step, 15 steps for 16 results.
template <class Op>
inline __m512 transpose_reduce16(const __m512* rows, Op op) {
  __m512 halves[8];
  for (int i = 0; i < 8; ++i) {
    const __m512 a = rows[2 * i], b = rows[2 * i + 1];
    halves[i] = op(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                   _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 quarters[4];  // 128-bit lane k of quarters[j] holds 4 partial results of row 4j + k
  for (int j = 0; j < 4; ++j) {
    const __m512 a = halves[2 * j], b = halves[2 * j + 1];
    quarters[j] = op(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                     _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  const __m512 pairs01 = op(_mm512_shuffle_ps(quarters[0], quarters[1], _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_ps(quarters[0], quarters[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 pairs23 = op(_mm512_shuffle_ps(quarters[2], quarters[3], _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_ps(quarters[2], quarters[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Element 4k + j now holds the result of row 4j + k.
  const __m512 folded = op(_mm512_shuffle_ps(pairs01, pairs23, _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_ps(pairs01, pairs23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, folded);
}

/// Lane r of the result is the sum of the lanes of rows[r], for W rows at once.
/// xsimd::haddp does this, but xsimd 8.1's AVX-512 version returns the sums permuted
/// (0 1 4 5 2 3 6 7 ...), so the 16-lane case is written out.
template <class Arch>
inline FloatBatch<Arch> transpose_sum(const FloatBatch<Arch>* rows) {
  if constexpr (FloatBatch<Arch>::size == 16) {
    __m512 raw[16];
    for (int i = 0; i < 16; ++i) raw[i] = rows[i];
    return transpose_reduce16(raw, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
  } else {
    return xsimd::haddp(rows);
  }
}

/// Eight 32-bit words (a word: two bf16 channels, 2w and 2w + 1) of 16 rows, transposed:
/// out[j] lane r holds word j of row r (rows[r * stride], stride in bf16 elements). Each input
/// register holds two rows' 8 words (rows i and i + 4, then 8 + i and 12 + i) so that a 4 x 4
/// transpose within 128-bit lanes and one lane shuffle leave row r in lane r: 8 row inserts and
/// 24 shuffles for 128 words, the same count per word as a 16 x 16 transpose, in half the
/// registers.
template <class Arch>
__attribute__((always_inline)) inline void transpose_words8(const bf16* rows, std::ptrdiff_t stride,
                                                            __m512i* out) {
  const auto row = [&](int r) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + r * stride));
  };
  __m512i y[2][4];  // y[g][j], 128-bit lane L: word j + 4 (L % 2) of rows 8g + 4 (L / 2) + 0..3
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g) {
    __m512i x[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
      x[i] = _mm512_inserti64x4(_mm512_castsi256_si512(row(8 * g + i)), row(8 * g + 4 + i), 1);
    const __m512i t0 = _mm512_unpacklo_epi32(x[0], x[1]), t1 = _mm512_unpackhi_epi32(x[0], x[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(x[2], x[3]), t3 = _mm512_unpackhi_epi32(x[2], x[3]);
    y[g][0] = _mm512_unpacklo_epi64(t0, t2);
    y[g][1] = _mm512_unpackhi_epi64(t0, t2);
    y[g][2] = _mm512_unpacklo_epi64(t1, t3);
    y[g][3] = _mm512_unpackhi_epi64(t1, t3);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    out[j] = _mm512_shuffle_i32x4(y[0][j], y[1][j], _MM_SHUFFLE(2, 0, 2, 0));
    out[4 + j] = _mm512_shuffle_i32x4(y[0][j], y[1][j], _MM_SHUFFLE(3, 1, 3, 1));
  }
}

/// scores[h * out_stride + r] = <q_h, row r> for kHeads heads (queries [kHeads, head_dim]) and
/// 16 bf16 rows, head_dim (kDim when > 0) a multiple of 16. The rows are transposed 8 words at
/// a time (transpose_words8); a word gives its two channels in f32 exactly (the low one shifted
/// up, the high one masked), and each channel is one FMA per head with the query's channel
/// broadcast from memory. Rows sit in lanes, so there are no horizontal sums, and the keys are
/// widened once for all heads. Summation order, the same in every lane and for every head
/// count (so a row's score depends on neither its neighbours nor the other heads): per 16
/// channels, the even and the odd channels in two chains of 8, added, then added to the
/// head's sum. Two chains of 32 FMAs rounded 1.6x more (rms, relative to the terms' size) than
/// the row-by-row kernel's 4 FMAs and 4-level tree; blocks of 8 are within 8% of it
/// (records/bf16-words-2026-12-06/score_order_accuracy.py). `between()` runs after
/// each 16 channels' loads (attend asks for lines ahead there). always_inline: GCC left some
/// instantiations out of line, and then the cold kernel took about a third longer in
/// exploratory builds, the hot one the same.
template <class Arch, int kHeads, std::int64_t kDim, class Between>
__attribute__((always_inline)) inline void score16_bf16_words(const float* queries,
                                                              std::int64_t dim, const bf16* rows,
                                                              std::ptrdiff_t stride, float* scores,
                                                              std::ptrdiff_t out_stride,
                                                              Between&& between) {
  const std::int64_t head_dim = kDim > 0 ? kDim : dim;
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __m512 sum[kHeads];
#pragma GCC unroll 8
  for (int h = 0; h < kHeads; ++h) sum[h] = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < head_dim; c += 16) {
    __m512i words[8];
    transpose_words8<Arch>(rows + c, stride, words);
    between();  // after the loads, before the products
    // Words outside, heads inside: 2 kHeads independent chains in flight.
    __m512 even[kHeads], odd[kHeads];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512 low = _mm512_castsi512_ps(_mm512_slli_epi32(words[j], 16));
      const __m512 high = _mm512_castsi512_ps(_mm512_and_si512(words[j], high_half));
      const float* q = queries + c + 2 * j;
#pragma GCC unroll 8
      for (int h = 0; h < kHeads; ++h) {
        const __m512 q_even = _mm512_set1_ps(q[h * head_dim]);
        const __m512 q_odd = _mm512_set1_ps(q[h * head_dim + 1]);
        even[h] = j == 0 ? _mm512_mul_ps(low, q_even) : _mm512_fmadd_ps(low, q_even, even[h]);
        odd[h] = j == 0 ? _mm512_mul_ps(high, q_odd) : _mm512_fmadd_ps(high, q_odd, odd[h]);
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < kHeads; ++h) sum[h] = _mm512_add_ps(sum[h], _mm512_add_ps(even[h], odd[h]));
  }
#pragma GCC unroll 8
  for (int h = 0; h < kHeads; ++h) _mm512_storeu_ps(scores + h * out_stride, sum[h]);
}

/// Channels [c, c + 32) of each head's accumulator ([heads, head_dim], head_dim a multiple of
/// 32) from natural order to word order and back: word order keeps the even channels c + 2i in
/// [c, c + 16) and the odd ones c + 2i + 1 in [c + 16, c + 32), as a 32-channel load of bf16
/// values widens them (a word's low half shifted up, its high half masked: two operations per
/// 32 channels instead of four). permute_accumulator moves each 32 channels by two index
/// vectors (_mm512_permutex2var_ps over the pair of 16); the two orders below give them.
template <class Arch>
inline void permute_accumulator(float* accumulator, std::int64_t floats, __m512i first,
                                __m512i second) {
  for (std::int64_t c = 0; c < floats; c += 32) {
    const __m512 a = _mm512_loadu_ps(accumulator + c), b = _mm512_loadu_ps(accumulator + c + 16);
    _mm512_storeu_ps(accumulator + c, _mm512_permutex2var_ps(a, first, b));
    _mm512_storeu_ps(accumulator + c + 16, _mm512_permutex2var_ps(a, second, b));
  }
}

template <class Arch>
inline void accumulator_to_word_order(float* accumulator, std::int64_t floats) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  permute_accumulator<Arch>(accumulator, floats, even,
                            _mm512_add_epi32(even, _mm512_set1_epi32(1)));
}

template <class Arch>
inline void accumulator_to_natural_order(float* accumulator, std::int64_t floats) {
  // Natural channel k < 16 is even channel k / 2 (index k / 2) or odd channel (k - 1) / 2
  // (index 16 + (k - 1) / 2); channels 16 + k the same, 8 further on.
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  permute_accumulator<Arch>(accumulator, floats, low, _mm512_add_epi32(low, _mm512_set1_epi32(8)));
}

/// The AVX-512 fold of one chunk's scores ([heads, kAttendChunk], `rows` used) into the
/// running states, 16 heads at a time: each head's chunk max and chunk sum land in one lane of
/// a transposing reduction, where fold_chunk_scores reduces every head horizontally in a
/// serial chain (max, then exp, then sum; 22% of the hot dense kernel's profile, and the hot
/// kernel about 5% faster without it: docs/performance.md). Scores past
/// `rows` are set to -inf, which changes no max and adds exp(-inf) = 0 to no sum. The
/// accumulators' rescale factors (1 where a head's max did not grow) go to rescale[heads], for
/// accumulate_values to apply as it loads them.
template <class Arch>
void fold_chunk_scores_wide(const AttendArgs& a, float* scores, std::int64_t rows, float* rescale) {
  using Batch = FloatBatch<Arch>;
  constexpr int W = static_cast<int>(Batch::size);
  static_assert(W == 16, "the wide fold is written for AVX-512");
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  static_assert(kAttendChunk == 2 * W, "the fold reads each head's chunk as two vectors");
  if (rows < kAttendChunk) {
    for (std::int64_t h = 0; h < a.heads; ++h)
      std::fill(scores + h * kAttendChunk + rows, scores + (h + 1) * kAttendChunk, kMinusInf);
  }
  const auto add = [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); };
  const auto max = [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); };
  for (std::int64_t h0 = 0; h0 < a.heads; h0 += W) {
    const int n = static_cast<int>(std::min<std::int64_t>(W, a.heads - h0));
    const auto live = static_cast<__mmask16>((1u << n) - 1u);
    float* chunk = scores + h0 * kAttendChunk;
    __m512 lanes[W];
    for (int h = 0; h < W; ++h) {
      lanes[h] = h < n ? _mm512_max_ps(_mm512_loadu_ps(chunk + h * kAttendChunk),
                                       _mm512_loadu_ps(chunk + h * kAttendChunk + W))
                       : _mm512_set1_ps(kMinusInf);
    }
    const __m512 old_max =
        _mm512_mask_loadu_ps(_mm512_set1_ps(kMinusInf), live, a.running_max + h0);
    // max_ps(x, y) is x > y ? x : y, which for (chunk, old) is std::max(old, chunk) of the
    // scalar fold, NaN cases included.
    const __m512 new_max = _mm512_max_ps(transpose_reduce16(lanes, max), old_max);
    alignas(64) float shift[W];
    _mm512_store_ps(shift, new_max);
    for (int h = 0; h < W; ++h) {
      if (h >= n) {
        lanes[h] = _mm512_setzero_ps();
        continue;
      }
      float* head = chunk + h * kAttendChunk;
      const Batch s(shift[h]);
      const Batch e0 = xsimd::exp(Batch::load_unaligned(head) - s);
      const Batch e1 = xsimd::exp(Batch::load_unaligned(head + W) - s);
      e0.store_unaligned(head);
      e1.store_unaligned(head + W);
      lanes[h] = e0 + e1;
    }
    const __m512 chunk_sum = transpose_reduce16(lanes, add);
    const __m512 old_sum = _mm512_maskz_loadu_ps(live, a.running_sum + h0);
    // As the scalar fold: rescale only where the max grew and something was accumulated.
    const __mmask16 grew = _mm512_cmp_ps_mask(new_max, old_max, _CMP_GT_OQ) &
                           _mm512_cmp_ps_mask(old_sum, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    const __m512 factor = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), grew,
                                             xsimd::exp(Batch(_mm512_sub_ps(old_max, new_max))));
    _mm512_mask_storeu_ps(a.running_sum + h0, live,
                          _mm512_add_ps(_mm512_mul_ps(old_sum, factor), chunk_sum));
    _mm512_mask_storeu_ps(a.running_max + h0, live, new_max);
    _mm512_mask_storeu_ps(rescale + h0, live, factor);
  }
}

/// op folded over the 16 lanes of x in transpose_reduce16's order (lanes i and i + 8, then i and
/// i + 4, then j and j + 2, then the last two), so one row alone reduces to the same bits as in
/// a group of 16.
template <class Op>
inline float reduce16_in_transpose_order(__m512 x, Op op) {
  const __m256 eighths = op(_mm512_castps512_ps256(x),
                            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  const __m128 quarters = op(_mm256_castps256_ps128(eighths), _mm256_extractf128_ps(eighths, 1));
  const __m128 pairs = op(quarters, _mm_movehl_ps(quarters, quarters));
  return _mm_cvtss_f32(op(pairs, _mm_shuffle_ps(pairs, pairs, _MM_SHUFFLE(1, 1, 1, 1))));
}

/// KernelTable::log_sum_exp for AVX-512, 16 heads at a time: each head's max and its sum of
/// exp(s - max) land in one lane of a transposing reduction, as fold_chunk_scores_wide folds a
/// chunk, and one vector log serves the 16 heads. Head by head, the reduction took two
/// horizontal reductions and a scalar log per head: a quarter of the two-stage rule's selection
/// in a profile (docs/performance.md). A group of at most kFewHeads heads (per-head selection
/// calls this for one) is reduced head by head in the same lane order, to the same bits. Lanes
/// past `count` read as -inf, which changes no max and adds exp(-inf) = 0 to no sum.
template <class Arch>
void log_sum_exp_wide(const float* scores, std::int64_t heads, std::int64_t count, float* out,
                      std::ptrdiff_t out_stride) {
  using Batch = FloatBatch<Arch>;
  constexpr int W = static_cast<int>(Batch::size);
  static_assert(W == 16, "the wide log-sum-exp is written for AVX-512");
  constexpr int kFewHeads = 4;  // up to this many, a reduction per head costs less than 16 rows'
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  const std::int64_t full = count / W;
  const std::int64_t vectors = (count + W - 1) / W;
  const auto tail = static_cast<__mmask16>((1u << (count % W)) - 1u);
  const auto load = [&](const float* head, std::int64_t v) {
    return v < full ? _mm512_loadu_ps(head + v * W)
                    : _mm512_mask_loadu_ps(_mm512_set1_ps(kMinusInf), tail, head + v * W);
  };
  const auto add = [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); };
  const auto max = [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); };
  // The ops of one lane of the reductions below, at the widths reduce16_in_transpose_order
  // takes them (the 256- and 128-bit forms give each lane the same bits as the 512-bit one).
  const auto add_narrow = [](auto x, auto y) {
    if constexpr (sizeof(x) == 32)
      return _mm256_add_ps(x, y);
    else
      return _mm_add_ps(x, y);
  };
  const auto max_narrow = [](auto x, auto y) {
    if constexpr (sizeof(x) == 32)
      return _mm256_max_ps(x, y);
    else
      return _mm_max_ps(x, y);
  };
  for (std::int64_t h0 = 0; h0 < heads; h0 += W) {
    const int n = static_cast<int>(std::min<std::int64_t>(W, heads - h0));
    const float* group = scores + h0 * count;
    if (n <= kFewHeads) {
      // A few heads (one, with per-head selection): each reduced alone, in the same order as a
      // lane of the transposing reductions, where those would fold 16 rows for n live ones.
      for (int h = 0; h < n; ++h) {
        const float* head = group + h * count;
        __m512 m = _mm512_set1_ps(kMinusInf);
        for (std::int64_t v = 0; v < vectors; ++v) m = _mm512_max_ps(m, load(head, v));
        const float head_max = reduce16_in_transpose_order(m, max_narrow);
        Batch sum(0.0f);
        for (std::int64_t v = 0; v < vectors; ++v)
          sum += xsimd::exp(Batch(load(head, v)) - Batch(head_max));
        const float total = reduce16_in_transpose_order(sum, add_narrow);
        out[(h0 + h) * out_stride] =
            _mm512_cvtss_f32(_mm512_add_ps(_mm512_set1_ps(head_max), xsimd::log(Batch(total))));
      }
      continue;
    }
    __m512 lanes[W];
    for (int h = 0; h < W; ++h) {
      lanes[h] = _mm512_set1_ps(kMinusInf);
      for (std::int64_t v = 0; h < n && v < vectors; ++v)
        lanes[h] = _mm512_max_ps(lanes[h], load(group + h * count, v));
    }
    const __m512 head_max = transpose_reduce16(lanes, max);
    alignas(64) float shift[W];
    _mm512_store_ps(shift, head_max);
    for (int h = 0; h < W; ++h) {
      Batch sum(0.0f);
      for (std::int64_t v = 0; h < n && v < vectors; ++v)
        sum += xsimd::exp(Batch(load(group + h * count, v)) - Batch(shift[h]));
      lanes[h] = sum;
    }
    const __m512 sums = transpose_reduce16(lanes, add);
    alignas(64) float lse[W];
    _mm512_store_ps(lse, _mm512_add_ps(head_max, xsimd::log(Batch(sums))));
    for (int h = 0; h < n; ++h) out[(h0 + h) * out_stride] = lse[h];
  }
}

}  // namespace
}  // namespace amc::kernels

// The kernel algorithms, written once over a primitive-operations policy `Ops`:
//   Ops::name, Ops::kLanes,
//   Ops::dot<T>(q, x, n), Ops::axpy(alpha, x, y, n) (f32 x), Ops::load<T>(x, y, n),
//   optionally Ops::dot_ahead<T>(q, x, n, ahead) and Ops::dot_positions<T>(q, q_stride, count,
//   x, n, ahead, out),
//   Ops::max(x, n), Ops::exp_sum(x, n, shift), Ops::scale(y, alpha, n),
//   Ops::first_above(x, n, threshold).
// Included by one translation unit per instruction set (kernels_scalar.cpp, kernels_sse2.cpp,
// ...); everything here has internal linkage so the per-ISA copies never merge at link time.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "amc/kernels/kernel_table.hpp"

namespace amc::kernels {
namespace {

template <class Ops, KvStorage T>
float dot_entry(const float* q, const void* x, std::int64_t n) {
  return Ops::template dot<T>(q, static_cast<const T*>(x), n);
}

template <class Ops, KvStorage T>
float dot_ahead_entry(const float* q, const void* x, std::int64_t n, const void* ahead) {
  if constexpr (requires { Ops::template dot_ahead<T>(q, static_cast<const T*>(x), n, ahead); }) {
    return Ops::template dot_ahead<T>(q, static_cast<const T*>(x), n, ahead);
  } else {
    return Ops::template dot<T>(q, static_cast<const T*>(x), n);
  }
}

template <class Ops, KvStorage T>
void dot_positions_entry(const float* q, std::int64_t q_stride, std::int64_t count, const void* x,
                         std::int64_t n, const void* ahead, float* out) {
  if constexpr (requires {
                  Ops::template dot_positions<T>(q, q_stride, count, static_cast<const T*>(x), n,
                                                 ahead, out);
                }) {
    Ops::template dot_positions<T>(q, q_stride, count, static_cast<const T*>(x), n, ahead, out);
  } else {
    for (std::int64_t t = 0; t < count; ++t) {
      out[t] = dot_ahead_entry<Ops, T>(q + t * q_stride, x, n, t == 0 ? ahead : nullptr);
    }
  }
}

template <class Ops, KvStorage T>
void load_entry(const void* x, float* y, std::int64_t n) {
  Ops::template load<T>(static_cast<const T*>(x), y, n);
}

template <class Ops, KvStorage T>
void axpy_entry(float alpha, const void* x, float* y, std::int64_t n) {
  if constexpr (std::same_as<T, float>) {
    Ops::axpy(alpha, static_cast<const float*>(x), y, n);
  } else {
    // Convert in slices so the f32 copy stays in registers/L1 whatever n is.
    constexpr std::int64_t kSlice = 256;
    alignas(64) float converted[kSlice];
    const T* source = static_cast<const T*>(x);
    for (std::int64_t i = 0; i < n; i += kSlice) {
      const std::int64_t count = std::min(kSlice, n - i);
      Ops::template load<T>(source + i, converted, count);
      Ops::axpy(alpha, converted, y + i, count);
    }
  }
}

template <class Ops, KvStorage T>
void score_rows_entry(const float* queries, std::int64_t heads, std::int64_t head_dim,
                      const void* rows, std::ptrdiff_t row_stride, std::int64_t count, float* out,
                      std::ptrdiff_t out_stride) {
  const T* row = static_cast<const T*>(rows);
  // Row-outer: each row is read from memory once and reused from L1 for every head.
  for (std::int64_t r = 0; r < count; ++r, row += row_stride) {
    for (std::int64_t h = 0; h < heads; ++h) {
      out[h * out_stride + r] = Ops::template dot<T>(queries + h * head_dim, row, head_dim);
    }
  }
}

/// KernelTable::log_sum_exp, head by head: the max, then exp_sum under it, then std::log.
template <class Ops>
void log_sum_exp_entry(float* scores, std::int64_t heads, std::int64_t count, float* out,
                       std::ptrdiff_t out_stride) {
  for (std::int64_t h = 0; h < heads; ++h, scores += count) {
    const float max = Ops::max(scores, count);
    out[h * out_stride] = count == 0 ? -std::numeric_limits<float>::infinity()
                                     : max + std::log(Ops::exp_sum(scores, count, max));
  }
}

/// KernelTable::log_sum_exp_rows: the table's score_rows and log_sum_exp in turn (the rows
/// ahead asked for by tables that prefetch: score_rows_asking_ahead).
template <class Ops, KvStorage T>
void log_sum_exp_rows_entry(const float* queries, std::int64_t heads, std::int64_t head_dim,
                            const void* rows, std::ptrdiff_t row_stride, std::int64_t count,
                            float* scratch, float* out, std::ptrdiff_t out_stride,
                            const RowsAhead& ahead) {
  if constexpr (requires { &Ops::template score_rows_asking_ahead<T>; }) {
    Ops::template score_rows_asking_ahead<T>(queries, heads, head_dim, rows, row_stride, count,
                                             scratch, count, ahead);
  } else {
    score_rows_entry<Ops, T>(queries, heads, head_dim, rows, row_stride, count, scratch, count);
  }
  if constexpr (requires { &Ops::log_sum_exp; }) {
    Ops::log_sum_exp(scratch, heads, count, out, out_stride);
  } else {
    log_sum_exp_entry<Ops>(scratch, heads, count, out, out_stride);
  }
}

/// q8_0 rows widened to f32 (KernelTable::load_q8_0_rows): a plain loop that each instruction
/// set's translation unit compiles with its own flags. Every product is exact (an f16 times an
/// 8-bit integer), so every table gives the same values.
void load_q8_0_rows_entry(const std::int8_t* quants, std::ptrdiff_t quant_stride, const f16* scales,
                          std::ptrdiff_t scale_stride, std::int64_t rows, std::int64_t head_dim,
                          float* out) {
  for (std::int64_t r = 0; r < rows; ++r, out += head_dim) {
    const std::int8_t* q = quants + r * quant_stride;
    const f16* d = scales + r * scale_stride;
    for (std::int64_t b = 0; b < head_dim / 32; ++b) {
      const float scale = to_float(d[b]);
      for (std::int64_t j = 0; j < 32; ++j)
        out[b * 32 + j] = scale * static_cast<float>(q[b * 32 + j]);
    }
  }
}

/// Folds one chunk's scores ([heads, kAttendChunk], `rows` used) into the running states: the
/// scores become weights exp(s - new max) in place, and what was accumulated under an older,
/// smaller max is rescaled once per chunk.
template <class Ops>
void fold_chunk_scores(const AttendArgs& a, float* scores, std::int64_t rows) {
  for (std::int64_t h = 0; h < a.heads; ++h) {
    float* head_scores = scores + h * kAttendChunk;
    const float old_max = a.running_max[h];
    const float new_max = std::max(old_max, Ops::max(head_scores, rows));
    const float chunk_sum = Ops::exp_sum(head_scores, rows, new_max);
    if (new_max > old_max && a.running_sum[h] != 0.0f) {
      // exp(-inf) would give 0 anyway; the guard spares the first chunk a pass over the
      // accumulator.
      const float rescale = std::exp(old_max - new_max);
      a.running_sum[h] *= rescale;
      Ops::scale(a.accumulator + h * a.head_dim, rescale, a.head_dim);
    }
    a.running_sum[h] += chunk_sum;
    a.running_max[h] = new_max;
  }
}

/// Reads one byte of every cache line of a's next rows (AttendArgs::next_keys: the first
/// kAttendChunk of them, keys and values) before the call's own work: the read-ahead of the
/// kernels that do not pace asks over their arithmetic (this one, attend_bf16_products), so
/// that a sparse support's next range is on its way while this one is attended. Independent
/// loads keep many misses in flight, and the work that follows does not wait for them.
inline void read_next_rows(const AttendArgs& a, std::size_t element_bytes) {
  const std::int64_t rows = std::min(kAttendChunk, a.next_rows);
  const auto row_bytes = static_cast<std::int64_t>(a.head_dim * element_bytes);
  const auto key_stride = static_cast<std::int64_t>(a.key_stride * element_bytes);
  const auto value_stride = static_cast<std::int64_t>(a.value_stride * element_bytes);
  const auto* keys = static_cast<const unsigned char*>(a.next_keys);
  const auto* values = static_cast<const unsigned char*>(a.next_values);
  unsigned seen = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < row_bytes; i += 64)
      seen |= keys[r * key_stride + i] | values[r * value_stride + i];
  }
#if defined(__GNUC__)
  asm volatile("" : : "r"(seen));  // the loads are kept, their result unused
#else
  static_cast<void>(*static_cast<const volatile unsigned*>(&seen));
#endif
}

/// Online softmax over chunks of kAttendChunk rows: score the chunk for every head, fold the
/// chunk into each head's (max, sum, accumulator) with one rescale per chunk, then stream the
/// value rows once, adding each to every head's accumulator.
template <class Ops, KvStorage T>
void attend_entry(const AttendArgs& a) {
  read_next_rows(a, sizeof(T));
  const T* keys = static_cast<const T*>(a.keys);
  const T* values = static_cast<const T*>(a.values);
  float* scores = a.scratch;                              // [heads, kAttendChunk]
  float* value_row = a.scratch + a.heads * kAttendChunk;  // [head_dim]
  for (std::int64_t first = 0; first < a.rows; first += kAttendChunk) {
    const std::int64_t rows = std::min(kAttendChunk, a.rows - first);
    score_rows_entry<Ops, T>(a.queries, a.heads, a.head_dim, keys + first * a.key_stride,
                             a.key_stride, rows, scores, kAttendChunk);
    fold_chunk_scores<Ops>(a, scores, rows);
    const T* value = values + first * a.value_stride;
    for (std::int64_t r = 0; r < rows; ++r, value += a.value_stride) {
      const float* row = value_row;
      if constexpr (std::same_as<T, float>) {
        row = value;
      } else {
        Ops::template load<T>(value, value_row, a.head_dim);
      }
      for (std::int64_t h = 0; h < a.heads; ++h) {
        Ops::axpy(scores[h * kAttendChunk + r], row, a.accumulator + h * a.head_dim, a.head_dim);
      }
    }
  }
}

/// attend_entry<Ops, float> over q8_0 rows (KernelTable::attend_q8_0): each chunk's keys and
/// each value row widened to f32 (exact) into scratch, then the same arithmetic.
template <class Ops>
void attend_q8_0_entry(const AttendArgs& a) {
  const auto* keys = static_cast<const std::int8_t*>(a.keys);
  const auto* values = static_cast<const std::int8_t*>(a.values);
  float* scores = a.scratch;                              // [heads, kAttendChunk]
  float* converted = a.scratch + a.heads * kAttendChunk;  // [kAttendChunk, head_dim]
  float* value_row = converted;                           // [head_dim], once the scores are in
  for (std::int64_t first = 0; first < a.rows; first += kAttendChunk) {
    const std::int64_t rows = std::min(kAttendChunk, a.rows - first);
    load_q8_0_rows_entry(keys + first * a.key_stride, a.key_stride,
                         a.key_scales + first * a.key_scale_stride, a.key_scale_stride, rows,
                         a.head_dim, converted);
    score_rows_entry<Ops, float>(a.queries, a.heads, a.head_dim, converted, a.head_dim, rows,
                                 scores, kAttendChunk);
    fold_chunk_scores<Ops>(a, scores, rows);
    for (std::int64_t r = first; r < first + rows; ++r) {
      load_q8_0_rows_entry(values + r * a.value_stride, a.value_stride,
                           a.value_scales + r * a.value_scale_stride, a.value_scale_stride, 1,
                           a.head_dim, value_row);
      for (std::int64_t h = 0; h < a.heads; ++h) {
        Ops::axpy(scores[h * kAttendChunk + r - first], value_row, a.accumulator + h * a.head_dim,
                  a.head_dim);
      }
    }
  }
}

template <class Ops>
KernelTable make_table() {
  KernelTable table;
  table.name = Ops::name;
  table.f32_lanes = Ops::kLanes;
  auto fill = [&]<KvStorage T>() {
    const std::size_t i = index_of(storage_type_of<T>);
    table.dot[i] = &dot_entry<Ops, T>;
    table.dot_ahead[i] = &dot_ahead_entry<Ops, T>;
    table.dot_positions[i] = &dot_positions_entry<Ops, T>;
    table.axpy[i] = &axpy_entry<Ops, T>;
    table.load[i] = &load_entry<Ops, T>;
    // An instruction set may bring its own blocked versions of the fused kernels.
    if constexpr (requires { Ops::template attend<T>(AttendArgs{}); }) {
      table.attend[i] = &Ops::template attend<T>;
    } else {
      table.attend[i] = &attend_entry<Ops, T>;
    }
    if constexpr (requires { &Ops::template score_rows<T>; }) {
      table.score_rows[i] = &Ops::template score_rows<T>;
    } else {
      table.score_rows[i] = &score_rows_entry<Ops, T>;
    }
    table.log_sum_exp_rows[i] = &log_sum_exp_rows_entry<Ops, T>;
  };
  static_assert(kStorageTypes == 3, "one fill per storage type");
  fill.template operator()<float>();
  fill.template operator()<bf16>();
  fill.template operator()<f16>();
  if constexpr (requires { &Ops::load_q8_0_rows; }) {
    table.load_q8_0_rows = &Ops::load_q8_0_rows;
  } else {
    table.load_q8_0_rows = &load_q8_0_rows_entry;
  }
  if constexpr (requires { Ops::attend_q8_0(AttendArgs{}); }) {
    table.attend_q8_0 = &Ops::attend_q8_0;
  } else {
    table.attend_q8_0 = &attend_q8_0_entry<Ops>;
  }
  if constexpr (requires { &Ops::log_sum_exp; }) {
    table.log_sum_exp = &Ops::log_sum_exp;
  } else {
    table.log_sum_exp = &log_sum_exp_entry<Ops>;
  }
  table.max = &Ops::max;
  table.exp_sum = &Ops::exp_sum;
  table.exp_sum_listed = &Ops::exp_sum_listed;
  table.scale = &Ops::scale;
  table.stream_sum = &Ops::stream_sum;
  table.first_above = &Ops::first_above;
  table.list_above = &Ops::list_above;
  return table;
}

/// Plain loops: the portable kernels, and the tails of the SIMD ones.
struct ScalarOps {
  static constexpr std::string_view name = "scalar";
  static constexpr int kLanes = 1;

  template <KvStorage T>
  static float dot(const float* q, const T* x, std::int64_t n) {
    float sum = 0.0f;
    for (std::int64_t i = 0; i < n; ++i) sum += q[i] * to_float(x[i]);
    return sum;
  }
  static void axpy(float alpha, const float* x, float* y, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }
  template <KvStorage T>
  static void load(const T* x, float* y, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = to_float(x[i]);
  }
  static float max(const float* x, std::int64_t n) {
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
    return m;
  }
  static std::int64_t first_above(const float* x, std::int64_t n, float threshold) {
    std::int64_t i = 0;
    while (i < n && !(x[i] > threshold)) ++i;
    return i;
  }
  static std::int64_t list_above(const float* x, std::int64_t n, float threshold,
                                 std::int64_t* listed, std::int64_t capacity) {
    return list_above_from(x, 0, n, threshold, listed, 0, capacity);
  }
  /// list_above over x[i..n), with `found` indices already listed: the SIMD tables' tail.
  static std::int64_t list_above_from(const float* x, std::int64_t i, std::int64_t n,
                                      float threshold, std::int64_t* listed, std::int64_t found,
                                      std::int64_t capacity) {
    for (; i < n; ++i) {
      if (!(x[i] > threshold)) continue;
      if (found == capacity) return capacity + 1;
      listed[found++] = i;
    }
    return found;
  }
  static float exp_sum(float* x, std::int64_t n, float shift) {
    float sum = 0.0f;
    for (std::int64_t i = 0; i < n; ++i) {
      x[i] = std::exp(x[i] - shift);
      sum += x[i];
    }
    return sum;
  }
  /// exp_sum where only the listed x can be above -inf: the listed terms in increasing index
  /// order, so the sum has exp_sum's bits (exp(-inf) adds an exact zero).
  static float exp_sum_listed(float* x, std::int64_t /*n*/, float shift, const std::int64_t* listed,
                              std::int64_t count) {
    float sum = 0.0f;
    for (std::int64_t j = 0; j < count; ++j) {
      float& v = x[listed[j]];
      v = std::exp(v - shift);
      sum += v;
    }
    return sum;
  }
  static void scale(float* y, float alpha, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) y[i] *= alpha;
  }
  static float stream_sum(const float* x, std::int64_t n) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    std::int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int j = 0; j < 4; ++j) acc[j] += x[i + j];
    for (; i < n; ++i) acc[0] += x[i];
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
};

}  // namespace
}  // namespace amc::kernels

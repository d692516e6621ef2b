// Weight products: SIMD dot per row for decode, f32 tiles and Eigen's GEMM for prefill.
#include "linear.hpp"

#include <amc/error.hpp>
#include <amc/io/gguf_quants.hpp>
#include <amc/kernels/kernel_table.hpp>

#include <algorithm>
#include <string_view>
#include <vector>

namespace amc::transformer {

namespace gemm {
// Defined in gemm/gemm_*.cpp; the AVX variants only where CMake compiled them.
#define AMC_TRANSFORMER_GEMM_SIGNATURE                                                         \
  (const float*, std::int64_t, const float*, std::int64_t, float*, std::int64_t, std::int64_t, \
   std::int64_t, std::int64_t, bool, bool)
void gemm_generic AMC_TRANSFORMER_GEMM_SIGNATURE;
#ifdef AMC_TRANSFORMER_GEMM_AVX2
void gemm_avx2 AMC_TRANSFORMER_GEMM_SIGNATURE;
#endif
#ifdef AMC_TRANSFORMER_GEMM_AVX512
void gemm_avx512 AMC_TRANSFORMER_GEMM_SIGNATURE;
#endif
#undef AMC_TRANSFORMER_GEMM_SIGNATURE
}  // namespace gemm

namespace {

using GemmFunction = void (*)(const float*, std::int64_t, const float*, std::int64_t, float*,
                              std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool, bool);

struct GemmChoice {
  GemmFunction function;
  const char* name;
};

// Follows amc's kernel dispatch, which already knows what this CPU (and AMC_KERNELS) allows:
// the GEMM never uses instructions the chosen kernels would not.
GemmChoice choose_gemm() {
  [[maybe_unused]] const std::string_view isa = kernels::active().name;
#ifdef AMC_TRANSFORMER_GEMM_AVX512
  if (isa == "avx512") return {&gemm::gemm_avx512, "avx512"};
#endif
#ifdef AMC_TRANSFORMER_GEMM_AVX2
  if (isa == "avx512" || isa == "avx2") return {&gemm::gemm_avx2, "avx2"};
#endif
  return {&gemm::gemm_generic, "generic"};
}

const GemmChoice& gemm_choice() {
  static const GemmChoice choice = choose_gemm();
  return choice;
}

}  // namespace

const char* gemm_isa() { return gemm_choice().name; }

void gemm_f32(const float* a, std::int64_t a_stride, const float* b, std::int64_t b_stride,
              float* c, std::int64_t c_stride, std::int64_t m, std::int64_t n, std::int64_t k,
              bool transposed, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  gemm_choice().function(a, a_stride, b, b_stride, c, c_stride, m, n, k, transposed, accumulate);
}

namespace {

/// Bytes a matvec over rows of blocks prefetches ahead.
constexpr std::size_t kPrefetchBytes = 4096;

/// y[r] = row_dot(x, row r's blocks) (+ bias[r]) for r in [begin, end) of a matrix kept as
/// ggml blocks, prefetching by bytes: matvec's 4 rows ahead are 4.5 KB of bf16 rows of 576, and
/// rows of blocks are 3-4x shorter.
template <class RowDot>
void matvec_rows_of_blocks(const Matrix& w, const float* bias, std::int64_t begin, std::int64_t end,
                           float* y, const RowDot& row_dot) {
  const auto prefetch_rows =
      static_cast<std::int64_t>(std::max<std::size_t>(4, kPrefetchBytes / w.block_row_bytes));
  const auto* data = static_cast<const std::byte*>(w.data);
  for (std::int64_t r = begin; r < end; ++r) {
#if defined(__GNUC__)
    if (r + prefetch_rows < w.rows) {
      const std::byte* ahead =
          data + static_cast<std::size_t>(r + prefetch_rows) * w.block_row_bytes;
      for (std::size_t b = 0; b < w.block_row_bytes; b += 64) __builtin_prefetch(ahead + b);
    }
#endif
    y[r] = row_dot(data + static_cast<std::size_t>(r) * w.block_row_bytes) +
           (bias != nullptr ? bias[r] : 0.0f);
  }
}

std::size_t blocks_per_row(const Matrix& w) {
  return static_cast<std::size_t>(
      w.cols / ggml_type_layout(static_cast<std::uint32_t>(*w.blocks))->block_elements);
}

/// matvec over rows kept as ggml blocks: amc::quantized_dot's kernel per row.
void matvec_blocks(const Matrix& w, const float* x, const float* bias, std::int64_t begin,
                   std::int64_t end, float* y) {
  const QuantizedDotKernel dot = quantized_dot_kernel(*w.blocks);
  const std::size_t blocks = blocks_per_row(w);
  matvec_rows_of_blocks(w, bias, begin, end, y,
                        [&](const std::byte* row) { return dot(x, row, blocks); });
}

}  // namespace

void row_to_f32(const Matrix& w, std::int64_t r, float* out) {
  if (w.blocks) {
    dequantize(*w.blocks, std::span(static_cast<const std::byte*>(w.row(r)), w.block_row_bytes),
               std::span(out, static_cast<std::size_t>(w.cols)));
    return;
  }
  kernels::active().load[kernels::index_of(w.dtype)](w.row(r), out, w.cols);
}

namespace {

/// How many rows ahead a product over the rows of an F32, BF16 or F16 matrix asks for: each
/// row's product asks for the row about 16 KB later, a line per line it reads
/// (KernelTable::dot_ahead): more misses in flight than the hardware prefetcher keeps alone,
/// without the stall that asking for a whole row at once before each row caused (the way it
/// was until 2026-12-05; docs/performance.md, "Weight streaming, spread").
std::int64_t rows_ahead(const Matrix& w) {
  constexpr std::int64_t kAheadBytes = 16384;
  const auto row_bytes =
      std::max<std::int64_t>(1, w.cols * static_cast<std::int64_t>(w.element_bytes()));
  return std::max<std::int64_t>(1, kAheadBytes / row_bytes);
}

}  // namespace

void matvec(const Matrix& w, const float* x, const float* bias, std::int64_t begin,
            std::int64_t end, float* y) {
  if (w.blocks) return matvec_blocks(w, x, bias, begin, end, y);
  const auto dot_ahead = kernels::active().dot_ahead[kernels::index_of(w.dtype)];
  const std::int64_t ahead_rows = rows_ahead(w);
  for (std::int64_t r = begin; r < end; ++r) {
    const void* ahead = r + ahead_rows < w.rows ? w.row(r + ahead_rows) : nullptr;
    y[r] = dot_ahead(x, w.row(r), w.cols, ahead) + (bias != nullptr ? bias[r] : 0.0f);
  }
}

namespace {

/// Bytes of rows of blocks multiplied with every position before the next run: they stay in
/// the core's L2 cache (512 KB to 2 MB on the CPUs amc runs on) between positions.
constexpr std::int64_t kPositionRunBytes = 64 * 1024;

/// Runs of rows of about kPositionRunBytes, a multiple of `multiple` rows each (at least one
/// multiple: interleaved rows go in whole groups): f(run_begin, run_end) in order.
template <class F>
void for_each_run_of_rows(std::int64_t row_bytes, std::int64_t multiple, std::int64_t begin,
                          std::int64_t end, F&& f) {
  const std::int64_t run = std::max<std::int64_t>(
      multiple, kPositionRunBytes / std::max<std::int64_t>(1, row_bytes) / multiple * multiple);
  for (std::int64_t b = begin; b < end; b += run) f(b, std::min(end, b + run));
}

}  // namespace

void matvec_positions(const Matrix& w, const float* x, std::int64_t x_stride, std::int64_t n,
                      const float* bias, std::int64_t begin, std::int64_t end, float* y,
                      std::int64_t y_stride) {
  if (n == 1) return matvec(w, x, bias, begin, end, y);
  if (w.blocks) {
    for_each_run_of_rows(static_cast<std::int64_t>(w.block_row_bytes), 1, begin, end,
                         [&](std::int64_t b, std::int64_t e) {
                           for (std::int64_t t = 0; t < n; ++t)
                             matvec_blocks(w, x + t * x_stride, bias, b, e, y + t * y_stride);
                         });
    return;
  }
  const auto dot_positions = kernels::active().dot_positions[kernels::index_of(w.dtype)];
  const std::int64_t ahead_rows = rows_ahead(w);
  thread_local std::vector<float> products;
  products.resize(static_cast<std::size_t>(n));
  for (std::int64_t r = begin; r < end; ++r) {
    const void* ahead = r + ahead_rows < w.rows ? w.row(r + ahead_rows) : nullptr;
    dot_positions(x, x_stride, n, w.row(r), w.cols, ahead, products.data());
    // matvec's expression, term for term (+ 0.0f included: it turns -0 into +0).
    for (std::int64_t t = 0; t < n; ++t) {
      y[t * y_stride + r] =
          products[static_cast<std::size_t>(t)] + (bias != nullptr ? bias[r] : 0.0f);
    }
  }
}

void matvec_positions(const Stack& w, const float* x, std::int64_t x_stride, std::int64_t n,
                      const float* bias, std::int64_t begin, std::int64_t end, float* y,
                      std::int64_t y_stride) {
  std::int64_t first = 0;  // stacked index of the current part's row 0
  for (const Matrix* m : w.parts) {
    const std::int64_t lo = std::max(begin, first), hi = std::min(end, first + m->rows);
    if (lo < hi) {
      matvec_positions(*m, x, x_stride, n, bias != nullptr ? bias + first : nullptr, lo - first,
                       hi - first, y + first, y_stride);
    }
    first += m->rows;
  }
}

std::int64_t Stack::rows() const {
  std::int64_t total = 0;
  for (const Matrix* m : parts) total += m->rows;
  return total;
}

void matvec(const Stack& w, const float* x, const float* bias, std::int64_t begin, std::int64_t end,
            float* y) {
  std::int64_t first = 0;  // stacked index of the current part's row 0
  for (const Matrix* m : w.parts) {
    const std::int64_t lo = std::max(begin, first), hi = std::min(end, first + m->rows);
    if (lo < hi) {
      matvec(*m, x, bias != nullptr ? bias + first : nullptr, lo - first, hi - first, y + first);
    }
    first += m->rows;
  }
}

namespace {

/// Whether m's rows are blocks with an int8 activation kernel (amc::int8_dot_kernel's types).
bool int8_type(const Matrix& m) { return m.blocks && has_int8_dot_kernel(*m.blocks); }

}  // namespace

bool has_int8_kernel(const Stack& w) {
  return std::ranges::any_of(w.parts, [](const Matrix* m) { return int8_type(*m); });
}

/// y[r] (+ bias[r]) for the rows [begin, end) of w from its interleaved copy: 16 rows per kernel
/// call; a group the range covers only in part is computed whole into a buffer and its rows in
/// the range copied (the tasks' ranges are multiples of 16, so only a short matrix's last group).
void matvec_interleaved(const Matrix& w, const Int8Activations& xq, const float* bias,
                        std::int64_t begin, std::int64_t end, float* y) {
  const Int8InterleavedKernel kernel = int8_interleaved_kernel(*w.blocks);
  const std::size_t blocks = blocks_per_row(w);
  const std::size_t group_bytes = interleaved_bytes(*w.blocks, kInterleavedRows, w.cols);
  for (std::int64_t g = begin / kInterleavedRows; g * kInterleavedRows < end; ++g) {
    const std::int64_t row0 = g * kInterleavedRows;
    const std::byte* group = w.interleaved + static_cast<std::size_t>(g) * group_bytes;
    if (row0 >= begin && row0 + kInterleavedRows <= end) {
      kernel(xq, group, blocks, y + row0);
    } else {
      alignas(64) float out[kInterleavedRows];
      kernel(xq, group, blocks, out);
      for (std::int64_t r = std::max(begin, row0); r < std::min(end, row0 + kInterleavedRows); ++r)
        y[r] = out[r - row0];
    }
  }
  if (bias != nullptr) {
    for (std::int64_t r = begin; r < end; ++r) y[r] += bias[r];
  }
}

void matvec_int8(const Stack& w, const float* x, const Int8Activations& xq, const float* bias,
                 std::int64_t begin, std::int64_t end, float* y) {
  std::int64_t first = 0;  // stacked index of the current part's row 0
  for (const Matrix* m : w.parts) {
    const std::int64_t lo = std::max(begin, first), hi = std::min(end, first + m->rows);
    if (lo < hi && m->interleaved != nullptr) {
      matvec_interleaved(*m, xq, bias != nullptr ? bias + first : nullptr, lo - first, hi - first,
                         y + first);
    } else if (lo < hi && !int8_type(*m)) {
      matvec(*m, x, bias != nullptr ? bias + first : nullptr, lo - first, hi - first, y + first);
    } else if (lo < hi) {
      const Int8DotKernel dot = int8_dot_kernel(*m->blocks);
      const std::size_t blocks = blocks_per_row(*m);
      matvec_rows_of_blocks(*m, bias != nullptr ? bias + first : nullptr, lo - first, hi - first,
                            y + first, [&](const std::byte* row) { return dot(xq, row, blocks); });
    }
    first += m->rows;
  }
}

void matvec_int8_positions(const Stack& w, const float* x, std::int64_t x_stride,
                           std::span<const Int8Activations> xq, const float* bias,
                           std::int64_t begin, std::int64_t end, float* y, std::int64_t y_stride) {
  const auto n = static_cast<std::int64_t>(xq.size());
  if (n == 1) return matvec_int8(w, x, xq[0], bias, begin, end, y);
  std::int64_t first = 0;  // stacked index of the current part's row 0
  for (const Matrix* m : w.parts) {
    const std::int64_t lo = std::max(begin, first), hi = std::min(end, first + m->rows);
    const float* part_bias = bias != nullptr ? bias + first : nullptr;
    if (lo < hi && (m->interleaved != nullptr || int8_type(*m))) {
      const Stack one{std::span(&m, 1)};
      for_each_run_of_rows(static_cast<std::int64_t>(m->block_row_bytes),
                           m->interleaved != nullptr ? kInterleavedRows : 1, lo - first, hi - first,
                           [&](std::int64_t b, std::int64_t e) {
                             for (std::int64_t t = 0; t < n; ++t) {
                               matvec_int8(one, x + t * x_stride, xq[static_cast<std::size_t>(t)],
                                           part_bias, b, e, y + first + t * y_stride);
                             }
                           });
    } else if (lo < hi) {
      matvec_positions(*m, x, x_stride, n, part_bias, lo - first, hi - first, y + first, y_stride);
    }
    first += m->rows;
  }
}

void matmul(const Stack& w, std::int64_t begin, std::int64_t end, const float* x, std::int64_t n,
            std::int64_t x_stride, const float* bias, float* y, std::int64_t y_stride) {
  const std::int64_t cols = w.cols();
  const std::int64_t rows = end - begin;
  if (rows <= 0) return;
  // The rows [begin, end) as one f32 [rows, cols] operand: in place when they are f32 rows of
  // one matrix, else converted into a per-thread tile (reused across calls).
  thread_local std::vector<float> tile;
  const float* b = nullptr;
  std::int64_t first = 0;  // stacked index of the current part's row 0
  for (const Matrix* m : w.parts) {
    const std::int64_t lo = std::max(begin, first), hi = std::min(end, first + m->rows);
    if (lo < hi) {
      if (lo == begin && hi == end && !m->blocks && m->dtype == StorageType::f32) {
        b = static_cast<const float*>(m->row(lo - first));
        break;
      }
      tile.resize(static_cast<std::size_t>(rows * cols));
      float* to = tile.data() + (lo - begin) * cols;
      if (m->blocks) {  // stored blocks dequantized per tile (the same values as at load)
        dequantize(*m->blocks,
                   std::span(static_cast<const std::byte*>(m->row(lo - first)),
                             static_cast<std::size_t>(hi - lo) * m->block_row_bytes),
                   std::span(to, static_cast<std::size_t>((hi - lo) * cols)));
      } else {
        kernels::active().load[kernels::index_of(m->dtype)](m->row(lo - first), to,
                                                            (hi - lo) * cols);
      }
      b = tile.data();
    }
    first += m->rows;
  }
  gemm_f32(x, x_stride, b, cols, y + begin, y_stride, n, rows, cols);
  if (bias != nullptr) {
    for (std::int64_t t = 0; t < n; ++t) {
      float* out = y + t * y_stride;
      for (std::int64_t r = begin; r < end; ++r) out[r] += bias[r];
    }
  }
}

}  // namespace amc::transformer

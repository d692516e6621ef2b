// Products with weight matrices in their stored dtype: matrix-vector (decode) through amc's
// SIMD dot kernel, matrix-matrix (prefill) through Eigen's GEMM on f32 tiles of the weights.
//
// Both compute a caller-chosen range of output rows of the weight, so callers split the rows
// over threads. An output element's value depends only on its row (and, for matmul, on the
// fixed tile it falls in), never on which thread computed it, so results are the same for any
// thread count.
#pragma once

#include <cstdint>
#include <span>

#include <amc/io/gguf_quants.hpp>

#include "checkpoint.hpp"

namespace amc::transformer {

/// out = row r of W as f32 (dequantized when W keeps ggml blocks).
/// \param out [W.cols]
void row_to_f32(const Matrix& w, std::int64_t r, float* out);

/// y[r] = <x, W[r]> (+ bias[r]) for r in [begin, end): amc's dot kernel of W's dtype, or, for
/// rows kept as ggml blocks, amc::quantized_dot's kernel of their type.
/// \param x    [W.cols] f32
/// \param bias [W.rows] or nullptr
/// \param y    [W.rows]: only entries [begin, end) are written
void matvec(const Matrix& w, const float* x, const float* bias, std::int64_t begin,
            std::int64_t end, float* y);

/// matvec for each of n positions: y[t * y_stride + r] = <x[t * x_stride], W[r]> (+ bias[r])
/// for t < n and r in [begin, end), each bit for bit what matvec computes for that position
/// alone. Rows of F32, BF16 or F16 are read once for all positions (KernelTable::dot_positions);
/// rows of blocks go in runs of about 64 KB, each run multiplied with every position while it
/// is in the core's cache.
void matvec_positions(const Matrix& w, const float* x, std::int64_t x_stride, std::int64_t n,
                      const float* bias, std::int64_t begin, std::int64_t end, float* y,
                      std::int64_t y_stride);

/// Weight matrices with the same number of columns stacked by rows, e.g. the q, k and v
/// projections, which multiply the same input: one product fills [Q | K | V] side by side.
struct Stack {
  std::span<const Matrix* const> parts;
  std::int64_t rows() const;
  std::int64_t cols() const { return parts.front()->cols; }
};

/// y[r] = <x, W[r]> (+ bias[r]) for stacked rows r in [begin, end): matvec over the parts.
/// \param bias [rows()] stacked biases, or nullptr
void matvec(const Stack& w, const float* x, const float* bias, std::int64_t begin, std::int64_t end,
            float* y);

/// matvec_positions over stacked rows.
void matvec_positions(const Stack& w, const float* x, std::int64_t x_stride, std::int64_t n,
                      const float* bias, std::int64_t begin, std::int64_t end, float* y,
                      std::int64_t y_stride);

/// Whether some part of `w` is kept as blocks with an int8 activation kernel (Q8_0, Q4_0,
/// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: amc::int8_dot_kernel; every block type amc keeps).
bool has_int8_kernel(const Stack& w);

/// matvec with int8 activations: rows of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
/// Q5_K or Q6_K blocks through amc::int8_dot_kernel on `xq` (x quantized by
/// amc::quantize_activations), every other row (F32, F16, BF16) as matvec does on x. A matrix
/// with an interleaved copy (Matrix::interleaved) goes through amc::int8_interleaved_kernel, 16
/// rows at a time: the same integer sums, the f32 steps in another order.
void matvec_int8(const Stack& w, const float* x, const Int8Activations& xq, const float* bias,
                 std::int64_t begin, std::int64_t end, float* y);

/// matvec_int8 for each of n positions (xq[t] the quantized x[t * x_stride]), each bit for bit
/// matvec_int8's for that position alone: rows of blocks in runs of about 64 KB, each run
/// multiplied with every position while it is in the core's cache; other rows as
/// matvec_positions.
void matvec_int8_positions(const Stack& w, const float* x, std::int64_t x_stride,
                           std::span<const Int8Activations> xq, const float* bias,
                           std::int64_t begin, std::int64_t end, float* y, std::int64_t y_stride);

/// Y[t, r] = <X[t], W[r]> (+ bias[r]) for t < n and stacked rows r in [begin, end), as one
/// GEMM on an f32 copy of those rows (f32 rows of a single matrix are used in place). Callers
/// keep [begin, end) fixed for a given stack, independent of the thread count.
/// \param x    [n, x_stride] f32, the first cols() columns used
/// \param bias [rows()] stacked biases, or nullptr
/// \param y    [n, y_stride]: columns [begin, end) are written
void matmul(const Stack& w, std::int64_t begin, std::int64_t end, const float* x, std::int64_t n,
            std::int64_t x_stride, const float* bias, float* y, std::int64_t y_stride);

/// The f32 GEMM matmul() uses: C[m, n] (+)= A[m, k] op(B), with op(B) = B^T for B [n, k]
/// (transposed) or B for B [k, n]; row-major operands with the given row strides; accumulate
/// adds to C instead of overwriting it. Exposed for the prefill's attention and the
/// benchmark's FLOP/s baseline.
void gemm_f32(const float* a, std::int64_t a_stride, const float* b, std::int64_t b_stride,
              float* c, std::int64_t c_stride, std::int64_t m, std::int64_t n, std::int64_t k,
              bool transposed = true, bool accumulate = false);

/// Name of the instruction set of the GEMM chosen at run time ("avx512", "avx2", "generic").
const char* gemm_isa();

}  // namespace amc::transformer

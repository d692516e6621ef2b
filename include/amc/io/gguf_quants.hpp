// Kernels on the weights of ggml tensor types (GGUF files): dequantization to f32 and bf16, dot
// products of stored blocks with f32 activations, and with int8 activations (row by row, or rows
// interleaved 16 to a group). The types: the plain types F32, F16 and BF16, the block types Q4_0,
// Q4_1, Q5_0, Q5_1 and Q8_0 (32 elements per block) and the k-quants Q4_K, Q5_K and Q6_K (256
// per super-block), dequantized bit for bit as ggml's dequantize_row_* define them
// (ggml-quants.c): every value is a product of f16 scales and small integers, computed in f32.
// Which type has which kernel: one table (src/ggml_types.hpp), asked through can_dequantize,
// has_int8_dot_kernel and can_interleave.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "amc/io/gguf.hpp"
#include "amc/storage.hpp"

namespace amc {

/// Whether dequantize() implements `type`.
bool can_dequantize(GgmlType type) noexcept;

/// The names of the types dequantize() implements, in ggml's order, for messages: "F32, F16,
/// Q4_0, ...".
std::string dequantizable_type_names();

/// Dequantizes `elements` values of `type` from `blocks` into `out` (f32).
/// \param blocks  elements / block_elements blocks of the type, any alignment
/// \param out     [elements]
/// Throws amc::error "amc::dequantize: ..." naming the type when it is not implemented, when
/// out.size() is not a multiple of the type's block, or when blocks.size() is not exactly the
/// bytes of out.size() elements.
void dequantize(GgmlType type, std::span<const std::byte> blocks, std::span<float> out);

/// As above, rounding each f32 value to bf16 (to nearest, ties to even; NaN stays NaN). A NaN
/// element (from an inf or NaN scale) is NaN in both outputs, but its sign and payload are
/// the arithmetic's: GCC builds give the bf16 of the f32 NaN, clang builds may not (LLVM leaves
/// a NaN result's sign unspecified). Every other element is to_bf16 of the f32 one, exactly.
void dequantize(GgmlType type, std::span<const std::byte> blocks, std::span<bf16> out);

/// A dot product of f32 values with stored blocks: <x, dequantize(blocks)> over `blocks` whole
/// blocks (x holds blocks * block_elements values). The products are those of x with the exact
/// dequantized values; they are summed in f32 in an order fixed per instruction set (Q8_0, Q4_0
/// and Q4_1 with AVX2, AVX-512 and NEON: decoded in registers, AVX2 into four 8-lane
/// accumulators, AVX-512 four 16-lane ones, NEON eight 4-lane ones; every other type and
/// table: the dequantized values in chunks of 256, 32 lanes), so the result is
/// deterministic on one machine, and within (blocks * block_elements / 32 + 8) f32 roundings
/// of the products' absolute sum of the exact one. Unchecked: quantized_dot() checks.
using QuantizedDotKernel = float (*)(const float* x, const std::byte* blocks,
                                     std::size_t block_count);

/// The active instruction set's (amc::kernels::active()) dot kernel for `type`: for a caller
/// that multiplies many rows, e.g. a matrix-vector product on stored weights. Throws as
/// dequantize() does for a type it does not implement.
QuantizedDotKernel quantized_dot_kernel(GgmlType type);

/// <x, dequantize(type, blocks)>, checked: x.size() a multiple of the type's block and
/// blocks.size() exactly its bytes (amc::error "amc::quantized_dot: ..." otherwise).
float quantized_dot(GgmlType type, std::span<const float> x, std::span<const std::byte> blocks);

/// Int8 activations: activations quantized for integer dot products, as ggml quantizes them for
/// its own (Q8_1): per block of 32 values, scale d = max|x| / 127 and quants q = round(x / d)
/// (ties away from zero) in [-127, 127], with the quants' sum. The block's values are then
/// d * q, each within d / 2 of x. Shapes: q [blocks * 32], scale and sum [blocks].
struct Int8Activations {
  std::vector<std::int8_t> q;
  std::vector<float> scale;
  std::vector<std::int32_t> sum;
  std::size_t blocks() const { return scale.size(); }
};

/// Quantizes x (x.size() a multiple of 32, else amc::error "amc::quantize_activations: ...")
/// into `out`, reusing its storage. q = round(x * (1 / d)), the product rounded to f32 first.
/// A block holding a NaN or an infinity gets quants 0 and a NaN scale, so that every product
/// with it is NaN; a block whose 1 / d is not finite (all zeros, or max|x| below 127 * 2^-128,
/// about 3.7e-37) gets quants 0 and scale 0. The same bits on every instruction set.
void quantize_activations(std::span<const float> x, Int8Activations& out);

/// <d q, w> over `block_count` blocks of a Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 row (blocks of 32) or
/// of a Q4_K, Q5_K or Q6_K row (super-blocks of 256; `x` covers them, 8 of its blocks per
/// super-block): per block of 32 activations the integer sum of q times the weight's quants,
/// exact, then scaled by the two scales in f32 (Q4_1 and Q5_1 add their offset times the
/// activations' sum). The
/// k-quants likewise per sub-block, with its decoded scale: Q4_K's and Q5_K's sub-blocks of 32
/// as Q4_1 (their min times the activations' sum subtracted), Q6_K's two sub-blocks of 16 per
/// block of 32 each summed and scaled apart. Faster than QuantizedDotKernel where the CPU has
/// integer dot products (AVX-512 VNNI, AVX2's maddubs, the Armv8.2 dot product, NEON's widening
/// multiplies), at the cost of the activations' rounding: llama.cpp's arithmetic (which for the
/// k-quants quantizes the activations per 256 instead). Unchecked.
using Int8DotKernel = float (*)(const Int8Activations& x, const std::byte* blocks,
                                std::size_t block_count);

/// Whether int8_dot_kernel takes `type` (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
bool has_int8_dot_kernel(GgmlType type) noexcept;

/// The active instruction set's Int8DotKernel for a type has_int8_dot_kernel takes (with AVX-512
/// VNNI or the Armv8.2 dot product where the CPU has it); amc::error "amc::int8_dot_kernel: ..."
/// for any other type (F32, F16, BF16 among those amc reads).
Int8DotKernel int8_dot_kernel(GgmlType type);

// --- Rows interleaved for int8 activations -------------------------------------------------
//
// A matrix-vector product row by row reduces every row's sum across the lanes of a vector and
// reads the activations once per row. Interleaved, the rows of Q8_0, Q4_0 and Q4_1 blocks sit 16
// to a group so that lane r of a vector is row r: per block of 32 columns, the group's 16 f16
// scales d, then (Q4_1) its 16 f16 minimums m, then the quants as 4-byte words, word j of every
// row together (row r's at byte 4 r of a 64-byte part). Q4's part j holds bytes 4j..4j+3 of the
// row's 16 nibble bytes (quants 4j..4j+3 in the low nibbles, 16+4j..16+4j+3 in the high ones),
// Q8_0's part j its quants 4j..4j+3 as unsigned bytes (q + 128). A group's block takes the bytes
// of 16 rows' blocks (288, 320 and 544), so the interleaved matrix is as large as the rows,
// except for a last group of fewer than 16 rows, which is padded with rows of zeros.

/// Rows per interleaved group: the f32 lanes of a 512-bit vector.
inline constexpr std::int64_t kInterleavedRows = 16;

/// Whether interleave_rows takes `type` (Q8_0, Q4_0, Q4_1).
bool can_interleave(GgmlType type) noexcept;

/// Bytes interleave_rows writes for `rows` rows of `cols` values: ceil(rows / 16) groups of
/// cols / 32 blocks. amc::error "amc::interleaved_bytes: ..." for a type can_interleave refuses,
/// a negative count, or cols not a positive multiple of 32.
std::size_t interleaved_bytes(GgmlType type, std::int64_t rows, std::int64_t cols);

/// Writes `rows` rows of `cols` values of `type`, stored as ggml stores them (`blocks`: row after
/// row), interleaved into `out` (layout above). amc::error "amc::interleave_rows: ..." naming
/// the argument when the type is refused (as interleaved_bytes), blocks.size() is not the rows'
/// bytes, or out.size() is not interleaved_bytes(type, rows, cols).
void interleave_rows(GgmlType type, std::int64_t rows, std::int64_t cols,
                     std::span<const std::byte> blocks, std::span<std::byte> out);

/// out[r] = <x, row r of one interleaved group> for its 16 rows, over `block_count` blocks of 32
/// (x quantized as for Int8DotKernel): per block the integer sum of x's quants times the weight's
/// (Q4_0's quants minus 8, Q8_0's signed), exact, times d_w * d_x in f32, accumulated with one
/// fused multiply-add per block in block order; Q4_1 adds m_w * (d_x * sum of x's quants) in a
/// second chain, added to the first at the end. The same bits on every instruction set. A padded
/// row gives 0 (NaN where x has a NaN scale). Unchecked.
using Int8InterleavedKernel = void (*)(const Int8Activations& x, const std::byte* group,
                                       std::size_t block_count, float* out);

/// The active instruction set's Int8InterleavedKernel for a type can_interleave takes: AVX-512
/// VNNI where the CPU has it, else plain loops (correct, but slower than int8_dot_kernel's row
/// by row: see int8_interleaved_accelerated). amc::error "amc::int8_interleaved_kernel: ..." for
/// other types.
Int8InterleavedKernel int8_interleaved_kernel(GgmlType type);

/// Whether int8_interleaved_kernel runs on the CPU's integer dot-product extension (AVX-512
/// VNNI): only then does interleaving pay (a [1536, 576] Q4_1 matrix, SmolLM2-135M's gate
/// projection, took 12.2 us against 62.4 row by row on the project's VM: amc-bench-gguf,
/// docs/performance.md).
bool int8_interleaved_accelerated() noexcept;

// --- The names these had before they were called int8 (removed in the next release) -----------

using Q8Activations [[deprecated("use amc::Int8Activations")]] = Int8Activations;
using Q8DotKernel [[deprecated("use amc::Int8DotKernel")]] = Int8DotKernel;
using Q8InterleavedKernel [[deprecated("use amc::Int8InterleavedKernel")]] = Int8InterleavedKernel;
[[deprecated("use amc::int8_dot_kernel")]] inline Int8DotKernel q8_dot_kernel(GgmlType type) {
  return int8_dot_kernel(type);
}
[[deprecated("use amc::int8_interleaved_kernel")]] inline Int8InterleavedKernel
q8_interleaved_kernel(GgmlType type) {
  return int8_interleaved_kernel(type);
}
[[deprecated("use amc::int8_interleaved_accelerated")]] inline bool
q8_interleaved_accelerated() noexcept {
  return int8_interleaved_accelerated();
}

}  // namespace amc

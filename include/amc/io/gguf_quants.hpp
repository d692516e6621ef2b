// Dequantization of ggml tensor types (GGUF files) to f32 and bf16: the plain types F32, F16 and
// BF16, the block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (32 elements per block) and the k-quants
// Q4_K, Q5_K and Q6_K (256 per super-block), bit for bit as ggml's dequantize_row_* define them
// (ggml-quants.c): every value is a product of f16 scales and small integers, computed in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "amc/io/gguf.hpp"
#include "amc/storage.hpp"

namespace amc {

/// Whether dequantize() implements `type`.
bool can_dequantize(GgmlType type) noexcept;

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

/// Activations quantized for integer dot products, as ggml quantizes them for its own (Q8_1):
/// per block of 32 values, scale d = max|x| / 127 and quants q = round(x / d) (ties away from
/// zero) in [-127, 127], with the quants' sum. The block's values are then d * q, each within
/// d / 2 of x. Shapes: q [blocks * 32], scale and sum [blocks].
struct Q8Activations {
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
void quantize_activations(std::span<const float> x, Q8Activations& out);

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
using Q8DotKernel = float (*)(const Q8Activations& x, const std::byte* blocks,
                              std::size_t block_count);

/// The active instruction set's Q8DotKernel for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or
/// Q6_K (with AVX-512 VNNI or the Armv8.2 dot product where the CPU has it); amc::error
/// "amc::q8_dot_kernel: ..." for any other type (F32, F16, BF16 among those amc reads).
Q8DotKernel q8_dot_kernel(GgmlType type);

}  // namespace amc

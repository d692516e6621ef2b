// Dequantization of ggml tensor types (GGUF files) to f32 and bf16: the plain types F32, F16 and
// BF16, the block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (32 elements per block) and the k-quants
// Q4_K, Q5_K and Q6_K (256 per super-block), bit for bit as ggml's dequantize_row_* define them
// (ggml-quants.c): every value is a product of f16 scales and small integers, computed in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

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

}  // namespace amc

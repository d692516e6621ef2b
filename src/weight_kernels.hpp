// The weight kernels of the ggml types, one table per instruction set: the same kernels compiled
// with each set's flags (weight_kernels_scalar.cpp, _avx2.cpp, _avx512.cpp, _neon.cpp), chosen to
// match the operators' kernel table (amc::kernels::active(), so AMC_KERNELS picks these too).
// Four kinds, each in a header of its own:
//   dequantization, blocks to f32 and bf16 (weight_kernels_dequantize.hpp);
//   dot products of stored blocks with f32 activations (weight_kernels_f32_dot.hpp);
//   int8 activations: quantized per block of 32 (weight_kernels_int8_activations.hpp) and
//     multiplied with stored blocks in integers (weight_kernels_int8_dot.hpp);
//   rows interleaved 16 to a group, times int8 activations (weight_kernels_interleaved.hpp).
// A table holds one entry per row of kGgmlTypes (src/ggml_types.hpp), null where the row does not
// claim that kernel. src/gguf_quants.cpp checks the public functions' arguments and picks a table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "amc/io/gguf_quants.hpp"
#include "amc/storage.hpp"
#include "ggml_types.hpp"

namespace amc::weight_kernels {

/// Entries per kernel of a table: one per row of kGgmlTypes.
inline constexpr std::size_t kTypes = std::size(kGgmlTypes);

// The interleaved layout (include/amc/io/gguf_quants.hpp): shared by interleave_rows and the
// kernels of weight_kernels_interleaved.hpp.

/// Bytes of one block of 32 columns of an interleaved group of 16 rows: 16 f16 scales, Q4_1's
/// 16 f16 minimums, then the 16 rows' quant bytes (16 for Q4, 32 for Q8_0).
inline constexpr std::size_t interleaved_block_bytes(GgmlType type) {
  const std::size_t quant_bytes = type == GgmlType::Q8_0 ? 32 : 16;
  return 16 * (2 + (type == GgmlType::Q4_1 ? 2 : 0) + quant_bytes);
}

/// Offset of the quant words in an interleaved block.
inline constexpr std::size_t interleaved_quants_offset(GgmlType type) {
  return type == GgmlType::Q4_1 ? 64 : 32;
}

/// What the exact integer sum of a block subtracts, times the activations' quant sum: Q4_0's
/// zero point 8, Q8_0's 128 (its quants are stored plus 128, unsigned for VPDPBUSD); Q4_1 none.
inline constexpr std::int32_t interleaved_offset(GgmlType type) {
  return type == GgmlType::Q4_0 ? 8 : type == GgmlType::Q8_0 ? 128 : 0;
}

/// Dequantizations over whole blocks (elements, for the plain types): `blocks` in, the block
/// size times as many values out (DequantizeKernel<float>, <bf16> of
/// weight_kernels_dequantize.hpp). The input may have any alignment.
using ToF32Kernel = void (*)(const std::byte* in, float* out, std::size_t blocks);
using ToBf16Kernel = void (*)(const std::byte* in, bf16* out, std::size_t blocks);
/// amc::quantize_activations over `blocks` blocks of 32: x and q [blocks, 32], scale and sum
/// [blocks]. Every table's is bit for bit the scalar one (weight_kernels_int8_activations.hpp).
using QuantizeKernel = void (*)(const float* x, std::size_t blocks, std::int8_t* q, float* scale,
                                std::int32_t* sum);

struct Table {
  std::string_view name;  ///< "scalar" (the baseline flags), "avx2", "avx512", "neon"
  ToF32Kernel to_f32[kTypes] = {};
  ToBf16Kernel to_bf16[kTypes] = {};
  /// <x, the blocks dequantized> over whole blocks: products of x with the exact dequantized
  /// values, summed in f32 (weight_kernels_f32_dot.hpp says in which order for each set).
  QuantizedDotKernel f32_dot[kTypes] = {};
  Int8DotKernel int8_dot[kTypes] = {};
  /// The int8 dot kernels with the instruction set's integer dot-product extension, for CPUs
  /// that have it (cpu_has_extension); null where the table has none. AVX-512 VNNI in the
  /// avx512 table, the Armv8.2 dot product (SDOT) in the neon table.
  Int8DotKernel int8_dot_extension[kTypes] = {};
  std::string_view extension;  ///< that extension: "avx512vnni", "dotprod", or empty
  Int8InterleavedKernel interleaved[kTypes] = {};  ///< interleaved groups, plain loops
  /// The same with the extension (AVX-512 VNNI in the avx512 table), null where there is none.
  Int8InterleavedKernel interleaved_extension[kTypes] = {};
  QuantizeKernel quantize = nullptr;
};

const Table& scalar_table();
#if AMC_KERNELS_AVX2
const Table& avx2_table();
#endif
#if AMC_KERNELS_AVX512
const Table& avx512_table();
#endif
#if AMC_KERNELS_NEON
const Table& neon_table();
#endif

/// The tables this build and CPU can run (those whose instruction set amc::kernels::available()
/// lists; SSE2 has none of its own), scalar first. The tests check each one.
std::vector<const Table*> available_tables();

/// Whether this CPU runs `table`'s extension kernels (false for a table without any).
bool cpu_has_extension(const Table& table);

}  // namespace amc::weight_kernels

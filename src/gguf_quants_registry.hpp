// The dequantization kernels of gguf_quants.cpp, one table per instruction set (the same
// plain loops compiled with each set's flags, src/gguf_quants_kernels.hpp), chosen to match the
// operators' kernel table (amc::kernels::active(), so AMC_KERNELS picks these too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "amc/io/gguf_quants.hpp"
#include "amc/storage.hpp"

namespace amc::dequant {

/// The types dequantize() implements, in table order.
enum class Kind : std::uint8_t { F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K };
inline constexpr std::size_t kKinds = 11;

// The interleaved layout (include/amc/io/gguf_quants.hpp): shared by interleave_rows and the
// kernels of gguf_quants_interleaved.hpp.

/// The kinds with interleaved kernels.
inline constexpr bool interleavable(Kind kind) {
  return kind == Kind::Q8_0 || kind == Kind::Q4_0 || kind == Kind::Q4_1;
}

/// Bytes of one block of 32 columns of an interleaved group of 16 rows: 16 f16 scales, Q4_1's
/// 16 f16 minimums, then the 16 rows' quant bytes (16 for Q4, 32 for Q8_0).
inline constexpr std::size_t interleaved_block_bytes(Kind kind) {
  const std::size_t quant_bytes = kind == Kind::Q8_0 ? 32 : 16;
  return 16 * (2 + (kind == Kind::Q4_1 ? 2 : 0) + quant_bytes);
}

/// Offset of the quant words in an interleaved block.
inline constexpr std::size_t interleaved_quants_offset(Kind kind) {
  return kind == Kind::Q4_1 ? 64 : 32;
}

/// What the exact integer sum of a block subtracts, times the activations' quant sum: Q4_0's
/// zero point 8, Q8_0's 128 (its quants are stored plus 128, unsigned for VPDPBUSD); Q4_1 none.
inline constexpr std::int32_t interleaved_offset(Kind kind) {
  return kind == Kind::Q4_0 ? 8 : kind == Kind::Q8_0 ? 128 : 0;
}

/// Kernels over whole blocks (elements, for F32, F16 and BF16): `blocks` in, the block size
/// times as many values out. The input may have any alignment.
using F32Kernel = void (*)(const std::byte* in, float* out, std::size_t blocks);
using Bf16Kernel = void (*)(const std::byte* in, bf16* out, std::size_t blocks);
/// <x, the blocks dequantized> over `blocks` whole blocks (x holds as many values): products of
/// x with the exact dequantized values, summed in f32 (gguf_quants_kernels.hpp says in which
/// order for each instruction set).
using DotKernel = float (*)(const float* x, const std::byte* in, std::size_t blocks);
/// The same over activations quantized to 8 bits (amc::Q8Activations); Q8_0, Q4_0, Q4_1, Q5_0,
/// Q5_1, Q4_K, Q5_K and Q6_K only (`blocks` of the weight's type: super-blocks of 256 for the
/// k-quants).
using Q8Kernel = float (*)(const Q8Activations& x, const std::byte* in, std::size_t blocks);
/// amc::Q8InterleavedKernel: one interleaved group of 16 rows (Q8_0, Q4_0, Q4_1 only).
using Q8RowsKernel = void (*)(const Q8Activations& x, const std::byte* group, std::size_t blocks,
                              float* out);
/// amc::quantize_activations over `blocks` blocks of 32: x and q [blocks, 32], scale and sum
/// [blocks]. Every table's is bit for bit the scalar one (gguf_quants_kernels.hpp).
using QuantizeKernel = void (*)(const float* x, std::size_t blocks, std::int8_t* q, float* scale,
                                std::int32_t* sum);

struct DequantTable {
  std::string_view name;  ///< "scalar" (the baseline flags), "avx2", "avx512", "neon"
  F32Kernel to_f32[kKinds] = {};
  Bf16Kernel to_bf16[kKinds] = {};
  DotKernel dot[kKinds] = {};
  Q8Kernel q8_dot[kKinds] = {};  ///< null for the other types
  /// The Q8 kernels with the instruction set's integer dot-product extension, for CPUs that
  /// have it (cpu_has_extension); null where the table has none. AVX-512 VNNI in the avx512
  /// table, the Armv8.2 dot product (SDOT) in the neon table.
  Q8Kernel q8_dot_extension[kKinds] = {};
  std::string_view extension;         ///< that extension: "avx512vnni", "dotprod", or empty
  Q8RowsKernel q8_rows[kKinds] = {};  ///< interleaved groups, plain loops; null for other types
  /// The same with the extension (AVX-512 VNNI in the avx512 table), null where there is none.
  Q8RowsKernel q8_rows_extension[kKinds] = {};
  QuantizeKernel quantize = nullptr;
};

const DequantTable& dequant_scalar_table();
#if AMC_KERNELS_AVX2
const DequantTable& dequant_avx2_table();
#endif
#if AMC_KERNELS_AVX512
const DequantTable& dequant_avx512_table();
#endif
#if AMC_KERNELS_NEON
const DequantTable& dequant_neon_table();
#endif

/// The tables this build and CPU can run (those whose instruction set amc::kernels::available()
/// lists; SSE2 has none of its own), scalar first. The tests check each one.
std::vector<const DequantTable*> available_tables();

/// Whether this CPU runs `table`'s q8_dot_extension kernels (false for a table without any).
bool cpu_has_extension(const DequantTable& table);

}  // namespace amc::dequant

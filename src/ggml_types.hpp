// The ggml types amc knows, one row each: the type (its number in GGUF files), its name, its
// block layout and the weight kernels amc has for it. The GGUF reader checks every tensor against
// these rows (src/gguf.cpp), the public functions of amc/io/gguf_quants.hpp find a type's kernels
// through them, and every instruction set's kernel table is built over them
// (weight_kernels_make_table.hpp), which also checks each row's claims against the kernels.
//
// Adding a type: its row, and the kernels the row claims. kDequantize: the plain loops of
// weight_kernels_dequantize.hpp (plain_dequantize; an instruction set's own kernels beside them
// are optional); the dot with f32 activations then follows (dot_by_chunks, or a fused kernel in
// weight_kernels_f32_dot.hpp). kInt8Dot: the type's case in the kernels of
// weight_kernels_int8_dot.hpp. kInterleaved: its case in weight_kernels_interleaved.hpp and in
// amc::interleave_rows. GgmlType names the types ggml has; a new number needs no enumerator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "amc/io/gguf.hpp"

namespace amc {

/// The weight kernels a type has, as bits of GgmlTypeRow::kernels.
enum GgmlTypeKernels : unsigned {
  kLayoutOnly = 0,         ///< the reader accepts its tensors; nothing computes on them
  kDequantize = 1u << 0,   ///< to f32 and bf16, and dot products with f32 activations
  kInt8Dot = 1u << 1,      ///< dot products with int8 activations (amc::int8_dot_kernel)
  kInterleaved = 1u << 2,  ///< rows interleaved 16 to a group (amc::interleave_rows)
};

struct GgmlTypeRow {
  GgmlType type;
  std::string_view name;        ///< as ggml spells it
  std::int64_t block_elements;  ///< 1 for the plain types
  std::int64_t block_bytes;
  unsigned kernels;  ///< GgmlTypeKernels bits

  constexpr bool has(GgmlTypeKernels kernel) const { return (kernels & kernel) != 0; }
  constexpr GgmlTypeLayout layout() const { return {name, block_elements, block_bytes}; }
};

// Block sizes as ggml's type_traits (ggml.c) and the block structs of ggml-common.h define them;
// the IQ and TQ sizes checked against the static_asserts of ggml-common.h (and gguf-py's
// GGML_QUANT_SIZES). Numbers 4, 5 (Q4_2, Q4_3) and 31-33 (Q4_0_4_4 ...) were removed from ggml
// and stay unknown. In ggml's order.
// clang-format off
inline constexpr GgmlTypeRow kGgmlTypes[] = {
    // type              name       elements bytes  kernels
    {GgmlType::F32,     "F32",      1,      4,   kDequantize},
    {GgmlType::F16,     "F16",      1,      2,   kDequantize},
    {GgmlType::Q4_0,    "Q4_0",     32,     18,  kDequantize | kInt8Dot | kInterleaved},
    {GgmlType::Q4_1,    "Q4_1",     32,     20,  kDequantize | kInt8Dot | kInterleaved},
    {GgmlType::Q5_0,    "Q5_0",     32,     22,  kDequantize | kInt8Dot},
    {GgmlType::Q5_1,    "Q5_1",     32,     24,  kDequantize | kInt8Dot},
    {GgmlType::Q8_0,    "Q8_0",     32,     34,  kDequantize | kInt8Dot | kInterleaved},
    {GgmlType::Q8_1,    "Q8_1",     32,     36,  kLayoutOnly},
    {GgmlType::Q2_K,    "Q2_K",     256,    84,  kLayoutOnly},
    {GgmlType::Q3_K,    "Q3_K",     256,    110, kLayoutOnly},
    {GgmlType::Q4_K,    "Q4_K",     256,    144, kDequantize | kInt8Dot},
    {GgmlType::Q5_K,    "Q5_K",     256,    176, kDequantize | kInt8Dot},
    {GgmlType::Q6_K,    "Q6_K",     256,    210, kDequantize | kInt8Dot},
    {GgmlType::Q8_K,    "Q8_K",     256,    292, kLayoutOnly},
    {GgmlType::IQ2_XXS, "IQ2_XXS",  256,    66,  kLayoutOnly},
    {GgmlType::IQ2_XS,  "IQ2_XS",   256,    74,  kLayoutOnly},
    {GgmlType::IQ3_XXS, "IQ3_XXS",  256,    98,  kLayoutOnly},
    {GgmlType::IQ1_S,   "IQ1_S",    256,    50,  kLayoutOnly},
    {GgmlType::IQ4_NL,  "IQ4_NL",   32,     18,  kLayoutOnly},
    {GgmlType::IQ3_S,   "IQ3_S",    256,    110, kLayoutOnly},
    {GgmlType::IQ2_S,   "IQ2_S",    256,    82,  kLayoutOnly},
    {GgmlType::IQ4_XS,  "IQ4_XS",   256,    136, kLayoutOnly},
    {GgmlType::I8,      "I8",       1,      1,   kLayoutOnly},
    {GgmlType::I16,     "I16",      1,      2,   kLayoutOnly},
    {GgmlType::I32,     "I32",      1,      4,   kLayoutOnly},
    {GgmlType::I64,     "I64",      1,      8,   kLayoutOnly},
    {GgmlType::F64,     "F64",      1,      8,   kLayoutOnly},
    {GgmlType::IQ1_M,   "IQ1_M",    256,    56,  kLayoutOnly},
    {GgmlType::BF16,    "BF16",     1,      2,   kDequantize},
    {GgmlType::TQ1_0,   "TQ1_0",    256,    54,  kLayoutOnly},
    {GgmlType::TQ2_0,   "TQ2_0",    256,    66,  kLayoutOnly},
};
// clang-format on

/// The position of type number `number` in kGgmlTypes, or the table's size when it has no row.
/// (Positions, not pointers compared with null: GCC under UBSan does not take such a comparison
/// as a constant expression.)
constexpr std::size_t ggml_type_index(std::uint32_t number) {
  for (std::size_t i = 0; i < std::size(kGgmlTypes); ++i) {
    if (static_cast<std::uint32_t>(kGgmlTypes[i].type) == number) return i;
  }
  return std::size(kGgmlTypes);
}

/// The row of type number `number`, or nullptr.
constexpr const GgmlTypeRow* find_ggml_type(std::uint32_t number) {
  const std::size_t i = ggml_type_index(number);
  return i < std::size(kGgmlTypes) ? &kGgmlTypes[i] : nullptr;
}
constexpr const GgmlTypeRow* find_ggml_type(GgmlType type) {
  return find_ggml_type(static_cast<std::uint32_t>(type));
}

/// The position of `row` in kGgmlTypes: its entry in every kernel table.
constexpr std::size_t row_index(const GgmlTypeRow& row) {
  return static_cast<std::size_t>(&row - kGgmlTypes);
}

/// The row of a type the kernels name at compile time (a type without a row does not compile).
constexpr const GgmlTypeRow& ggml_type_row(GgmlType type) {
  const std::size_t i = ggml_type_index(static_cast<std::uint32_t>(type));
  if (i == std::size(kGgmlTypes))
    throw std::logic_error("amc::ggml_type_row: a type without a row");
  return kGgmlTypes[i];
}

/// Elements and bytes of one block of `type`, for the kernels.
constexpr std::size_t block_elements(GgmlType type) {
  return static_cast<std::size_t>(ggml_type_row(type).block_elements);
}
constexpr std::size_t block_bytes(GgmlType type) {
  return static_cast<std::size_t>(ggml_type_row(type).block_bytes);
}

/// What the rows must hold for the rest to work: increasing numbers (so each type once), a name,
/// a positive layout; int8 dot products only for types that dequantize, in blocks of 32
/// activations; interleaving only for int8 types with blocks of 32.
consteval bool valid_rows() {
  for (std::size_t i = 0; i < std::size(kGgmlTypes); ++i) {
    const GgmlTypeRow& row = kGgmlTypes[i];
    if (i > 0 && static_cast<std::uint32_t>(row.type) <=
                     static_cast<std::uint32_t>(kGgmlTypes[i - 1].type)) {
      return false;
    }
    if (row.name.empty() || row.block_elements < 1 || row.block_bytes < 1) return false;
    if (row.has(kInt8Dot) && (!row.has(kDequantize) || row.block_elements % 32 != 0)) return false;
    if (row.has(kInterleaved) && (!row.has(kInt8Dot) || row.block_elements != 32)) return false;
  }
  return true;
}
static_assert(valid_rows(), "src/ggml_types.hpp: a row of kGgmlTypes breaks a rule of valid_rows");

}  // namespace amc

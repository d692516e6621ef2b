// One instruction set's table of weight kernels, built over the rows of kGgmlTypes
// (src/ggml_types.hpp): each row gets the kernels it claims, and the compiler checks that the
// kernels exist for every claim and that no type has a dequantization its row does not claim.
// Included by each per-instruction-set translation unit (weight_kernels_scalar.cpp, _avx2.cpp,
// _avx512.cpp, _neon.cpp), which compiles every kernel header with that set's flags.
#pragma once

#include <string_view>
#include <utility>

#include "ggml_types.hpp"
#include "weight_kernels.hpp"
#include "weight_kernels_dequantize.hpp"
#include "weight_kernels_f32_dot.hpp"
#include "weight_kernels_int8_activations.hpp"
#include "weight_kernels_int8_dot.hpp"
#include "weight_kernels_interleaved.hpp"

namespace amc::weight_kernels {
namespace {

/// Fills the entries of row I with the kernels it claims.
template <std::size_t I>
void add_row(Table& table) {
  constexpr GgmlType type = kGgmlTypes[I].type;
  constexpr bool dequantizes = kGgmlTypes[I].has(kDequantize);
  static_assert(dequantizes == is_kernel<decltype(plain_dequantize<type, float>)>,
                "src/ggml_types.hpp: a row's kDequantize and the type's plain_dequantize disagree");
  if constexpr (dequantizes) {
    table.to_f32[I] = dequantize_kernel<type, float>();
    table.to_bf16[I] = dequantize_kernel<type, bf16>();
    table.f32_dot[I] = f32_dot_kernel<type>();
  }
  if constexpr (kGgmlTypes[I].has(kInt8Dot)) {
    table.int8_dot[I] = Int8Baseline<type>::kernel;
    table.int8_dot_extension[I] = Int8Extension<type>::kernel;
  }
  if constexpr (kGgmlTypes[I].has(kInterleaved)) {
    table.interleaved[I] = interleaved_generic<type>;
    table.interleaved_extension[I] = InterleavedExtension<type>::kernel;
  }
}

Table make_table(std::string_view name) {
  Table table;
  table.name = name;
  [&]<std::size_t... I>(std::index_sequence<I...>) { (add_row<I>(table), ...); }
  (std::make_index_sequence<kTypes>{});
  table.extension = int8_extension;
  table.quantize = quantize_kernel;
  return table;
}

}  // namespace
}  // namespace amc::weight_kernels

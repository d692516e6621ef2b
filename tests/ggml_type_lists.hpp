// The ggml types the GGUF kernel tests iterate, read from the library's one table of types
// (amc::ggml_types() and what it says each type has): a type added there is tested by every case
// that iterates these lists, and fails where a test has no reference decoder for it. Which
// types are expected is pinned apart, in test_gguf_quants.cpp's "which types" case.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "amc/io/gguf.hpp"
#include "amc/io/gguf_quants.hpp"

namespace amc::test {

inline std::int64_t block_elements_of(GgmlType type) {
  return ggml_type_layout(static_cast<std::uint32_t>(type))->block_elements;
}

/// The types of amc::ggml_types() for which `keep` holds, in its order.
inline std::vector<GgmlType> ggml_types_where(const std::function<bool(GgmlType)>& keep) {
  std::vector<GgmlType> types;
  for (const GgmlType type : ggml_types()) {
    if (keep(type)) types.push_back(type);
  }
  return types;
}

/// Every type dequantize() takes.
inline std::vector<GgmlType> dequantizable_types() { return ggml_types_where(can_dequantize); }

/// The block types among them (more than one element per block: not F32, F16, BF16).
inline std::vector<GgmlType> block_types() {
  return ggml_types_where([](GgmlType t) { return can_dequantize(t) && block_elements_of(t) > 1; });
}

/// The types with int8 dot kernels (amc::int8_dot_kernel).
inline std::vector<GgmlType> int8_dot_types() { return ggml_types_where(has_int8_dot_kernel); }

/// Those of them in blocks of 32, and those in super-blocks of 256 (the k-quants).
inline std::vector<GgmlType> int8_dot_types_32() {
  return ggml_types_where(
      [](GgmlType t) { return has_int8_dot_kernel(t) && block_elements_of(t) == 32; });
}
inline std::vector<GgmlType> int8_dot_types_256() {
  return ggml_types_where(
      [](GgmlType t) { return has_int8_dot_kernel(t) && block_elements_of(t) == 256; });
}

/// The types interleave_rows takes.
inline std::vector<GgmlType> interleavable_types() { return ggml_types_where(can_interleave); }

}  // namespace amc::test

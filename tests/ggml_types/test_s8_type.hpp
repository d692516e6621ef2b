// A test-only ggml type with its kernels, written as a type of src/ggml_types.hpp would be:
// TEST_S8, number 200 (no ggml type has it), blocks of 16 elements, an f32 scale d then 16 int8
// quants q (20 bytes), values d * q. It has a dequantization (plain loops, as
// weight_kernels_dequantize.hpp's) and nothing else: test_ggml_type_extension registers it by
// one row added to a copy of src/ggml_types.hpp, this header included there
// (tests/CMakeLists.txt), and checks that the GGUF reader then takes its tensors and the public
// functions dequantize them, on every instruction set's table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "amc/io/gguf.hpp"
#include "weight_kernels_dequantize.hpp"

namespace amc::test {

inline constexpr GgmlType kTestS8 = static_cast<GgmlType>(200);

}  // namespace amc::test

namespace amc::weight_kernels {
namespace {

template <class Out>
void test_s8(const std::byte* in_bytes, Out* __restrict out, std::size_t blocks) {
  const auto* __restrict in = reinterpret_cast<const u8*>(in_bytes);
  for (std::size_t b = 0; b < blocks; ++b, in += 20, out += 16) {
    float d;
    std::memcpy(&d, in, sizeof d);
    const auto* __restrict qs = in + 4;
    emit<16>(out, [&](int j) { return static_cast<float>(static_cast<std::int8_t>(qs[j])) * d; });
  }
}

template <class Out>
inline constexpr DequantizeKernel<Out> plain_dequantize<test::kTestS8, Out> = test_s8<Out>;

}  // namespace
}  // namespace amc::weight_kernels

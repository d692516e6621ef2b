// A ggml type is one row of src/ggml_types.hpp plus its kernels (docs/architecture.md, "Where a
// change goes"): this executable links copies of the library's GGUF sources whose table has one
// row added for the test type of tests/ggml_types/test_s8_type.hpp (tests/CMakeLists.txt makes
// the copies, and compiles every instruction set's kernel table from them), and nothing else
// knows the type. It must then be a type like any other: listed by amc::ggml_types() and the
// tests' lists, its tensors read and written by the GGUF reader and writer, dequantized through
// the public functions and by every table, its dot product with f32 activations there without a
// kernel of its own, and named where the library lists the types it dequantizes.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "amc/error.hpp"
#include "amc/io/gguf.hpp"
#include "amc/io/gguf_quants.hpp"
#include "amc/storage.hpp"
#include "catch.hpp"
#include "ggml_type_lists.hpp"
#include "ggml_types.hpp"  // the copy, with the test type's row
#include "test_helpers.hpp"
#include "weight_kernels.hpp"  // every table's kernels, called one by one

namespace {

using amc::GgmlType;
constexpr GgmlType kType = amc::test::kTestS8;
constexpr std::size_t kElements = 16, kBytes = 20;  // its layout, as test_s8_type.hpp writes it

/// `blocks` blocks of random int8 quants, each with a random finite scale (both signs, 2^-20 ..
/// 2^20, random mantissa: products that round in f32).
std::vector<std::byte> random_blocks(std::size_t blocks, std::mt19937_64& rng) {
  std::vector<std::byte> bytes(blocks * kBytes);
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0xFF);
  std::uniform_real_distribution<double> exponent(-20.0, 20.0);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  for (std::size_t b = 0; b < blocks; ++b) {
    const auto d = static_cast<float>((rng() % 2 ? -1.0 : 1.0) * mantissa(rng) *
                                      std::exp2(std::floor(exponent(rng))));
    std::memcpy(bytes.data() + b * kBytes, &d, sizeof d);
  }
  return bytes;
}

/// Element e of the blocks, by hand: the f32 scale times the int8 quant, exact in double and
/// rounded to f32 once, as the f32 product is.
float element(const std::vector<std::byte>& bytes, std::size_t e) {
  const std::size_t block = e / kElements;
  float d = 0.0f;
  std::memcpy(&d, bytes.data() + block * kBytes, sizeof d);
  const auto q = static_cast<std::int8_t>(bytes[block * kBytes + 4 + e % kElements]);
  return static_cast<float>(static_cast<double>(d) * q);
}

bool contains(const std::vector<GgmlType>& types, GgmlType type) {
  return std::find(types.begin(), types.end(), type) != types.end();
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const amc::error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a ggml type registered by one row is a type like any other", "[gguf_quants]") {
  // Registered after the built-in types (ggml's order: its number is the largest).
  REQUIRE(amc::ggml_types().back() == kType);
  const auto layout = amc::ggml_type_layout(200);
  REQUIRE(layout.has_value());
  CHECK(layout->name == "TEST_S8");
  CHECK(layout->block_elements == 16);
  CHECK(layout->block_bytes == 20);
  CHECK(amc::to_string(kType) == "TEST_S8");
  CHECK_FALSE(amc::ggml_type_layout(201).has_value());

  // What its row says it has, and the tests' lists built from the table.
  CHECK(amc::can_dequantize(kType));
  CHECK_FALSE(amc::has_int8_dot_kernel(kType));
  CHECK_FALSE(amc::can_interleave(kType));
  CHECK(contains(amc::test::dequantizable_types(), kType));
  CHECK(contains(amc::test::block_types(), kType));
  CHECK_FALSE(contains(amc::test::int8_dot_types(), kType));
  CHECK_FALSE(contains(amc::test::interleavable_types(), kType));
  CHECK(amc::dequantizable_type_names() ==
        "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16, TEST_S8");
  CHECK(message_of([] {
          std::vector<float> out(256);
          amc::dequantize(GgmlType::Q2_K, std::vector<std::byte>(84), out);
        }).find("Q6_K, BF16, TEST_S8)") != std::string::npos);
  CHECK(message_of([] { amc::int8_dot_kernel(kType); }) ==
        "amc::int8_dot_kernel: type TEST_S8 has no int8 activation kernel (Q4_0, Q4_1, Q5_0, "
        "Q5_1, Q8_0, Q4_K, Q5_K, Q6_K have)");
}

TEST_CASE("a ggml type registered by one row: the GGUF reader and writer take its tensors",
          "[gguf_quants]") {
  std::mt19937_64 rng(200);
  const std::vector<std::byte> data = random_blocks(2 * 3, rng);  // [2, 48]: 3 blocks a row
  const std::vector<amc::GgufTensorToWrite> tensors = {{"w", kType, {2, 48}, data}};
  std::vector<std::uint8_t> image = amc::gguf_bytes({}, tensors);
  const amc::GgufFile file = amc::GgufFile::from_bytes(image);
  const amc::GgufTensorInfo& w = file.at("w");
  CHECK(w.type == kType);
  CHECK(w.shape == std::vector<std::int64_t>{2, 48});
  CHECK(w.byte_size == 6 * kBytes);
  const std::span<const std::byte> bytes = file.bytes(w);
  REQUIRE(bytes.size() == data.size());
  CHECK(std::memcmp(bytes.data(), data.data(), data.size()) == 0);

  // Its block checked like any other: 40 columns are not whole blocks of 16.
  const std::vector<amc::GgufTensorToWrite> ragged = {{"w", kType, {2, 40}, data}};
  CHECK_THROWS_AS(amc::gguf_bytes({}, ragged), amc::error);
  // Accepted because of its row: the same file with a number no row has is refused.
  const std::size_t type_at = 24 + 8 + 1 + 4 + 2 * 8;  // header, name, dimension count, ne
  std::uint32_t number = 0;
  std::memcpy(&number, image.data() + type_at, sizeof number);
  REQUIRE(number == 200);
  number = 201;
  std::memcpy(image.data() + type_at, &number, sizeof number);
  CHECK(message_of([&] { amc::GgufFile::from_bytes(image); }).find("unknown ggml type 201") !=
        std::string::npos);
}

TEST_CASE("a ggml type registered by one row dequantizes, on every table", "[gguf_quants]") {
  std::mt19937_64 rng(16);
  for (const std::size_t blocks : {std::size_t{1}, std::size_t{7}, std::size_t{40}}) {
    INFO(blocks << " blocks");
    const std::vector<std::byte> bytes = random_blocks(blocks, rng);
    const std::size_t n = blocks * kElements;
    // The public functions (the active table).
    std::vector<float> out(n, -1.0f);
    std::vector<amc::bf16> out16(n, amc::bf16{0xFFFF});
    amc::dequantize(kType, bytes, out);
    amc::dequantize(kType, bytes, out16);
    for (std::size_t e = 0; e < n; ++e) {
      INFO("element " << e);
      REQUIRE(std::bit_cast<std::uint32_t>(out[e]) ==
              std::bit_cast<std::uint32_t>(element(bytes, e)));
      REQUIRE(out16[e].bits == amc::to_bf16(out[e]).bits);
    }
    // Every table's kernels, called one by one.
    const std::size_t k = amc::row_index(*amc::find_ggml_type(kType));
    for (const amc::weight_kernels::Table* table : amc::weight_kernels::available_tables()) {
      INFO("table " << table->name);
      REQUIRE(table->to_f32[k] != nullptr);
      REQUIRE(table->to_bf16[k] != nullptr);
      REQUIRE(table->f32_dot[k] != nullptr);
      CHECK(table->int8_dot[k] == nullptr);
      CHECK(table->interleaved[k] == nullptr);
      std::vector<float> f32(n, -1.0f);
      std::vector<amc::bf16> b16(n, amc::bf16{0xFFFF});
      table->to_f32[k](bytes.data(), f32.data(), blocks);
      table->to_bf16[k](bytes.data(), b16.data(), blocks);
      CHECK(std::memcmp(f32.data(), out.data(), n * sizeof(float)) == 0);
      CHECK(std::memcmp(b16.data(), out16.data(), n * sizeof(amc::bf16)) == 0);
    }
  }
}

TEST_CASE("a ggml type registered by one row has a dot product with f32 activations",
          "[gguf_quants]") {
  // No kernel of its own: every table dequantizes it 256 values at a time and sums the products
  // in 32 lanes, within (n / 32 + 8) f32 roundings of the products' absolute sum.
  std::mt19937_64 rng(32);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const std::size_t k = amc::row_index(*amc::find_ggml_type(kType));
  for (const std::size_t blocks :
       {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{40}}) {
    const std::vector<std::byte> bytes = random_blocks(blocks, rng);
    const std::size_t n = blocks * kElements;
    std::vector<float> x(n);
    for (float& v : x) v = uniform(rng);
    double exact = 0.0, magnitude = 0.0;
    for (std::size_t e = 0; e < n; ++e) {
      const double p = static_cast<double>(x[e]) * element(bytes, e);
      exact += p;
      magnitude += std::abs(p);
    }
    const double bound = (static_cast<double>(n) / 32.0 + 8.0) * 0x1p-24 * magnitude;
    INFO(blocks << " blocks: exact " << exact << ", bound " << bound);
    CHECK(std::abs(amc::quantized_dot(kType, x, bytes) - exact) <= bound);
    for (const amc::weight_kernels::Table* table : amc::weight_kernels::available_tables()) {
      INFO("table " << table->name);
      CHECK(std::abs(table->f32_dot[k](x.data(), bytes.data(), blocks) - exact) <= bound);
    }
  }
  CHECK(message_of([] {
          amc::quantized_dot(kType, std::vector<float>(24), std::vector<std::byte>(40));
        }) ==
        "amc::quantized_dot: TEST_S8: x holds 24 f32 values, not a multiple of the block of 16 "
        "elements");
}

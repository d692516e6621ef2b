// amc::dequantize against a reference written here from the block layouts (ggml-common.h)
// alone: plain loops that read each element's bits by hand and compute in double, where every
// value is exact (f16 scales times small integers, all multiples of 2^-24 below 2^27), so the
// one rounding to f32 is the only one. Random blocks (random bytes, so the f16 scales include
// subnormals, infinities and NaNs) and blocks whose scales are set to each extreme; the bf16
// output against amc::to_bf16 of the f32 output; the size checks. Run once per kernel table
// (tests/CMakeLists.txt: test_gguf_quants_scalar, _sse2, _avx2; on aarch64 _no_dotprod). The
// dot products and the activations' quantization are also checked table by table, each table's
// kernels called directly (see "Every table's kernels, one by one" below).
#include "amc/io/gguf_quants.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/storage.hpp"
#include "catch.hpp"
#include "ggml_type_lists.hpp"
#include "ggml_types.hpp"  // src/: the tables' index of a type
#include "test_helpers.hpp"
#include "weight_kernels.hpp"  // src/: every table's kernels, called one by one

namespace {

using amc::GgmlType;

std::mt19937_64& rng() {
  static std::mt19937_64 engine(0x9915'0ddc'0de5ULL);
  return engine;
}

using amc::test::f16_value;

std::uint16_t u16_at(const std::vector<std::uint8_t>& b, std::size_t at) {
  return static_cast<std::uint16_t>(b[at] | (b[at + 1] << 8));
}

/// Element e of a Q4_K, Q5_K or Q6_K super-block starting at `at`, by hand, in its two parts:
/// the scaled quant d * scale * q (Q6_K: d * scale * (q - 32)) and the offset -dmin * min (0
/// for Q6_K). Both are exact in double.
struct KParts {
  double scaled;
  double offset;
};

KParts k_parts(GgmlType type, const std::vector<std::uint8_t>& b, std::size_t at, int e) {
  if (type == GgmlType::Q6_K) {
    const int half = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const std::uint8_t low_byte = b[at + 64 * half + l + 32 * (k % 2)];
    const int low = k < 2 ? low_byte & 15 : low_byte >> 4;
    const int high = (b[at + 128 + 32 * half + l] >> (2 * k)) & 3;
    const int scale = static_cast<std::int8_t>(b[at + 192 + e / 16]);
    return {f16_value(u16_at(b, at + 208)) * scale * ((low | (high << 4)) - 32), 0.0};
  }
  const bool five = type == GgmlType::Q5_K;
  const int sub = e / 32;  // sub-block 0..7
  const int group = e / 64, within = e % 32;
  const std::uint8_t* s = &b[at + 4];
  int scale = 0, min = 0;
  if (sub < 4) {
    scale = s[sub] & 63;
    min = s[sub + 4] & 63;
  } else {
    scale = (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4);
    min = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
  }
  const std::uint8_t byte = b[at + (five ? 48 : 16) + 32 * group + within];
  int q = sub % 2 == 0 ? byte & 15 : byte >> 4;
  if (five) q += 16 * ((b[at + 16 + within] >> sub) & 1);
  return {f16_value(u16_at(b, at)) * scale * q, -f16_value(u16_at(b, at + 2)) * min};
}

/// The expected value of element e of a block starting at `at` (every type, by hand).
double reference(GgmlType type, const std::vector<std::uint8_t>& b, std::size_t at, int e) {
  switch (type) {
    case GgmlType::Q8_0:
      return f16_value(u16_at(b, at)) * static_cast<std::int8_t>(b[at + 2 + e]);
    case GgmlType::Q4_0: {
      const std::uint8_t byte = b[at + 2 + e % 16];
      const int q = e < 16 ? byte & 15 : byte >> 4;
      return (q - 8) * f16_value(u16_at(b, at));
    }
    case GgmlType::Q4_1: {
      const std::uint8_t byte = b[at + 4 + e % 16];
      const int q = e < 16 ? byte & 15 : byte >> 4;
      return q * f16_value(u16_at(b, at)) + f16_value(u16_at(b, at + 2));
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      const bool one = type == GgmlType::Q5_1;
      const std::size_t qh_at = at + (one ? 4 : 2);
      const std::uint8_t byte = b[qh_at + 4 + e % 16];
      const int low = e < 16 ? byte & 15 : byte >> 4;
      const int fifth = (b[qh_at + e / 8] >> (e % 8)) & 1;  // bit e of the little-endian u32
      const int q = low + 16 * fifth;
      const double d = f16_value(u16_at(b, at));
      return one ? q * d + f16_value(u16_at(b, at + 2)) : (q - 16) * d;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: {
      const KParts p = k_parts(type, b, at, e);
      return type == GgmlType::Q6_K ? p.scaled : p.scaled + p.offset;  // -0 stays -0
    }
    default:
      FAIL("no reference for this type");
      return 0;
  }
}

struct Layout {
  int elements;
  int bytes;
  std::vector<int> scales;  // byte offsets of the f16 scales in a block
};

Layout layout_of(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0:
      return {32, 34, {0}};
    case GgmlType::Q4_0:
      return {32, 18, {0}};
    case GgmlType::Q4_1:
      return {32, 20, {0, 2}};
    case GgmlType::Q5_0:
      return {32, 22, {0}};
    case GgmlType::Q5_1:
      return {32, 24, {0, 2}};
    case GgmlType::Q4_K:
      return {256, 144, {0, 2}};
    case GgmlType::Q5_K:
      return {256, 176, {0, 2}};
    case GgmlType::Q6_K:
      return {256, 210, {208}};
    default:
      FAIL("no layout for " << amc::to_string(type));
      return {1, 1, {}};
  }
}

/// The block types dequantize() takes (every one of src/ggml_types.hpp's table).
const std::vector<GgmlType> block_types = amc::test::block_types();

/// f16 scales at the edges: zeros, the smallest and largest subnormals, the smallest normal,
/// the largest finite, one, infinities, a quiet and a signalling NaN.
const std::uint16_t extreme_scales[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x0400, 0x7BFF,
                                        0xFBFF, 0x3C00, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00};

/// Equal as f32 bit patterns, or both NaN (a NaN's payload depends on which operand the
/// hardware propagates; the reference in double cannot say).
/// bf16 `got` is to_bf16(`f32`), or both are NaN (LLVM leaves a NaN result's sign and payload
/// unspecified, so clang's f32 and bf16 instantiations of a kernel may differ there).
bool same_bf16(amc::bf16 got, float f32) {
  if (std::isnan(f32)) return (got.bits & 0x7FFFu) > 0x7F80u;
  return got.bits == amc::to_bf16(f32).bits;
}

bool same(float got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return std::bit_cast<std::uint32_t>(got) ==
         std::bit_cast<std::uint32_t>(static_cast<float>(want));
}

std::span<const std::byte> as_bytes(const std::vector<std::uint8_t>& b, std::size_t offset = 0) {
  return std::as_bytes(std::span(b)).subspan(offset);
}

/// Dequantizes `blocks` (starting at byte `offset` of the buffer, to test any alignment) to
/// f32 and bf16 and checks both against the reference.
void check_blocks(GgmlType type, const std::vector<std::uint8_t>& buffer, std::size_t offset,
                  std::size_t blocks) {
  const Layout layout = layout_of(type);
  const std::size_t n = blocks * static_cast<std::size_t>(layout.elements);
  std::vector<float> out(n, -1.0f);
  amc::dequantize(type, as_bytes(buffer, offset).first(blocks * layout.bytes), out);
  std::vector<amc::bf16> out16(n, amc::bf16{0xFFFF});
  amc::dequantize(type, as_bytes(buffer, offset).first(blocks * layout.bytes), out16);
  int failures = 0;
  for (std::size_t block = 0; block < blocks && failures < 5; ++block) {
    for (int e = 0; e < layout.elements && failures < 5; ++e) {
      const std::size_t i = block * layout.elements + static_cast<std::size_t>(e);
      const double want = reference(type, buffer, offset + block * layout.bytes, e);
      if (!same(out[i], want)) {
        ++failures;
        FAIL_CHECK(std::string(amc::to_string(type))
                   << " block " << block << " element " << e << ": got " << out[i] << " (bits 0x"
                   << std::hex << std::bit_cast<std::uint32_t>(out[i]) << std::dec << "), want "
                   << want);
      }
      if (!same_bf16(out16[i], out[i])) {
        ++failures;
        FAIL_CHECK(std::string(amc::to_string(type))
                   << " block " << block << " element " << e << ": bf16 0x" << std::hex
                   << out16[i].bits << " but to_bf16 of the f32 value gives 0x"
                   << amc::to_bf16(out[i]).bits);
      }
    }
  }
}

std::vector<std::uint8_t> random_bytes(std::size_t n) {
  std::vector<std::uint8_t> bytes(n);
  for (std::uint8_t& b : bytes) b = static_cast<std::uint8_t>(rng()());
  return bytes;
}

}  // namespace

TEST_CASE("dequantize: which types", "[gguf_quants]") {
  INFO("kernel table: " << amc::kernels::active().name);
  // The lists the cases iterate come from the library's table of types; these are the types it
  // must hold, each with its kernels.
  using T = GgmlType;
  CHECK(amc::test::block_types() ==
        std::vector<T>{T::Q4_0, T::Q4_1, T::Q5_0, T::Q5_1, T::Q8_0, T::Q4_K, T::Q5_K, T::Q6_K});
  CHECK(amc::test::dequantizable_types() == std::vector<T>{T::F32, T::F16, T::Q4_0, T::Q4_1,
                                                           T::Q5_0, T::Q5_1, T::Q8_0, T::Q4_K,
                                                           T::Q5_K, T::Q6_K, T::BF16});
  CHECK(amc::test::int8_dot_types_32() ==
        std::vector<T>{T::Q4_0, T::Q4_1, T::Q5_0, T::Q5_1, T::Q8_0});
  CHECK(amc::test::int8_dot_types_256() == std::vector<T>{T::Q4_K, T::Q5_K, T::Q6_K});
  CHECK(amc::test::interleavable_types() == std::vector<T>{T::Q4_0, T::Q4_1, T::Q8_0});
  for (const GgmlType type : {GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q8_K,
                              GgmlType::IQ4_NL, GgmlType::I8, GgmlType::F64, GgmlType::TQ2_0}) {
    CHECK_FALSE(amc::can_dequantize(type));
    CHECK_FALSE(amc::has_int8_dot_kernel(type));
  }
  CHECK(amc::dequantizable_type_names() ==
        "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16");
}

TEST_CASE("dequantize: random blocks of every block type match the reference", "[gguf_quants]") {
  INFO("kernel table: " << amc::kernels::active().name);
  for (const GgmlType type : block_types) {
    const Layout layout = layout_of(type);
    for (const std::size_t blocks : {std::size_t{1}, std::size_t{3}, std::size_t{40}}) {
      for (const std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
        INFO(amc::to_string(type) << ", " << blocks << " blocks at offset " << offset);
        check_blocks(type, random_bytes(offset + blocks * layout.bytes), offset, blocks);
      }
    }
  }
}

TEST_CASE("dequantize: blocks with extreme f16 scales", "[gguf_quants]") {
  INFO("kernel table: " << amc::kernels::active().name);
  for (const GgmlType type : block_types) {
    const Layout layout = layout_of(type);
    // One block per (scale, second scale) pair, so that both fields see every extreme.
    std::vector<std::uint8_t> buffer;
    std::size_t blocks = 0;
    for (const std::uint16_t a : extreme_scales) {
      for (const std::uint16_t b : extreme_scales) {
        std::vector<std::uint8_t> block = random_bytes(static_cast<std::size_t>(layout.bytes));
        for (std::size_t s = 0; s < layout.scales.size(); ++s) {
          const std::uint16_t value = s == 0 ? a : b;
          block[layout.scales[s]] = static_cast<std::uint8_t>(value & 0xFF);
          block[layout.scales[s] + 1] = static_cast<std::uint8_t>(value >> 8);
        }
        buffer.insert(buffer.end(), block.begin(), block.end());
        ++blocks;
      }
    }
    INFO(amc::to_string(type));
    check_blocks(type, buffer, 0, blocks);
  }
}

TEST_CASE("dequantize: F32, F16 and BF16 convert exactly", "[gguf_quants]") {
  INFO("kernel table: " << amc::kernels::active().name);
  SECTION("F16: every bit pattern, including subnormals, infinities and NaN payloads") {
    std::vector<std::uint8_t> bytes(2 * 65536);
    for (std::uint32_t h = 0; h < 65536; ++h) {
      bytes[2 * h] = static_cast<std::uint8_t>(h & 0xFF);
      bytes[2 * h + 1] = static_cast<std::uint8_t>(h >> 8);
    }
    std::vector<float> out(65536);
    amc::dequantize(GgmlType::F16, as_bytes(bytes), out);
    std::vector<amc::bf16> out16(65536);
    amc::dequantize(GgmlType::F16, as_bytes(bytes), out16);
    int failures = 0;
    for (std::uint32_t h = 0; h < 65536 && failures < 5; ++h) {
      const auto half = static_cast<std::uint16_t>(h);
      const double want = f16_value(half);
      std::uint32_t want_bits = std::bit_cast<std::uint32_t>(static_cast<float>(want));
      if (std::isnan(want)) {  // the payload shifted into the f32 mantissa, quiet bit untouched
        want_bits = ((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13);
      }
      const std::uint32_t got = std::bit_cast<std::uint32_t>(out[h]);
      if (got != want_bits || !same_bf16(out16[h], out[h])) {
        ++failures;
        FAIL_CHECK("f16 0x" << std::hex << h << ": got 0x" << got << " / bf16 0x" << out16[h].bits
                            << ", want 0x" << want_bits);
      }
    }
  }
  SECTION("F16 and BF16 at every length 1..40 and misaligned (vector loops and their tails)") {
    for (std::size_t n = 1; n <= 40; ++n) {
      const std::vector<std::uint8_t> bytes = random_bytes(2 * n + 1);
      std::vector<float> out(n);
      std::vector<amc::bf16> out16(n);
      amc::dequantize(GgmlType::F16, as_bytes(bytes, 1), out);
      amc::dequantize(GgmlType::F16, as_bytes(bytes, 1), out16);
      for (std::size_t i = 0; i < n; ++i) {
        const auto h = u16_at(bytes, 1 + 2 * i);
        INFO("n " << n << " i " << i << " f16 0x" << std::hex << h);
        CHECK(same(out[i], f16_value(h)));
        CHECK(same_bf16(out16[i], out[i]));
      }
      amc::dequantize(GgmlType::BF16, as_bytes(bytes, 1), out);
      amc::dequantize(GgmlType::BF16, as_bytes(bytes, 1), out16);
      for (std::size_t i = 0; i < n; ++i) {
        const auto h = u16_at(bytes, 1 + 2 * i);
        INFO("n " << n << " i " << i << " bf16 0x" << std::hex << h);
        CHECK(std::bit_cast<std::uint32_t>(out[i]) == std::uint32_t{h} << 16);
        CHECK(same_bf16(out16[i], out[i]));
      }
    }
  }
  SECTION("F32: copied, and rounded to bf16 to nearest even") {
    const std::vector<std::uint8_t> bytes = random_bytes(4 * 1000 + 2);
    std::vector<float> out(1000);
    std::vector<amc::bf16> out16(1000);
    amc::dequantize(GgmlType::F32, as_bytes(bytes, 2), out);
    amc::dequantize(GgmlType::F32, as_bytes(bytes, 2), out16);
    for (std::size_t i = 0; i < out.size(); ++i) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, bytes.data() + 2 + 4 * i, 4);
      REQUIRE(std::bit_cast<std::uint32_t>(out[i]) == bits);
      // Round to nearest even by hand, NaN quietened.
      std::uint32_t want = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
      if ((bits & 0x7FFFFFFFu) > 0x7F800000u) want = (bits >> 16) | 0x40u;
      REQUIRE(out16[i].bits == want);
    }
    // Ties: 1 + 2^-8 is halfway between two bf16 and goes to the even one (1.0).
    const std::vector<float> ties = {1.00390625f, 1.01171875f, -1.00390625f, 3.4028235e38f};
    std::vector<amc::bf16> rounded(ties.size());
    amc::dequantize(GgmlType::F32, std::as_bytes(std::span(ties)), rounded);
    CHECK(rounded[0].bits == 0x3F80);
    CHECK(rounded[1].bits == 0x3F82);
    CHECK(rounded[2].bits == 0xBF80);
    CHECK(rounded[3].bits == 0x7F80);  // the largest float rounds up to inf
  }
}

TEST_CASE("dequantize: empty input and size errors", "[gguf_quants]") {
  std::vector<float> none;
  amc::dequantize(GgmlType::Q4_1, {}, std::span<float>(none));
  const std::vector<std::uint8_t> bytes = random_bytes(100);
  std::vector<float> out(32);
  std::vector<amc::bf16> out16(32);
  REQUIRE_THROWS_WITH(amc::dequantize(GgmlType::Q4_0, as_bytes(bytes).first(17), out),
                      AMC_CONTAINS("amc::dequantize: Q4_0: 17 bytes of blocks given but 32 "
                                   "elements need 1 blocks of 18 bytes"));
  REQUIRE_THROWS_WITH(amc::dequantize(GgmlType::Q4_0, as_bytes(bytes).first(19), out16),
                      AMC_CONTAINS("19 bytes"));
  std::vector<float> odd(33);
  REQUIRE_THROWS_WITH(amc::dequantize(GgmlType::Q8_0, as_bytes(bytes).first(34), odd),
                      AMC_CONTAINS("Q8_0: the output holds 33 f32 values, not a multiple of the "
                                   "block of 32"));
  std::vector<amc::bf16> odd16(300);
  REQUIRE_THROWS_WITH(amc::dequantize(GgmlType::Q6_K, as_bytes(bytes).first(0), odd16),
                      AMC_CONTAINS("Q6_K: the output holds 300 bf16 values"));
  REQUIRE_THROWS_WITH(amc::dequantize(GgmlType::Q2_K, as_bytes(bytes).first(84), out),
                      AMC_CONTAINS("type Q2_K is not implemented"));
  REQUIRE_THROWS_WITH(amc::dequantize(static_cast<GgmlType>(4), as_bytes(bytes).first(18), out),
                      AMC_CONTAINS("type number 4 is not implemented"));
  std::vector<float> f32(25);
  REQUIRE_THROWS_WITH(amc::dequantize(GgmlType::F32, as_bytes(bytes).first(99), f32),
                      AMC_CONTAINS("F32: 99 bytes of blocks given but 25 elements need 25 "
                                   "blocks of 4 bytes = 100"));
}

// fuzz/regressions/fuzz_gguf: inputs that once failed fuzz_gguf (fuzz/regressions/README.md).
TEST_CASE("dequantize: fuzz_gguf regressions give bf16 equal to to_bf16 of f32 (NaN: NaN)",
          "[gguf_quants]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(AMC_FUZZ_REGRESSIONS_DIR) / "fuzz_gguf";
  REQUIRE(fs::is_directory(dir));
  int files = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    INFO(entry.path().string());
    ++files;
    const amc::GgufFile file = amc::GgufFile::open(entry.path());
    for (const amc::GgufTensorInfo& info : file.tensors()) {
      if (!amc::can_dequantize(info.type)) continue;
      std::vector<float> out(static_cast<std::size_t>(info.numel()));
      std::vector<amc::bf16> out16(out.size());
      amc::dequantize(info.type, file.bytes(info), out);
      amc::dequantize(info.type, file.bytes(info), out16);
      for (std::size_t k = 0; k < out.size(); ++k) {
        INFO(info.name << " element " << k);
        REQUIRE(same_bf16(out16[k], out[k]));
      }
    }
  }
  CHECK(files > 0);
}

namespace {

/// Blocks of `type` with random quants and finite scales between 2^-12 and 2^-2 (random signs):
/// what a real file holds, so that the dot product's rounding is what is measured.
std::vector<std::uint8_t> finite_blocks(GgmlType type, std::size_t offset, std::size_t blocks) {
  const Layout layout = layout_of(type);
  std::vector<std::uint8_t> b = random_bytes(offset + blocks * layout.bytes);
  std::uniform_int_distribution<int> exponent(3, 13);  // f16 biased exponents: 2^-12 .. 2^-2
  for (std::size_t block = 0; block < blocks; ++block) {
    for (const int at : layout.scales) {
      const std::size_t i = offset + block * layout.bytes + static_cast<std::size_t>(at);
      const auto bits = static_cast<std::uint16_t>((rng()() & 0x83FFu) | (exponent(rng()) << 10));
      b[i] = static_cast<std::uint8_t>(bits & 0xFF);
      b[i + 1] = static_cast<std::uint8_t>(bits >> 8);
    }
  }
  return b;
}

/// Element e of a plain-type tensor at byte `at`, by hand.
double plain_reference(GgmlType type, const std::vector<std::uint8_t>& b, std::size_t at) {
  switch (type) {
    case GgmlType::F32: {
      float f;
      std::memcpy(&f, b.data() + at, sizeof f);
      return f;
    }
    case GgmlType::F16:
      return f16_value(u16_at(b, at));
    default:  // BF16
      return std::bit_cast<float>(static_cast<std::uint32_t>(u16_at(b, at)) << 16);
  }
}

/// quantized_dot against sum_e x_e w_e in double; the bound of the documented order: each of
/// 32 lanes sums n / 32 products (plus the final pairwise sums and the product's own
/// rounding), so |error| <= (n / 32 + 8) u sum |x_e w_e|, u = 2^-24.
/// `kernel` is a table's kernel called directly; null: the public quantized_dot (active table).
void check_dot(GgmlType type, std::size_t blocks, std::size_t offset,
               const std::vector<std::uint8_t>& buffer, int elements, int bytes,
               const std::function<double(std::size_t at, int e)>& value,
               amc::QuantizedDotKernel kernel = nullptr) {
  const std::size_t n = blocks * static_cast<std::size_t>(elements);
  std::vector<float> x(n);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : x) v = uniform(rng());
  double exact = 0.0, magnitude = 0.0;
  for (std::size_t block = 0; block < blocks; ++block) {
    for (int e = 0; e < elements; ++e) {
      const double w = value(offset + block * static_cast<std::size_t>(bytes), e);
      const double p =
          static_cast<double>(
              x[block * static_cast<std::size_t>(elements) + static_cast<std::size_t>(e)]) *
          w;
      exact += p;
      magnitude += std::abs(p);
    }
  }
  const std::span<const std::byte> in =
      as_bytes(buffer, offset).first(blocks * static_cast<std::size_t>(bytes));
  const float got =
      kernel != nullptr ? kernel(x.data(), in.data(), blocks) : amc::quantized_dot(type, x, in);
  const double bound = (static_cast<double>(n) / 32.0 + 8.0) * 0x1p-24 * magnitude;
  INFO(amc::to_string(type) << ", " << blocks << " blocks at offset " << offset << ": got " << got
                            << ", exact " << exact << ", bound " << bound);
  CHECK(std::abs(static_cast<double>(got) - exact) <= bound);
}

}  // namespace

TEST_CASE("quantized_dot: every type against the products in double, within its bound",
          "[gguf_quants]") {
  INFO("kernel table: " << amc::kernels::active().name);
  for (const GgmlType type : block_types) {
    const Layout layout = layout_of(type);
    // 9 and 40 blocks of 32 cross the generic kernel's chunks of 256 values.
    for (const std::size_t blocks :
         {std::size_t{1}, std::size_t{3}, std::size_t{9}, std::size_t{40}}) {
      for (const std::size_t offset : {std::size_t{0}, std::size_t{3}}) {
        const std::vector<std::uint8_t> buffer = finite_blocks(type, offset, blocks);
        check_dot(type, blocks, offset, buffer, layout.elements, layout.bytes,
                  [&](std::size_t at, int e) { return reference(type, buffer, at, e); });
      }
    }
  }
  for (const auto& [type, bytes] :
       {std::pair{GgmlType::F32, 4}, std::pair{GgmlType::F16, 2}, std::pair{GgmlType::BF16, 2}}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{31}, std::size_t{300}}) {
      std::vector<std::uint8_t> buffer(n * static_cast<std::size_t>(bytes));
      std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
      for (std::size_t i = 0; i < n; ++i) {
        const float v = uniform(rng());
        if (type == GgmlType::F32) {
          std::memcpy(buffer.data() + 4 * i, &v, 4);
        } else {
          const std::uint16_t h =
              type == GgmlType::F16 ? amc::to_f16(v).bits : amc::to_bf16(v).bits;
          buffer[2 * i] = static_cast<std::uint8_t>(h & 0xFF);
          buffer[2 * i + 1] = static_cast<std::uint8_t>(h >> 8);
        }
      }
      check_dot(type, n, 0, buffer, 1, bytes,
                [&](std::size_t at, int) { return plain_reference(type, buffer, at); });
    }
  }
}

TEST_CASE("quantized_dot: a NaN or infinite scale makes the sum NaN or infinite, not a number",
          "[gguf_quants]") {
  for (const GgmlType type : block_types) {
    const Layout layout = layout_of(type);
    std::vector<std::uint8_t> buffer = finite_blocks(type, 0, 9);
    const std::size_t at = 4 * static_cast<std::size_t>(layout.bytes) +
                           static_cast<std::size_t>(layout.scales.front());
    buffer[at] = 0x00;  // f16 +inf: 0x7C00
    buffer[at + 1] = 0x7C;
    const std::vector<float> x(9 * static_cast<std::size_t>(layout.elements), 1.0f);
    INFO(amc::to_string(type));
    CHECK_FALSE(std::isfinite(amc::quantized_dot(type, x, as_bytes(buffer))));
  }
}

TEST_CASE("quantized_dot: size and type errors", "[gguf_quants]") {
  const std::vector<std::uint8_t> buffer(40);
  const std::vector<float> x(33);
  REQUIRE_THROWS_WITH(amc::quantized_dot(GgmlType::Q4_1, x, as_bytes(buffer)),
                      AMC_CONTAINS("amc::quantized_dot: Q4_1: x holds 33 f32 values, not a "
                                   "multiple of the block of 32 elements"));
  REQUIRE_THROWS_WITH(
      amc::quantized_dot(GgmlType::Q4_1, std::span(x).first(32), as_bytes(buffer)),
      AMC_CONTAINS("40 bytes of blocks given but 32 elements need 1 blocks of 20 bytes = 20"));
  REQUIRE_THROWS_WITH(amc::quantized_dot_kernel(GgmlType::Q2_K),
                      AMC_CONTAINS("amc::quantized_dot_kernel: type Q2_K is not implemented"));
}

TEST_CASE("quantize_activations: ggml's Q8_1 blocks, by hand", "[gguf_quants]") {
  std::vector<float> x(96);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (float& v : x) v = uniform(rng());
  for (int j = 32; j < 64; ++j) x[static_cast<std::size_t>(j)] = 0.0f;  // an all-zero block
  amc::Int8Activations q;
  amc::quantize_activations(x, q);
  REQUIRE(q.blocks() == 3);
  for (std::size_t b = 0; b < 3; ++b) {
    double largest = 0.0;
    for (int j = 0; j < 32; ++j)
      largest = std::max(largest, std::abs(static_cast<double>(x[32 * b + j])));
    CHECK(q.scale[b] == static_cast<float>(largest) / 127.0f);
    std::int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      const std::size_t i = 32 * b + static_cast<std::size_t>(j);
      sum += q.q[i];
      CHECK(std::abs(static_cast<double>(q.q[i])) <= 127);
      // Within half a step of x (the scale's own rounding adds a hair).
      CHECK(std::abs(static_cast<double>(q.q[i]) * q.scale[b] - x[i]) <=
            0.5 * q.scale[b] * (1 + 1e-5));
    }
    CHECK(q.sum[b] == sum);
  }
  CHECK(q.scale[1] == 0.0f);
  // A NaN or infinite activation: its block's scale is NaN, so the products are not numbers.
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> y = x;
    y[70] = bad;
    amc::quantize_activations(y, q);
    CHECK(std::isnan(q.scale[2]));
    CHECK(std::isfinite(q.scale[0]));
    const std::vector<std::uint8_t> w = finite_blocks(GgmlType::Q8_0, 0, 3);
    CHECK(std::isnan(
        amc::int8_dot_kernel(GgmlType::Q8_0)(q, reinterpret_cast<const std::byte*>(w.data()), 3)));
  }
  REQUIRE_THROWS_WITH(amc::quantize_activations(std::span(x).first(40), q),
                      AMC_CONTAINS("amc::quantize_activations: x holds 40 values"));
}

namespace {

/// The part of every weight of the block of 32 at `at` that the int8 kernels scale apart from
/// the quants' sum (they cancel in the weight): Q4_0's -8 d and Q5_0's -16 d (the x86 kernels
/// sum them apart), Q4_1's and Q5_1's m; 0 for Q8_0.
double int8_offset(GgmlType type, const std::vector<std::uint8_t>& b, std::size_t at) {
  switch (type) {
    case GgmlType::Q4_0:
      return -8.0 * f16_value(u16_at(b, at));
    case GgmlType::Q5_0:
      return -16.0 * f16_value(u16_at(b, at));
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      return f16_value(u16_at(b, at + 2));
    default:
      return 0.0;
  }
}

/// A int8 kernel over `blocks` random blocks of `type` (changed by `edit` if given) and random
/// activations, quantized, against the products of the weights decoded by hand (reference) and
/// the quantized activations in double: what every kernel computes exactly in integers and then
/// scales in f32. The magnitude M sums |w - o| |x| + |o| |x| with o the offset int8_offset (the
/// kernels may sum the two apart); a few f32 roundings per block's term (the scales, the offset)
/// and the sum over blocks: |got - exact| <= (blocks + 16) u M, u = 2^-24.
void check_int8_dot(GgmlType type, std::size_t blocks, amc::Int8DotKernel kernel,
                    const std::function<void(std::vector<std::uint8_t>&)>& edit = {}) {
  const Layout layout = layout_of(type);
  std::vector<std::uint8_t> buffer = finite_blocks(type, 0, blocks);
  if (edit) edit(buffer);
  std::vector<float> x(blocks * 32);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : x) v = uniform(rng());
  amc::Int8Activations q;
  amc::quantize_activations(x, q);
  double exact = 0.0, magnitude = 0.0;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t at = b * static_cast<std::size_t>(layout.bytes);
    const double offset = int8_offset(type, buffer, at);
    for (int e = 0; e < 32; ++e) {
      const double w = reference(type, buffer, at, e);
      const double xv = static_cast<double>(q.q[32 * b + static_cast<std::size_t>(e)]) * q.scale[b];
      exact += w * xv;
      magnitude += (std::abs(w - offset) + std::abs(offset)) * std::abs(xv);
    }
  }
  const float got = kernel(q, reinterpret_cast<const std::byte*>(buffer.data()), blocks);
  const double bound = (static_cast<double>(blocks) + 16.0) * 0x1p-24 * magnitude;
  INFO(amc::to_string(type) << ", " << blocks << " blocks: got " << got << ", exact " << exact
                            << ", bound " << bound);
  CHECK(std::abs(static_cast<double>(got) - exact) <= bound);
}

}  // namespace

TEST_CASE(
    "int8_dot: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 against the quantized activations' products in double",
    "[gguf_quants]") {
  INFO("kernel table: " << amc::kernels::active().name);
  for (const GgmlType type : amc::test::int8_dot_types_32()) {
    for (const std::size_t blocks : {std::size_t{1}, std::size_t{9}, std::size_t{48}}) {
      check_int8_dot(type, blocks, amc::int8_dot_kernel(type));
    }
  }
  REQUIRE_THROWS_WITH(amc::int8_dot_kernel(GgmlType::F16),
                      AMC_CONTAINS("amc::int8_dot_kernel: type F16 has no int8 activation kernel"));
  REQUIRE_THROWS_WITH(
      amc::int8_dot_kernel(GgmlType::Q2_K),
      AMC_CONTAINS("amc::int8_dot_kernel: type Q2_K has no int8 activation kernel"));
}

// --- Every table's kernels, one by one ---------------------------------------------------------
// The cases above go through the public functions, so they test the table that AMC_KERNELS
// selects (ctest runs them once per table). The cases below call every table this CPU runs
// directly, and each table's int8 kernels both without and with its dot-product extension (AVX-512
// VNNI, the Armv8.2 dot product), so that a broken baseline kernel cannot hide behind the
// extension the CPU prefers.

namespace {

using WeightKernelTable = amc::weight_kernels::Table;

/// The entry of `type` in every table: its row of the library's table of types.
std::size_t table_index(GgmlType type) {
  const amc::GgmlTypeRow* row = amc::find_ggml_type(type);
  if (row == nullptr) FAIL("no table entry for " << amc::to_string(type));
  return amc::row_index(*row);
}

/// The int8 kernels of the blocks of 32.
const std::vector<GgmlType> int8_types_32 = amc::test::int8_dot_types_32();
/// The k-quants' int8 kernels (super-blocks of 256 against 8 activation blocks of 32 each).
const std::vector<GgmlType> int8_types_256 = amc::test::int8_dot_types_256();
/// Every type with an int8 kernel.
const std::vector<GgmlType> int8_types = amc::test::int8_dot_types();

const WeightKernelTable* table_named(std::string_view name) {
  for (const WeightKernelTable* table : amc::weight_kernels::available_tables()) {
    if (table->name == name) return table;
  }
  return nullptr;
}

/// One set of int8 kernels to test: a table's baseline ones ("neon") or its extension's
/// ("neon+dotprod"), the latter only where the CPU has the extension.
struct Int8Variant {
  std::string name;
  const amc::Int8DotKernel* kernels;
  amc::Int8DotKernel of(GgmlType type) const { return kernels[table_index(type)]; }
};

std::vector<Int8Variant> int8_variants() {
  std::vector<Int8Variant> variants;
  for (const WeightKernelTable* table : amc::weight_kernels::available_tables()) {
    variants.push_back({std::string(table->name), table->int8_dot});
    if (amc::weight_kernels::cpu_has_extension(*table)) {
      variants.push_back({std::string(table->name) + "+" + std::string(table->extension),
                          table->int8_dot_extension});
    }
  }
  return variants;
}

}  // namespace

TEST_CASE("weight kernel tables: one per instruction set of the operators, each complete",
          "[gguf_quants]") {
  const std::vector<const WeightKernelTable*> tables = amc::weight_kernels::available_tables();
  REQUIRE(!tables.empty());
  CHECK(tables.front()->name == "scalar");
  for (const amc::kernels::KernelTable* kernels : amc::kernels::available()) {
    if (kernels->name == "sse2") continue;  // none of its own: the baseline build serves it
    INFO("operators' table " << kernels->name);
    CHECK(table_named(kernels->name) != nullptr);
  }
  for (const WeightKernelTable* table : tables) {
    INFO(table->name);
    CHECK(table->quantize != nullptr);
    for (const GgmlType type : amc::ggml_types()) {
      INFO(amc::to_string(type));
      const std::size_t k = table_index(type);
      const bool dequantizes = amc::can_dequantize(type);
      CHECK((table->to_f32[k] != nullptr) == dequantizes);
      CHECK((table->to_bf16[k] != nullptr) == dequantizes);
      CHECK((table->f32_dot[k] != nullptr) == dequantizes);
      CHECK((table->int8_dot[k] != nullptr) == amc::has_int8_dot_kernel(type));
      CHECK((table->interleaved[k] != nullptr) == amc::can_interleave(type));
    }
    for (const GgmlType type : int8_types) {
      INFO(amc::to_string(type));
      CHECK(table->int8_dot[table_index(type)] != nullptr);
      CHECK((table->int8_dot_extension[table_index(type)] != nullptr) == !table->extension.empty());
    }
    for (const GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
      CHECK(table->int8_dot[table_index(type)] == nullptr);
      CHECK(table->int8_dot_extension[table_index(type)] == nullptr);
    }
  }
#if defined(__aarch64__)
  if (const WeightKernelTable* neon = table_named("neon")) {
#if defined(__GNUC__) && !defined(__clang__)
    CHECK(neon->extension == "dotprod");  // clang before 16 may build none
#endif
#if defined(__linux__)
    // Independently of the library's check: Linux's hardware capability bits.
    const bool dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
    CHECK(amc::weight_kernels::cpu_has_extension(*neon) ==
          (dotprod && neon->extension == "dotprod"));
#endif
  }
#endif
#if defined(__GNUC__) && defined(__x86_64__)
  if (const WeightKernelTable* avx512 = table_named("avx512")) {
    CHECK(avx512->extension == "avx512vnni");
    CHECK(amc::weight_kernels::cpu_has_extension(*avx512) ==
          (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")));
  }
#endif
}

TEST_CASE("int8_dot_kernel: the active table's kernel, with its extension where the CPU has it",
          "[gguf_quants]") {
  const std::string_view name = amc::kernels::active().name;
  const WeightKernelTable* active = table_named(name == "sse2" ? "scalar" : name);
  REQUIRE(active != nullptr);
  const bool extension = amc::weight_kernels::cpu_has_extension(*active);
  INFO("table " << active->name << (extension ? " with " : " without ") << "its extension");
  for (const GgmlType type : int8_types) {
    INFO(amc::to_string(type));
    const std::size_t k = table_index(type);
    CHECK(amc::int8_dot_kernel(type) ==
          (extension ? active->int8_dot_extension[k] : active->int8_dot[k]));
  }
}

TEST_CASE("quantized_dot: every table's kernels against the products in double, within the bound",
          "[gguf_quants]") {
  for (const WeightKernelTable* table : amc::weight_kernels::available_tables()) {
    INFO("table " << table->name);
    for (const GgmlType type : block_types) {
      const Layout layout = layout_of(type);
      for (const std::size_t blocks :
           {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{9}, std::size_t{40}}) {
        for (const std::size_t offset : {std::size_t{0}, std::size_t{3}}) {
          const std::vector<std::uint8_t> buffer = finite_blocks(type, offset, blocks);
          check_dot(
              type, blocks, offset, buffer, layout.elements, layout.bytes,
              [&](std::size_t at, int e) { return reference(type, buffer, at, e); },
              table->f32_dot[table_index(type)]);
        }
      }
    }
  }
}

TEST_CASE("int8_dot: every table's kernels, with and without the extension, within the bound",
          "[gguf_quants]") {
  for (const Int8Variant& variant : int8_variants()) {
    INFO("kernels " << variant.name);
    for (const GgmlType type : int8_types_32) {
      // 1-9 and 13 cover every count of a last partial group of 4 or 8 blocks.
      for (const std::size_t blocks : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 48}) {
        check_int8_dot(type, blocks, variant.of(type));
      }
    }
    // Q5_0 and Q5_1 with every fifth bit clear, every one set, and a different pattern per block
    // (clear, set, alternating, or one of the two halves), the rest random.
    for (const GgmlType type : {GgmlType::Q5_0, GgmlType::Q5_1}) {
      const std::size_t qh_at = type == GgmlType::Q5_1 ? 4 : 2;
      const std::uint32_t patterns[] = {0x00000000u, 0xFFFFFFFFu, 0x55555555u, 0xFFFF0000u,
                                        0x0000FFFFu};
      for (const int fill : {0, 1, -1}) {
        INFO(amc::to_string(type) << " fifth bits "
                                  << (fill < 0 ? "by block"
                                      : fill   ? "set"
                                               : "clear"));
        for (const std::size_t blocks : {1, 5, 13}) {
          check_int8_dot(type, blocks, variant.of(type), [&](std::vector<std::uint8_t>& b) {
            const auto size = static_cast<std::size_t>(layout_of(type).bytes);
            for (std::size_t k = 0; k < blocks; ++k) {
              const std::uint32_t qh = fill < 0 ? patterns[k % 5] : fill ? 0xFFFFFFFFu : 0u;
              std::memcpy(b.data() + k * size + qh_at, &qh, sizeof qh);  // little-endian
            }
          });
        }
      }
    }
  }
}

namespace {

/// A 16-bit field (an f16 scale) stored little-endian at block + at, as GGUF stores it.
void put16(std::uint8_t* block, int at, std::uint16_t bits) {
  block[at] = static_cast<std::uint8_t>(bits & 0xFF);
  block[at + 1] = static_cast<std::uint8_t>(bits >> 8);
}

/// `blocks` blocks of `type` with f16 scale bits d(b) (and offset bits m(b), Q4_1 and Q5_1) and
/// quants quant(b, e) for element e as stored: Q8_0's signed (-128..127), Q4_0's and Q4_1's
/// nibbles (0..15), Q5_0's and Q5_1's 0..31 (the fifth bit into bit e of qh).
std::vector<std::uint8_t> make_blocks(GgmlType type, std::size_t blocks,
                                      const std::function<std::uint16_t(std::size_t)>& d,
                                      const std::function<std::uint16_t(std::size_t)>& m,
                                      const std::function<int(std::size_t, int)>& quant) {
  const Layout layout = layout_of(type);
  std::vector<std::uint8_t> bytes(blocks * static_cast<std::size_t>(layout.bytes));
  for (std::size_t b = 0; b < blocks; ++b) {
    std::uint8_t* block = bytes.data() + b * static_cast<std::size_t>(layout.bytes);
    put16(block, 0, d(b));
    if (type == GgmlType::Q8_0) {
      for (int e = 0; e < 32; ++e) block[2 + e] = static_cast<std::uint8_t>(quant(b, e));
      continue;
    }
    const bool min = type == GgmlType::Q4_1 || type == GgmlType::Q5_1;
    const bool five = type == GgmlType::Q5_0 || type == GgmlType::Q5_1;
    if (min) put16(block, 2, m(b));
    std::uint8_t* qs = block + (min ? 4 : 2) + (five ? 4 : 0);
    for (int e = 0; e < 16; ++e) {
      qs[e] = static_cast<std::uint8_t>((quant(b, e) & 15) | ((quant(b, e + 16) & 15) << 4));
    }
    if (five) {
      std::uint8_t* qh = block + (min ? 4 : 2);
      for (int e = 0; e < 32; ++e)
        qh[e / 8] |= static_cast<std::uint8_t>((quant(b, e) >> 4) << (e % 8));
    }
  }
  return bytes;
}

/// Activations with quants quant(b, e) (-127..127, as quantize_activations makes them) and
/// scales scale(b); their sums from the quants.
amc::Int8Activations make_activations(std::size_t blocks,
                                      const std::function<int(std::size_t, int)>& quant,
                                      const std::function<float(std::size_t)>& scale) {
  amc::Int8Activations x;
  x.q.resize(blocks * 32);
  x.scale.resize(blocks);
  x.sum.assign(blocks, 0);
  for (std::size_t b = 0; b < blocks; ++b) {
    x.scale[b] = scale(b);
    for (int e = 0; e < 32; ++e) {
      const auto q = static_cast<std::int8_t>(quant(b, e));
      x.q[32 * b + static_cast<std::size_t>(e)] = q;
      x.sum[b] += q;
    }
  }
  return x;
}

/// Every int8 kernel on blocks whose scales are powers of two, small enough that every product and
/// partial sum is exact in f32 whatever the order (checked: the products' absolute sum below
/// 2^24 units of `granularity`, the smallest step of any term): so each kernel's result is the
/// exact value, which requires its integer sums to be exact, and equals the generic kernel's.
void check_exact(GgmlType type, const std::vector<std::uint8_t>& weights,
                 const amc::Int8Activations& x, double granularity) {
  const Layout layout = layout_of(type);
  const std::size_t blocks = x.blocks();
  double exact = 0.0, magnitude = 0.0;
  for (std::size_t b = 0; b < blocks; ++b) {
    for (int e = 0; e < 32; ++e) {
      const std::size_t at = b * static_cast<std::size_t>(layout.bytes);
      const double xv = x.q[32 * b + static_cast<std::size_t>(e)] * static_cast<double>(x.scale[b]);
      exact += reference(type, weights, at, e) * xv;
      // The kernels may sum q d x and the offset's -8 d x, -16 d x or m x apart: both count.
      const double offset = int8_offset(type, weights, at);
      magnitude +=
          (std::abs(reference(type, weights, at, e) - offset) + std::abs(offset)) * std::abs(xv);
    }
  }
  REQUIRE(magnitude < 0x1p24 * granularity);
  const auto* in = reinterpret_cast<const std::byte*>(weights.data());
  const float generic = table_named("scalar")->int8_dot[table_index(type)](x, in, blocks);
  CHECK(static_cast<double>(generic) == exact);
  for (const Int8Variant& variant : int8_variants()) {
    const float got = variant.of(type)(x, in, blocks);
    INFO("kernels " << variant.name << ": " << amc::to_string(type) << ", " << blocks
                    << " blocks: got " << got << ", exact " << exact << ", generic kernel "
                    << generic);
    CHECK(got == generic);
  }
}

constexpr std::uint16_t kF16Half = 0x3800, kF16One = 0x3C00, kF16Two = 0x4000;

/// The largest stored quant of a block of 32 (make_blocks): Q8_0's 127, Q4's 15, Q5's 31.
int top_quant(GgmlType type) {
  if (type == GgmlType::Q8_0) return 127;
  return type == GgmlType::Q5_0 || type == GgmlType::Q5_1 ? 31 : 15;
}

}  // namespace

TEST_CASE("int8_dot: every kernel's integer sums are exact, equal to the generic kernel's",
          "[gguf_quants]") {
  const auto one = [](std::size_t) { return kF16One; };
  const auto zero16 = [](std::size_t) { return std::uint16_t{0}; };
  const auto unit = [](std::size_t) { return 1.0f; };
  SECTION("the largest products (16-bit sums of more than two overflow), every group tail") {
    // Q8_0's -128 and Q4's nibbles 0 and 15 (weights -8 and 7 for Q4_0) against +-127; Q5's
    // quants 0 and 31 (every fifth bit clear or set; weights -16 and 15 for Q5_0), and 16 and 15
    // (the fifth bit alone, the nibble alone; alternating: both alternate).
    struct Pattern {
      int weight;  // the quant as stored
      int x;
      bool alternate;  // the weight's sign (Q8_0) or quant (Q4, Q5: q, top - q) alternates
    };
    for (const GgmlType type : int8_types_32) {
      const bool q8 = type == GgmlType::Q8_0;
      const int top = top_quant(type);
      std::vector<Pattern> patterns = {{q8 ? -128 : 0, 127, false},
                                       {q8 ? -128 : 0, -127, false},
                                       {top, 127, false},
                                       {q8 ? -128 : top, 127, true}};
      if (top == 31) {
        patterns.insert(patterns.end(), {{16, 127, false}, {15, -127, false}, {16, -127, true}});
      }
      for (const Pattern p : patterns) {
        const auto quant = [&](std::size_t, int e) {
          if (!p.alternate || e % 2 == 0) return p.weight;
          return q8 ? -p.weight - 1 : top - p.weight;
        };
        for (std::size_t blocks = 1; blocks <= 13; ++blocks) {
          INFO("pattern weight " << p.weight << " x " << p.x
                                 << (p.alternate ? " alternating" : ""));
          check_exact(type, make_blocks(type, blocks, one, zero16, quant),
                      make_activations(
                          blocks, [&](std::size_t, int) { return p.x; }, unit),
                      1.0);
        }
      }
    }
  }
  SECTION("random quants, scales 1, offsets 0 and +-1") {
    std::uniform_int_distribution<int> x_quant(-127, 127), offset(0, 2);
    for (const GgmlType type : int8_types_32) {
      std::uniform_int_distribution<int> w_quant(type == GgmlType::Q8_0 ? -128 : 0,
                                                 top_quant(type));
      for (const std::size_t blocks : {1, 2, 3, 4, 5, 7, 8, 9, 16, 48}) {
        const std::uint16_t offsets[] = {0x0000, kF16One, 0xBC00};  // 0, 1, -1
        std::vector<std::uint16_t> m(blocks);
        for (std::uint16_t& bits : m) bits = offsets[offset(rng())];
        check_exact(type,
                    make_blocks(
                        type, blocks, one, [&](std::size_t b) { return m[b]; },
                        [&](std::size_t, int) { return w_quant(rng()); }),
                    make_activations(
                        blocks, [&](std::size_t, int) { return x_quant(rng()); }, unit),
                    1.0);
      }
    }
  }
  SECTION("scales 1/2, 1 and 2 on both sides, block by block (which scale goes with which sum)") {
    std::uniform_int_distribution<int> x_quant(-32, 31), pick(0, 2), sign(0, 1);
    const std::uint16_t d_bits[] = {kF16Half, kF16One, kF16Two};
    const float dx_values[] = {0.5f, 1.0f, 2.0f};
    for (const GgmlType type : int8_types_32) {
      std::uniform_int_distribution<int> w_quant(type == GgmlType::Q8_0 ? -32 : 0,
                                                 type == GgmlType::Q8_0 ? 31 : top_quant(type));
      for (const std::size_t blocks : {1, 3, 4, 6, 8, 11, 13}) {
        std::vector<std::uint16_t> d(blocks), m(blocks);
        std::vector<float> dx(blocks);
        for (std::size_t b = 0; b < blocks; ++b) {
          d[b] = d_bits[pick(rng())];
          m[b] = static_cast<std::uint16_t>(d_bits[pick(rng())] | (sign(rng()) << 15));
          dx[b] = dx_values[pick(rng())];
        }
        check_exact(type,
                    make_blocks(
                        type, blocks, [&](std::size_t b) { return d[b]; },
                        [&](std::size_t b) { return m[b]; },
                        [&](std::size_t, int) { return w_quant(rng()); }),
                    make_activations(
                        blocks, [&](std::size_t, int) { return x_quant(rng()); },
                        [&](std::size_t b) { return dx[b]; }),
                    0.25);
      }
    }
  }
}

// --- The k-quants' int8 kernels ------------------------------------------------------------------
// Q4_K, Q5_K and Q6_K super-blocks of 256 against 8 activation blocks of 32, on every table and
// extension this CPU runs, against the products in double of the weights decoded by hand
// (k_parts, from the layout alone) and the activations' values d_x q_x.

namespace {

/// Super-blocks of `type` built from their fields, encoded by hand from the layout
/// (ggml-common.h): f16 bits d(b) and, for Q4_K/Q5_K, dmin(b); sub-block scale(b, j) and min(b, j)
/// (6 bits, j < 8) or, for Q6_K, scale(b, j) (int8, j < 16); the stored quant(b, e) of element e
/// (0..15, 0..31, or Q6_K's 0..63, which the format offsets by -32).
std::vector<std::uint8_t> make_k_blocks(GgmlType type, std::size_t blocks,
                                        const std::function<std::uint16_t(std::size_t)>& d,
                                        const std::function<std::uint16_t(std::size_t)>& dmin,
                                        const std::function<int(std::size_t, int)>& scale,
                                        const std::function<int(std::size_t, int)>& min,
                                        const std::function<int(std::size_t, int)>& quant) {
  const Layout layout = layout_of(type);
  std::vector<std::uint8_t> bytes(blocks * static_cast<std::size_t>(layout.bytes));
  for (std::size_t b = 0; b < blocks; ++b) {
    std::uint8_t* block = bytes.data() + b * static_cast<std::size_t>(layout.bytes);
    if (type == GgmlType::Q6_K) {
      put16(block, 208, d(b));
      for (int k = 0; k < 16; ++k) block[192 + k] = static_cast<std::uint8_t>(scale(b, k));
      for (int e = 0; e < 256; ++e) {
        const int q = quant(b, e), half = e / 128, k = (e % 128) / 32, l = e % 32;
        std::uint8_t& low = block[64 * half + 32 * (k % 2) + l];
        low = static_cast<std::uint8_t>(low | (k < 2 ? q & 15 : (q & 15) << 4));
        block[128 + 32 * half + l] |= static_cast<std::uint8_t>((q >> 4) << (2 * k));
      }
      continue;
    }
    put16(block, 0, d(b));
    put16(block, 2, dmin(b));
    std::uint8_t* s = block + 4;
    for (int j = 0; j < 8; ++j) {
      const int sc = scale(b, j), m = min(b, j);
      if (j < 4) {
        s[j] = static_cast<std::uint8_t>(s[j] | sc);
        s[j + 4] = static_cast<std::uint8_t>(s[j + 4] | m);
      } else {
        s[j + 4] = static_cast<std::uint8_t>((sc & 15) | ((m & 15) << 4));
        s[j - 4] = static_cast<std::uint8_t>(s[j - 4] | ((sc >> 4) << 6));
        s[j] = static_cast<std::uint8_t>(s[j] | ((m >> 4) << 6));
      }
    }
    const bool five = type == GgmlType::Q5_K;
    std::uint8_t* qs = block + (five ? 48 : 16);
    for (int e = 0; e < 256; ++e) {
      const int q = quant(b, e), j = e / 32, l = e % 32;
      qs[32 * (j / 2) + l] |= static_cast<std::uint8_t>(j % 2 == 0 ? q & 15 : (q & 15) << 4);
      if (five) block[16 + l] |= static_cast<std::uint8_t>((q >> 4) << j);
    }
  }
  return bytes;
}

/// The exact <w, x> in double and the magnitude M that bounds every term and partial sum a
/// kernel forms: sum over elements of (|d sc q| + |dmin m|) |d_x q_x|, the scaled quants and
/// the offsets apart because the kernels sum them apart (they cancel in w).
struct KExpected {
  double exact = 0.0;
  double magnitude = 0.0;
};

KExpected k_expected(GgmlType type, const std::vector<std::uint8_t>& weights,
                     const amc::Int8Activations& x) {
  const auto bytes = static_cast<std::size_t>(layout_of(type).bytes);
  KExpected out;
  for (std::size_t b = 0; b < x.blocks() / 8; ++b) {
    for (int e = 0; e < 256; ++e) {
      const std::size_t i = 256 * b + static_cast<std::size_t>(e);
      const double xv = x.q[i] * static_cast<double>(x.scale[i / 32]);
      const KParts p = k_parts(type, weights, b * bytes, e);
      out.exact += (p.scaled + p.offset) * xv;
      out.magnitude += (std::abs(p.scaled) + std::abs(p.offset)) * std::abs(xv);
    }
  }
  return out;
}

/// A k-quant int8 kernel against k_expected, within the f32 roundings. The integer sums are exact
/// (the kernels' bounds: below 2^24), so only f32 rounds: each term (a sub-block's scaled sum;
/// Q4_K/Q5_K's min term of a sub-block) carries at most three roundings (the scale's product
/// with d_x, its product with the sum, and the difference of the two terms in the plain loop),
/// and then passes through fewer additions than there are terms T (16 per super-block at most)
/// plus the final reductions and the subtraction of the min terms (at most 8 in every kernel's
/// order): |got - exact| <= (T + 11) u M to first order, u = 2^-24, each term being at most
/// its share of M. Tested at (T + 16) u M.
void check_k_dot(GgmlType type, const std::vector<std::uint8_t>& weights,
                 const amc::Int8Activations& x, amc::Int8DotKernel kernel,
                 const std::string& what) {
  const std::size_t blocks = x.blocks() / 8;
  const KExpected want = k_expected(type, weights, x);
  const float got = kernel(x, reinterpret_cast<const std::byte*>(weights.data()), blocks);
  const double bound = (16.0 * static_cast<double>(blocks) + 16.0) * 0x1p-24 * want.magnitude;
  INFO(what << ": " << amc::to_string(type) << ", " << blocks << " super-blocks: got " << got
            << ", exact " << want.exact << ", bound " << bound);
  CHECK(std::abs(static_cast<double>(got) - want.exact) <= bound);
}

/// Activations with random quants in [-127, 127] and random scales in [2^-10, 2^2).
amc::Int8Activations random_k_activations(std::size_t blocks) {
  std::uniform_int_distribution<int> quant(-127, 127);
  std::uniform_real_distribution<float> scale(0x1p-10f, 4.0f);
  return make_activations(
      8 * blocks, [&](std::size_t, int) { return quant(rng()); },
      [&](std::size_t) { return scale(rng()); });
}

/// Random super-blocks: random bytes (every 6-bit scale and min, quant and fifth bit, Q6_K's
/// int8 scales), f16 d and dmin finite (finite_blocks), and in every third super-block the
/// scales and mins of three sub-blocks forced to the 6-bit maximum 63 (Q6_K: scales -128 and
/// 127).
std::vector<std::uint8_t> random_k_blocks(GgmlType type, std::size_t blocks) {
  std::vector<std::uint8_t> bytes = finite_blocks(type, 0, blocks);
  const auto size = static_cast<std::size_t>(layout_of(type).bytes);
  for (std::size_t b = 0; b < blocks; b += 3) {
    std::uint8_t* block = bytes.data() + b * size;
    if (type == GgmlType::Q6_K) {
      block[192 + 1] = 0x80;  // -128
      block[192 + 6] = 0x7F;
      block[192 + 15] = 0x80;
      continue;
    }
    // Sub-blocks 0 and 2 (low 6 bits of bytes j and j + 4) and 5 (the nibbles of byte 9 and the
    // top bits of bytes 1 and 5).
    for (const int at : {0, 4, 2, 6}) block[4 + at] |= 0x3F;
    block[4 + 9] = 0xFF;
    block[4 + 1] |= 0xC0;
    block[4 + 5] |= 0xC0;
  }
  return bytes;
}

/// Super-blocks at their extremes: every scale and min at the maximum (63; Q6_K: `q6_scale`),
/// every quant `quant` (Q4_K/Q5_K 0..15 or 0..31 as stored; Q6_K the stored 0..63), d and dmin
/// 1 (f16 0x3C00).
std::vector<std::uint8_t> extreme_k_blocks(GgmlType type, std::size_t blocks, int quant,
                                           int q6_scale) {
  const auto one = [](std::size_t) { return kF16One; };
  return make_k_blocks(
      type, blocks, one, one,
      [&](std::size_t, int) { return type == GgmlType::Q6_K ? q6_scale : 63; },
      [](std::size_t, int) { return 63; }, [&](std::size_t, int) { return quant; });
}

}  // namespace

TEST_CASE(
    "int8_dot: Q4_K, Q5_K, Q6_K on every table, with and without the extension, against "
    "the weights decoded by hand, within the f32 roundings",
    "[gguf_quants]") {
  for (const Int8Variant& variant : int8_variants()) {
    for (const GgmlType type : int8_types_256) {
      SECTION(variant.name + " " + std::string(amc::to_string(type))) {
        const amc::Int8DotKernel kernel = variant.of(type);
        REQUIRE(kernel != nullptr);
        // Random blocks and activations, 1-8 super-blocks (each of the x86 kernels' four
        // accumulators and the NEON ones' two filled unevenly).
        for (const std::size_t blocks : {1, 2, 3, 5, 8}) {
          for (int round = 0; round < 4; ++round) {
            check_k_dot(type, random_k_blocks(type, blocks), random_k_activations(blocks), kernel,
                        variant.name + ", random");
          }
        }
        // The largest products: every scale, min and quant at its maximum (Q6_K also its most
        // negative weight, -32, with scale -128) against +-127, of one sign (the sum is then
        // its own magnitude, so the bound is relative) and of random signs. A 16-bit pair sum
        // that saturated, or a 32-bit one that wrapped, would be off by far more than the bound.
        const bool six = type == GgmlType::Q6_K;
        const int top = type == GgmlType::Q4_K ? 15 : type == GgmlType::Q5_K ? 31 : 63;
        std::uniform_int_distribution<int> sign(0, 1);
        for (const auto& [quant, q6_scale] :
             {std::pair{top, 127}, std::pair{six ? 0 : top, -128}, std::pair{0, six ? 127 : 63}}) {
          for (const int x_sign : {1, -1, 0}) {
            const std::size_t blocks = 3;
            const amc::Int8Activations x = make_activations(
                8 * blocks,
                [&](std::size_t, int) {
                  return x_sign != 0 ? 127 * x_sign : sign(rng()) ? 127 : -127;
                },
                [](std::size_t) { return 1.0f; });
            INFO("quants " << quant << ", Q6_K scales " << q6_scale << ", x sign " << x_sign);
            check_k_dot(type, extreme_k_blocks(type, blocks, quant, q6_scale), x, kernel,
                        variant.name + ", extremes");
          }
        }
      }
    }
  }
}

TEST_CASE("int8_dot_kernel: Q4_K, Q5_K, Q6_K through the public function", "[gguf_quants]") {
  INFO("kernel table: " << amc::kernels::active().name);
  for (const GgmlType type : int8_types_256) {
    for (const std::size_t blocks : {1, 4, 9}) {
      check_k_dot(type, random_k_blocks(type, blocks), random_k_activations(blocks),
                  amc::int8_dot_kernel(type), "amc::int8_dot_kernel");
    }
  }
}

TEST_CASE(
    "int8_dot: the k-quant kernels' integer sums are exact, every table equal to the scalar "
    "one",
    "[gguf_quants]") {
  // What is claimed: with power-of-two scales (d, dmin and d_x each 1/2, 1 or 2) every value a
  // kernel forms (d sc, its product with d_x, the integer sums, their products with the scales,
  // the min terms, every partial and the total sum) is a multiple of 1/4 no larger than M, so
  // when M < 2^24 / 4 (checked) every f32 operation is exact, whatever the order: each kernel
  // must then return the exact value, which needs its integer sums exact and each applied to
  // its own sub-block's and activation block's scales, and so equals the scalar table's bit for
  // bit. (With general scales the tables round differently: only the bound above holds.)
  const std::uint16_t d_bits[] = {kF16Half, kF16One, kF16Two};
  const float dx_values[] = {0.5f, 1.0f, 2.0f};
  std::uniform_int_distribution<int> pick(0, 2), six_bits(0, 63), q6_scale(-128, 127);
  for (const GgmlType type : int8_types_256) {
    const int top = type == GgmlType::Q4_K ? 15 : type == GgmlType::Q5_K ? 31 : 63;
    std::uniform_int_distribution<int> w_quant(0, top);
    // Small activations keep M below the limit (Q6_K's scales reach 128: smaller still).
    const int x_top = type == GgmlType::Q6_K ? 3 : 6;
    std::uniform_int_distribution<int> x_quant(-x_top, x_top);
    for (const std::size_t blocks : {1, 2, 3}) {
      for (int round = 0; round < 4; ++round) {
        std::vector<std::uint16_t> d(blocks), dmin(blocks);
        std::vector<float> dx(8 * blocks);
        for (std::size_t b = 0; b < blocks; ++b) {
          d[b] = d_bits[pick(rng())];
          dmin[b] = d_bits[pick(rng())];
        }
        for (float& v : dx) v = dx_values[pick(rng())];
        // One sub-block in four at the 6-bit maximum, the rest random.
        const auto scale = [&](std::size_t, int j) {
          if (type == GgmlType::Q6_K)
            return j % 4 == 0 ? (j % 8 == 0 ? -128 : 127) : q6_scale(rng());
          return j % 4 == round % 4 ? 63 : six_bits(rng());
        };
        const std::vector<std::uint8_t> weights = make_k_blocks(
            type, blocks, [&](std::size_t b) { return d[b]; },
            [&](std::size_t b) { return dmin[b]; }, scale,
            [&](std::size_t, int j) { return j % 4 == (round + 1) % 4 ? 63 : six_bits(rng()); },
            [&](std::size_t, int) { return w_quant(rng()); });
        const amc::Int8Activations x = make_activations(
            8 * blocks, [&](std::size_t, int) { return x_quant(rng()); },
            [&](std::size_t b) { return dx[b]; });
        const KExpected want = k_expected(type, weights, x);
        INFO(amc::to_string(type) << " M " << want.magnitude);
        REQUIRE(want.magnitude < 0x1p22);
        const auto* in = reinterpret_cast<const std::byte*>(weights.data());
        const float scalar = table_named("scalar")->int8_dot[table_index(type)](x, in, blocks);
        INFO(amc::to_string(type) << ", " << blocks << " super-blocks: exact " << want.exact
                                  << ", scalar table " << scalar);
        CHECK(static_cast<double>(scalar) == want.exact);
        for (const Int8Variant& variant : int8_variants()) {
          INFO("kernels " << variant.name);
          CHECK(variant.of(type)(x, in, blocks) == scalar);
        }
      }
    }
  }
}

namespace {

/// quantize_activations' output with the scales as bit patterns (NaN compared exactly too).
struct Quantized {
  std::vector<std::int8_t> q;
  std::vector<std::uint32_t> scale;
  std::vector<std::int32_t> sum;
};

/// The documented arithmetic, written here again: per block of 32, d = max|x| / 127 and q =
/// std::round(x * (1 / d)); a block with a NaN or infinity: quants 0, scale the quiet NaN; a
/// block whose 1 / d is not finite (zeros, or max|x| so small that 1 / d overflows): quants 0,
/// scale 0.
Quantized reference_quantize(std::span<const float> x) {
  const std::size_t blocks = x.size() / 32;
  Quantized out{std::vector<std::int8_t>(x.size()), std::vector<std::uint32_t>(blocks),
                std::vector<std::int32_t>(blocks)};
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::span<const float> v = x.subspan(32 * b, 32);
    bool finite = true;
    float largest = 0.0f;
    for (const float value : v) {
      finite = finite && std::isfinite(value);
      largest = std::max(largest, std::abs(value));
    }
    const float d = largest / 127.0f;
    const float inverse = 1.0f / d;
    if (!finite) {
      out.scale[b] = std::bit_cast<std::uint32_t>(std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    if (!std::isfinite(inverse)) continue;  // scale +0, quants 0
    out.scale[b] = std::bit_cast<std::uint32_t>(d);
    for (std::size_t j = 0; j < 32; ++j) {
      const float q = std::round(v[j] * inverse);
      REQUIRE(std::abs(q) <= 127.0f);
      out.q[32 * b + j] = static_cast<std::int8_t>(q);
      out.sum[b] += out.q[32 * b + j];
    }
  }
  return out;
}

Quantized run_quantize(amc::weight_kernels::QuantizeKernel kernel, std::span<const float> x) {
  const std::size_t blocks = x.size() / 32;
  std::vector<float> scale(blocks, -1.0f);
  Quantized out{std::vector<std::int8_t>(x.size(), 99), std::vector<std::uint32_t>(blocks),
                std::vector<std::int32_t>(blocks, 99)};
  kernel(x.data(), blocks, out.q.data(), scale.data(), out.sum.data());
  for (std::size_t b = 0; b < blocks; ++b) out.scale[b] = std::bit_cast<std::uint32_t>(scale[b]);
  return out;
}

/// got == want bit for bit; on a difference, the first differing block with its values.
void check_same_quantized(const Quantized& got, const Quantized& want, std::span<const float> x) {
  for (std::size_t b = 0; b < want.scale.size(); ++b) {
    const bool same =
        got.scale[b] == want.scale[b] && got.sum[b] == want.sum[b] &&
        std::equal(want.q.begin() + 32 * b, want.q.begin() + 32 * (b + 1), got.q.begin() + 32 * b);
    if (same) continue;
    std::ostringstream values;
    for (std::size_t j = 0; j < 32; ++j) {
      values << "\n  x " << std::hexfloat << x[32 * b + j] << std::defaultfloat << ": q "
             << int{got.q[32 * b + j]} << ", want " << int{want.q[32 * b + j]};
    }
    FAIL_CHECK("block " << b << ": scale 0x" << std::hex << got.scale[b] << ", want 0x"
                        << want.scale[b] << std::dec << "; sum " << got.sum[b] << ", want "
                        << want.sum[b] << values.str());
    return;
  }
  SUCCEED(want.scale.size() << " blocks the same");
}

/// A value v with v * inverse == target exactly in f32, searched within a few ulps of
/// target / inverse; target / inverse itself when there is none.
float value_giving(float target, float inverse) {
  const float guess = target / inverse;
  float up = guess, down = guess;
  for (int step = 0; step < 8; ++step) {
    if (up * inverse == target) return up;
    if (down * inverse == target) return down;
    up = std::nextafter(up, std::numeric_limits<float>::infinity());
    down = std::nextafter(down, -std::numeric_limits<float>::infinity());
  }
  return guess;
}

/// Blocks whose values times 1 / d land exactly on the roundings' edges: ties k + 1/2 (away
/// from zero), their neighbours one ulp either side (0.49999997 must give 0, not 1), both
/// signs. With d a power of two (max|x| = 127 2^k), and with random d.
std::vector<float> tie_blocks() {
  std::vector<float> x;
  std::uniform_int_distribution<int> k(-127, 126), exponent(-20, 20);
  std::uniform_real_distribution<float> largest(1e-3f, 1e3f);
  const float specials[] = {0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 126.5f, -126.5f};
  for (int block = 0; block < 64; ++block) {
    const float big = block % 2 == 0 ? std::ldexp(127.0f, exponent(rng())) : largest(rng());
    const float inverse = 1.0f / (big / 127.0f);
    x.push_back(block % 4 < 2 ? big : -big);
    for (int j = 1; j < 32; ++j) {
      float target = j <= 8 ? specials[j - 1] : static_cast<float>(k(rng())) + 0.5f;
      if (j % 3 == 1) target = std::nextafter(target, 0.0f);
      if (j % 3 == 2 && j > 8) target = std::nextafter(target, 2.0f * target);
      x.push_back(value_giving(target, inverse));
    }
  }
  return x;
}

/// Blocks at the edges: zeros of both signs, NaN (quiet, signalling, negative) and infinities
/// in every position, the largest and smallest magnitudes, subnormals, max|x| at every power of
/// two and on either side of the smallest block that still has a finite 1 / d.
std::vector<float> edge_blocks() {
  const float inf = std::numeric_limits<float>::infinity();
  const float max = std::numeric_limits<float>::max();
  std::uniform_real_distribution<float> fraction(-1.0f, 1.0f);
  std::vector<float> x;
  // A block of fraction * scale values with `special` at position `at` (none when at >= 32).
  const auto block = [&](float scale, float special, int at) {
    for (int j = 0; j < 32; ++j) x.push_back(j == at ? special : fraction(rng()) * scale);
  };
  x.insert(x.end(), 32, 0.0f);
  x.insert(x.end(), 32, -0.0f);
  for (int j = 0; j < 32; ++j) x.push_back(j % 3 == 0 ? -0.0f : 0.0f);
  for (const float special :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
        std::bit_cast<float>(0x7F800001u), inf, -inf}) {
    for (const int at : {0, 3, 7, 8, 15, 16, 30, 31}) block(2.0f, special, at);
  }
  for (const int at : {0, 13, 31}) {
    block(max, max, at);
    block(max, -max, at);
    block(1.0f, max, at);  // every other value rounds to 0
  }
  for (int e = -149; e <= 127; ++e) block(std::ldexp(1.0f, e), std::ldexp(1.0f, e), e & 31);
  // Subnormal values only.
  for (int b = 0; b < 4; ++b) {
    for (int j = 0; j < 32; ++j) {
      const auto bits = static_cast<std::uint32_t>(rng()() & 0x807FFFFFu);
      x.push_back(std::bit_cast<float>(bits));
    }
  }
  // The smallest max|x| whose 1 / (max|x| / 127) is finite, by bisection over the bit patterns
  // (monotonic for positive floats), and its neighbours.
  std::uint32_t low = 1, high = 0x3F800000u;  // not finite at low, finite at high
  while (high - low > 1) {
    const std::uint32_t mid = low + (high - low) / 2;
    (std::isfinite(1.0f / (std::bit_cast<float>(mid) / 127.0f)) ? high : low) = mid;
  }
  for (std::uint32_t bits = high - 2; bits <= high + 2; ++bits) {
    block(std::bit_cast<float>(bits), std::bit_cast<float>(bits), static_cast<int>(bits & 31));
    block(std::bit_cast<float>(bits), -std::bit_cast<float>(bits), 5);
  }
  return x;
}

/// Random blocks: uniform, or magnitudes spread over many binades with random signs and a few
/// zeros.
std::vector<float> random_activations(std::size_t n, bool wide) {
  std::vector<float> x(n);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f), mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-40, 40), sign(0, 1), zero(0, 50);
  for (float& v : x) {
    if (!wide) {
      v = uniform(rng());
    } else {
      v = zero(rng()) == 0 ? 0.0f : std::ldexp(mantissa(rng()), exponent(rng()));
      if (sign(rng()) != 0) v = -v;
    }
  }
  return x;
}

}  // namespace

TEST_CASE("quantize_activations: every table bit for bit as the reference, ties and edges too",
          "[gguf_quants]") {
  std::vector<std::pair<std::string, std::vector<float>>> inputs = {{"ties", tie_blocks()},
                                                                    {"edges", edge_blocks()}};
  for (const std::size_t blocks : {1, 2, 3, 18, 48, 37}) {
    inputs.emplace_back("uniform, " + std::to_string(blocks) + " blocks",
                        random_activations(32 * blocks, false));
    inputs.emplace_back("wide, " + std::to_string(blocks) + " blocks",
                        random_activations(32 * blocks, true));
  }
  for (const auto& [what, x] : inputs) {
    INFO(what);
    const Quantized want = reference_quantize(x);
    // Misaligned as well: the input one float into a buffer.
    std::vector<float> shifted(x.size() + 1);
    std::copy(x.begin(), x.end(), shifted.begin() + 1);
    for (const WeightKernelTable* table : amc::weight_kernels::available_tables()) {
      INFO("table " << table->name);
      check_same_quantized(run_quantize(table->quantize, x), want, x);
      check_same_quantized(run_quantize(table->quantize, std::span(shifted).subspan(1)), want, x);
    }
    amc::Int8Activations q;
    amc::quantize_activations(x, q);
    Quantized api{q.q, std::vector<std::uint32_t>(q.blocks()), q.sum};
    for (std::size_t b = 0; b < q.blocks(); ++b)
      api.scale[b] = std::bit_cast<std::uint32_t>(q.scale[b]);
    check_same_quantized(api, want, x);
  }
}

TEST_CASE("the q8 names are deprecated aliases of the int8 ones", "[gguf_quants]") {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  static_assert(std::is_same_v<amc::Q8Activations, amc::Int8Activations>);
  static_assert(std::is_same_v<amc::Q8DotKernel, amc::Int8DotKernel>);
  static_assert(std::is_same_v<amc::Q8InterleavedKernel, amc::Int8InterleavedKernel>);
  for (const GgmlType type : int8_types) {
    CHECK(amc::q8_dot_kernel(type) == amc::int8_dot_kernel(type));
  }
  CHECK(amc::q8_interleaved_kernel(GgmlType::Q4_1) == amc::int8_interleaved_kernel(GgmlType::Q4_1));
  CHECK(amc::q8_interleaved_accelerated() == amc::int8_interleaved_accelerated());
#pragma GCC diagnostic pop
}

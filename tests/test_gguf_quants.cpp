// amc::dequantize against a reference written here from the block layouts (ggml-common.h)
// alone: plain loops that read each element's bits by hand and compute in double, where every
// value is exact (f16 scales times small integers, all multiples of 2^-24 below 2^27), so the
// one rounding to f32 is the only one. Random blocks (random bytes, so the f16 scales include
// subnormals, infinities and NaNs) and blocks whose scales are set to each extreme; the bf16
// output against amc::to_bf16 of the f32 output; the size checks. Run once per kernel table
// (tests/CMakeLists.txt: test_gguf_quants_scalar, _sse2, _avx2).
#include "amc/io/gguf_quants.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/storage.hpp"
#include "catch.hpp"

namespace {

using amc::GgmlType;

std::mt19937_64& rng() {
  static std::mt19937_64 engine(0x9915'0ddc'0de5ULL);
  return engine;
}

/// An f16 bit pattern as double, from the binary16 definition. NaN for every NaN pattern
/// (payloads are compared separately where they survive).
double f16_value(std::uint16_t bits) {
  const int sign = (bits >> 15) != 0 ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  if (exponent == 31)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

std::uint16_t u16_at(const std::vector<std::uint8_t>& b, std::size_t at) {
  return static_cast<std::uint16_t>(b[at] | (b[at + 1] << 8));
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
    case GgmlType::Q5_K: {
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
      return f16_value(u16_at(b, at)) * scale * q - f16_value(u16_at(b, at + 2)) * min;
    }
    case GgmlType::Q6_K: {
      const int half = e / 128, r = e % 128, k = r / 32, l = r % 32;
      const std::uint8_t low_byte = b[at + 64 * half + l + 32 * (k % 2)];
      const int low = k < 2 ? low_byte & 15 : low_byte >> 4;
      const int high = (b[at + 128 + 32 * half + l] >> (2 * k)) & 3;
      const int scale = static_cast<std::int8_t>(b[at + 192 + e / 16]);
      return f16_value(u16_at(b, at + 208)) * scale * ((low | (high << 4)) - 32);
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
      return {1, 1, {}};
  }
}

const GgmlType block_types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

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
  for (const GgmlType type : block_types) CHECK(amc::can_dequantize(type));
  CHECK(amc::can_dequantize(GgmlType::F32));
  CHECK(amc::can_dequantize(GgmlType::F16));
  CHECK(amc::can_dequantize(GgmlType::BF16));
  for (const GgmlType type : {GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q8_K,
                              GgmlType::IQ4_NL, GgmlType::I8, GgmlType::F64, GgmlType::TQ2_0}) {
    CHECK_FALSE(amc::can_dequantize(type));
  }
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
void check_dot(GgmlType type, std::size_t blocks, std::size_t offset,
               const std::vector<std::uint8_t>& buffer, int elements, int bytes,
               const std::function<double(std::size_t at, int e)>& value) {
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
  const float got = amc::quantized_dot(
      type, x, as_bytes(buffer, offset).first(blocks * static_cast<std::size_t>(bytes)));
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

TEST_CASE("quantize_activations: ggml's Q8 blocks, by hand", "[gguf_quants]") {
  std::vector<float> x(96);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (float& v : x) v = uniform(rng());
  for (int j = 32; j < 64; ++j) x[static_cast<std::size_t>(j)] = 0.0f;  // an all-zero block
  amc::Q8Activations q;
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
        amc::q8_dot_kernel(GgmlType::Q8_0)(q, reinterpret_cast<const std::byte*>(w.data()), 3)));
  }
  REQUIRE_THROWS_WITH(amc::quantize_activations(std::span(x).first(40), q),
                      AMC_CONTAINS("amc::quantize_activations: x holds 40 values"));
}

TEST_CASE("q8_dot: Q8_0, Q4_0, Q4_1 against the quantized activations' products in double",
          "[gguf_quants]") {
  INFO("kernel table: " << amc::kernels::active().name);
  for (const GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1}) {
    const Layout layout = layout_of(type);
    for (const std::size_t blocks : {std::size_t{1}, std::size_t{9}, std::size_t{48}}) {
      const std::vector<std::uint8_t> buffer = finite_blocks(type, 0, blocks);
      std::vector<float> x(blocks * 32);
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      for (float& v : x) v = uniform(rng());
      amc::Q8Activations q;
      amc::quantize_activations(x, q);
      // The products of the dequantized weights and the quantized activations, in double:
      // what every kernel computes exactly in integers and then scales in f32.
      double exact = 0.0, magnitude = 0.0;
      for (std::size_t b = 0; b < blocks; ++b) {
        for (int e = 0; e < 32; ++e) {
          const double p =
              reference(type, buffer, b * static_cast<std::size_t>(layout.bytes), e) *
              (static_cast<double>(q.q[32 * b + static_cast<std::size_t>(e)]) * q.scale[b]);
          exact += p;
          magnitude += std::abs(p);
        }
      }
      const float got =
          amc::q8_dot_kernel(type)(q, reinterpret_cast<const std::byte*>(buffer.data()), blocks);
      // A few f32 roundings per block's term (scales, offset) and the sum over blocks.
      const double bound = (static_cast<double>(blocks) + 16.0) * 0x1p-24 * magnitude;
      INFO(amc::to_string(type) << ", " << blocks << " blocks: got " << got << ", exact " << exact
                                << ", bound " << bound);
      CHECK(std::abs(static_cast<double>(got) - exact) <= bound);
    }
  }
  REQUIRE_THROWS_WITH(amc::q8_dot_kernel(GgmlType::Q6_K),
                      AMC_CONTAINS("amc::q8_dot_kernel: type Q6_K has no 8-bit activation kernel"));
}

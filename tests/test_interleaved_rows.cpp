// amc::interleave_rows and the interleaved int8 kernels (include/amc/io/gguf_quants.hpp) against a
// reference written here from ggml's block layouts: each row's blocks read by hand from the rows
// as stored (not from the interleaved bytes), the integer sums and the scaled terms in double.
// Every table's plain-loop kernel and, where the CPU has it, its extension kernel (AVX-512 VNNI)
// is called one by one; all must give the same bits, within the f32 bound of the exact sum.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "amc/error.hpp"
#include "amc/io/gguf_quants.hpp"
#include "catch.hpp"
#include "ggml_type_lists.hpp"
#include "ggml_types.hpp"  // src/: the tables' index of a type
#include "test_helpers.hpp"
#include "weight_kernels.hpp"  // src/: every table's kernels, called one by one

namespace {

using amc::GgmlType;

using amc::test::f16_value;

/// A finite f16 of magnitude 2^-10 .. 2^0 with a random sign and mantissa.
std::uint16_t random_f16(std::mt19937_64& rng) {
  const auto sign = static_cast<std::uint16_t>((rng() & 1) << 15);
  const auto exponent = static_cast<std::uint16_t>(5 + rng() % 11);  // 2^-10 .. 2^0
  return static_cast<std::uint16_t>(sign | (exponent << 10) | (rng() & 0x3FF));
}

struct Format {
  std::size_t block_bytes;  // ggml's
  std::size_t quants_at;    // first quant byte in a ggml block
};

Format format_of(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0:
      return {34, 2};
    case GgmlType::Q4_0:
      return {18, 2};
    default:
      return {20, 4};  // Q4_1
  }
}

/// `rows` rows of `blocks` random blocks of `type`, row after row as ggml stores them.
std::vector<std::byte> random_rows(GgmlType type, std::int64_t rows, std::size_t blocks,
                                   std::mt19937_64& rng) {
  const Format f = format_of(type);
  std::vector<std::byte> out(static_cast<std::size_t>(rows) * blocks * f.block_bytes);
  for (std::size_t b = 0; b < out.size() / f.block_bytes; ++b) {
    std::byte* block = out.data() + b * f.block_bytes;
    const std::uint16_t d = random_f16(rng), m = random_f16(rng);
    std::memcpy(block, &d, 2);
    if (type == GgmlType::Q4_1) std::memcpy(block + 2, &m, 2);
    for (std::size_t i = f.quants_at; i < f.block_bytes; ++i)
      block[i] = static_cast<std::byte>(rng() & 0xFF);
  }
  return out;
}

/// <x, row> in double from the row's ggml blocks: per block the exact integer sum S of the
/// weight's quants (Q4_0's minus 8, Q8_0's signed) times x's, then d_w d_x S (+ m_w d_x sum_x for
/// Q4_1); `magnitude` gets the sum of the terms' absolute values.
double reference_dot(GgmlType type, const std::byte* row, std::size_t blocks,
                     const amc::Int8Activations& x, double& magnitude) {
  const Format f = format_of(type);
  double total = 0.0;
  magnitude = 0.0;
  for (std::size_t b = 0; b < blocks; ++b) {
    const auto* block = reinterpret_cast<const std::uint8_t*>(row + b * f.block_bytes);
    std::int64_t s = 0;
    for (int e = 0; e < 32; ++e) {
      int w = 0;
      if (type == GgmlType::Q8_0) {
        // NOLINTNEXTLINE(bugprone-signed-char-misuse): Q8_0's quants are signed
        w = static_cast<std::int8_t>(block[2 + e]);
      } else {
        const std::uint8_t byte = block[f.quants_at + (e % 16)];
        w = e < 16 ? (byte & 15) : (byte >> 4);
        if (type == GgmlType::Q4_0) w -= 8;
      }
      s += static_cast<std::int64_t>(w) * x.q[32 * b + static_cast<std::size_t>(e)];
    }
    std::uint16_t d_bits = 0, m_bits = 0;
    std::memcpy(&d_bits, block, 2);
    std::memcpy(&m_bits, block + 2, 2);
    const double dx = x.scale[b];
    const double term = f16_value(d_bits) * dx * static_cast<double>(s);
    const double offset =
        type == GgmlType::Q4_1 ? f16_value(m_bits) * dx * static_cast<double>(x.sum[b]) : 0.0;
    total += term + offset;
    magnitude += std::fabs(term) + std::fabs(offset);
  }
  return total;
}

struct Variant {
  std::string name;
  amc::Int8InterleavedKernel kernel;
};

/// The entry of `type` in every table: its row of the library's table of types.
std::size_t table_index(GgmlType type) { return amc::row_index(*amc::find_ggml_type(type)); }

/// Every table's plain-loop kernel for `type`, and its extension kernel where the CPU runs it.
std::vector<Variant> variants(GgmlType type) {
  const std::size_t k = table_index(type);
  std::vector<Variant> out;
  for (const amc::weight_kernels::Table* table : amc::weight_kernels::available_tables()) {
    out.push_back({std::string(table->name), table->interleaved[k]});
    if (amc::weight_kernels::cpu_has_extension(*table) &&
        table->interleaved_extension[k] != nullptr) {
      out.push_back({std::string(table->name) + "+" + std::string(table->extension),
                     table->interleaved_extension[k]});
    }
  }
  INFO(amc::to_string(type));
  for (const Variant& v : out) REQUIRE(v.kernel != nullptr);
  return out;
}

}  // namespace

TEST_CASE("interleaved int8 kernels: every table's, against the rows' exact sums, the same bits",
          "[gguf_quants][interleaved]") {
  std::mt19937_64 rng(0x1e7e'a7edULL);
  for (const GgmlType type : amc::test::interleavable_types()) {
    const std::vector<Variant> kernels = variants(type);
    for (const std::int64_t rows : {1, 15, 16, 17, 40}) {
      for (const std::int64_t cols : {32, 96, 576}) {
        CAPTURE(amc::to_string(type), rows, cols);
        const auto blocks = static_cast<std::size_t>(cols / 32);
        const std::vector<std::byte> stored = random_rows(type, rows, blocks, rng);
        std::vector<float> xf(static_cast<std::size_t>(cols));
        std::normal_distribution<float> normal(0.0f, 2.0f);
        for (float& v : xf) v = normal(rng);
        amc::Int8Activations x;
        amc::quantize_activations(xf, x);
        std::vector<std::byte> packed(amc::interleaved_bytes(type, rows, cols));
        amc::interleave_rows(type, rows, cols, stored, packed);
        const std::size_t group_bytes = packed.size() / static_cast<std::size_t>((rows + 15) / 16);
        for (std::int64_t g = 0; g * 16 < rows; ++g) {
          std::vector<std::vector<float>> outs;
          for (const Variant& v : kernels) {
            std::vector<float> out(16, -1.0f);
            v.kernel(x, packed.data() + static_cast<std::size_t>(g) * group_bytes, blocks,
                     out.data());
            outs.push_back(out);
          }
          for (int lane = 0; lane < 16; ++lane) {
            const std::int64_t r = 16 * g + lane;
            CAPTURE(r);
            for (std::size_t k = 1; k < kernels.size(); ++k) {
              INFO(kernels[k].name << " against " << kernels[0].name);
              REQUIRE(std::bit_cast<std::uint32_t>(outs[k][lane]) ==
                      std::bit_cast<std::uint32_t>(outs[0][lane]));
            }
            if (r >= rows) {  // a padded row: zero scales, zero quants
              REQUIRE(outs[0][lane] == 0.0f);
              continue;
            }
            double magnitude = 0.0;
            const double exact = reference_dot(
                type,
                stored.data() + static_cast<std::size_t>(r) * blocks * format_of(type).block_bytes,
                blocks, x, magnitude);
            // Per block: d_w d_x rounded once, and one rounding per fused multiply-add into each
            // of the (at most two) chains, plus their final addition: within
            // (2 blocks + 4) u of the terms' absolute sum, u = 2^-24.
            const double bound = (2.0 * static_cast<double>(blocks) + 4.0) * 0x1p-24 * magnitude;
            REQUIRE(std::fabs(static_cast<double>(outs[0][lane]) - exact) <= bound);
          }
        }
      }
    }
  }
}

TEST_CASE("interleaved int8 kernels: the public choice follows the CPU's extension",
          "[gguf_quants][interleaved]") {
  for (const GgmlType type : amc::test::interleavable_types()) {
    const amc::Int8InterleavedKernel chosen = amc::int8_interleaved_kernel(type);
    bool found = false;
    for (const amc::weight_kernels::Table* table : amc::weight_kernels::available_tables()) {
      const std::size_t k = table_index(type);
      found = found || chosen == table->interleaved[k] || chosen == table->interleaved_extension[k];
    }
    CHECK(found);
  }
  // Accelerated exactly when some table's extension kernel runs on this CPU and was chosen.
  bool extension_chosen = false;
  for (const amc::weight_kernels::Table* table : amc::weight_kernels::available_tables()) {
    extension_chosen =
        extension_chosen || amc::int8_interleaved_kernel(GgmlType::Q4_1) ==
                                table->interleaved_extension[table_index(GgmlType::Q4_1)];
  }
  CHECK(amc::int8_interleaved_accelerated() == extension_chosen);
  CHECK(amc::can_interleave(GgmlType::Q4_1));
  CHECK(!amc::can_interleave(GgmlType::Q5_0));
  CHECK(!amc::can_interleave(GgmlType::F32));
}

TEST_CASE("interleave_rows: sizes and padding, and errors that name the argument",
          "[gguf_quants][interleaved]") {
  // One group of 16 rows takes the bytes of 16 rows' blocks; 17 rows take two groups.
  constexpr std::size_t kQ4_1Block = 20, kQ4_0Block = 18;  // ggml's block bytes
  CHECK(amc::interleaved_bytes(GgmlType::Q4_1, 16, 64) == kQ4_1Block * 16 * 2);
  CHECK(amc::interleaved_bytes(GgmlType::Q4_0, 17, 32) == kQ4_0Block * 2 * 16);
  CHECK(amc::interleaved_bytes(GgmlType::Q8_0, 0, 32) == 0);
  using Catch::Matchers::Contains;
  REQUIRE_THROWS_WITH(amc::interleaved_bytes(GgmlType::Q5_0, 16, 32),
                      Contains("amc::interleaved_bytes") && Contains("Q5_0"));
  REQUIRE_THROWS_WITH(amc::interleaved_bytes(GgmlType::Q4_1, 16, 48), Contains("cols is 48"));
  REQUIRE_THROWS_WITH(amc::interleaved_bytes(GgmlType::Q4_1, -1, 32), Contains("rows is -1"));
  std::vector<std::byte> rows(16 * kQ4_1Block), out(16 * kQ4_1Block);
  REQUIRE_NOTHROW(amc::interleave_rows(GgmlType::Q4_1, 16, 32, rows, out));
  REQUIRE_THROWS_WITH(amc::interleave_rows(GgmlType::Q4_1, 15, 32, rows, out),
                      Contains("amc::interleave_rows") && Contains("blocks holds 320 bytes"));
  std::vector<std::byte> short_out(16 * kQ4_1Block - 1);
  REQUIRE_THROWS_WITH(amc::interleave_rows(GgmlType::Q4_1, 16, 32, rows, short_out),
                      Contains("out holds 319 bytes"));
  REQUIRE_THROWS_WITH(amc::int8_interleaved_kernel(GgmlType::Q6_K),
                      Contains("amc::int8_interleaved_kernel") && Contains("Q6_K"));
}

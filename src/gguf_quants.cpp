// Dequantization of ggml types: argument checks and the choice of kernel table. The loops are
// in gguf_quants_kernels.hpp, compiled once per instruction set.
#include "amc/io/gguf_quants.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "gguf_quants_registry.hpp"

namespace amc {
namespace {

std::optional<dequant::Kind> kind_of(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return dequant::Kind::F32;
    case GgmlType::F16:
      return dequant::Kind::F16;
    case GgmlType::BF16:
      return dequant::Kind::BF16;
    case GgmlType::Q4_0:
      return dequant::Kind::Q4_0;
    case GgmlType::Q4_1:
      return dequant::Kind::Q4_1;
    case GgmlType::Q5_0:
      return dequant::Kind::Q5_0;
    case GgmlType::Q5_1:
      return dequant::Kind::Q5_1;
    case GgmlType::Q8_0:
      return dequant::Kind::Q8_0;
    case GgmlType::Q4_K:
      return dequant::Kind::Q4_K;
    case GgmlType::Q5_K:
      return dequant::Kind::Q5_K;
    case GgmlType::Q6_K:
      return dequant::Kind::Q6_K;
    default:
      return std::nullopt;
  }
}

/// The table of the instruction set the operators use (amc::kernels::active(), which honours
/// AMC_KERNELS); SSE2 uses the baseline build, which the compiler vectorises for it.
const dequant::DequantTable& choose_table() {
  const std::string_view active = kernels::active().name;
  for (const dequant::DequantTable* table : dequant::available_tables()) {
    if (table->name == active) return *table;
  }
  return dequant::dequant_scalar_table();
}

const dequant::DequantTable& table() {
  static const dequant::DequantTable& chosen = choose_table();
  return chosen;
}

/// Checks the arguments and returns the kernel index and the block count.
std::pair<std::size_t, std::size_t> check(GgmlType type, std::size_t in_bytes, std::size_t out_size,
                                          const char* out_type,
                                          const char* where = "amc::dequantize",
                                          const char* out_name = "the output") {
  const std::optional<dequant::Kind> kind = kind_of(type);
  const std::optional<GgmlTypeLayout> layout = ggml_type_layout(static_cast<std::uint32_t>(type));
  AMC_CHECK(kind.has_value() && layout.has_value(), where, "type ",
            layout ? std::string(layout->name)
                   : "number " + std::to_string(static_cast<std::uint32_t>(type)),
            " is not implemented (dequantize takes F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
            "Q4_K, Q5_K and Q6_K)");
  const auto block_elements = static_cast<std::size_t>(layout->block_elements);
  const auto block_bytes = static_cast<std::size_t>(layout->block_bytes);
  AMC_CHECK(out_size % block_elements == 0, where, layout->name, ": ", out_name, " holds ",
            out_size, " ", out_type, " values, not a multiple of the block of ", block_elements,
            " elements");
  const std::size_t blocks = out_size / block_elements;
  // blocks * block_bytes cannot overflow: it is at most 4 bytes per element (F32) of an
  // output that exists in memory.
  AMC_CHECK(in_bytes == blocks * block_bytes, where, layout->name, ": ", in_bytes,
            " bytes of blocks given but ", out_size, " elements need ", blocks, " blocks of ",
            block_bytes, " bytes = ", blocks * block_bytes);
  return {static_cast<std::size_t>(*kind), blocks};
}

}  // namespace

QuantizedDotKernel quantized_dot_kernel(GgmlType type) {
  const auto [kind, none] = check(type, 0, 0, "f32", "amc::quantized_dot_kernel");
  return table().dot[kind];
}

float quantized_dot(GgmlType type, std::span<const float> x, std::span<const std::byte> blocks) {
  const auto [kind, count] = check(type, blocks.size(), x.size(), "f32", "amc::quantized_dot", "x");
  return count == 0 ? 0.0f : table().dot[kind](x.data(), blocks.data(), count);
}

void quantize_activations(std::span<const float> x, Q8Activations& out) {
  AMC_CHECK(x.size() % 32 == 0, "amc::quantize_activations", "x holds ", x.size(),
            " values, not a multiple of the block of 32");
  const std::size_t blocks = x.size() / 32;
  out.q.resize(x.size());
  out.scale.resize(blocks);
  out.sum.resize(blocks);
  if (blocks == 0) return;
  table().quantize(x.data(), blocks, out.q.data(), out.scale.data(), out.sum.data());
}

Q8DotKernel q8_dot_kernel(GgmlType type) {
  constexpr const char* where = "amc::q8_dot_kernel";
  AMC_CHECK(type == GgmlType::Q8_0 || type == GgmlType::Q4_0 || type == GgmlType::Q4_1 ||
                type == GgmlType::Q5_0 || type == GgmlType::Q5_1 || type == GgmlType::Q4_K ||
                type == GgmlType::Q5_K || type == GgmlType::Q6_K,
            where, "type ", to_string(type),
            " has no 8-bit activation kernel (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K "
            "have)");
  const auto kind = static_cast<std::size_t>(*kind_of(type));
  static const bool extension = dequant::cpu_has_extension(table());
  if (extension && table().q8_dot_extension[kind] != nullptr) {
    return table().q8_dot_extension[kind];
  }
  return table().q8_dot[kind];
}

bool can_dequantize(GgmlType type) noexcept { return kind_of(type).has_value(); }

void dequantize(GgmlType type, std::span<const std::byte> blocks, std::span<float> out) {
  const auto [kind, count] = check(type, blocks.size(), out.size(), "f32");
  if (count == 0) return;
  table().to_f32[kind](blocks.data(), out.data(), count);
}

void dequantize(GgmlType type, std::span<const std::byte> blocks, std::span<bf16> out) {
  const auto [kind, count] = check(type, blocks.size(), out.size(), "bf16");
  if (count == 0) return;
  table().to_bf16[kind](blocks.data(), out.data(), count);
}

namespace dequant {

std::vector<const DequantTable*> available_tables() {
  std::vector<const DequantTable*> tables{&dequant_scalar_table()};
#if AMC_KERNELS_AVX2
  if (kernels::find("avx2") != nullptr) tables.push_back(&dequant_avx2_table());
#endif
#if AMC_KERNELS_AVX512
  if (kernels::find("avx512") != nullptr) tables.push_back(&dequant_avx512_table());
#endif
#if AMC_KERNELS_NEON
  if (kernels::find("neon") != nullptr) tables.push_back(&dequant_neon_table());
#endif
  return tables;
}

bool cpu_has_extension([[maybe_unused]] const DequantTable& table) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  // VNNI with 256-bit vectors (AVX512VL), which the avx512 table's Q8 kernels use.
  if (table.extension == "avx512vnni") {
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
  }
#endif
#if defined(__ARM_FEATURE_DOTPROD)
  if (table.extension == "dotprod") return true;  // the whole build requires it already
#elif defined(__aarch64__) && defined(__linux__)
  // Linux's hardware capability bit for the dot product (SDOT/UDOT): optional in Armv8.2
  // and 8.3, required from Armv8.4.
  if (table.extension == "dotprod") return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
  return false;
}

}  // namespace dequant
}  // namespace amc

namespace amc {
namespace {

/// The kind of an interleavable type, or amc::error "<where>: ..." naming it.
dequant::Kind interleaved_kind(GgmlType type, const char* where) {
  const std::optional<dequant::Kind> kind = kind_of(type);
  AMC_CHECK(kind.has_value() && dequant::interleavable(*kind), where, "type ", to_string(type),
            " cannot be interleaved (Q8_0, Q4_0 and Q4_1 can)");
  return *kind;
}

}  // namespace

bool can_interleave(GgmlType type) noexcept {
  const std::optional<dequant::Kind> kind = kind_of(type);
  return kind.has_value() && dequant::interleavable(*kind);
}

std::size_t interleaved_bytes(GgmlType type, std::int64_t rows, std::int64_t cols) {
  constexpr const char* where = "amc::interleaved_bytes";
  const dequant::Kind kind = interleaved_kind(type, where);
  AMC_CHECK(rows >= 0, where, "rows is ", rows, "; expected a count >= 0");
  AMC_CHECK(cols > 0 && cols % 32 == 0, where, "cols is ", cols,
            "; expected a positive multiple of the block of 32");
  const auto groups = static_cast<std::size_t>((rows + kInterleavedRows - 1) / kInterleavedRows);
  return groups * static_cast<std::size_t>(cols / 32) * dequant::interleaved_block_bytes(kind);
}

void interleave_rows(GgmlType type, std::int64_t rows, std::int64_t cols,
                     std::span<const std::byte> blocks, std::span<std::byte> out) {
  constexpr const char* where = "amc::interleave_rows";
  const dequant::Kind kind = interleaved_kind(type, where);
  const std::size_t expected_out = interleaved_bytes(type, rows, cols);  // checks rows and cols
  const auto per_row = static_cast<std::size_t>(cols / 32);
  const auto block_bytes =
      static_cast<std::size_t>(ggml_type_layout(static_cast<std::uint32_t>(type))->block_bytes);
  const std::size_t row_bytes = per_row * block_bytes;
  AMC_CHECK(blocks.size() == static_cast<std::size_t>(rows) * row_bytes, where, to_string(type),
            ": blocks holds ", blocks.size(), " bytes, but ", rows, " rows of ", cols,
            " values are ", static_cast<std::size_t>(rows) * row_bytes);
  AMC_CHECK(out.size() == expected_out, where, to_string(type), ": out holds ", out.size(),
            " bytes; expected interleaved_bytes = ", expected_out);
  std::fill(out.begin(), out.end(), std::byte{0});  // the padded rows of a last partial group
  const std::size_t group_block = dequant::interleaved_block_bytes(kind);
  const std::size_t quants = dequant::interleaved_quants_offset(kind);
  const std::size_t words = kind == dequant::Kind::Q8_0 ? 8 : 4;        // 4-byte words per row
  const std::size_t quant_first = kind == dequant::Kind::Q4_1 ? 4 : 2;  // in a ggml block
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto lane = static_cast<std::size_t>(r % kInterleavedRows);
    std::byte* group =
        out.data() + static_cast<std::size_t>(r / kInterleavedRows) * per_row * group_block;
    const std::byte* row = blocks.data() + static_cast<std::size_t>(r) * row_bytes;
    for (std::size_t b = 0; b < per_row; ++b) {
      const std::byte* from = row + b * block_bytes;
      std::byte* to = group + b * group_block;
      std::memcpy(to + 2 * lane, from, 2);                                            // d
      if (kind == dequant::Kind::Q4_1) std::memcpy(to + 32 + 2 * lane, from + 2, 2);  // m
      for (std::size_t j = 0; j < words; ++j) {
        std::byte* word = to + quants + 64 * j + 4 * lane;
        std::memcpy(word, from + quant_first + 4 * j, 4);
        if (kind == dequant::Kind::Q8_0) {  // signed quants stored plus 128, unsigned
          for (int t = 0; t < 4; ++t) word[t] ^= std::byte{0x80};
        }
      }
    }
  }
}

Q8InterleavedKernel q8_interleaved_kernel(GgmlType type) {
  const auto kind = static_cast<std::size_t>(interleaved_kind(type, "amc::q8_interleaved_kernel"));
  if (q8_interleaved_accelerated()) return table().q8_rows_extension[kind];
  return table().q8_rows[kind];
}

bool q8_interleaved_accelerated() noexcept {
  static const bool accelerated =
      dequant::cpu_has_extension(table()) &&
      table().q8_rows_extension[static_cast<std::size_t>(dequant::Kind::Q4_1)] != nullptr;
  return accelerated;
}

}  // namespace amc

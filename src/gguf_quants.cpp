// The weight kernels' public functions: argument checks and the choice of kernel table. Which
// type has which kernel is its row of src/ggml_types.hpp; the kernels are in the
// weight_kernels_*.hpp headers, compiled once per instruction set (src/weight_kernels.hpp).
#include "amc/io/gguf_quants.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "ggml_types.hpp"
#include "weight_kernels.hpp"

namespace amc {
namespace {

/// The table of the instruction set the operators use (amc::kernels::active(), which honours
/// AMC_KERNELS); SSE2 uses the baseline build, which the compiler vectorises for it.
const weight_kernels::Table& choose_table() {
  const std::string_view active = kernels::active().name;
  for (const weight_kernels::Table* table : weight_kernels::available_tables()) {
    if (table->name == active) return *table;
  }
  return weight_kernels::scalar_table();
}

const weight_kernels::Table& table() {
  static const weight_kernels::Table& chosen = choose_table();
  return chosen;
}

/// The names of the rows that have `kernel`: "F32, F16, ...".
std::string names_with(GgmlTypeKernels kernel) {
  std::string names;
  for (const GgmlTypeRow& row : kGgmlTypes) {
    if (!row.has(kernel)) continue;
    if (!names.empty()) names += ", ";
    names += row.name;
  }
  return names;
}

/// "Q2_K", or "number 4" for a type without a row.
std::string type_name(GgmlType type) {
  const GgmlTypeRow* row = find_ggml_type(type);
  return row != nullptr ? std::string(row->name)
                        : "number " + std::to_string(static_cast<std::uint32_t>(type));
}

/// The row of `type` if it has `kernel`, else nullptr.
const GgmlTypeRow* row_with(GgmlType type, GgmlTypeKernels kernel) {
  const GgmlTypeRow* row = find_ggml_type(type);
  return row != nullptr && row->has(kernel) ? row : nullptr;
}

/// Checks the arguments and returns the kernel index and the block count.
std::pair<std::size_t, std::size_t> check(GgmlType type, std::size_t in_bytes, std::size_t out_size,
                                          const char* out_type,
                                          const char* where = "amc::dequantize",
                                          const char* out_name = "the output") {
  const GgmlTypeRow* row = row_with(type, kDequantize);
  AMC_CHECK(row != nullptr, where, "type ", type_name(type),
            " is not implemented (dequantize takes ", names_with(kDequantize), ")");
  const auto block_elements = static_cast<std::size_t>(row->block_elements);
  const auto block_bytes = static_cast<std::size_t>(row->block_bytes);
  AMC_CHECK(out_size % block_elements == 0, where, row->name, ": ", out_name, " holds ", out_size,
            " ", out_type, " values, not a multiple of the block of ", block_elements, " elements");
  const std::size_t blocks = out_size / block_elements;
  // blocks * block_bytes cannot overflow: it is at most 4 bytes per element (F32) of an
  // output that exists in memory.
  AMC_CHECK(in_bytes == blocks * block_bytes, where, row->name, ": ", in_bytes,
            " bytes of blocks given but ", out_size, " elements need ", blocks, " blocks of ",
            block_bytes, " bytes = ", blocks * block_bytes);
  return {row_index(*row), blocks};
}

}  // namespace

QuantizedDotKernel quantized_dot_kernel(GgmlType type) {
  const auto [index, none] = check(type, 0, 0, "f32", "amc::quantized_dot_kernel");
  return table().f32_dot[index];
}

float quantized_dot(GgmlType type, std::span<const float> x, std::span<const std::byte> blocks) {
  const auto [index, count] =
      check(type, blocks.size(), x.size(), "f32", "amc::quantized_dot", "x");
  return count == 0 ? 0.0f : table().f32_dot[index](x.data(), blocks.data(), count);
}

void quantize_activations(std::span<const float> x, Int8Activations& out) {
  AMC_CHECK(x.size() % 32 == 0, "amc::quantize_activations", "x holds ", x.size(),
            " values, not a multiple of the block of 32");
  const std::size_t blocks = x.size() / 32;
  out.q.resize(x.size());
  out.scale.resize(blocks);
  out.sum.resize(blocks);
  if (blocks == 0) return;
  table().quantize(x.data(), blocks, out.q.data(), out.scale.data(), out.sum.data());
}

bool has_int8_dot_kernel(GgmlType type) noexcept { return row_with(type, kInt8Dot) != nullptr; }

Int8DotKernel int8_dot_kernel(GgmlType type) {
  const GgmlTypeRow* row = row_with(type, kInt8Dot);
  AMC_CHECK(row != nullptr, "amc::int8_dot_kernel", "type ", type_name(type),
            " has no int8 activation kernel (", names_with(kInt8Dot), " have)");
  const std::size_t index = row_index(*row);
  static const bool extension = weight_kernels::cpu_has_extension(table());
  if (extension && table().int8_dot_extension[index] != nullptr) {
    return table().int8_dot_extension[index];
  }
  return table().int8_dot[index];
}

bool can_dequantize(GgmlType type) noexcept { return row_with(type, kDequantize) != nullptr; }

std::string dequantizable_type_names() { return names_with(kDequantize); }

void dequantize(GgmlType type, std::span<const std::byte> blocks, std::span<float> out) {
  const auto [index, count] = check(type, blocks.size(), out.size(), "f32");
  if (count == 0) return;
  table().to_f32[index](blocks.data(), out.data(), count);
}

void dequantize(GgmlType type, std::span<const std::byte> blocks, std::span<bf16> out) {
  const auto [index, count] = check(type, blocks.size(), out.size(), "bf16");
  if (count == 0) return;
  table().to_bf16[index](blocks.data(), out.data(), count);
}

namespace weight_kernels {

std::vector<const Table*> available_tables() {
  std::vector<const Table*> tables{&scalar_table()};
#if AMC_KERNELS_AVX2
  if (kernels::find("avx2") != nullptr) tables.push_back(&avx2_table());
#endif
#if AMC_KERNELS_AVX512
  if (kernels::find("avx512") != nullptr) tables.push_back(&avx512_table());
#endif
#if AMC_KERNELS_NEON
  if (kernels::find("neon") != nullptr) tables.push_back(&neon_table());
#endif
  return tables;
}

bool cpu_has_extension([[maybe_unused]] const Table& table) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  // VNNI with 256-bit vectors (AVX512VL), which the avx512 table's int8 kernels use.
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

}  // namespace weight_kernels
}  // namespace amc

namespace amc {
namespace {

/// The row of an interleavable type, or amc::error "<where>: ..." naming it.
const GgmlTypeRow& interleaved_row(GgmlType type, const char* where) {
  const GgmlTypeRow* row = row_with(type, kInterleaved);
  AMC_CHECK(row != nullptr, where, "type ", to_string(type), " cannot be interleaved (",
            names_with(kInterleaved), " can)");
  return *row;
}

}  // namespace

bool can_interleave(GgmlType type) noexcept { return row_with(type, kInterleaved) != nullptr; }

std::size_t interleaved_bytes(GgmlType type, std::int64_t rows, std::int64_t cols) {
  constexpr const char* where = "amc::interleaved_bytes";
  interleaved_row(type, where);
  AMC_CHECK(rows >= 0, where, "rows is ", rows, "; expected a count >= 0");
  AMC_CHECK(cols > 0 && cols % 32 == 0, where, "cols is ", cols,
            "; expected a positive multiple of the block of 32");
  const auto groups = static_cast<std::size_t>((rows + kInterleavedRows - 1) / kInterleavedRows);
  return groups * static_cast<std::size_t>(cols / 32) *
         weight_kernels::interleaved_block_bytes(type);
}

void interleave_rows(GgmlType type, std::int64_t rows, std::int64_t cols,
                     std::span<const std::byte> blocks, std::span<std::byte> out) {
  constexpr const char* where = "amc::interleave_rows";
  const GgmlTypeRow& row_type = interleaved_row(type, where);
  const std::size_t expected_out = interleaved_bytes(type, rows, cols);  // checks rows and cols
  const auto per_row = static_cast<std::size_t>(cols / 32);
  const auto block_bytes = static_cast<std::size_t>(row_type.block_bytes);
  const std::size_t row_bytes = per_row * block_bytes;
  AMC_CHECK(blocks.size() == static_cast<std::size_t>(rows) * row_bytes, where, to_string(type),
            ": blocks holds ", blocks.size(), " bytes, but ", rows, " rows of ", cols,
            " values are ", static_cast<std::size_t>(rows) * row_bytes);
  AMC_CHECK(out.size() == expected_out, where, to_string(type), ": out holds ", out.size(),
            " bytes; expected interleaved_bytes = ", expected_out);
  std::fill(out.begin(), out.end(), std::byte{0});  // the padded rows of a last partial group
  const std::size_t group_block = weight_kernels::interleaved_block_bytes(type);
  const std::size_t quants = weight_kernels::interleaved_quants_offset(type);
  const std::size_t words = type == GgmlType::Q8_0 ? 8 : 4;        // 4-byte words per row
  const std::size_t quant_first = type == GgmlType::Q4_1 ? 4 : 2;  // in a ggml block
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto lane = static_cast<std::size_t>(r % kInterleavedRows);
    std::byte* group =
        out.data() + static_cast<std::size_t>(r / kInterleavedRows) * per_row * group_block;
    const std::byte* row = blocks.data() + static_cast<std::size_t>(r) * row_bytes;
    for (std::size_t b = 0; b < per_row; ++b) {
      const std::byte* from = row + b * block_bytes;
      std::byte* to = group + b * group_block;
      std::memcpy(to + 2 * lane, from, 2);                                       // d
      if (type == GgmlType::Q4_1) std::memcpy(to + 32 + 2 * lane, from + 2, 2);  // m
      for (std::size_t j = 0; j < words; ++j) {
        std::byte* word = to + quants + 64 * j + 4 * lane;
        std::memcpy(word, from + quant_first + 4 * j, 4);
        if (type == GgmlType::Q8_0) {  // signed quants stored plus 128, unsigned
          for (int t = 0; t < 4; ++t) word[t] ^= std::byte{0x80};
        }
      }
    }
  }
}

Int8InterleavedKernel int8_interleaved_kernel(GgmlType type) {
  const std::size_t index = row_index(interleaved_row(type, "amc::int8_interleaved_kernel"));
  if (int8_interleaved_accelerated()) return table().interleaved_extension[index];
  return table().interleaved[index];
}

bool int8_interleaved_accelerated() noexcept {
  static const bool accelerated = [] {
    if (!weight_kernels::cpu_has_extension(table())) return false;
    for (const GgmlTypeRow& row : kGgmlTypes) {
      if (row.has(kInterleaved)) return table().interleaved_extension[row_index(row)] != nullptr;
    }
    return false;
  }();
  return accelerated;
}

}  // namespace amc

// libFuzzer target: the GGUF reader on arbitrary in-memory images.
//
// GgufFile::from_bytes must either refuse the image with amc::error or accept it; an accepted
// file must hand out only bytes inside the image (every tensor's bytes are read in full; ASan
// catches any read outside the buffer), keep the documented invariants (alignment, offsets,
// byte sizes from the layouts, find/at), answer every typed getter with a value or amc::error,
// and dequantize every tensor of a dequantizable type (up to 2^16 elements) to f32 and bf16.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "amc/error.hpp"
#include "amc/io/gguf.hpp"
#include "amc/io/gguf_quants.hpp"

namespace {

volatile std::uint8_t sink;  // keeps the reads below from being optimised away

void touch(std::span<const std::byte> bytes) {
  std::uint8_t acc = 0;
  for (const std::byte b : bytes)
    acc = static_cast<std::uint8_t>(acc ^ std::to_integer<std::uint8_t>(b));
  sink = acc;
}

template <class F>
void refused_or_done(const F& body) {
  try {
    body();
  } catch (const amc::error&) {
  }
}

void getters(const amc::GgufFile& file, const std::string& key) {
  refused_or_done([&] { sink = static_cast<std::uint8_t>(file.integer(key)); });
  refused_or_done([&] { sink = static_cast<std::uint8_t>(file.number(key) > 0); });
  refused_or_done([&] { sink = static_cast<std::uint8_t>(file.boolean(key)); });
  refused_or_done([&] { sink = static_cast<std::uint8_t>(file.string(key).size()); });
  refused_or_done([&] { sink = static_cast<std::uint8_t>(file.strings(key).size()); });
  refused_or_done([&] { sink = static_cast<std::uint8_t>(file.integers(key).size()); });
  refused_or_done(
      [&] { sink = static_cast<std::uint8_t>(file.optional_integer(key).has_value()); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> image(data, data + size);
  try {
    const amc::GgufFile file = amc::GgufFile::from_bytes(std::move(image), "fuzz");
    if (file.version() != 2 && file.version() != 3) std::abort();
    if (file.alignment() == 0 || (file.alignment() & (file.alignment() - 1)) != 0) std::abort();
    if (file.data_offset() > size || file.data_offset() % file.alignment() != 0) std::abort();
    for (const auto& [key, value] : file.metadata()) {
      if (file.find_value(key) != &value) std::abort();
      getters(file, key);
    }
    for (const amc::GgufTensorInfo& info : file.tensors()) {
      if (file.find(info.name) != &info || &file.at(info.name) != &info) std::abort();
      const auto layout = amc::ggml_type_layout(static_cast<std::uint32_t>(info.type));
      if (!layout || info.shape.empty() || info.shape.size() > 4) std::abort();
      if (info.byte_size != info.numel() / static_cast<std::uint64_t>(layout->block_elements) *
                                static_cast<std::uint64_t>(layout->block_bytes)) {
        std::abort();
      }
      if (info.offset % file.alignment() != 0 ||
          file.data_offset() + info.offset + info.byte_size > size) {
        std::abort();
      }
      const std::span<const std::byte> bytes = file.bytes(info);
      if (bytes.size() != info.byte_size) std::abort();
      touch(bytes);
      if (amc::can_dequantize(info.type) && info.numel() <= (1u << 16)) {
        std::vector<float> f32(static_cast<std::size_t>(info.numel()));
        std::vector<amc::bf16> b16(f32.size());
        amc::dequantize(info.type, bytes, f32);
        amc::dequantize(info.type, bytes, b16);
        // bf16 is to_bf16 of the f32 value, bit for bit, except that a NaN is only required
        // to stay NaN: its sign and payload are the arithmetic's, and LLVM leaves those of a
        // NaN result unspecified (two instantiations of one kernel may differ).
        for (std::size_t i = 0; i < f32.size(); ++i) {
          const bool nan16 = (b16[i].bits & 0x7FFFu) > 0x7F80u;
          if (f32[i] != f32[i] ? !nan16 : b16[i].bits != amc::to_bf16(f32[i]).bits) std::abort();
        }
      }
    }
  } catch (const amc::error&) {
    // refused: the expected outcome for almost every mutation
  }
  return 0;
}

// libFuzzer target: the safetensors reader on arbitrary in-memory images.
//
// SafetensorsFile::from_bytes must either refuse the image with amc::error or accept it; an
// accepted file must then hand out only bytes inside the image: every tensor is read in full
// through bytes(), to_f32() and the typed view data<T>() of its dtype (ASan catches any read
// outside the buffer). An accepted file must also survive the writer: serialize_safetensors()
// of its tensors and metadata reads back to the same tensors, offsets, bytes and metadata.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "amc/error.hpp"
#include "amc/io/safetensors.hpp"

namespace {

volatile std::uint8_t sink;  // keeps the reads below from being optimised away

void touch(std::span<const std::byte> bytes) {
  std::uint8_t acc = 0;
  for (const std::byte b : bytes)
    acc = static_cast<std::uint8_t>(acc ^ std::to_integer<std::uint8_t>(b));
  sink = acc;
}

template <class T>
void view(const amc::SafetensorsFile& file, const amc::TensorInfo& info) {
  try {
    const std::span<const T> values = file.data<T>(info.name);
    if (values.size() != info.numel()) std::abort();
    touch(std::as_bytes(values));
  } catch (const amc::error&) {
    // misaligned in memory: refused, as documented
  }
}

void view_typed(const amc::SafetensorsFile& file, const amc::TensorInfo& info) {
  using amc::Dtype;
  switch (info.dtype) {
    case Dtype::F32:
      view<float>(file, info);
      break;
    case Dtype::F64:
      view<double>(file, info);
      break;
    case Dtype::BF16:
      view<amc::bf16>(file, info);
      break;
    case Dtype::F16:
      view<amc::f16>(file, info);
      break;
    case Dtype::I8:
      view<std::int8_t>(file, info);
      break;
    case Dtype::U8:
      view<std::uint8_t>(file, info);
      break;
    case Dtype::I16:
      view<std::int16_t>(file, info);
      break;
    case Dtype::U16:
      view<std::uint16_t>(file, info);
      break;
    case Dtype::I32:
      view<std::int32_t>(file, info);
      break;
    case Dtype::U32:
      view<std::uint32_t>(file, info);
      break;
    case Dtype::I64:
      view<std::int64_t>(file, info);
      break;
    case Dtype::U64:
      view<std::uint64_t>(file, info);
      break;
    case Dtype::BOOL:
    case Dtype::F8_E5M2:
    case Dtype::F8_E4M3:
      break;
  }
  // A wrong type is always refused.
  if (info.dtype != Dtype::U8) {
    try {
      static_cast<void>(file.data<std::uint8_t>(info.name));
      std::abort();
    } catch (const amc::error&) {
    }
  }
}

void check_round_trip(const amc::SafetensorsFile& file) {
  std::vector<amc::TensorToWrite> tensors;
  for (const amc::TensorInfo& info : file.tensors()) {
    if (info.name.empty()) return;  // the writer refuses empty names (the reader accepts them)
    tensors.push_back({info.name, info.dtype, info.shape, file.bytes(info)});
  }
  const std::vector<std::uint8_t> image = amc::serialize_safetensors(tensors, file.metadata());
  const amc::SafetensorsFile again = amc::SafetensorsFile::from_bytes(image, "round trip");
  if (again.tensors().size() != file.tensors().size() || again.metadata() != file.metadata()) {
    std::abort();
  }
  for (std::size_t i = 0; i < file.tensors().size(); ++i) {
    const amc::TensorInfo& a = file.tensors()[i];
    const amc::TensorInfo& b = again.tensors()[i];
    const auto bytes_a = file.bytes(a), bytes_b = again.bytes(b);
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.begin != b.begin ||
        a.end != b.end || bytes_a.size() != bytes_b.size() ||
        (!bytes_a.empty() && std::memcmp(bytes_a.data(), bytes_b.data(), bytes_a.size()) != 0)) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> image(data, data + size);
  try {
    const amc::SafetensorsFile file = amc::SafetensorsFile::from_bytes(std::move(image), "fuzz");
    if (file.data_offset() > size) std::abort();
    std::uint64_t covered = 0;
    for (const amc::TensorInfo& info : file.tensors()) {
      // The documented invariants of an accepted file.
      if (info.begin != covered || info.end < info.begin) std::abort();
      if (info.byte_size() != info.numel() * amc::dtype_size(info.dtype)) std::abort();
      covered = info.end;
      if (file.find(info.name) == nullptr || &file.at(info.name) != file.find(info.name)) {
        std::abort();
      }
      const std::span<const std::byte> raw = file.bytes(info.name);
      if (raw.size() != info.byte_size()) std::abort();
      touch(raw);
      try {
        const std::vector<float> values = file.to_f32(info.name);
        if (values.size() != info.numel()) std::abort();
      } catch (const amc::error&) {
        // dtypes other than F32, BF16 and F16 are refused
      }
      view_typed(file, info);
    }
    if (file.data_offset() + covered != size) std::abort();
    for (const auto& [key, value] : file.metadata())
      sink = static_cast<std::uint8_t>(key.size() + value.size());
    check_round_trip(file);
  } catch (const amc::error&) {
    // refused: the expected outcome for almost every mutation
  }
  return 0;
}

// GGUF reader and writer: round trips of every value type (nested arrays too), versions 2 and
// 3, general.alignment, tensors of every known layout; hostile files built byte by byte here
// (independently of the writer), each refused with a message naming the field, the value and
// the byte offset; truncation at every byte of a small valid file; the typed getters.
#include "amc/io/gguf.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "amc/error.hpp"
#include "catch.hpp"

namespace {

namespace fs = std::filesystem;
using amc::GgmlType;
using amc::GgufArray;
using amc::GgufValue;
using amc::GgufValueType;
using Metadata = std::vector<std::pair<std::string, GgufValue>>;

GgufValue u(GgufValueType type, std::uint64_t value) { return {type, value}; }
GgufValue i(GgufValueType type, std::int64_t value) { return {type, value}; }
GgufValue f(GgufValueType type, double value) { return {type, value}; }
GgufValue b(bool value) { return {GgufValueType::boolean, value}; }
GgufValue s(std::string value) { return {GgufValueType::string, std::move(value)}; }
GgufValue array(GgufValueType element, std::vector<GgufValue> elements) {
  return {GgufValueType::array, GgufArray{element, std::move(elements)}};
}

/// A GGUF image assembled by hand, little-endian.
struct Image {
  std::vector<std::uint8_t> bytes;

  template <class T>
  Image& put(T value) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
    return *this;
  }
  Image& u32(std::uint32_t v) { return put(v); }
  Image& u64(std::uint64_t v) { return put(v); }
  Image& str(std::string_view text) {
    u64(text.size());
    bytes.insert(bytes.end(), text.begin(), text.end());
    return *this;
  }
  /// "GGUF", version, tensor count, metadata count.
  static Image header(std::uint64_t tensors, std::uint64_t entries, std::uint32_t version = 3) {
    Image image;
    image.bytes = {'G', 'G', 'U', 'F'};
    image.u32(version).u64(tensors).u64(entries);
    return image;
  }
  Image& pad(std::size_t alignment = 32) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    return *this;
  }
  Image& zeros(std::size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }
  /// One tensor info: dims innermost first, as in the file.
  Image& tensor(std::string_view name, std::vector<std::uint64_t> ne, std::uint32_t type,
                std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(ne.size()));
    for (const std::uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
};

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const amc::error& error) {
    return error.what();
  }
  return {};
}

/// from_bytes(image) must throw amc::error naming the source and containing every word.
void require_rejected(std::vector<std::uint8_t> image,
                      std::initializer_list<std::string_view> words) {
  INFO("expected: " << *words.begin());
  const std::string message =
      error_of([&] { static_cast<void>(amc::GgufFile::from_bytes(std::move(image), "bad.gguf")); });
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  CHECK(message.starts_with("amc::GgufFile::from_bytes: bad.gguf: "));
  for (const std::string_view word : words) {
    INFO("expected to contain: " << word);
    CHECK(message.find(word) != std::string::npos);
  }
}

void require_error(const std::function<void()>& body,
                   std::initializer_list<std::string_view> words) {
  const std::string message = error_of(body);
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  for (const std::string_view word : words) {
    INFO("expected to contain: " << word);
    CHECK(message.find(word) != std::string::npos);
  }
}

/// Every value type once, plus nested arrays.
Metadata all_value_types() {
  return {
      {"t.uint8", u(GgufValueType::uint8, 255)},
      {"t.int8", i(GgufValueType::int8, -128)},
      {"t.uint16", u(GgufValueType::uint16, 65535)},
      {"t.int16", i(GgufValueType::int16, -32768)},
      {"t.uint32", u(GgufValueType::uint32, 4294967295u)},
      {"t.int32", i(GgufValueType::int32, -2147483647 - 1)},
      {"t.uint64", u(GgufValueType::uint64, std::numeric_limits<std::uint64_t>::max())},
      {"t.int64", i(GgufValueType::int64, std::numeric_limits<std::int64_t>::min())},
      {"t.float32", f(GgufValueType::float32, 0.1f)},
      {"t.float64", f(GgufValueType::float64, 0.1)},
      {"t.bool", b(true)},
      {"t.string", s(std::string("caf\xc3\xa9 \x00 \xff", 10))},  // values are bytes
      {"t.empty_string", s("")},
      {"t.strings", array(GgufValueType::string, {s("a"), s(""), s("ccc")})},
      {"t.ints",
       array(GgufValueType::int32, {i(GgufValueType::int32, -1), i(GgufValueType::int32, 7)})},
      {"t.empty_array", array(GgufValueType::float32, {})},
      {"t.nested",
       array(GgufValueType::array,
             {array(GgufValueType::uint8, {u(GgufValueType::uint8, 1)}),
              array(GgufValueType::string, {}),
              array(GgufValueType::array, {array(GgufValueType::boolean, {b(false), b(true)})})})},
  };
}

void require_same(const GgufValue& a, const GgufValue& b) {
  REQUIRE(a.type == b.type);
  REQUIRE(a.value.index() == b.value.index());
  if (const auto* x = std::get_if<GgufArray>(&a.value)) {
    const auto& y = std::get<GgufArray>(b.value);
    REQUIRE(x->element_type == y.element_type);
    REQUIRE(x->elements.size() == y.elements.size());
    for (std::size_t k = 0; k < x->elements.size(); ++k)
      require_same(x->elements[k], y.elements[k]);
  } else if (const auto* v = std::get_if<std::uint64_t>(&a.value)) {
    REQUIRE(*v == std::get<std::uint64_t>(b.value));
  } else if (const auto* y = std::get_if<std::int64_t>(&a.value)) {
    REQUIRE(*y == std::get<std::int64_t>(b.value));
  } else if (const auto* z = std::get_if<double>(&a.value)) {
    REQUIRE(*z == std::get<double>(b.value));
  } else if (const auto* w = std::get_if<bool>(&a.value)) {
    REQUIRE(*w == std::get<bool>(b.value));
  } else {
    REQUIRE(std::get<std::string>(a.value) == std::get<std::string>(b.value));
  }
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> out(n);
  for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<std::byte>((k * 7 + seed) & 0xFF);
  return out;
}

/// A small valid file: two metadata entries, two tensors, alignment 32, the last tensor's
/// size a multiple of 32 (so that no trailing padding is optional: every prefix is truncated).
std::vector<std::uint8_t> small_file() {
  static const std::vector<std::byte> a = pattern(6 * 4, 1), c = pattern(8 * 4, 2);
  const Metadata metadata = {
      {"general.name", s("tiny")},
      {"tiny.list", array(GgufValueType::uint16, {u(GgufValueType::uint16, 3)})}};
  const std::vector<amc::GgufTensorToWrite> tensors = {{"a", GgmlType::F32, {2, 3}, a},
                                                       {"c", GgmlType::F32, {8}, c}};
  return amc::gguf_bytes(metadata, tensors);
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("amc_test_gguf_" + std::to_string(::getpid()) + "_" + name);
}

}  // namespace

TEST_CASE("gguf: layouts of the ggml types", "[gguf]") {
  const std::pair<GgmlType, std::pair<int, int>> expected[] = {
      {GgmlType::F32, {1, 4}},        {GgmlType::F16, {1, 2}},
      {GgmlType::BF16, {1, 2}},       {GgmlType::Q4_0, {32, 18}},
      {GgmlType::Q4_1, {32, 20}},     {GgmlType::Q5_0, {32, 22}},
      {GgmlType::Q5_1, {32, 24}},     {GgmlType::Q8_0, {32, 34}},
      {GgmlType::Q8_1, {32, 36}},     {GgmlType::Q2_K, {256, 84}},
      {GgmlType::Q3_K, {256, 110}},   {GgmlType::Q4_K, {256, 144}},
      {GgmlType::Q5_K, {256, 176}},   {GgmlType::Q6_K, {256, 210}},
      {GgmlType::Q8_K, {256, 292}},   {GgmlType::I8, {1, 1}},
      {GgmlType::I16, {1, 2}},        {GgmlType::I32, {1, 4}},
      {GgmlType::I64, {1, 8}},        {GgmlType::F64, {1, 8}},
      {GgmlType::IQ2_XXS, {256, 66}}, {GgmlType::IQ2_XS, {256, 74}},
      {GgmlType::IQ3_XXS, {256, 98}}, {GgmlType::IQ1_S, {256, 50}},
      {GgmlType::IQ4_NL, {32, 18}},   {GgmlType::IQ3_S, {256, 110}},
      {GgmlType::IQ2_S, {256, 82}},   {GgmlType::IQ4_XS, {256, 136}},
      {GgmlType::IQ1_M, {256, 56}},   {GgmlType::TQ1_0, {256, 54}},
      {GgmlType::TQ2_0, {256, 66}},
  };
  for (const auto& [type, sizes] : expected) {
    const auto layout = amc::ggml_type_layout(static_cast<std::uint32_t>(type));
    REQUIRE(layout.has_value());
    INFO(layout->name);
    CHECK(layout->name == amc::to_string(type));
    CHECK(layout->block_elements == sizes.first);
    CHECK(layout->block_bytes == sizes.second);
  }
  // ggml_types() lists exactly these, in ggml's order.
  std::vector<GgmlType> listed;
  for (const auto& [type, sizes] : expected) listed.push_back(type);
  std::sort(listed.begin(), listed.end());
  CHECK(std::vector<GgmlType>(amc::ggml_types().begin(), amc::ggml_types().end()) == listed);
  for (const std::uint32_t gone : {4u, 5u, 31u, 32u, 33u, 36u, 1000u}) {
    CHECK_FALSE(amc::ggml_type_layout(gone).has_value());
    CHECK(amc::to_string(static_cast<GgmlType>(gone)) == "unknown");
  }
  CHECK(amc::to_string(GgufValueType::boolean) == "bool");
  CHECK(amc::to_string(static_cast<GgufValueType>(13)) == "invalid");
}

TEST_CASE("gguf: every value type and nested arrays round-trip", "[gguf]") {
  const Metadata metadata = all_value_types();
  const std::vector<std::uint8_t> image = amc::gguf_bytes(metadata, {});
  const amc::GgufFile file = amc::GgufFile::from_bytes(image);
  CHECK(file.version() == 3);
  CHECK(file.alignment() == 32);
  CHECK(file.tensors().empty());
  REQUIRE(file.metadata().size() == metadata.size());
  for (std::size_t k = 0; k < metadata.size(); ++k) {
    INFO(metadata[k].first);
    CHECK(file.metadata()[k].first == metadata[k].first);  // file order kept
    if (metadata[k].first == "t.float32") {                // stored as float32: the double of 0.1f
      CHECK(std::get<double>(file.metadata()[k].second.value) == double{0.1f});
      continue;
    }
    require_same(file.metadata()[k].second, metadata[k].second);
  }
  CHECK(file.data_offset() == image.size());
  CHECK(file.data_offset() % 32 == 0);
}

TEST_CASE("gguf: version 2 reads as version 3", "[gguf]") {
  std::vector<std::uint8_t> image = small_file();
  image[4] = 2;
  const amc::GgufFile file = amc::GgufFile::from_bytes(image);
  CHECK(file.version() == 2);
  CHECK(file.string("general.name") == "tiny");
  CHECK(file.at("c").shape == std::vector<std::int64_t>{8});
}

TEST_CASE("gguf: tensors of every layout, shapes outermost first", "[gguf]") {
  std::vector<std::vector<std::byte>> storage;
  std::vector<amc::GgufTensorToWrite> tensors;
  for (std::uint32_t number = 0; number < 40; ++number) {
    const auto layout = amc::ggml_type_layout(number);
    if (!layout) continue;
    // [3, 2 blocks]: two blocks per row, three rows.
    const std::vector<std::int64_t> shape = {3, 2 * layout->block_elements};
    storage.push_back(pattern(static_cast<std::size_t>(6 * layout->block_bytes), number));
    tensors.push_back({std::string("t.") + std::string(layout->name), static_cast<GgmlType>(number),
                       shape, storage.back()});
  }
  tensors.push_back({"four_dims", GgmlType::F16, {5, 4, 3, 2}, {}});
  storage.push_back(pattern(2 * 120, 99));
  tensors.back().data = storage.back();
  for (const std::uint32_t alignment : {1u, 32u, 64u, 4096u}) {
    INFO("alignment " << alignment);
    const Metadata metadata = {{"general.alignment", u(GgufValueType::uint32, alignment)}};
    const fs::path path = temp_path("layouts.gguf");
    amc::write_gguf(path, metadata, tensors);
    const amc::GgufFile file = amc::GgufFile::open(path);
    fs::remove(path);
    CHECK(file.alignment() == alignment);
    CHECK(file.data_offset() % alignment == 0);
    REQUIRE(file.tensors().size() == tensors.size());
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      const amc::GgufTensorInfo& info = file.tensors()[k];
      INFO(info.name);
      CHECK(info.name == tensors[k].name);
      CHECK(info.type == tensors[k].type);
      CHECK(info.shape == tensors[k].shape);
      CHECK(info.offset % alignment == 0);
      CHECK(&file.at(info.name) == &info);
      const auto bytes = file.bytes(info);
      REQUIRE(bytes.size() == tensors[k].data.size());
      CHECK(std::memcmp(bytes.data(), tensors[k].data.data(), bytes.size()) == 0);
      // In memory too: the mapping is page-aligned, so file alignment is memory alignment.
      CHECK(reinterpret_cast<std::uintptr_t>(bytes.data()) % std::min(alignment, 4096u) == 0);
    }
  }
  // The file stores ggml's ne, innermost first.
  const std::vector<std::byte> data = pattern(2 * 64 * 4, 3);
  const std::vector<amc::GgufTensorToWrite> one = {{"w", GgmlType::F32, {2, 64}, data}};
  const std::vector<std::uint8_t> image = amc::gguf_bytes({}, one);
  const std::size_t dims_at = 24 + 8 + 1 + 4;  // header, name length, "w", dimension count
  std::uint64_t ne0 = 0, ne1 = 0;
  std::memcpy(&ne0, image.data() + dims_at, 8);
  std::memcpy(&ne1, image.data() + dims_at + 8, 8);
  CHECK(ne0 == 64);
  CHECK(ne1 == 2);
  const amc::GgufFile file = amc::GgufFile::from_bytes(image);
  CHECK(file.at("w").numel() == 128);
  CHECK(file.at("w").byte_size == 512);
}

TEST_CASE("gguf: a file cut short at any byte is refused", "[gguf]") {
  const std::vector<std::uint8_t> image = small_file();
  REQUIRE_NOTHROW(amc::GgufFile::from_bytes(image));
  for (std::size_t cut = 0; cut < image.size(); ++cut) {
    INFO("cut at " << cut << " of " << image.size());
    const std::string message = error_of([&] {
      static_cast<void>(amc::GgufFile::from_bytes(
          std::vector<std::uint8_t>(image.begin(), image.begin() + static_cast<long>(cut)), "cut"));
    });
    REQUIRE_FALSE(message.empty());
    CHECK(message.starts_with("amc::GgufFile::from_bytes: cut: "));
    CHECK(message.find("byte offset") != std::string::npos);
  }
}

TEST_CASE("gguf: header errors", "[gguf]") {
  require_rejected({'G', 'G', 'M', 'L', 3, 0, 0, 0},
                   {"not a GGUF file", "the magic is 'GGML'", "byte offset 0"});
  require_rejected({}, {"file truncated: the magic needs 4 bytes", "byte offset 0"});
  require_rejected(Image::header(0, 0, 1).pad().bytes,
                   {"GGUF version 1 is not supported", "32-bit", "byte offset 4"});
  require_rejected(Image::header(0, 0, 4).pad().bytes,
                   {"version 4 is not supported", "versions 2 and 3", "byte offset 4"});
  require_rejected(Image::header(0, 0, 0x03000000).pad().bytes,
                   {"version 50331648", "byte-swapped 3", "big-endian", "byte offset 4"});
  require_rejected(Image::header(std::uint64_t{1} << 60, 0).pad().bytes,
                   {"tensor count 1152921504606846976", "remaining 8 bytes", "byte offset 8"});
  require_rejected(Image::header(0, 1000).pad().bytes,
                   {"metadata count 1000", "remaining 8 bytes", "byte offset 16"});
  require_rejected(Image::header(0, 0).bytes,  // no padding before the data section
                   {"file truncated: the padding to the data section", "byte offset 24"});
  REQUIRE_NOTHROW(amc::GgufFile::from_bytes(Image::header(0, 0).pad().bytes));
}

TEST_CASE("gguf: metadata errors", "[gguf]") {
  const auto entry = [](std::string_view key, std::uint32_t type) {
    Image image = Image::header(0, 1);
    image.str(key).u32(type);
    return image;
  };
  require_rejected(entry("", 4).u32(1).pad().bytes,
                   {"metadata key of entry 0 is empty", "byte offset 24"});
  require_rejected(entry("bad\xff", 4).u32(1).pad().bytes,
                   {"metadata key 'bad\\xff' of entry 0 is not valid UTF-8", "byte offset 24"});
  require_rejected(Image::header(0, 1).u64(std::uint64_t{1} << 63).zeros(40).bytes,
                   {"metadata key of entry 0: string length 9223372036854775808 runs past the "
                    "end",
                    "byte offset 24"});
  require_rejected(entry("k", 13).zeros(8).pad().bytes,
                   {"metadata 'k': value type 13 is not a GGUF value type", "byte offset 33"});
  require_rejected(entry("k", 7).put<std::uint8_t>(2).pad().bytes,
                   {"metadata 'k': boolean byte 2 is neither 0 nor 1", "byte offset 37"});
  require_rejected(entry("k", 8).u64(1000).zeros(20).bytes,
                   {"metadata 'k': string length 1000 runs past the end", "byte offset 37"});
  require_rejected(
      entry("k", 9).u32(99).u64(0).pad().bytes,
      {"metadata 'k': array element type 99 is not a GGUF value type", "byte offset 37"});
  require_rejected(entry("k", 9).u32(4).u64(std::uint64_t{1} << 62).zeros(16).bytes,
                   {"metadata 'k': array length 4611686018427387904 of uint32 exceeds what the "
                    "remaining",
                    "at least 4 bytes each", "byte offset 41"});
  require_rejected(entry("k", 9).u32(8).u64(2).u64(1).put<char>('x').u64(5).zeros(3).bytes,
                   {"metadata 'k'[1]: string length 5 runs past the end"});
  require_rejected(entry("k", 4).zeros(1).bytes,
                   {"file truncated: metadata 'k' needs 4 bytes but the file ends after 1 more",
                    "byte offset 37"});
  {  // 9 levels of arrays; 8 are fine
    for (const int levels : {8, 9}) {
      Image image = entry("deep", 9);
      for (int level = 1; level < levels; ++level) image.u32(9).u64(1);
      image.u32(0).u64(0).pad();
      if (levels == 8) {
        REQUIRE_NOTHROW(amc::GgufFile::from_bytes(image.bytes));
      } else {
        require_rejected(image.bytes, {"metadata 'deep'[0][0][0][0][0][0][0][0]: arrays nested "
                                       "deeper than 8 levels"});
      }
    }
  }
  {  // duplicate key
    Image image = Image::header(0, 2);
    image.str("k").u32(4).u32(1).str("k").u32(4).u32(2).pad();
    require_rejected(image.bytes, {"duplicate metadata key 'k' (entry 1", "byte offset 41"});
  }
  // general.alignment of another type, zero, not a power of two.
  require_rejected(entry("general.alignment", 10).u64(32).pad().bytes,
                   {"general.alignment has type uint64, not uint32", "byte offset 53"});
  require_rejected(entry("general.alignment", 4).u32(48).pad().bytes,
                   {"general.alignment 48 is not a power of two", "byte offset 53"});
  require_rejected(entry("general.alignment", 4).u32(0).pad().bytes,
                   {"general.alignment 0 is not a power of two"});
}

TEST_CASE("gguf: tensor info errors", "[gguf]") {
  // One tensor, no metadata: the info starts at byte 24.
  const auto one = [](std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset,
                      std::size_t data) {
    Image image = Image::header(1, 0);
    image.tensor("w", std::move(ne), type, offset).pad().zeros(data);
    return image.bytes;
  };
  REQUIRE_NOTHROW(amc::GgufFile::from_bytes(one({4}, 0, 0, 16)));
  require_rejected(one({}, 0, 0, 16),
                   {"tensor 'w' (tensor 0): 0 dimensions, not 1 to 4", "byte offset 33"});
  require_rejected(one({1, 1, 1, 1, 1}, 0, 0, 16),
                   {"tensor 'w' (tensor 0): 5 dimensions, not 1 to 4", "byte offset 33"});
  require_rejected(
      one({4, 0}, 0, 0, 16),
      {"tensor 'w' (tensor 0): dimension ne[1] = 0 is outside [1, 2^62]", "byte offset 45"});
  require_rejected(one({(std::uint64_t{1} << 62) + 1}, 0, 0, 16),
                   {"dimension ne[0] = 4611686018427387905 is outside [1, 2^62]"});
  require_rejected(
      one({std::uint64_t{1} << 31, std::uint64_t{1} << 31, std::uint64_t{1} << 31}, 0, 0, 16),
      {"tensor 'w' (tensor 0): element count of shape [2147483648, 2147483648, "
       "2147483648] overflows int64",
       "byte offset 33"});
  require_rejected(one({std::uint64_t{1} << 62}, 0, 0, 16),
                   {"byte size of shape [4611686018427387904] of F32 overflows int64"});
  require_rejected(one({4}, 4, 0, 16),
                   {"tensor 'w' (tensor 0): unknown ggml type 4", "byte offset 45"});
  require_rejected(one({4}, 1000, 0, 16), {"unknown ggml type 1000"});
  require_rejected(one({33}, 2, 0, 64),
                   {"innermost dimension 33 of shape [33] is not a multiple of Q4_0's block of "
                    "32 elements"});
  require_rejected(one({4}, 0, 16, 64),
                   {"tensor 'w' (tensor 0): data offset 16 is not a multiple of the alignment "
                    "32",
                    "byte offset 49"});
  require_rejected(one({4}, 0, 32, 16),
                   {"tensor 'w' (tensor 0): data [32, 32 + 16) runs past the end of the 16-byte "
                    "data section",
                    "byte offset 49"});
  require_rejected(one({4}, 0, std::numeric_limits<std::uint64_t>::max() - 31, 16),
                   {"data [18446744073709551584, 18446744073709551584 + 16) runs past the end"});
  require_rejected(one({4}, 0, 0, 15), {"runs past the end of the 15-byte data section"});
  {  // overlap and duplicate names
    Image image = Image::header(2, 0);
    image.tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).pad().zeros(64);
    require_rejected(image.bytes, {"tensor 'b' (tensor 1): data [32, 48) overlaps tensor 'a' at "
                                   "[0, 64)"});
    Image twice = Image::header(2, 0);
    twice.tensor("a", {4}, 0, 0).tensor("a", {4}, 0, 32).pad().zeros(64);
    require_rejected(twice.bytes, {"duplicate tensor name 'a' (tensor 1", "byte offset 57"});
  }
  {  // a name past the end, and a name with unprintable bytes
    Image image = Image::header(1, 0);
    image.u64(100).zeros(40);
    require_rejected(image.bytes, {"the name of tensor 0: string length 100 runs past the end"});
    require_rejected(one({4}, 77, 0, 16), {"unknown ggml type 77"});
    Image odd = Image::header(1, 0);
    odd.tensor("w\n\xff", {4}, 1234, 0).pad().zeros(16);
    require_rejected(odd.bytes, {"tensor 'w\\x0a\\xff' (tensor 0): unknown ggml type 1234"});
  }
  {  // gaps, reverse order and bytes after the last tensor are accepted
    Image image = Image::header(2, 0);
    image.tensor("late", {4}, 0, 64).tensor("early", {4}, 0, 0).pad().zeros(200);
    const amc::GgufFile file = amc::GgufFile::from_bytes(image.bytes);
    CHECK(file.tensors()[0].name == "late");
    CHECK(file.at("late").offset == 64);
  }
}

TEST_CASE("gguf: typed getters", "[gguf]") {
  Metadata metadata = all_value_types();
  metadata.push_back({"t.big", u(GgufValueType::uint64, std::uint64_t{1} << 63)});
  metadata.push_back({"t.big_list", array(GgufValueType::uint64,
                                          {u(GgufValueType::uint64, 1),
                                           u(GgufValueType::uint64, std::uint64_t{1} << 63)})});
  const amc::GgufFile file = amc::GgufFile::from_bytes(amc::gguf_bytes(metadata, {}), "m.gguf");
  CHECK(file.integer("t.uint8") == 255);
  CHECK(file.integer("t.int8") == -128);
  CHECK(file.integer("t.uint32") == 4294967295);
  CHECK(file.integer("t.int64") == std::numeric_limits<std::int64_t>::min());
  CHECK(file.optional_integer("t.int16") == -32768);
  CHECK_FALSE(file.optional_integer("absent").has_value());
  CHECK(file.number("t.float64") == 0.1);
  CHECK(file.number("t.float32") == double{0.1f});
  CHECK(file.optional_number("t.float32") == double{0.1f});
  CHECK(file.boolean("t.bool"));
  CHECK(file.optional_boolean("t.bool") == true);
  CHECK_FALSE(file.optional_boolean("absent").has_value());
  CHECK(file.string("t.empty_string").empty());
  CHECK(file.optional_string("t.string") == std::string("caf\xc3\xa9 \x00 \xff", 10));
  CHECK(file.strings("t.strings") == std::vector<std::string>{"a", "", "ccc"});
  CHECK(file.integers("t.ints") == std::vector<std::int64_t>{-1, 7});
  CHECK(file.find_value("t.nested") != nullptr);
  CHECK(file.find_value("absent") == nullptr);

  require_error([&] { static_cast<void>(file.integer("absent")); },
                {"amc::GgufFile::integer: m.gguf: metadata 'absent' is missing (expected an "
                 "integer"});
  require_error([&] { static_cast<void>(file.integer("t.string")); },
                {"amc::GgufFile::integer: m.gguf: metadata 't.string' is string, expected an "
                 "integer (uint8, int8"});
  require_error([&] { static_cast<void>(file.integer("t.big")); },
                {"metadata 't.big' = 9223372036854775808 (uint64) exceeds the int64 range"});
  require_error([&] { static_cast<void>(file.optional_integer("t.float32")); },
                {"amc::GgufFile::optional_integer: m.gguf: metadata 't.float32' is float32"});
  require_error([&] { static_cast<void>(file.number("t.int32")); },
                {"amc::GgufFile::number: m.gguf: metadata 't.int32' is int32, expected float32 "
                 "or float64"});
  require_error([&] { static_cast<void>(file.boolean("t.uint8")); },
                {"metadata 't.uint8' is uint8, expected bool"});
  require_error([&] { static_cast<void>(file.optional_string("t.strings")); },
                {"metadata 't.strings' is array of string, expected string"});
  require_error([&] { static_cast<void>(file.strings("t.ints")); },
                {"amc::GgufFile::strings: m.gguf: metadata 't.ints' is array of int32, expected "
                 "array of string"});
  require_error([&] { static_cast<void>(file.integers("t.strings")); },
                {"metadata 't.strings' is array of string, expected array of an integer type"});
  require_error([&] { static_cast<void>(file.integers("t.big_list")); },
                {"metadata 't.big_list'[1] = 9223372036854775808 (uint64) exceeds the int64"});
  require_error([&] { static_cast<void>(file.at("nope")); },
                {"amc::GgufFile::at: m.gguf: no tensor named 'nope' among its 0 tensors"});
}

TEST_CASE("gguf: open, moves and I/O errors", "[gguf]") {
  const fs::path path = temp_path("small.gguf");
  const std::vector<std::uint8_t> image = small_file();
  {
    amc::GgufFile memory = amc::GgufFile::from_bytes(image);
    const std::vector<amc::GgufTensorToWrite> tensors = {
        {"a", GgmlType::F32, memory.at("a").shape, memory.bytes(memory.at("a"))},
        {"c", GgmlType::F32, memory.at("c").shape, memory.bytes(memory.at("c"))}};
    const Metadata metadata(memory.metadata().begin(), memory.metadata().end());
    amc::write_gguf(path, metadata, tensors);
  }
  amc::GgufFile file = amc::GgufFile::open(path);
  CHECK(file.source() == path.string());
  CHECK(fs::file_size(path) == image.size());  // write_gguf and gguf_bytes agree
  CHECK(file.at("a").shape == std::vector<std::int64_t>{2, 3});
  CHECK(file.bytes(file.at("c"))[5] == pattern(32, 2)[5]);
  amc::GgufFile moved = std::move(file);
  CHECK(moved.tensors().size() == 2);
  CHECK(file.tensors().empty());  // NOLINT(bugprone-use-after-move): documented state
  CHECK(file.metadata().empty());
  CHECK(file.find("a") == nullptr);
  file = std::move(moved);
  CHECK(file.string("general.name") == "tiny");
  fs::remove(path);

  require_error([&] { static_cast<void>(amc::GgufFile::open(path)); },
                {"amc::GgufFile::open: ", path.string(), ": cannot open: "});
  require_error([&] { static_cast<void>(amc::GgufFile::open(fs::temp_directory_path())); },
                {"amc::GgufFile::open: ", "not a regular file"});
  {  // a truncated file on disk: the message starts as documented for open
    const fs::path cut = temp_path("cut.gguf");
    std::FILE* out = std::fopen(cut.c_str(), "wb");
    REQUIRE(out != nullptr);
    std::fwrite(image.data(), 1, image.size() - 1, out);
    std::fclose(out);
    require_error([&] { static_cast<void>(amc::GgufFile::open(cut)); },
                  {"amc::GgufFile::open: " + cut.string() + ": ", "runs past the end"});
    fs::remove(cut);
  }
}

TEST_CASE("gguf: the writer refuses what the reader would", "[gguf]") {
  const std::vector<std::byte> data = pattern(64, 0);
  const auto write = [&](const Metadata& metadata, std::vector<amc::GgufTensorToWrite> tensors) {
    static_cast<void>(amc::gguf_bytes(metadata, tensors));
  };
  const std::span<const std::byte> sixteen(data.data(), 16);
  require_error(
      [&] {
        write({}, {{"w", GgmlType::F32, {5}, sixteen}});
      },
      {"amc::gguf_bytes: tensor 'w': 16 bytes given but shape [5] of F32 needs 20"});
  require_error(
      [&] {
        write({}, {{"w", GgmlType::F32, {4}, sixteen}, {"w", GgmlType::F32, {4}, sixteen}});
      },
      {"duplicate tensor name (tensor 'w')"});
  require_error(
      [&] {
        write({}, {{"w", static_cast<GgmlType>(4), {4}, sixteen}});
      },
      {"tensor 'w': unknown ggml type 4"});
  require_error(
      [&] {
        write({}, {{"w", GgmlType::F32, {}, sixteen}});
      },
      {"tensor 'w': shape [] has 0 dimensions"});
  require_error(
      [&] {
        write({}, {{"w", GgmlType::F32, {1, 1, 1, 1, 4}, sixteen}});
      },
      {"5 dimensions"});
  require_error(
      [&] {
        write({}, {{"w", GgmlType::F32, {4, 0}, sixteen}});
      },
      {"dimension 0 of shape [4, 0] is outside [1, 2^62]"});
  require_error(
      [&] {
        write({}, {{"w", GgmlType::Q4_0, {2, 16}, sixteen}});
      },
      {"innermost dimension 16 of shape [2, 16] is not a multiple of Q4_0's block"});
  require_error(
      [&] {
        write({{"k", u(GgufValueType::uint8, 256)}}, {});
      },
      {"metadata 'k' = 256 does not fit uint8"});
  require_error(
      [&] {
        write({{"k", i(GgufValueType::int16, 40000)}}, {});
      },
      {"metadata 'k' = 40000 does not fit int16"});
  require_error(
      [&] {
        write({{"k", i(GgufValueType::uint32, 1)}}, {});
      },
      {"metadata 'k' has type uint32 but holds no uint64_t"});
  require_error(
      [&] {
        write({{"k", GgufValue{static_cast<GgufValueType>(13), std::uint64_t{0}}}}, {});
      },
      {"metadata 'k' has value type invalid (13)"});
  require_error(
      [&] {
        write({{"k", array(GgufValueType::string, {s("a"), u(GgufValueType::uint8, 1)})}}, {});
      },
      {"metadata 'k'[1] has type uint8 in an array of string"});
  require_error([&] { write({{"k", s("a")}, {"k", s("b")}}, {}); }, {"duplicate metadata key 'k'"});
  require_error([&] { write({{"", s("a")}}, {}); }, {"metadata key is empty"});
  require_error(
      [&] {
        write({{"\xc0\x80", s("a")}}, {});
      },
      {"metadata key '\\xc0\\x80' is not valid UTF-8"});
  require_error(
      [&] {
        write({{"general.alignment", u(GgufValueType::uint32, 24)}}, {});
      },
      {"general.alignment 24 is not a uint32 power of two"});
  require_error(
      [&] {
        write({{"general.alignment", i(GgufValueType::int32, 32)}}, {});
      },
      {"general.alignment has type int32, not uint32"});
  {
    GgufValue deep = array(GgufValueType::uint8, {});
    for (int level = 1; level < 9; ++level) deep = array(GgufValueType::array, {deep});
    require_error([&] { write({{"deep", deep}}, {}); }, {"nests arrays deeper than 8 levels"});
  }
  const fs::path path = temp_path("refused.gguf");
  require_error(
      [&] {
        amc::write_gguf(path, {},
                        std::vector<amc::GgufTensorToWrite>{{"w", GgmlType::F32, {5}, sixteen}});
      },
      {"amc::write_gguf: tensor 'w'"});
  CHECK_FALSE(fs::exists(path));
}

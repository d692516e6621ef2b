// safetensors reader and writer: round trips, files from an independent writer, and one case
// per class of malformed file, each checked for the words that say what went wrong and where.
// Also the atomic file utility the writer (and the tools) write through.
#include "amc/io/safetensors.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amc/error.hpp"
#include "amc/io/atomic_file.hpp"
#include "amc/storage.hpp"
#include "catch.hpp"

namespace {

namespace fs = std::filesystem;

/// A file image with a declared header length, the header text as given (no padding) and
/// `data_size` data bytes (0, 1, 2, ... so that misplaced reads show).
std::vector<std::uint8_t> image_with_length(std::uint64_t declared_length, std::string_view header,
                                            std::size_t data_size = 0) {
  // Assembled as a string: GCC 12 at -O3 misreports vector::insert and memcpy here as overflows.
  std::string text(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) {
    text[i] = static_cast<char>((declared_length >> (8 * i)) & 0xFFu);  // little-endian
  }
  text += header;
  for (std::size_t i = 0; i < data_size; ++i) text += static_cast<char>(i & 0xFFu);
  std::vector<std::uint8_t> bytes(text.size());
  std::transform(text.begin(), text.end(), bytes.begin(),
                 [](char c) { return static_cast<std::uint8_t>(c); });
  return bytes;
}

std::vector<std::uint8_t> image(std::string_view header, std::size_t data_size = 0) {
  return image_with_length(header.size(), header, data_size);
}

/// The message of the amc::error `body` throws, or "" if it throws nothing. Any other
/// exception type escapes and fails the test: malformed input must surface as amc::error.
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const amc::error& error) {
    return error.what();
  }
  return {};
}

/// Requires that `body` throws amc::error whose message contains every one of `words`.
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

/// Requires from_bytes(`bytes`) to be refused with a message naming the source and `words`.
void require_rejected(std::vector<std::uint8_t> bytes,
                      std::initializer_list<std::string_view> words) {
  const std::string message =
      error_of([&] { amc::SafetensorsFile::from_bytes(std::move(bytes), "bad.safetensors"); });
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  CHECK(message.find("amc::SafetensorsFile::from_bytes: bad.safetensors: ") == 0);
  for (const std::string_view word : words) {
    INFO("expected to contain: " << word);
    CHECK(message.find(word) != std::string::npos);
  }
}

/// A fresh directory under the system temp directory, removed with its contents at scope end.
class TempDir {
 public:
  TempDir() {
    std::random_device random;
    path_ = fs::temp_directory_path() /
            ("amc_test_safetensors_" + std::to_string(random()) + std::to_string(random()));
    fs::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::size_t entries_in(const fs::path& directory) {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(directory)) ++count;
  return count;
}

/// Single-quoted for /bin/sh (unused when python3 was not found).
[[maybe_unused]] std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

template <class T>
T load(std::span<const std::byte> bytes, std::size_t index) {
  T value{};
  std::memcpy(&value, bytes.data() + index * sizeof(T), sizeof(T));
  return value;
}

/// The tensors of the round-trip tests and the arrays they borrow.
struct Sample {
  std::vector<float> f32{0.0f, -1.5f, 3.25f, 1e-3f, -0.0f, 123456.789f};
  std::vector<amc::bf16> bf16s;
  std::vector<amc::f16> f16s;
  std::vector<std::int32_t> i32{-7, 0, std::numeric_limits<std::int32_t>::max(),
                                std::numeric_limits<std::int32_t>::min()};
  std::vector<float> scalar{42.5f};
  std::vector<float> empty;
  std::vector<std::uint8_t> flags{1, 0, 1};
  std::vector<amc::TensorToWrite> tensors;
  std::map<std::string, std::string> metadata{{"format", "pt"}, {"note", "r\u00e9sum\u00e9 \"q\""}};

  Sample() {
    for (const float x : {1.0f, -2.0f, 0.5f, 3.140625f})
      bf16s.push_back(amc::from_float<amc::bf16>(x));
    for (const float x : {1.0f, -0.5f, 65504.0f, 6.1035156e-05f}) {
      f16s.push_back(amc::from_float<amc::f16>(x));
    }
    // Odd-sized BF16/F16 tensors first would misalign the F32 one; this order keeps every
    // typed view aligned, which the typed-view checks below rely on.
    tensors.push_back(amc::make_tensor_to_write<float>("layer.f32", {2, 3}, f32));
    tensors.push_back(amc::make_tensor_to_write<std::int32_t>("layer.i32", {2, 2}, i32));
    tensors.push_back(amc::make_tensor_to_write<amc::bf16>("layer.bf16", {4}, bf16s));
    tensors.push_back(amc::make_tensor_to_write<amc::f16>("layer.f16", {2, 2}, f16s));
    tensors.push_back(amc::make_tensor_to_write<float>("scalar", {}, scalar));
    tensors.push_back(amc::make_tensor_to_write<float>("empty", {0, 4}, empty));
    tensors.push_back(amc::TensorToWrite{
        "flags", amc::Dtype::BOOL, {3}, std::as_bytes(std::span<const std::uint8_t>(flags))});
  }
};

void check_sample(const amc::SafetensorsFile& file, const Sample& sample) {
  REQUIRE(file.tensors().size() == sample.tensors.size());
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < sample.tensors.size(); ++i) {
    const amc::TensorInfo& info = file.tensors()[i];
    CHECK(info.name == sample.tensors[i].name);  // file order is the order written
    CHECK(info.dtype == sample.tensors[i].dtype);
    CHECK(info.shape == sample.tensors[i].shape);
    CHECK(info.begin == offset);
    offset = info.end;
    CHECK(file.find(info.name) == &info);
  }
  CHECK(file.data_offset() % 8 == 0);
  CHECK(file.metadata() == sample.metadata);

  const std::span<const float> f32 = file.data<float>("layer.f32");
  CHECK(std::vector<float>(f32.begin(), f32.end()) == sample.f32);
  CHECK(std::signbit(f32[4]));
  CHECK(file.to_f32("layer.f32") == sample.f32);

  const std::span<const std::int32_t> i32 = file.data<std::int32_t>("layer.i32");
  CHECK(std::vector<std::int32_t>(i32.begin(), i32.end()) == sample.i32);

  const std::span<const amc::bf16> bf16s = file.data<amc::bf16>("layer.bf16");
  REQUIRE(bf16s.size() == 4);
  CHECK(bf16s[3].bits == sample.bf16s[3].bits);
  CHECK(file.to_f32("layer.bf16") == std::vector<float>{1.0f, -2.0f, 0.5f, 3.140625f});

  const std::span<const amc::f16> f16s = file.data<amc::f16>("layer.f16");
  REQUIRE(f16s.size() == 4);
  CHECK(f16s[2].bits == 0x7BFF);  // 65504, the largest finite f16
  CHECK(file.to_f32("layer.f16") == std::vector<float>{1.0f, -0.5f, 65504.0f, 6.1035156e-05f});

  const amc::TensorInfo& scalar = file.at("scalar");
  CHECK(scalar.shape.empty());
  CHECK(scalar.numel() == 1);
  CHECK(file.to_f32("scalar") == std::vector<float>{42.5f});

  const amc::TensorInfo& empty = file.at("empty");
  CHECK(empty.numel() == 0);
  CHECK(empty.byte_size() == 0);
  CHECK(file.data<float>("empty").empty());
  CHECK(file.to_f32("empty").empty());

  const std::span<const std::byte> flags = file.bytes("flags");
  REQUIRE(flags.size() == 3);
  CHECK(std::to_integer<int>(flags[0]) == 1);
  CHECK(std::to_integer<int>(flags[1]) == 0);
}

}  // namespace

TEST_CASE("dtype names, sizes and parsing", "[safetensors]") {
  using amc::Dtype;
  const std::array<std::pair<Dtype, std::size_t>, 15> sizes{{{Dtype::BOOL, 1},
                                                             {Dtype::U8, 1},
                                                             {Dtype::I8, 1},
                                                             {Dtype::F8_E5M2, 1},
                                                             {Dtype::F8_E4M3, 1},
                                                             {Dtype::I16, 2},
                                                             {Dtype::U16, 2},
                                                             {Dtype::F16, 2},
                                                             {Dtype::BF16, 2},
                                                             {Dtype::I32, 4},
                                                             {Dtype::U32, 4},
                                                             {Dtype::F32, 4},
                                                             {Dtype::F64, 8},
                                                             {Dtype::I64, 8},
                                                             {Dtype::U64, 8}}};
  for (const auto& [dtype, size] : sizes) {
    CHECK(amc::dtype_size(dtype) == size);
    CHECK(amc::parse_dtype(amc::to_string(dtype)) == dtype);
  }
  CHECK(amc::to_string(Dtype::F8_E4M3) == "F8_E4M3");
  CHECK_FALSE(amc::try_parse_dtype("bf16").has_value());  // the file spelling is upper case
  require_error([] { amc::parse_dtype("F128"); }, {"amc::parse_dtype", "unknown dtype 'F128'"});
  STATIC_REQUIRE(amc::dtype_of<amc::bf16> == Dtype::BF16);
  STATIC_REQUIRE(amc::dtype_of<std::uint16_t> == Dtype::U16);
}

TEST_CASE("round trip in memory", "[safetensors]") {
  const Sample sample;
  const std::vector<std::uint8_t> bytes =
      amc::serialize_safetensors(sample.tensors, sample.metadata);
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  CHECK(header_size % 8 == 0);
  CHECK(bytes[8] == '{');
  CHECK(bytes[8 + header_size - 1] == ' ');  // padded with spaces (the JSON is not 8k long)

  const amc::SafetensorsFile file = amc::SafetensorsFile::from_bytes(bytes);
  check_sample(file, sample);
  CHECK(file.source() == "<memory>");
}

TEST_CASE("names and metadata that need JSON escapes round trip", "[safetensors]") {
  const std::string name = "we\"ird\\name\n\t/\u00fc\u540d";
  const std::vector<std::int16_t> values{-3, 0, 32767};
  const std::array tensors{amc::make_tensor_to_write<std::int16_t>(name, {3}, std::span(values))};
  const std::map<std::string, std::string> metadata{{"k\"\n", "v\\\u0001"}, {"", ""}};
  const amc::SafetensorsFile file =
      amc::SafetensorsFile::from_bytes(amc::serialize_safetensors(tensors, metadata));
  REQUIRE(file.tensors().size() == 1);
  CHECK(file.tensors()[0].name == name);
  CHECK(file.metadata() == metadata);
  const std::span<const std::int16_t> read = file.data<std::int16_t>(name);
  CHECK(std::vector<std::int16_t>(read.begin(), read.end()) == values);
}

TEST_CASE("empty files: no tensors, metadata only", "[safetensors]") {
  const std::vector<std::uint8_t> none = amc::serialize_safetensors({});
  CHECK(none.size() == 16);  // "{}" padded to 8
  const amc::SafetensorsFile file = amc::SafetensorsFile::from_bytes(none);
  CHECK(file.tensors().empty());
  CHECK(file.metadata().empty());
  CHECK(file.find("x") == nullptr);

  const amc::SafetensorsFile only_metadata =
      amc::SafetensorsFile::from_bytes(image(R"({"__metadata__": {"a": "b"}})"));
  CHECK(only_metadata.metadata().at("a") == "b");
  CHECK(only_metadata.tensors().empty());
}

TEST_CASE("round trip through a file, atomic writes, moves", "[safetensors]") {
  const TempDir dir;
  const fs::path path = dir.path() / "model.safetensors";
  const Sample sample;
  amc::write_safetensors(path, sample.tensors, sample.metadata);
  CHECK(entries_in(dir.path()) == 1);  // no temporary file left behind
  CHECK(fs::file_size(path) == amc::serialize_safetensors(sample.tensors, sample.metadata).size());

  amc::SafetensorsFile file = amc::SafetensorsFile::open(path);
  CHECK(file.source() == path.string());
  check_sample(file, sample);

  SECTION("moves keep views valid and empty the source") {
    const float* first = file.data<float>("layer.f32").data();
    amc::SafetensorsFile moved = std::move(file);
    CHECK(moved.data<float>("layer.f32").data() == first);
    CHECK(file.tensors().empty());  // NOLINT(bugprone-use-after-move): documented empty state
    amc::SafetensorsFile assigned =
        amc::SafetensorsFile::from_bytes(amc::serialize_safetensors({}));
    assigned = std::move(moved);
    check_sample(assigned, sample);
  }

  SECTION("a refused write leaves the existing file untouched") {
    std::vector<amc::TensorToWrite> duplicate = sample.tensors;
    duplicate.push_back(duplicate.front());
    require_error([&] { amc::write_safetensors(path, duplicate); },
                  {"amc::write_safetensors", "duplicate tensor name", "'layer.f32'"});
    CHECK(entries_in(dir.path()) == 1);
    check_sample(amc::SafetensorsFile::open(path), sample);
  }

  SECTION("an existing file is replaced") {
    const std::vector<float> one{7.0f};
    const std::array tensors{amc::make_tensor_to_write<float>("only", {1}, std::span(one))};
    amc::write_safetensors(path, tensors);
    const amc::SafetensorsFile replaced = amc::SafetensorsFile::open(path);
    CHECK(replaced.tensors().size() == 1);
    CHECK(replaced.to_f32("only") == one);
    CHECK(entries_in(dir.path()) == 1);
  }
}

TEST_CASE("writer refuses bad input before writing anything", "[safetensors]") {
  const TempDir dir;
  const fs::path path = dir.path() / "out.safetensors";
  const std::vector<float> four{1, 2, 3, 4};
  const auto refuse = [&](const amc::TensorToWrite& tensor,
                          std::initializer_list<std::string_view> words) {
    const std::array tensors{tensor};
    require_error([&] { amc::serialize_safetensors(tensors); }, words);
    require_error([&] { amc::write_safetensors(path, tensors); }, words);
    CHECK(entries_in(dir.path()) == 0);
  };
  refuse(amc::make_tensor_to_write<float>("w", {5}, std::span(four)),
         {"tensor 'w' has 16 bytes but shape [5] of F32 needs 20"});
  refuse(amc::make_tensor_to_write<float>("w", {-1, 4}, std::span(four)),
         {"negative dimension -1", "tensor 'w'"});
  refuse(amc::make_tensor_to_write<float>("", {4}, std::span(four)), {"tensor name is empty"});
  refuse(amc::make_tensor_to_write<float>("__metadata__", {4}, std::span(four)), {"reserved"});
  refuse(amc::make_tensor_to_write<float>("w", {std::int64_t{1} << 62, 4}, std::span(four)),
         {"overflows the 64-bit element count", "tensor 'w'"});
  refuse(amc::make_tensor_to_write<float>("w", {std::int64_t{1} << 62}, std::span(four)),
         {"overflows the 64-bit byte count"});
  refuse(amc::make_tensor_to_write<float>("bad\xff", {4}, std::span(four)), {"not valid UTF-8"});

  const std::array tensors{amc::make_tensor_to_write<float>("w", {4}, std::span(four))};
  require_error(
      [&] { amc::write_safetensors(dir.path() / "missing" / "out.safetensors", tensors); },
      {"amc::write_safetensors", "cannot create temporary file"});
  require_error(
      [&] {
        amc::serialize_safetensors(tensors, {{"k", "\xc3"}});
      },
      {"metadata value for key 'k' is not valid UTF-8"});
}

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("atomic writes create and replace whole files and leave no temporary", "[atomic_file]") {
  const TempDir dir;
  const fs::path path = dir.path() / "table.csv";
  amc::write_file_atomically(path, "old\n");
  CHECK(read_text(path) == "old\n");
  CHECK(entries_in(dir.path()) == 1);
  amc::write_file_atomically(path, "new, longer\n");
  CHECK(read_text(path) == "new, longer\n");
  amc::write_file_atomically(path, "");
  CHECK(fs::file_size(path) == 0);
  CHECK(entries_in(dir.path()) == 1);

  SECTION("the target keeps its old content until commit; without commit nothing changes") {
    {
      amc::AtomicFile file(path);
      CHECK(file.target() == path);
      CHECK(file.temporary().parent_path() == dir.path());  // same file system: rename is atomic
      file.write("par");
      file.write(std::as_bytes(std::span("ts\n", 3)));
      CHECK(fs::exists(file.temporary()));
      CHECK(fs::file_size(path) == 0);
      file.commit();
      CHECK_FALSE(fs::exists(file.temporary()));
      require_error([&] { file.commit(); }, {"amc::AtomicFile", "committed twice"});
      require_error([&] { file.write("x"); }, {"amc::AtomicFile", "written after commit"});
    }
    CHECK(read_text(path) == "parts\n");
    {
      amc::AtomicFile abandoned(path, "amc::test");
      abandoned.write("never seen");
    }
    CHECK(read_text(path) == "parts\n");
    CHECK(entries_in(dir.path()) == 1);
  }

  SECTION("a bare file name is written in the current directory") {
    const fs::path previous = fs::current_path();
    fs::current_path(dir.path());
    amc::write_file_atomically("bare.txt", "here");
    fs::current_path(previous);
    CHECK(read_text(dir.path() / "bare.txt") == "here");
    CHECK(entries_in(dir.path()) == 2);
  }

  SECTION("rename_durably moves a file over another") {
    const fs::path drawn = dir.path() / "plot.png.tmp";
    std::ofstream(drawn) << "image";
    amc::rename_durably(drawn, path);
    CHECK(read_text(path) == "image");
    CHECK(entries_in(dir.path()) == 1);
    require_error([&] { amc::rename_durably(drawn, path); },
                  {"amc::rename_durably", path.string() + ": cannot rename " + drawn.string() +
                                              " over it: No such file or directory"});
  }
}

TEST_CASE("atomic writes refuse a missing directory and a directory in the way", "[atomic_file]") {
  const TempDir dir;
  const fs::path missing = dir.path() / "missing" / "out.txt";
  require_error(
      [&] { amc::write_file_atomically(missing, "x"); },
      {"amc::write_file_atomically: ", missing.string() + ": cannot create temporary file ",
       ": No such file or directory"});
  CHECK(entries_in(dir.path()) == 0);

  // The rename fails after the temporary was written: the directory stays, the temporary goes.
  const fs::path blocked = dir.path() / "blocked";
  fs::create_directories(blocked / "inside");
  require_error(
      [&] { amc::write_file_atomically(blocked, "x", "amc::caller"); },
      {"amc::caller: ", blocked.string() + ": cannot rename ", " over it: Is a directory"});
  CHECK(fs::is_directory(blocked / "inside"));
  CHECK(entries_in(dir.path()) == 1);
}

TEST_CASE("reads files from an independent writer (Python struct + json)", "[safetensors]") {
#ifndef AMC_PYTHON3
  WARN("python3 was not found at configure time: skipping the independent-writer check");
#else
  const TempDir dir;
  const std::string script = std::string(AMC_TEST_TOOLS_DIR) + "/write_safetensors.py";
  for (const bool padded : {true, false}) {
    const fs::path path = dir.path() / (padded ? "padded.safetensors" : "unpadded.safetensors");
    const std::string command = shell_quote(AMC_PYTHON3) + " " + shell_quote(script) + " " +
                                shell_quote(path.string()) + (padded ? "" : " --no-pad");
    INFO("command: " << command);
    REQUIRE(std::system(command.c_str()) == 0);

    const amc::SafetensorsFile file = amc::SafetensorsFile::open(path);
    std::vector<std::string> names;
    for (const amc::TensorInfo& info : file.tensors()) names.push_back(info.name);
    // Sorted by data offset, not by the (reversed) key order of the JSON header; the
    // zero-size tensor sorts before the tensor that starts at the same offset.
    CHECK(names == std::vector<std::string>{"d.i32", "a.f32", "b.bf16", "f.empty", "c.f16",
                                            "e.scalar", "g.i64", "h.\u540d\u524d"});
    CHECK(file.metadata() ==
          std::map<std::string, std::string>{{"format", "pt"}, {"writer", "python-struct"}});
    CHECK((file.data_offset() % 8 == 0) == padded);

    CHECK(file.to_f32("a.f32") == std::vector<float>{0.0f, 0.5f, 1.0f, 1.5f, -2.0f, 2.5f});
    CHECK(file.at("a.f32").shape == std::vector<std::int64_t>{2, 3});
    CHECK(file.to_f32("b.bf16") == std::vector<float>{1.0f, -2.5f, 0.15625f, 65536.0f});
    CHECK(file.to_f32("c.f16") == std::vector<float>{1.0f, -0.5f, 65504.0f});
    const std::span<const std::byte> ints = file.bytes("d.i32");
    CHECK(load<std::int32_t>(ints, 0) == -1);
    CHECK(load<std::int32_t>(ints, 3) == 4);
    CHECK(file.at("e.scalar").shape.empty());
    CHECK(load<double>(file.bytes("e.scalar"), 0) == 3.25);
    CHECK(load<std::int64_t>(file.bytes("g.i64"), 0) == -(std::int64_t{1} << 40));
    CHECK(file.at("f.empty").shape == std::vector<std::int64_t>{0, 5});
    CHECK(file.bytes("f.empty").empty());
    CHECK(file.at("h.\u540d\u524d").byte_size() == 3);

    if (padded) {
      // d.i32 starts the 8-aligned data buffer; e.scalar starts at data byte 54.
      CHECK(file.data<std::int32_t>("d.i32")[1] == 2);
      require_error(
          [&] { file.data<double>("e.scalar"); },
          {"tensor 'e.scalar'", "not aligned to 8 bytes for double", "use bytes() and copy"});
    }
  }
#endif
}

TEST_CASE("files amc writes pass an independent reader (Python struct + json)", "[safetensors]") {
#ifndef AMC_PYTHON3
  WARN("python3 was not found at configure time: skipping the independent-reader check");
#else
  const TempDir dir;
  const fs::path path = dir.path() / "amc.safetensors";
  const fs::path described = dir.path() / "described.txt";
  const Sample sample;
  amc::write_safetensors(path, sample.tensors, sample.metadata);
  const std::string command =
      shell_quote(AMC_PYTHON3) + " " +
      shell_quote(std::string(AMC_TEST_TOOLS_DIR) + "/write_safetensors.py") + " --describe " +
      shell_quote(path.string()) + " " + shell_quote(described.string());
  INFO("command: " << command);
  REQUIRE(std::system(command.c_str()) == 0);

  std::vector<std::string> expected;
  for (const amc::TensorToWrite& tensor : sample.tensors) {
    std::string line = tensor.name + "|" + std::string(amc::to_string(tensor.dtype)) + "|";
    for (std::size_t i = 0; i < tensor.shape.size(); ++i) {
      if (i > 0) line += ',';
      line += std::to_string(tensor.shape[i]);
    }
    line += "|";
    constexpr std::string_view hex = "0123456789abcdef";
    for (const std::byte b : tensor.bytes) {
      line += hex[std::to_integer<unsigned>(b) >> 4];
      line += hex[std::to_integer<unsigned>(b) & 0xFu];
    }
    expected.push_back(line);
  }
  for (const auto& [key, value] : sample.metadata)
    expected.push_back("__metadata__|" + key + "|" + value);

  std::ifstream in(described);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  CHECK(lines == expected);
#endif
}

TEST_CASE("typed views check dtype and alignment", "[safetensors]") {
  const Sample sample;
  const amc::SafetensorsFile file =
      amc::SafetensorsFile::from_bytes(amc::serialize_safetensors(sample.tensors), "sample");
  require_error([&] { file.data<float>("layer.bf16"); },
                {"amc::SafetensorsFile::data: sample: ", "tensor 'layer.bf16'", "stored as BF16",
                 "float (F32) was requested", "data<amc::bf16>()", "to_f32()"});
  require_error([&] { file.data<std::uint32_t>("layer.i32"); },
                {"stored as I32", "std::uint32_t (U32)", "data<std::int32_t>()"});
  require_error([&] { file.to_f32("layer.i32"); },
                {"amc::SafetensorsFile::to_f32", "tensor 'layer.i32' has dtype I32",
                 "converts only F32, BF16 and F16"});
  require_error([&] { file.to_f32("flags"); }, {"dtype BOOL", "bytes()"});
  std::vector<float> wrong_size(5);
  require_error([&] { file.to_f32("layer.f32", wrong_size); },
                {"has 6 elements but the output holds 5"});
  require_error([&] { file.at("missing"); },
                {"amc::SafetensorsFile::at: sample: no tensor named 'missing'"});
  require_error([&] { file.data<float>("missing"); }, {"no tensor named 'missing'"});
  CHECK(file.find("missing") == nullptr);

  // One byte of U8 before an F32: the F32 starts at an odd address (the vector's buffer is
  // at least 8-aligned and the padded header keeps the data buffer 8-aligned).
  std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::uint8_t> bytes = image(header, 1);
  const float value = -3.5f;
  const auto* value_bytes = reinterpret_cast<const std::uint8_t*>(&value);
  bytes.insert(bytes.end(), value_bytes, value_bytes + 4);
  const amc::SafetensorsFile misaligned = amc::SafetensorsFile::from_bytes(bytes, "odd");
  require_error([&] { misaligned.data<float>("b"); },
                {"tensor 'b' (F32)", "not aligned to 4 bytes for float", "use to_f32()"});
  CHECK(misaligned.to_f32("b") == std::vector<float>{-3.5f});
  CHECK(misaligned.data<std::uint8_t>("a")[0] == 0);
}

TEST_CASE("malformed files are refused with what and where", "[safetensors]") {
  const std::string f32x1 = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";

  SECTION("too short") {
    require_rejected({}, {"file is 0 bytes, shorter than the 8-byte header length"});
    require_rejected({1, 2, 3}, {"file is 3 bytes"});
  }
  SECTION("header length beyond the file") {
    require_rejected(image_with_length(100, "{}"),
                     {"header length 100 runs past the end of the file (2 bytes"});
    require_rejected(image_with_length(std::numeric_limits<std::uint64_t>::max(), "{}"),
                     {"header length 18446744073709551615 exceeds"});
  }
  SECTION("header over the cap") {
    require_rejected(image_with_length(100'000'001, ""),
                     {"header length 100000001 exceeds the 100000000-byte limit"});
  }
  SECTION("not JSON") {
    require_rejected(image(R"({"a":x})"), {"header is not valid UTF-8 JSON (byte offset 13)"});
    require_rejected(image(R"({"a": )"), {"header is not valid UTF-8 JSON"});
    require_rejected(image(""), {"header is not valid UTF-8 JSON (byte offset 8)"});
    require_rejected(image("{\"\xff\": {}}"), {"header is not valid UTF-8 JSON (byte offset 10)",
                                               "ill-formed UTF-8 byte", "\\xff"});
    require_rejected(image(std::string("{}\0\0", 4)),
                     {"header is not valid UTF-8 JSON (byte offset 10): it contains a NUL byte"});
    require_rejected(image(std::string("{\"a\0\": 1}", 9)), {"NUL byte"});
  }
  SECTION("nested too deep") {
    // Refused during the parse: a hostile header could otherwise nest millions of levels.
    const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
    require_rejected(image(R"({"w": {"dtype":"U8","shape":)" + deep + R"(,"data_offsets":[0,0]}})"),
                     {"header nests arrays and objects deeper than 64 levels (inside 'shape')"});
  }
  SECTION("not an object") {
    require_rejected(image("[1, 2]"), {"header is not a JSON object but array (byte offset 8)"});
    require_rejected(image(R"("w")"), {"not a JSON object but string"});
  }
  SECTION("bad metadata") {
    require_rejected(image(R"({"__metadata__": [1]})"),
                     {"'__metadata__' is not an object of strings but array"});
    require_rejected(image(R"({"__metadata__": {"k": 1}})"),
                     {"'__metadata__' value for key 'k' is not a string but 1"});
    require_rejected(image(R"({"__metadata__": {}, "__metadata__": {}})"),
                     {"duplicate '__metadata__'"});
  }
  SECTION("entry not an object, missing fields") {
    require_rejected(image(R"({"w": 3})"), {"entry is not an object but 3 (tensor 'w')"});
    require_rejected(image(R"({"w": {"shape":[1],"data_offsets":[0,4]}})", 4),
                     {"missing 'dtype' (tensor 'w')"});
    require_rejected(image(R"({"w": {"dtype":"F32","data_offsets":[0,4]}})", 4),
                     {"missing 'shape' (tensor 'w')"});
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[1]}})", 4),
                     {"missing 'data_offsets' (tensor 'w')"});
  }
  SECTION("unknown dtype") {
    require_rejected(image(R"({"w": {"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16),
                     {"unknown dtype 'F128' (tensor 'w')"});
    require_rejected(image(R"({"w": {"dtype":"bf16","shape":[1],"data_offsets":[0,2]}})", 2),
                     {"unknown dtype 'bf16'"});
    require_rejected(image(R"({"w": {"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
                     {"'dtype' is not a string but 4 (tensor 'w')"});
  }
  SECTION("bad shape") {
    require_rejected(image(R"({"w": {"dtype":"F32","shape":4,"data_offsets":[0,16]}})", 16),
                     {"'shape' is not an array but 4 (tensor 'w')"});
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}})", 4),
                     {"'shape' [2,-1] has -1, not a non-negative integer (tensor 'w')"});
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4),
                     {"not a non-negative integer"});
    require_rejected(image(R"({"w": {"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4),
                     {"not a non-negative integer"});
    require_rejected(
        image(R"({"w": {"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4]}})", 4),
        {"dimension 18446744073709551615 exceeds the int64 range"});
  }
  SECTION("bad offsets") {
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[4]}})", 4),
                     {"'data_offsets' is not an array of 2 integers but [4] (tensor 'w')"});
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8),
                     {"not an array of 2 integers"});
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":{"a":0}}})", 4),
                     {"not an array of 2 integers"});
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4),
                     {"are not both non-negative integers (tensor 'w')"});
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", 4),
                     {"are not both non-negative integers"});
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4),
                     {"'data_offsets' begin 4 is after end 0 (tensor 'w')"});
  }
  SECTION("overlap") {
    require_rejected(image(R"({"a": {"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"( "b": {"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                           6),
                     {"overlap: data_offsets [2, 6] overlap the preceding tensor 'a'",
                      "(tensor 'b', byte offset "});
    // Same range twice under two names.
    require_rejected(image(R"({"a": {"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"( "b": {"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                           4),
                     {"overlap"});
    // A zero-size tensor inside another tensor's range.
    require_rejected(image(R"({"a": {"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"( "b": {"dtype":"U8","shape":[0],"data_offsets":[2,2]}})",
                           4),
                     {"overlap", "(tensor 'b', byte offset "});
  }
  SECTION("hole") {
    require_rejected(image(R"({"a": {"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"( "b": {"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                           10),
                     {"hole: data bytes [4, 6) belong to no tensor",
                      "between tensor 'a' and tensor 'b'", "byte offset "});
  }
  SECTION("not starting at 0") {
    require_rejected(image(R"({"w": {"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6),
                     {"data does not start at offset 0", "begins at data byte 2", "(tensor 'w'",
                      "data buffer at byte offset 62"});
  }
  SECTION("length mismatch") {
    require_rejected(image(R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
                     {"length mismatch: data_offsets [0, 4] hold 4 bytes but shape [2] of F32 "
                      "needs 8 (tensor 'w')"});
  }
  SECTION("trailing bytes and short buffers") {
    const std::string header = R"({"w": )" + f32x1 + "}";
    require_rejected(image(header, 6),
                     {"trailing data: the data buffer is 6 bytes but the tensors cover 4, "
                      "leaving 2 bytes after the last tensor (byte offset 67)"});
    require_rejected(image("{}", 1), {"trailing data", "leaving 1 bytes"});
    require_rejected(image(header, 2), {"data_offsets [0, 4] run past the end of the 2-byte data "
                                        "buffer",
                                        "(tensor 'w'"});
  }
  SECTION("duplicate names and keys") {
    require_rejected(image(R"({"w": )" + f32x1 + R"(, "w": )" + f32x1 + "}", 4),
                     {"duplicate tensor name (tensor 'w')"});
    require_rejected(
        image(R"({"w": {"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
        {"duplicate key 'dtype' in entry 'w'"});
  }
  SECTION("multiplication overflow in shape") {
    require_rejected(
        image(R"({"w": {"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
        {"shape [4294967296, 4294967296] of U8 overflows the 64-bit element count (tensor 'w')"});
    require_rejected(
        image(R"({"w": {"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
        {"overflows the 64-bit byte count"});
  }
  SECTION("open() names the path and refuses what is not a file") {
    const TempDir dir;
    const fs::path path = dir.path() / "bad.safetensors";
    {
      const std::vector<std::uint8_t> bytes = image(R"({"w": )" + f32x1 + "}", 2);
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(bytes.data()),
                static_cast<std::streamsize>(bytes.size()));
    }
    require_error([&] { amc::SafetensorsFile::open(path); },
                  {"amc::SafetensorsFile::open: " + path.string() + ": ", "run past the end"});
    require_error([&] { amc::SafetensorsFile::open(dir.path() / "absent"); },
                  {"cannot open", "absent"});
    require_error([&] { amc::SafetensorsFile::open(dir.path()); }, {"not a regular file"});
    std::ofstream(dir.path() / "empty.safetensors").close();
    require_error([&] { amc::SafetensorsFile::open(dir.path() / "empty.safetensors"); },
                  {"file is 0 bytes"});
  }
}

TEST_CASE("valid edge cases: zero-size neighbours, unknown entry fields", "[safetensors]") {
  // Two zero-size tensors at the same offset as a non-empty one, a 0-rank tensor, and a field
  // the format does not define (ignored, as the reference implementation does).
  const amc::SafetensorsFile file = amc::SafetensorsFile::from_bytes(
      image(R"({"z2": {"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
            R"( "s": {"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
            R"( "z1": {"dtype":"I64","shape":[3,0,2],"data_offsets":[4,4]},)"
            R"( "t": {"dtype":"U8","shape":[2],"data_offsets":[4,6],"extra":true}})",
            6));
  std::vector<std::string> names;
  for (const amc::TensorInfo& info : file.tensors()) names.push_back(info.name);
  CHECK(names == std::vector<std::string>{"s", "z1", "z2", "t"});
  CHECK(file.at("z1").numel() == 0);
  CHECK(file.at("s").numel() == 1);
}

TEST_CASE("corrupted images are accepted consistently or refused, never read out of bounds",
          "[safetensors]") {
  // Small fuzz with a fixed seed: flip, overwrite and truncate bytes of a valid image. Every
  // outcome must be a valid file whose tensors lie inside the buffer, or an amc::error (any
  // other exception escapes and fails). Run under ASan this also proves no out-of-bounds read.
  const Sample sample;
  const std::vector<std::uint8_t> valid =
      amc::serialize_safetensors(sample.tensors, sample.metadata);
  std::mt19937_64 random(20240601);
  std::size_t accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::uint8_t> bytes = valid;
    const auto pick = [&](std::size_t n) {
      return static_cast<std::size_t>(random() % static_cast<std::uint64_t>(n));
    };
    const int edits = 1 + static_cast<int>(pick(3));
    for (int e = 0; e < edits; ++e) {
      switch (pick(4)) {
        case 0:
          bytes[pick(bytes.size())] ^= static_cast<std::uint8_t>(1u << pick(8));
          break;
        case 1:
          bytes[pick(bytes.size())] = static_cast<std::uint8_t>(random());
          break;
        case 2:
          bytes[pick(bytes.size())] = static_cast<std::uint8_t>("0123456789[]{},:\" -"[pick(18)]);
          break;
        default:
          bytes.resize(pick(bytes.size() + 1));
          break;
      }
      if (bytes.empty()) break;
    }
    try {
      const amc::SafetensorsFile file = amc::SafetensorsFile::from_bytes(std::move(bytes));
      ++accepted;
      std::uint64_t covered = 0;
      unsigned checksum = 0;
      for (const amc::TensorInfo& info : file.tensors()) {
        REQUIRE(info.begin == covered);
        covered = info.end;
        for (const std::byte b : file.bytes(info)) checksum += std::to_integer<unsigned>(b);
        if (info.dtype == amc::Dtype::F32 || info.dtype == amc::Dtype::BF16 ||
            info.dtype == amc::Dtype::F16) {
          CHECK(file.to_f32(info.name).size() == info.numel());
        }
      }
      static_cast<void>(checksum);
    } catch (const amc::error&) {
    }
  }
  // Flips inside tensor data or metadata values leave the file valid: both outcomes occur.
  CHECK(accepted > 0);
  CHECK(accepted < 3000);
}

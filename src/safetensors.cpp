// safetensors reader and writer. nlohmann::json stays in this translation unit so that the
// public header (and amc's installed package) does not depend on it.
#include "amc/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>

#include "amc/error.hpp"
#include "amc/io/atomic_file.hpp"

namespace amc {
namespace {

using json = nlohmann::json;

constexpr std::array<std::pair<std::string_view, Dtype>, 15> dtype_names{{
    {"BOOL", Dtype::BOOL},
    {"U8", Dtype::U8},
    {"I8", Dtype::I8},
    {"F8_E5M2", Dtype::F8_E5M2},
    {"F8_E4M3", Dtype::F8_E4M3},
    {"I16", Dtype::I16},
    {"U16", Dtype::U16},
    {"F16", Dtype::F16},
    {"BF16", Dtype::BF16},
    {"I32", Dtype::I32},
    {"U32", Dtype::U32},
    {"F32", Dtype::F32},
    {"F64", Dtype::F64},
    {"I64", Dtype::I64},
    {"U64", Dtype::U64},
}};

/// The C++ element type of `dtype` in data<T>() (the inverse of dtype_of), or "" if none.
std::string_view cpp_type_for(Dtype dtype) {
  switch (dtype) {
    case Dtype::F32:
      return "float";
    case Dtype::F64:
      return "double";
    case Dtype::BF16:
      return "amc::bf16";
    case Dtype::F16:
      return "amc::f16";
    case Dtype::I8:
      return "std::int8_t";
    case Dtype::U8:
      return "std::uint8_t";
    case Dtype::I16:
      return "std::int16_t";
    case Dtype::U16:
      return "std::uint16_t";
    case Dtype::I32:
      return "std::int32_t";
    case Dtype::U32:
      return "std::uint32_t";
    case Dtype::I64:
      return "std::int64_t";
    case Dtype::U64:
      return "std::uint64_t";
    case Dtype::BOOL:
    case Dtype::F8_E5M2:
    case Dtype::F8_E4M3:
      break;
  }
  return "";
}

/// The accessor that reads `dtype` without conversion, for error messages that say what to call.
std::string view_type_for(Dtype dtype) {
  const std::string_view type = cpp_type_for(dtype);
  return type.empty() ? std::string("bytes()") : "data<" + std::string(type) + ">()";
}

bool converts_to_f32(Dtype dtype) {
  return dtype == Dtype::F32 || dtype == Dtype::BF16 || dtype == Dtype::F16;
}

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

/// A JSON value for an error message, cut short. Hand-rolled rather than json::dump() because
/// dump recurses without limit and a hostile header may nest arrays millions deep.
void append_brief(std::string& out, const json& value, int depth) {
  constexpr std::size_t limit = 60;
  if (out.size() > limit) return;
  if (value.is_array() || value.is_object()) {
    const bool array = value.is_array();
    if (depth >= 4) {
      out += array ? "[...]" : "{...}";
      return;
    }
    out += array ? '[' : '{';
    bool first = true;
    for (auto item = value.begin(); item != value.end() && out.size() <= limit; ++item) {
      if (!first) out += ',';
      first = false;
      if (!array) {
        out += json(item.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ':';
      }
      append_brief(out, item.value(), depth + 1);
    }
    out += array ? ']' : '}';
    return;
  }
  out += value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string brief(const json& value) {
  constexpr std::size_t limit = 60;
  std::string text;
  append_brief(text, value, 0);
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

/// nlohmann's message without its "[json.exception...] " tag, with bytes that are not printable
/// ASCII (such as the ill-formed UTF-8 it quotes) escaped so that the message stays valid text.
std::string printable(std::string_view message) {
  if (message.starts_with("[json.exception.")) {
    const std::size_t tag_end = message.find("] ");
    if (tag_end != std::string_view::npos) message.remove_prefix(tag_end + 2);
  }
  std::string text;
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F) {
      text += c;
    } else {
      constexpr std::string_view hex = "0123456789abcdef";
      text += "\\x";
      text += hex[byte >> 4];
      text += hex[byte & 0xF];
    }
  }
  return text;
}

std::string errno_message(int error_number) {
  return std::error_code(error_number, std::generic_category()).message();
}

/// Element count and byte count of a shape, or nullopt with `overflow` saying which product
/// left 64 bits. A zero dimension makes the tensor empty whatever the other dimensions are.
struct Extent {
  std::uint64_t numel = 0;
  std::uint64_t bytes = 0;
};
std::optional<Extent> extent_of(std::span<const std::int64_t> shape, Dtype dtype,
                                std::string_view& overflow) {
  Extent extent;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return extent;
  extent.numel = 1;
  for (const std::int64_t dim : shape) {
    if (__builtin_mul_overflow(extent.numel, static_cast<std::uint64_t>(dim), &extent.numel)) {
      overflow = "element count";
      return std::nullopt;
    }
  }
  if (__builtin_mul_overflow(extent.numel, static_cast<std::uint64_t>(dtype_size(dtype)),
                             &extent.bytes)) {
    overflow = "byte count";
    return std::nullopt;
  }
  return extent;
}

/// A non-negative JSON integer (nlohmann stores those as unsigned; floats such as 2.0 and
/// negative numbers are refused).
std::optional<std::uint64_t> as_unsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) {
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  }
  return std::nullopt;
}

/// Formats every header error as "<where>: <source>: <what>".
class HeaderErrors {
 public:
  HeaderErrors(const char* where, const std::string& source) : where_(where), source_(source) {}

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    detail::throw_error(where_, source_, ": ", std::forward<Parts>(parts)...);
  }

 private:
  const char* where_;
  const std::string& source_;
};

/// Deepest nesting of arrays and objects accepted in a header. A valid header needs 3 (top,
/// entry, shape); the reference reader (serde_json) stops at 128. Without a limit a hostile
/// 100 MB header nested millions deep costs gigabytes and tens of seconds to parse.
constexpr std::size_t max_header_depth = 64;

/// Builds the header's DOM from nlohmann's SAX events, refusing duplicate keys (nlohmann's own
/// parser silently keeps the last one, and a duplicate tensor name must be refused) and
/// nesting deeper than max_header_depth. nlohmann's parser-callback API could do the same but
/// rescans the parent object after every child, which is quadratic in the number of tensors.
class HeaderBuilder final : public nlohmann::json_sax<json> {
 public:
  HeaderBuilder(json& root, const HeaderErrors& errors) : root_(root), errors_(errors) {}

  bool null() override { return add(json(nullptr)); }
  bool boolean(bool value) override { return add(json(value)); }
  bool number_integer(number_integer_t value) override { return add(json(value)); }
  bool number_unsigned(number_unsigned_t value) override { return add(json(value)); }
  bool number_float(number_float_t value, const string_t& /*text*/) override {
    return add(json(value));
  }
  bool string(string_t& value) override { return add(json(std::move(value))); }
  bool binary(binary_t& value) override { return add(json::binary(std::move(value))); }

  bool start_object(std::size_t /*elements*/) override { return open(json::object()); }
  bool start_array(std::size_t /*elements*/) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& name) override {
    const auto [slot, inserted] = open_.back().value->emplace(name, nullptr);
    if (!inserted) report_duplicate(name);
    slot_ = &slot.value();
    last_key_ = name;
    return true;
  }

  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const json::exception& error) override {
    // nlohmann counts bytes read (1-based); report the 0-based file offset of the bad byte.
    errors_.fail("header is not valid UTF-8 JSON (byte offset ",
                 8 + static_cast<std::uint64_t>(position > 0 ? position - 1 : 0),
                 "): ", printable(error.what()));
  }

 private:
  struct Open {
    json* value;
    std::string name;  // the key this container has in its parent ("" at the top)
  };

  /// Stores `value` where the parser is: the root, the next array element or the slot of
  /// the key just read. Returns its address for containers.
  json* place(json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *open_.back().value;
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    *slot_ = std::move(value);
    return slot_;
  }
  bool add(json&& value) {
    place(std::move(value));
    return true;
  }
  bool open(json&& container) {
    if (open_.size() >= max_header_depth) {
      errors_.fail("header nests arrays and objects deeper than ", max_header_depth,
                   " levels (inside '", last_key_, "')");
    }
    std::string name = open_.empty() || open_.back().value->is_array() ? std::string() : last_key_;
    json* placed = place(std::move(container));
    open_.push_back(Open{placed, std::move(name)});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  [[noreturn]] void report_duplicate(const std::string& key) const {
    if (open_.size() == 1) {
      if (key == "__metadata__") errors_.fail("duplicate '__metadata__' entry in the header");
      errors_.fail("duplicate tensor name (tensor '", key, "')");
    }
    if (open_.size() == 2) {
      errors_.fail("duplicate key '", key, "' in entry '", open_.back().name, "'");
    }
    errors_.fail("duplicate key '", key, "' in the header (inside '", open_.back().name, "')");
  }

  json& root_;
  const HeaderErrors& errors_;
  std::vector<Open> open_;
  json* slot_ = nullptr;
  std::string last_key_;
};

// --- writer helpers -------------------------------------------------------------------------

/// Validated layout of a file to write: the padded header text and the data buffer length.
struct Layout {
  std::string header;
  std::uint64_t data_size = 0;
};

/// `text` as a JSON string literal; throws amc::error naming `what` if it is not valid UTF-8.
std::string quoted(const std::string& text, const char* where, std::string_view what) {
  try {
    return json(text).dump();
  } catch (const json::type_error&) {
    detail::throw_error(where, what, " is not valid UTF-8");
  }
}

Layout plan_layout(std::span<const TensorToWrite> tensors,
                   const std::map<std::string, std::string>& metadata, const char* where) {
  // The header text is assembled by hand: nlohmann::ordered_json (needed to keep the given
  // order) looks keys up linearly, which is quadratic for files with many tensors.
  Layout layout;
  std::string& header = layout.header;
  header.push_back('{');  // not `= "{"`: GCC 12 -O3 then misreports -Wrestrict
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ',';
      first = false;
      header += quoted(key, where, "metadata key '" + key + "'");
      header += ':';
      header += quoted(value, where, "metadata value for key '" + key + "'");
    }
    header += '}';
  }
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    AMC_CHECK(!tensor.name.empty(), where, "tensor name is empty");
    AMC_CHECK(tensor.name != "__metadata__", where,
              "tensor name '__metadata__' is reserved for the metadata entry");
    AMC_CHECK(names.insert(tensor.name).second, where, "duplicate tensor name (tensor '",
              tensor.name, "')");
    for (const std::int64_t dim : tensor.shape) {
      AMC_CHECK(dim >= 0, where, "negative dimension ", dim, " in shape ",
                shape_string(tensor.shape), " (tensor '", tensor.name, "')");
    }
    std::string_view overflow;
    const std::optional<Extent> extent = extent_of(tensor.shape, tensor.dtype, overflow);
    AMC_CHECK(extent.has_value(), where, "shape ", shape_string(tensor.shape), " of ",
              to_string(tensor.dtype), " overflows the 64-bit ", overflow, " (tensor '",
              tensor.name, "')");
    AMC_CHECK(extent->bytes == tensor.bytes.size(), where, "tensor '", tensor.name, "' has ",
              tensor.bytes.size(), " bytes but shape ", shape_string(tensor.shape), " of ",
              to_string(tensor.dtype), " needs ", extent->bytes);
    std::uint64_t end = 0;
    AMC_CHECK(!__builtin_add_overflow(offset, extent->bytes, &end), where,
              "total data size overflows 64 bits (tensor '", tensor.name, "')");
    if (header.size() > 1) header += ',';
    header += quoted(tensor.name, where, "tensor name");
    header += ":{\"dtype\":\"";
    header += to_string(tensor.dtype);
    header += "\",\"shape\":[";
    for (std::size_t i = 0; i < tensor.shape.size(); ++i) {
      if (i > 0) header += ',';
      header += std::to_string(tensor.shape[i]);
    }
    header += "],\"data_offsets\":[";
    header += std::to_string(offset);
    header += ',';
    header += std::to_string(end);
    header += "]}";
    offset = end;
  }
  header += '}';
  // Readers may reinterpret tensor bytes in place; padding the header with spaces (valid JSON
  // whitespace) to a multiple of 8 makes the data buffer start 8-aligned in the file.
  header.append((8 - header.size() % 8) % 8, ' ');
  AMC_CHECK(header.size() <= SafetensorsFile::max_header_size, where, "header of ", header.size(),
            " bytes exceeds the ", SafetensorsFile::max_header_size, "-byte limit readers accept");
  layout.data_size = offset;
  return layout;
}

std::array<std::uint8_t, 8> length_prefix(std::uint64_t length) {
  std::array<std::uint8_t, 8> prefix{};
  std::memcpy(prefix.data(), &length, sizeof length);  // little-endian host (static_assert)
  return prefix;
}

}  // namespace

// --- dtypes ---------------------------------------------------------------------------------

std::size_t dtype_size(Dtype dtype) noexcept {
  switch (dtype) {
    case Dtype::BOOL:
    case Dtype::U8:
    case Dtype::I8:
    case Dtype::F8_E5M2:
    case Dtype::F8_E4M3:
      return 1;
    case Dtype::I16:
    case Dtype::U16:
    case Dtype::F16:
    case Dtype::BF16:
      return 2;
    case Dtype::I32:
    case Dtype::U32:
    case Dtype::F32:
      return 4;
    case Dtype::F64:
    case Dtype::I64:
    case Dtype::U64:
      return 8;
  }
  return 0;
}

std::string_view to_string(Dtype dtype) noexcept {
  for (const auto& [name, value] : dtype_names) {
    if (value == dtype) return name;
  }
  return "?";
}

std::optional<Dtype> try_parse_dtype(std::string_view text) noexcept {
  for (const auto& [name, value] : dtype_names) {
    if (name == text) return value;
  }
  return std::nullopt;
}

Dtype parse_dtype(std::string_view text) {
  const std::optional<Dtype> dtype = try_parse_dtype(text);
  AMC_CHECK(dtype.has_value(), "amc::parse_dtype", "unknown dtype '", text,
            "' (expected one of BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, "
            "F32, F64, I64, U64)");
  return *dtype;
}

// --- SafetensorsFile ------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  constexpr const char* where = "amc::SafetensorsFile::open";
  SafetensorsFile file;
  file.source_ = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error_number = errno;
    detail::throw_error(where, file.source_, ": cannot open: ", errno_message(error_number));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct ::stat status {};
  if (::fstat(fd, &status) != 0) {
    const int error_number = errno;
    detail::throw_error(where, file.source_, ": cannot stat: ", errno_message(error_number));
  }
  AMC_CHECK(S_ISREG(status.st_mode), where, file.source_, ": not a regular file");
  const auto size = static_cast<std::uint64_t>(status.st_size);
  // mmap refuses length 0; an empty file is rejected by parse() as shorter than 8 bytes.
  if (size > 0) {
    void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int error_number = errno;
      detail::throw_error(where, file.source_, ": cannot map ", size,
                          " bytes: ", errno_message(error_number));
    }
    file.mapping_ = mapping;
    file.mapping_size_ = size;
  }
  file.size_ = size;
  file.parse(where);  // on throw, ~SafetensorsFile unmaps
  return file;
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<std::uint8_t> bytes,
                                            std::string source_name) {
  SafetensorsFile file;
  file.source_ = std::move(source_name);
  file.owned_ = std::move(bytes);
  file.size_ = file.owned_.size();
  file.parse("amc::SafetensorsFile::from_bytes");
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : source_(std::move(other.source_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      owned_(std::move(other.owned_)),
      size_(std::exchange(other.size_, 0)),
      data_offset_(std::exchange(other.data_offset_, 0)),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {
  // Leave the source consistently empty rather than "moved-from unspecified".
  other.release();
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    release();
    source_ = std::move(other.source_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    owned_ = std::move(other.owned_);
    size_ = std::exchange(other.size_, 0);
    data_offset_ = std::exchange(other.data_offset_, 0);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
    other.release();
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() noexcept {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
  mapping_ = nullptr;
  mapping_size_ = 0;
  owned_.clear();
  owned_.shrink_to_fit();
  size_ = 0;
  data_offset_ = 0;
  tensors_.clear();
  index_.clear();
  metadata_.clear();
}

const std::byte* SafetensorsFile::base() const noexcept {
  if (mapping_ != nullptr) return static_cast<const std::byte*>(mapping_);
  return reinterpret_cast<const std::byte*>(owned_.data());
}

void SafetensorsFile::parse(const char* where) {
  const HeaderErrors errors(where, source_);
  const std::byte* const image = base();

  if (size_ < 8) {
    errors.fail("file is ", size_, " bytes, shorter than the 8-byte header length (byte offset 0)");
  }
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, image, sizeof header_size);  // little-endian host (static_assert)
  // The cap comes first so that a huge declared length is reported as such, not as truncation.
  if (header_size > max_header_size) {
    errors.fail("header length ", header_size, " exceeds the ", max_header_size,
                "-byte limit (byte offset 0)");
  }
  if (header_size > size_ - 8) {
    errors.fail("header length ", header_size, " runs past the end of the file (", size_ - 8,
                " bytes after the 8-byte length, byte offset 0)");
  }
  data_offset_ = 8 + header_size;
  const std::uint64_t buffer_size = size_ - data_offset_;

  const char* const text = reinterpret_cast<const char*>(image + 8);
  // nlohmann's lexer takes a NUL byte for the end of input and would silently ignore whatever
  // follows it; JSON text cannot contain a raw NUL, so refuse it here.
  if (const void* nul = std::memchr(text, 0, header_size); nul != nullptr) {
    errors.fail("header is not valid UTF-8 JSON (byte offset ",
                8 + static_cast<std::uint64_t>(static_cast<const char*>(nul) - text),
                "): it contains a NUL byte");
  }
  json header;
  HeaderBuilder builder(header, errors);
  // strict: the whole header must be one JSON value (trailing spaces allowed).
  static_cast<void>(
      json::sax_parse(text, text + header_size, &builder, json::input_format_t::json, true));
  if (!header.is_object()) {
    errors.fail("header is not a JSON object but ", header.type_name(), " (byte offset 8)");
  }

  for (auto entry = header.begin(); entry != header.end(); ++entry) {
    const std::string& name = entry.key();
    const json& value = entry.value();
    if (name == "__metadata__") {
      if (!value.is_object()) {
        errors.fail("'__metadata__' is not an object of strings but ", value.type_name());
      }
      for (auto item = value.begin(); item != value.end(); ++item) {
        if (!item.value().is_string()) {
          errors.fail("'__metadata__' value for key '", item.key(), "' is not a string but ",
                      brief(item.value()));
        }
        metadata_.emplace(item.key(), item.value().get<std::string>());
      }
      continue;
    }

    if (!value.is_object()) {
      errors.fail("entry is not an object but ", brief(value), " (tensor '", name, "')");
    }
    TensorInfo info;
    info.name = name;

    const auto dtype = value.find("dtype");
    if (dtype == value.end()) errors.fail("missing 'dtype' (tensor '", name, "')");
    if (!dtype->is_string()) {
      errors.fail("'dtype' is not a string but ", brief(*dtype), " (tensor '", name, "')");
    }
    const std::optional<Dtype> parsed_dtype = try_parse_dtype(dtype->get<std::string>());
    if (!parsed_dtype) {
      errors.fail("unknown dtype '", dtype->get<std::string>(), "' (tensor '", name, "')");
    }
    info.dtype = *parsed_dtype;

    const auto shape = value.find("shape");
    if (shape == value.end()) errors.fail("missing 'shape' (tensor '", name, "')");
    if (!shape->is_array()) {
      errors.fail("'shape' is not an array but ", brief(*shape), " (tensor '", name, "')");
    }
    for (const json& dim : *shape) {
      const std::optional<std::uint64_t> extent = as_unsigned(dim);
      if (!extent) {
        errors.fail("'shape' ", brief(*shape), " has ", brief(dim),
                    ", not a non-negative integer (tensor '", name, "')");
      }
      if (*extent > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        errors.fail("'shape' dimension ", *extent, " exceeds the int64 range (tensor '", name,
                    "')");
      }
      info.shape.push_back(static_cast<std::int64_t>(*extent));
    }

    const auto offsets = value.find("data_offsets");
    if (offsets == value.end()) errors.fail("missing 'data_offsets' (tensor '", name, "')");
    if (!offsets->is_array() || offsets->size() != 2) {
      errors.fail("'data_offsets' is not an array of 2 integers but ", brief(*offsets),
                  " (tensor '", name, "')");
    }
    const std::optional<std::uint64_t> begin = as_unsigned((*offsets)[0]);
    const std::optional<std::uint64_t> end = as_unsigned((*offsets)[1]);
    if (!begin || !end) {
      errors.fail("'data_offsets' ", brief(*offsets),
                  " are not both non-negative integers (tensor '", name, "')");
    }
    if (*begin > *end) {
      errors.fail("'data_offsets' begin ", *begin, " is after end ", *end, " (tensor '", name,
                  "')");
    }
    info.begin = *begin;
    info.end = *end;

    std::string_view overflow;
    const std::optional<Extent> extent = extent_of(info.shape, info.dtype, overflow);
    if (!extent) {
      errors.fail("shape ", shape_string(info.shape), " of ", to_string(info.dtype),
                  " overflows the 64-bit ", overflow, " (tensor '", name, "')");
    }
    if (info.byte_size() != extent->bytes) {
      errors.fail("length mismatch: data_offsets [", info.begin, ", ", info.end, "] hold ",
                  info.byte_size(), " bytes but shape ", shape_string(info.shape), " of ",
                  to_string(info.dtype), " needs ", extent->bytes, " (tensor '", name, "')");
    }
    tensors_.push_back(std::move(info));
  }

  // Zero-size tensors share offsets with their neighbours; ordering by (begin, end) puts them
  // before the tensor that starts there, and the name breaks remaining ties deterministically.
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t covered = 0;  // every data byte before this belongs to exactly one tensor
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const TensorInfo& info = tensors_[i];
    if (info.begin > covered) {
      if (i == 0) {
        errors.fail("data does not start at offset 0: the first tensor begins at data byte ",
                    info.begin, " (tensor '", info.name, "', data buffer at byte offset ",
                    data_offset_, ")");
      }
      errors.fail("hole: data bytes [", covered, ", ", info.begin,
                  ") belong to no tensor (between tensor '", tensors_[i - 1].name, "' and tensor '",
                  info.name, "', byte offset ", data_offset_ + covered, ")");
    }
    if (info.begin < covered) {
      errors.fail("overlap: data_offsets [", info.begin, ", ", info.end,
                  "] overlap the preceding tensor '", tensors_[i - 1].name, "' which ends at ",
                  covered, " (tensor '", info.name, "', byte offset ", data_offset_ + info.begin,
                  ")");
    }
    if (info.end > buffer_size) {
      errors.fail("data_offsets [", info.begin, ", ", info.end, "] run past the end of the ",
                  buffer_size, "-byte data buffer, file truncated? (tensor '", info.name,
                  "', byte offset ", data_offset_ + info.begin, ")");
    }
    covered = info.end;
  }
  if (covered != buffer_size) {
    errors.fail("trailing data: the data buffer is ", buffer_size, " bytes but the tensors cover ",
                covered, ", leaving ", buffer_size - covered,
                " bytes after the last tensor (byte offset ", data_offset_ + covered, ")");
  }

  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const noexcept {
  const auto found = index_.find(name);
  return found == index_.end() ? nullptr : &tensors_[found->second];
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
  const TensorInfo* info = find(name);
  AMC_CHECK(info != nullptr, "amc::SafetensorsFile::at", source_, ": no tensor named '", name,
            "' among its ", tensors_.size(), " tensor", tensors_.size() == 1 ? "" : "s");
  return *info;
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& info) const noexcept {
  return {base() + data_offset_ + info.begin, static_cast<std::size_t>(info.byte_size())};
}

void SafetensorsFile::check_view(const TensorInfo& info, Dtype requested,
                                 std::size_t alignment) const {
  constexpr const char* where = "amc::SafetensorsFile::data";
  const std::string_view requested_type = cpp_type_for(requested);
  AMC_CHECK(info.dtype == requested, where, source_, ": tensor '", info.name, "' is stored as ",
            to_string(info.dtype), " but ", requested_type, " (", to_string(requested),
            ") was requested; use ", view_type_for(info.dtype),
            converts_to_f32(info.dtype) ? " or to_f32()" : "");
  if (info.byte_size() == 0) return;
  const auto address = reinterpret_cast<std::uintptr_t>(base() + data_offset_ + info.begin);
  AMC_CHECK(address % alignment == 0, where, source_, ": tensor '", info.name, "' (",
            to_string(info.dtype), ") starts at byte offset ", data_offset_ + info.begin,
            ", which is not aligned to ", alignment, " bytes for ", requested_type,
            " in memory; use ",
            converts_to_f32(info.dtype) ? "to_f32() or bytes(), which copy" : "bytes() and copy");
}

std::vector<float> SafetensorsFile::to_f32(std::string_view name) const {
  std::vector<float> values(static_cast<std::size_t>(at(name).numel()));
  to_f32(name, values);
  return values;
}

void SafetensorsFile::to_f32(std::string_view name, std::span<float> out) const {
  constexpr const char* where = "amc::SafetensorsFile::to_f32";
  const TensorInfo& info = at(name);
  AMC_CHECK(converts_to_f32(info.dtype), where, source_, ": tensor '", info.name, "' has dtype ",
            to_string(info.dtype), "; to_f32 converts only F32, BF16 and F16 (use ",
            view_type_for(info.dtype), ")");
  AMC_CHECK(out.size() == info.numel(), where, source_, ": tensor '", info.name, "' has ",
            info.numel(), " elements but the output holds ", out.size());
  const std::span<const std::byte> raw = bytes(info);
  if (raw.empty()) return;
  // memcpy per element: the bytes may be misaligned for the element type.
  if (info.dtype == Dtype::F32) {
    std::memcpy(out.data(), raw.data(), raw.size());
    return;
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, raw.data() + 2 * i, sizeof bits);
    out[i] = info.dtype == Dtype::BF16 ? to_float(bf16{bits}) : to_float(f16{bits});
  }
}

// --- writer ---------------------------------------------------------------------------------

std::vector<std::uint8_t> serialize_safetensors(
    std::span<const TensorToWrite> tensors, const std::map<std::string, std::string>& metadata) {
  const Layout layout = plan_layout(tensors, metadata, "amc::serialize_safetensors");
  // Sized once, filled with memcpy (cheaper than growing, and GCC 12 at -O3 misreports
  // vector::insert of these ranges as overflowing).
  std::vector<std::uint8_t> image(8 + layout.header.size() +
                                  static_cast<std::size_t>(layout.data_size));
  const auto prefix = length_prefix(layout.header.size());
  std::memcpy(image.data(), prefix.data(), prefix.size());
  std::memcpy(image.data() + prefix.size(), layout.header.data(), layout.header.size());
  std::size_t offset = prefix.size() + layout.header.size();
  for (const TensorToWrite& tensor : tensors) {
    if (tensor.bytes.empty()) continue;  // a zero-size span may hold a null pointer
    std::memcpy(image.data() + offset, tensor.bytes.data(), tensor.bytes.size());
    offset += tensor.bytes.size();
  }
  return image;
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  constexpr const char* where = "amc::write_safetensors";
  const Layout layout = plan_layout(tensors, metadata, where);  // throws before any file exists
  AtomicFile file(path, where);
  const auto prefix = length_prefix(layout.header.size());
  file.write(std::as_bytes(std::span(prefix)));
  file.write(std::as_bytes(std::span(layout.header)));
  for (const TensorToWrite& tensor : tensors) file.write(tensor.bytes);
  file.commit();
}

}  // namespace amc

// GGUF reader and writer. The reader walks the header with one bounds-checked cursor: every
// field is read only after the bytes it needs were found to exist, and every count is compared
// with the bytes left before anything is sized by it, so a hostile file can neither read past
// the image nor make the reader allocate more than the file itself implies.
#include "amc/io/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <system_error>
#include <utility>

#include "amc/error.hpp"
#include "amc/io/atomic_file.hpp"
#include "ggml_types.hpp"

namespace amc {
namespace {

// --- types ------------------------------------------------------------------------------------

/// Deepest nesting of metadata arrays (an array of arrays is 2 deep). ggml's own reader takes no
/// nested arrays at all; gguf-py writes them. A limit keeps the recursion bounded.
constexpr int max_array_depth = 8;
/// Largest dimension accepted: 2^62 keeps every single extent, and the offsets built from it,
/// far from the int64 range.
constexpr std::uint64_t max_dimension = std::uint64_t{1} << 62;
constexpr std::uint32_t max_dims = 4;  // GGML_MAX_DIMS
constexpr std::uint32_t default_alignment = 32;

/// Bytes the smallest value of `type` takes in the file (its element in an array).
std::uint64_t min_value_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8:
    case GgufValueType::int8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::uint16:
    case GgufValueType::int16:
      return 2;
    case GgufValueType::uint32:
    case GgufValueType::int32:
    case GgufValueType::float32:
      return 4;
    case GgufValueType::uint64:
    case GgufValueType::int64:
    case GgufValueType::float64:
    case GgufValueType::string:  // its u64 length
      return 8;
    case GgufValueType::array:  // element type and count
      return 12;
  }
  return 1;
}

bool is_value_type(std::uint32_t type) { return type <= 12; }

bool is_unsigned(GgufValueType type) {
  return type == GgufValueType::uint8 || type == GgufValueType::uint16 ||
         type == GgufValueType::uint32 || type == GgufValueType::uint64;
}
bool is_signed(GgufValueType type) {
  return type == GgufValueType::int8 || type == GgufValueType::int16 ||
         type == GgufValueType::int32 || type == GgufValueType::int64;
}
bool is_float(GgufValueType type) {
  return type == GgufValueType::float32 || type == GgufValueType::float64;
}

/// The name of value type `number` for messages, with the number when it is no type.
std::string value_type_name(std::uint32_t number) {
  if (is_value_type(number)) return std::string(to_string(static_cast<GgufValueType>(number)));
  return "invalid (" + std::to_string(number) + ")";
}

// --- text -------------------------------------------------------------------------------------

/// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points above
/// U+10FFFF).
bool valid_utf8(std::string_view text) {
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    std::uint32_t code = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
      code = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      code = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      code = c & 0x07u;
    } else {
      return false;
    }
    if (n - i < length) return false;
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0u) != 0x80u) return false;
      code = (code << 6) | (next & 0x3Fu);
    }
    if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000) || code > 0x10FFFF ||
        (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

/// `text` for a message: bytes that are not printable ASCII as \xNN, cut after 80 bytes (a
/// hostile name may be megabytes long).
std::string printable(std::string_view text) {
  constexpr std::size_t limit = 80;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7F && byte != '\\') {
      out += static_cast<char>(byte);
    } else {
      constexpr std::string_view hex = "0123456789abcdef";
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 0xF];
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

std::string errno_message(int error_number) {
  return std::error_code(error_number, std::generic_category()).message();
}

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

bool power_of_two(std::uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

std::uint64_t align_up(std::uint64_t x, std::uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

/// Element count and byte size of a shape (outermost first) of a type, or a reason for refusal
/// (the first check that fails) in `why`.
struct Extent {
  std::uint64_t numel = 0;
  std::uint64_t bytes = 0;
};
std::optional<Extent> extent_of(std::span<const std::int64_t> shape, const GgmlTypeLayout& layout,
                                std::string& why) {
  Extent extent{1, 0};
  for (const std::int64_t dim : shape) {
    if (__builtin_mul_overflow(extent.numel, static_cast<std::uint64_t>(dim), &extent.numel) ||
        extent.numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      why = "element count of shape " + shape_string(shape) + " overflows int64";
      return std::nullopt;
    }
  }
  const auto block = static_cast<std::uint64_t>(layout.block_elements);
  const auto inner = static_cast<std::uint64_t>(shape.back());
  if (inner % block != 0) {
    why = "innermost dimension " + std::to_string(inner) + " of shape " + shape_string(shape) +
          " is not a multiple of " + std::string(layout.name) + "'s block of " +
          std::to_string(block) + " elements";
    return std::nullopt;
  }
  if (__builtin_mul_overflow(extent.numel / block, static_cast<std::uint64_t>(layout.block_bytes),
                             &extent.bytes) ||
      extent.bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    why = "byte size of shape " + shape_string(shape) + " of " + std::string(layout.name) +
          " overflows int64";
    return std::nullopt;
  }
  return extent;
}

// --- reader -----------------------------------------------------------------------------------

/// Formats every header error as "<where>: <source>: <what>".
class Errors {
 public:
  Errors(const char* where, const std::string& source) : where_(where), source_(source) {}

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    detail::throw_error(where_, source_, ": ", std::forward<Parts>(parts)...);
  }

 private:
  const char* where_;
  const std::string& source_;
};

/// "[index]", assembled by appending: GCC 12 at -O3 misreports `"[" + std::to_string(i) + "]"`
/// as an overlapping memcpy (-Wrestrict).
std::string bracketed(std::uint64_t index) {
  std::string text(1, '[');
  text += std::to_string(index);
  text.push_back(']');
  return text;
}

/// Where a metadata value sits, for messages: "metadata 'key'" plus the element indices of
/// nested arrays, "metadata 'key'[3][0]". Formatted only when an error is reported.
struct Place {
  const std::string* key = nullptr;
  std::uint64_t entry = 0;  // position among the metadata
  std::vector<std::uint64_t> path;

  std::string text() const {
    std::string out = "metadata '" + printable(*key) + "'";
    for (const std::uint64_t index : path) out += bracketed(index);
    return out;
  }
};

/// A bounds-checked little-endian cursor over the image.
class Cursor {
 public:
  Cursor(const std::byte* data, std::uint64_t size, const Errors& errors)
      : data_(data), size_(size), errors_(errors) {}

  std::uint64_t offset() const { return offset_; }
  std::uint64_t remaining() const { return size_ - offset_; }

  /// Reads a T; `what()` names the field if the file ends first.
  template <class T, class What>
  T read(const What& what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + offset_, sizeof(T));  // little-endian host (static_assert)
    offset_ += sizeof(T);
    return value;
  }

  /// Reads a u64-length string; `what()` names it ("tensor name of tensor 3", ...).
  template <class What>
  std::string_view read_string(const What& what) {
    const std::uint64_t start = offset_;
    const auto length = read<std::uint64_t>([&] { return "the length of " + what(); });
    if (length > remaining()) {
      errors_.fail(what(), ": string length ", length, " runs past the end of the file (",
                   remaining(), " bytes left, byte offset ", start, ")");
    }
    const std::string_view text(reinterpret_cast<const char*>(data_ + offset_),
                                static_cast<std::size_t>(length));
    offset_ += length;
    return text;
  }

  template <class What>
  void need(std::uint64_t bytes, const What& what) const {
    if (bytes > remaining()) {
      errors_.fail("file truncated: ", what(), " needs ", bytes, " bytes but the file ends ",
                   remaining() == 0 ? std::string("there")
                                    : "after " + std::to_string(remaining()) + " more",
                   " (", size_, " bytes, byte offset ", offset_, ")");
    }
  }

 private:
  const std::byte* data_;
  std::uint64_t size_;
  std::uint64_t offset_ = 0;
  const Errors& errors_;
};

class HeaderParser {
 public:
  HeaderParser(Cursor& cursor, const Errors& errors) : cursor_(cursor), errors_(errors) {}

  /// One value of `type` at the cursor; `depth` counts the arrays it sits in.
  GgufValue value(GgufValueType type, int depth, Place& place) {
    GgufValue result;
    result.type = type;
    const auto what = [&] { return place.text(); };
    switch (type) {
      case GgufValueType::uint8:
        result.value = std::uint64_t{cursor_.read<std::uint8_t>(what)};
        break;
      case GgufValueType::int8:
        result.value = std::int64_t{cursor_.read<std::int8_t>(what)};
        break;
      case GgufValueType::uint16:
        result.value = std::uint64_t{cursor_.read<std::uint16_t>(what)};
        break;
      case GgufValueType::int16:
        result.value = std::int64_t{cursor_.read<std::int16_t>(what)};
        break;
      case GgufValueType::uint32:
        result.value = std::uint64_t{cursor_.read<std::uint32_t>(what)};
        break;
      case GgufValueType::int32:
        result.value = std::int64_t{cursor_.read<std::int32_t>(what)};
        break;
      case GgufValueType::uint64:
        result.value = cursor_.read<std::uint64_t>(what);
        break;
      case GgufValueType::int64:
        result.value = cursor_.read<std::int64_t>(what);
        break;
      case GgufValueType::float32:
        result.value = double{cursor_.read<float>(what)};
        break;
      case GgufValueType::float64:
        result.value = cursor_.read<double>(what);
        break;
      case GgufValueType::boolean: {
        const std::uint64_t at = cursor_.offset();
        const auto byte = cursor_.read<std::uint8_t>(what);
        if (byte > 1) {
          errors_.fail(place.text(), ": boolean byte ", unsigned{byte},
                       " is neither 0 nor 1 (byte offset ", at, ")");
        }
        result.value = byte == 1;
        break;
      }
      case GgufValueType::string:
        result.value = std::string(cursor_.read_string(what));
        break;
      case GgufValueType::array:
        result.value = array(depth + 1, place);
        break;
    }
    return result;
  }

 private:
  GgufArray array(int depth, Place& place) {
    const std::uint64_t type_at = cursor_.offset();
    if (depth > max_array_depth) {
      errors_.fail(place.text(), ": arrays nested deeper than ", max_array_depth,
                   " levels (byte offset ", type_at, ")");
    }
    const auto raw_type =
        cursor_.read<std::uint32_t>([&] { return "the element type of " + place.text(); });
    if (!is_value_type(raw_type)) {
      errors_.fail(place.text(), ": array element type ", raw_type,
                   " is not a GGUF value type (0-12) (byte offset ", type_at, ")");
    }
    const auto type = static_cast<GgufValueType>(raw_type);
    const std::uint64_t count_at = cursor_.offset();
    const auto count =
        cursor_.read<std::uint64_t>([&] { return "the array length of " + place.text(); });
    const std::uint64_t element_size = min_value_size(type);
    if (count > cursor_.remaining() / element_size) {
      errors_.fail(place.text(), ": array length ", count, " of ", to_string(type),
                   " exceeds what the remaining ", cursor_.remaining(),
                   " bytes could hold (at least ", element_size, " bytes each, byte offset ",
                   count_at, ")");
    }
    GgufArray result;
    result.element_type = type;
    // Bounded by the check above: at most one element per remaining byte.
    result.elements.reserve(static_cast<std::size_t>(count));
    place.path.push_back(0);
    for (std::uint64_t i = 0; i < count; ++i) {
      place.path.back() = i;
      result.elements.push_back(value(type, depth, place));
    }
    place.path.pop_back();
    return result;
  }

  Cursor& cursor_;
  const Errors& errors_;
};

const char* integer_type_list = "uint8, int8, uint16, int16, uint32, int32, uint64 or int64";

}  // namespace

// --- type names -------------------------------------------------------------------------------

std::string_view to_string(GgufValueType type) noexcept {
  switch (type) {
    case GgufValueType::uint8:
      return "uint8";
    case GgufValueType::int8:
      return "int8";
    case GgufValueType::uint16:
      return "uint16";
    case GgufValueType::int16:
      return "int16";
    case GgufValueType::uint32:
      return "uint32";
    case GgufValueType::int32:
      return "int32";
    case GgufValueType::float32:
      return "float32";
    case GgufValueType::boolean:
      return "bool";
    case GgufValueType::string:
      return "string";
    case GgufValueType::array:
      return "array";
    case GgufValueType::uint64:
      return "uint64";
    case GgufValueType::int64:
      return "int64";
    case GgufValueType::float64:
      return "float64";
  }
  return "invalid";
}

std::optional<GgmlTypeLayout> ggml_type_layout(std::uint32_t type) noexcept {
  const GgmlTypeRow* row = find_ggml_type(type);
  if (row == nullptr) return std::nullopt;
  return row->layout();
}

std::span<const GgmlType> ggml_types() noexcept {
  static constexpr auto kTypes = [] {
    std::array<GgmlType, std::size(kGgmlTypes)> types{};
    for (std::size_t i = 0; i < types.size(); ++i) types[i] = kGgmlTypes[i].type;
    return types;
  }();
  return kTypes;
}

std::string_view to_string(GgmlType type) noexcept {
  const std::optional<GgmlTypeLayout> layout = ggml_type_layout(static_cast<std::uint32_t>(type));
  return layout ? layout->name : std::string_view("unknown");
}

// --- GgufFile ---------------------------------------------------------------------------------

struct GgufFile::Mapping {
  void* address = nullptr;
  std::size_t size = 0;
  Mapping(void* a, std::size_t s) : address(a), size(s) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(address, size); }
};

GgufFile GgufFile::open(const std::filesystem::path& path) {
  constexpr const char* where = "amc::GgufFile::open";
  GgufFile file;
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
  // mmap refuses length 0; parse() refuses an empty file as truncated at the magic.
  if (size > 0) {
    void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      const int error_number = errno;
      detail::throw_error(where, file.source_, ": cannot map ", size,
                          " bytes: ", errno_message(error_number));
    }
    file.mapping_ = std::make_unique<Mapping>(address, static_cast<std::size_t>(size));
  }
  file.size_ = static_cast<std::size_t>(size);
  file.parse(where);  // on throw, ~GgufFile unmaps
  return file;
}

GgufFile GgufFile::from_bytes(std::vector<std::uint8_t> bytes, std::string source_name) {
  GgufFile file;
  file.source_ = std::move(source_name);
  file.owned_ = std::move(bytes);
  file.size_ = file.owned_.size();
  file.parse("amc::GgufFile::from_bytes");
  return file;
}

GgufFile::GgufFile(GgufFile&& other) noexcept { *this = std::move(other); }

GgufFile& GgufFile::operator=(GgufFile&& other) noexcept {
  if (this != &other) {
    source_ = std::move(other.source_);
    mapping_ = std::move(other.mapping_);
    owned_ = std::move(other.owned_);
    size_ = std::exchange(other.size_, 0);
    version_ = std::exchange(other.version_, 0);
    alignment_ = std::exchange(other.alignment_, default_alignment);
    data_offset_ = std::exchange(other.data_offset_, 0);
    metadata_ = std::move(other.metadata_);
    tensors_ = std::move(other.tensors_);
    metadata_index_ = std::move(other.metadata_index_);
    tensor_index_ = std::move(other.tensor_index_);
    // Leave the source consistently empty rather than "moved-from unspecified".
    other.source_.clear();
    other.owned_.clear();
    other.metadata_.clear();
    other.tensors_.clear();
    other.metadata_index_.clear();
    other.tensor_index_.clear();
  }
  return *this;
}

GgufFile::~GgufFile() = default;

const std::byte* GgufFile::base() const noexcept {
  if (mapping_ != nullptr) return static_cast<const std::byte*>(mapping_->address);
  return reinterpret_cast<const std::byte*>(owned_.data());
}

void GgufFile::parse(const char* where) {
  const Errors errors(where, source_);
  Cursor cursor(base(), size_, errors);

  // Header: magic, version, counts.
  const auto magic = cursor.read<std::array<char, 4>>([] { return std::string("the magic"); });
  if (std::string_view(magic.data(), 4) != "GGUF") {
    errors.fail("not a GGUF file: the magic is '", printable(std::string_view(magic.data(), 4)),
                "', not 'GGUF' (byte offset 0)");
  }
  version_ = cursor.read<std::uint32_t>([] { return std::string("the version"); });
  if (version_ == 1) {
    errors.fail(
        "GGUF version 1 is not supported: its counts and lengths are 32-bit; convert "
        "the file with a current llama.cpp (byte offset 4)");
  }
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xFFFFu) == 0 && (version_ >> 16) != 0) {
      errors.fail("version ", version_, " (0x", std::hex, version_, std::dec,
                  ") reads as a byte-swapped ", __builtin_bswap32(version_),
                  ": big-endian GGUF files are not supported (byte offset 4)");
    }
    errors.fail("version ", version_, " is not supported (amc reads GGUF versions 2 and 3, ",
                "byte offset 4)");
  }
  const auto tensor_count =
      cursor.read<std::uint64_t>([] { return std::string("the tensor count"); });
  const auto metadata_count =
      cursor.read<std::uint64_t>([] { return std::string("the metadata count"); });
  // The smallest metadata entry: key length, a 1-byte key, value type, a 1-byte value. The
  // smallest tensor info: name length (empty name), dimension count, one dimension, type,
  // offset.
  constexpr std::uint64_t min_entry = 8 + 1 + 4 + 1;
  constexpr std::uint64_t min_tensor = 8 + 4 + 8 + 4 + 8;
  if (tensor_count > cursor.remaining() / min_tensor) {
    errors.fail("tensor count ", tensor_count, " exceeds what the remaining ", cursor.remaining(),
                " bytes could hold (at least ", min_tensor,
                " bytes per tensor info, byte offset 8)");
  }
  if (metadata_count > (cursor.remaining() - tensor_count * min_tensor) / min_entry) {
    errors.fail("metadata count ", metadata_count, " exceeds what the remaining ",
                cursor.remaining(), " bytes could hold next to ", tensor_count,
                " tensor infos (at least ", min_entry, " bytes per entry, byte offset 16)");
  }

  // Metadata. Entries are appended as parsed (no reserve from the count: a count that passed
  // the check above can still be far larger than the entries a real file holds).
  HeaderParser parser(cursor, errors);
  std::optional<std::uint64_t> alignment_at;  // byte offset of general.alignment's value
  for (std::uint64_t entry = 0; entry < metadata_count; ++entry) {
    const std::uint64_t key_at = cursor.offset();
    const std::string_view key =
        cursor.read_string([&] { return "metadata key of entry " + std::to_string(entry); });
    if (key.empty()) {
      errors.fail("metadata key of entry ", entry, " is empty (byte offset ", key_at, ")");
    }
    if (!valid_utf8(key)) {
      errors.fail("metadata key '", printable(key), "' of entry ", entry,
                  " is not valid UTF-8 (byte offset ", key_at, ")");
    }
    if (metadata_index_.find(key) != metadata_index_.end()) {
      errors.fail("duplicate metadata key '", printable(key), "' (entry ", entry, ", byte offset ",
                  key_at, ")");
    }
    std::string key_text(key);
    Place place{&key_text, entry, {}};
    const std::uint64_t type_at = cursor.offset();
    const auto raw_type =
        cursor.read<std::uint32_t>([&] { return "the value type of " + place.text(); });
    if (!is_value_type(raw_type)) {
      errors.fail(place.text(), ": value type ", raw_type,
                  " is not a GGUF value type (0-12) (byte offset ", type_at, ")");
    }
    const std::uint64_t value_at = cursor.offset();
    if (key_text == "general.alignment") alignment_at = value_at;
    GgufValue value = parser.value(static_cast<GgufValueType>(raw_type), 0, place);
    metadata_index_.emplace(key_text, metadata_.size());
    metadata_.emplace_back(std::move(key_text), std::move(value));
  }

  // general.alignment, which fixes the data section's start and the tensors' offsets.
  alignment_ = default_alignment;
  if (const GgufValue* alignment = find_value("general.alignment")) {
    if (alignment->type != GgufValueType::uint32) {
      errors.fail("general.alignment has type ", to_string(alignment->type),
                  ", not uint32 (byte offset ", *alignment_at, ")");
    }
    const std::uint64_t value = std::get<std::uint64_t>(alignment->value);
    if (!power_of_two(value)) {
      errors.fail("general.alignment ", value, " is not a power of two (byte offset ",
                  *alignment_at, ")");
    }
    alignment_ = static_cast<std::uint32_t>(value);
  }

  // Tensor infos.
  std::vector<std::uint64_t> offset_at;  // byte offset of each tensor's offset field
  for (std::uint64_t index = 0; index < tensor_count; ++index) {
    const std::uint64_t name_at = cursor.offset();
    const std::string_view name =
        cursor.read_string([&] { return "the name of tensor " + std::to_string(index); });
    const auto tensor = [&] {
      return "tensor '" + printable(name) + "' (tensor " + std::to_string(index) + ")";
    };
    if (tensor_index_.find(name) != tensor_index_.end()) {
      errors.fail("duplicate tensor name '", printable(name), "' (tensor ", index, ", byte offset ",
                  name_at, ")");
    }
    GgufTensorInfo info;
    info.name = std::string(name);
    const std::uint64_t dims_at = cursor.offset();
    const auto dims =
        cursor.read<std::uint32_t>([&] { return "the dimension count of " + tensor(); });
    if (dims == 0 || dims > max_dims) {
      errors.fail(tensor(), ": ", dims, " dimensions, not 1 to ", max_dims, " (byte offset ",
                  dims_at, ")");
    }
    info.shape.resize(dims);
    for (std::uint32_t d = 0; d < dims; ++d) {
      const std::uint64_t dim_at = cursor.offset();
      const auto extent = cursor.read<std::uint64_t>(
          [&] { return "dimension " + std::to_string(d) + " of " + tensor(); });
      if (extent == 0 || extent > max_dimension) {
        errors.fail(tensor(), ": dimension ne[", d, "] = ", extent,
                    " is outside [1, 2^62] (byte offset ", dim_at, ")");
      }
      info.shape[dims - 1 - d] = static_cast<std::int64_t>(extent);  // outermost first
    }
    const std::uint64_t type_at = cursor.offset();
    const auto type = cursor.read<std::uint32_t>([&] { return "the type of " + tensor(); });
    const std::optional<GgmlTypeLayout> layout = ggml_type_layout(type);
    if (!layout) {
      errors.fail(tensor(), ": unknown ggml type ", type, " (byte offset ", type_at, ")");
    }
    info.type = static_cast<GgmlType>(type);
    std::string why;
    const std::optional<Extent> extent = extent_of(info.shape, *layout, why);
    if (!extent) errors.fail(tensor(), ": ", why, " (byte offset ", dims_at, ")");
    info.byte_size = extent->bytes;
    offset_at.push_back(cursor.offset());
    info.offset = cursor.read<std::uint64_t>([&] { return "the data offset of " + tensor(); });
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // The data section starts at the next multiple of the alignment.
  data_offset_ = align_up(cursor.offset(), alignment_);
  if (data_offset_ > size_) {
    errors.fail("file truncated: the padding to the data section at byte ", data_offset_,
                " (alignment ", alignment_, ") runs past the end of the ", size_,
                "-byte file (byte offset ", cursor.offset(), ")");
  }
  const std::uint64_t data_size = size_ - data_offset_;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const GgufTensorInfo& info = tensors_[i];
    if (info.offset % alignment_ != 0) {
      errors.fail("tensor '", printable(info.name), "' (tensor ", i, "): data offset ", info.offset,
                  " is not a multiple of the alignment ", alignment_, " (byte offset ",
                  offset_at[i], ")");
    }
    if (info.offset > data_size || info.byte_size > data_size - info.offset) {
      errors.fail("tensor '", printable(info.name), "' (tensor ", i, "): data [", info.offset, ", ",
                  info.offset, " + ", info.byte_size, ") runs past the end of the ", data_size,
                  "-byte data section, file truncated? (byte offset ", offset_at[i], ")");
    }
  }
  std::vector<std::size_t> order(tensors_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const GgufTensorInfo& before = tensors_[order[k - 1]];
    const GgufTensorInfo& info = tensors_[order[k]];
    if (info.offset < before.offset + before.byte_size) {
      errors.fail("tensor '", printable(info.name), "' (tensor ", order[k], "): data [",
                  info.offset, ", ", info.offset + info.byte_size, ") overlaps tensor '",
                  printable(before.name), "' at [", before.offset, ", ",
                  before.offset + before.byte_size, ") (byte offset ", offset_at[order[k]], ")");
    }
  }
}

const GgufValue* GgufFile::find_value(std::string_view key) const noexcept {
  const auto found = metadata_index_.find(key);
  return found == metadata_index_.end() ? nullptr : &metadata_[found->second].second;
}

const GgufTensorInfo* GgufFile::find(std::string_view name) const noexcept {
  const auto found = tensor_index_.find(name);
  return found == tensor_index_.end() ? nullptr : &tensors_[found->second];
}

const GgufTensorInfo& GgufFile::at(std::string_view name) const {
  const GgufTensorInfo* info = find(name);
  AMC_CHECK(info != nullptr, "amc::GgufFile::at", source_, ": no tensor named '", printable(name),
            "' among its ", tensors_.size(), " tensor", tensors_.size() == 1 ? "" : "s");
  return *info;
}

std::span<const std::byte> GgufFile::bytes(const GgufTensorInfo& info) const noexcept {
  return {base() + data_offset_ + info.offset, static_cast<std::size_t>(info.byte_size)};
}

// --- typed getters ----------------------------------------------------------------------------

namespace {

/// The value of `key` or nullptr; a value of a type `accept` refuses throws, naming `expected`.
template <class Accept>
const GgufValue* typed(const GgufFile& file, std::string_view key, const char* where,
                       std::string_view expected, bool required, const Accept& accept) {
  const GgufValue* value = file.find_value(key);
  if (value == nullptr) {
    AMC_CHECK(!required, where, file.source(), ": metadata '", printable(key),
              "' is missing (expected ", expected, ")");
    return nullptr;
  }
  AMC_CHECK(accept(*value), where, file.source(), ": metadata '", printable(key), "' is ",
            to_string(value->type),
            value->type == GgufValueType::array
                ? " of " + std::string(to_string(std::get<GgufArray>(value->value).element_type))
                : std::string(),
            ", expected ", expected);
  return value;
}

/// An integer GgufValue as int64; throws naming the key (and the element) when out of range.
std::int64_t as_int64(const GgufValue& value, const GgufFile& file, std::string_view key,
                      const char* where, std::string_view element) {
  if (const auto* u = std::get_if<std::uint64_t>(&value.value)) {
    AMC_CHECK(*u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), where,
              file.source(), ": metadata '", printable(key), "'", element, " = ", *u, " (",
              to_string(value.type), ") exceeds the int64 range");
    return static_cast<std::int64_t>(*u);
  }
  return std::get<std::int64_t>(value.value);
}

bool integer_value(const GgufValue& v) { return is_unsigned(v.type) || is_signed(v.type); }

std::optional<std::int64_t> get_integer(const GgufFile& file, std::string_view key,
                                        const char* where, bool required) {
  const GgufValue* value =
      typed(file, key, where, "an integer (" + std::string(integer_type_list) + ")", required,
            integer_value);
  if (value == nullptr) return std::nullopt;
  return as_int64(*value, file, key, where, "");
}

std::optional<double> get_number(const GgufFile& file, std::string_view key, const char* where,
                                 bool required) {
  const GgufValue* value = typed(file, key, where, "float32 or float64", required,
                                 [](const GgufValue& v) { return is_float(v.type); });
  if (value == nullptr) return std::nullopt;
  return std::get<double>(value->value);
}

std::optional<bool> get_boolean(const GgufFile& file, std::string_view key, const char* where,
                                bool required) {
  const GgufValue* value = typed(file, key, where, "bool", required, [](const GgufValue& v) {
    return v.type == GgufValueType::boolean;
  });
  if (value == nullptr) return std::nullopt;
  return std::get<bool>(value->value);
}

std::optional<std::string> get_string(const GgufFile& file, std::string_view key, const char* where,
                                      bool required) {
  const GgufValue* value = typed(file, key, where, "string", required, [](const GgufValue& v) {
    return v.type == GgufValueType::string;
  });
  if (value == nullptr) return std::nullopt;
  return std::get<std::string>(value->value);
}

}  // namespace

std::int64_t GgufFile::integer(std::string_view key) const {
  return *get_integer(*this, key, "amc::GgufFile::integer", true);
}
std::optional<std::int64_t> GgufFile::optional_integer(std::string_view key) const {
  return get_integer(*this, key, "amc::GgufFile::optional_integer", false);
}
double GgufFile::number(std::string_view key) const {
  return *get_number(*this, key, "amc::GgufFile::number", true);
}
std::optional<double> GgufFile::optional_number(std::string_view key) const {
  return get_number(*this, key, "amc::GgufFile::optional_number", false);
}
bool GgufFile::boolean(std::string_view key) const {
  return *get_boolean(*this, key, "amc::GgufFile::boolean", true);
}
std::optional<bool> GgufFile::optional_boolean(std::string_view key) const {
  return get_boolean(*this, key, "amc::GgufFile::optional_boolean", false);
}
std::string GgufFile::string(std::string_view key) const {
  return *get_string(*this, key, "amc::GgufFile::string", true);
}
std::optional<std::string> GgufFile::optional_string(std::string_view key) const {
  return get_string(*this, key, "amc::GgufFile::optional_string", false);
}

std::vector<std::string> GgufFile::strings(std::string_view key) const {
  constexpr const char* where = "amc::GgufFile::strings";
  const GgufValue* value =
      typed(*this, key, where, "array of string", true, [](const GgufValue& v) {
        return v.type == GgufValueType::array &&
               std::get<GgufArray>(v.value).element_type == GgufValueType::string;
      });
  std::vector<std::string> out;
  const GgufArray& array = std::get<GgufArray>(value->value);
  out.reserve(array.elements.size());
  for (const GgufValue& element : array.elements)
    out.push_back(std::get<std::string>(element.value));
  return out;
}

std::vector<std::int64_t> GgufFile::integers(std::string_view key) const {
  constexpr const char* where = "amc::GgufFile::integers";
  const GgufValue* value =
      typed(*this, key, where, "array of an integer type (" + std::string(integer_type_list) + ")",
            true, [](const GgufValue& v) {
              if (v.type != GgufValueType::array) return false;
              const GgufValueType element = std::get<GgufArray>(v.value).element_type;
              return is_unsigned(element) || is_signed(element);
            });
  std::vector<std::int64_t> out;
  const GgufArray& array = std::get<GgufArray>(value->value);
  out.reserve(array.elements.size());
  for (std::size_t i = 0; i < array.elements.size(); ++i) {
    out.push_back(as_int64(array.elements[i], *this, key, where, bracketed(i)));
  }
  return out;
}

// --- writer -----------------------------------------------------------------------------------

namespace {

/// The header of a file to write (everything before the data section, padding included) and
/// where each tensor's bytes go within the data section.
struct Plan {
  std::vector<std::uint8_t> header;
  std::uint32_t alignment = default_alignment;
  std::vector<std::uint64_t> offsets;
  std::uint64_t data_size = 0;  // padded
};

class Writer {
 public:
  Writer(std::vector<std::uint8_t>& out, const char* where) : out_(out), where_(where) {}

  template <class T>
  void put(T value) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(&value);
    out_.insert(out_.end(), bytes, bytes + sizeof(T));
  }
  void put_string(std::string_view text) {
    put<std::uint64_t>(text.size());
    out_.insert(out_.end(), text.begin(), text.end());
  }

  /// Checks that `value` holds what its type says (and fits it) and appends it.
  void value(const GgufValue& value, int depth, const std::string& place) {
    const auto mismatch = [&](std::string_view held) {
      detail::throw_error(where_, place, " has type ", to_string(value.type), " but holds ", held);
    };
    const auto unsigned_value = [&](std::uint64_t max) {
      const auto* u = std::get_if<std::uint64_t>(&value.value);
      if (u == nullptr) mismatch("no uint64_t");
      AMC_CHECK(*u <= max, where_, place, " = ", *u, " does not fit ", to_string(value.type));
      return *u;
    };
    const auto signed_value = [&](std::int64_t min, std::int64_t max) {
      const auto* s = std::get_if<std::int64_t>(&value.value);
      if (s == nullptr) mismatch("no int64_t");
      AMC_CHECK(*s >= min && *s <= max, where_, place, " = ", *s, " does not fit ",
                to_string(value.type));
      return *s;
    };
    switch (value.type) {
      case GgufValueType::uint8:
        put(static_cast<std::uint8_t>(unsigned_value(0xFF)));
        return;
      case GgufValueType::uint16:
        put(static_cast<std::uint16_t>(unsigned_value(0xFFFF)));
        return;
      case GgufValueType::uint32:
        put(static_cast<std::uint32_t>(unsigned_value(0xFFFFFFFF)));
        return;
      case GgufValueType::uint64:
        put(unsigned_value(std::numeric_limits<std::uint64_t>::max()));
        return;
      case GgufValueType::int8:
        put(static_cast<std::int8_t>(signed_value(-128, 127)));
        return;
      case GgufValueType::int16:
        put(static_cast<std::int16_t>(signed_value(-32768, 32767)));
        return;
      case GgufValueType::int32:
        put(static_cast<std::int32_t>(signed_value(std::numeric_limits<std::int32_t>::min(),
                                                   std::numeric_limits<std::int32_t>::max())));
        return;
      case GgufValueType::int64:
        put(signed_value(std::numeric_limits<std::int64_t>::min(),
                         std::numeric_limits<std::int64_t>::max()));
        return;
      case GgufValueType::float32:
      case GgufValueType::float64: {
        const auto* d = std::get_if<double>(&value.value);
        if (d == nullptr) mismatch("no double");
        if (value.type == GgufValueType::float32) {
          put(static_cast<float>(*d));  // rounded to nearest; out of range becomes inf
        } else {
          put(*d);
        }
        return;
      }
      case GgufValueType::boolean: {
        const auto* b = std::get_if<bool>(&value.value);
        if (b == nullptr) mismatch("no bool");
        put(static_cast<std::uint8_t>(*b ? 1 : 0));
        return;
      }
      case GgufValueType::string: {
        const auto* s = std::get_if<std::string>(&value.value);
        if (s == nullptr) mismatch("no std::string");
        put_string(*s);
        return;
      }
      case GgufValueType::array: {
        const auto* a = std::get_if<GgufArray>(&value.value);
        if (a == nullptr) mismatch("no GgufArray");
        AMC_CHECK(depth < max_array_depth, where_, place, " nests arrays deeper than ",
                  max_array_depth, " levels");
        AMC_CHECK(is_value_type(static_cast<std::uint32_t>(a->element_type)), where_, place,
                  " has array element type ",
                  value_type_name(static_cast<std::uint32_t>(a->element_type)));
        put(static_cast<std::uint32_t>(a->element_type));
        put<std::uint64_t>(a->elements.size());
        for (std::size_t i = 0; i < a->elements.size(); ++i) {
          const GgufValue& element = a->elements[i];
          const std::string element_place = place + bracketed(i);
          AMC_CHECK(element.type == a->element_type, where_, element_place, " has type ",
                    to_string(element.type), " in an array of ", to_string(a->element_type));
          this->value(element, depth + 1, element_place);
        }
        return;
      }
    }
    detail::throw_error(where_, place, " has value type ",
                        value_type_name(static_cast<std::uint32_t>(value.type)));
  }

 private:
  std::vector<std::uint8_t>& out_;
  const char* where_;
};

Plan plan_file(std::span<const std::pair<std::string, GgufValue>> metadata,
               std::span<const GgufTensorToWrite> tensors, const char* where) {
  Plan plan;
  Writer writer(plan.header, where);
  writer.put(std::array<char, 4>{'G', 'G', 'U', 'F'});
  writer.put<std::uint32_t>(3);
  writer.put<std::uint64_t>(tensors.size());
  writer.put<std::uint64_t>(metadata.size());

  std::set<std::string_view> keys;
  for (const auto& [key, value] : metadata) {
    AMC_CHECK(!key.empty(), where, "metadata key is empty");
    AMC_CHECK(valid_utf8(key), where, "metadata key '", printable(key), "' is not valid UTF-8");
    AMC_CHECK(keys.insert(key).second, where, "duplicate metadata key '", printable(key), "'");
    if (key == "general.alignment") {
      AMC_CHECK(value.type == GgufValueType::uint32, where, "general.alignment has type ",
                to_string(value.type), ", not uint32");
      const auto* u = std::get_if<std::uint64_t>(&value.value);
      AMC_CHECK(u != nullptr && power_of_two(*u) && *u <= 0xFFFFFFFFu, where, "general.alignment ",
                u ? std::to_string(*u) : std::string("(not a uint64_t)"),
                " is not a uint32 power of two");
      plan.alignment = static_cast<std::uint32_t>(*u);
    }
    writer.put_string(key);
    writer.put(static_cast<std::uint32_t>(value.type));
    writer.value(value, 0, "metadata '" + printable(key) + "'");
  }

  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const GgufTensorToWrite& tensor : tensors) {
    const std::string name = "tensor '" + printable(tensor.name) + "'";
    AMC_CHECK(names.insert(tensor.name).second, where, "duplicate tensor name (", name, ")");
    const std::optional<GgmlTypeLayout> layout =
        ggml_type_layout(static_cast<std::uint32_t>(tensor.type));
    AMC_CHECK(layout.has_value(), where, name, ": unknown ggml type ",
              static_cast<std::uint32_t>(tensor.type));
    AMC_CHECK(!tensor.shape.empty() && tensor.shape.size() <= max_dims, where, name, ": shape ",
              shape_string(tensor.shape), " has ", tensor.shape.size(), " dimensions, not 1 to 4");
    for (const std::int64_t dim : tensor.shape) {
      AMC_CHECK(dim >= 1 && static_cast<std::uint64_t>(dim) <= max_dimension, where, name,
                ": dimension ", dim, " of shape ", shape_string(tensor.shape),
                " is outside [1, 2^62]");
    }
    std::string why;
    const std::optional<Extent> extent = extent_of(tensor.shape, *layout, why);
    AMC_CHECK(extent.has_value(), where, name, ": ", why);
    AMC_CHECK(tensor.data.size() == extent->bytes, where, name, ": ", tensor.data.size(),
              " bytes given but shape ", shape_string(tensor.shape), " of ", layout->name,
              " needs ", extent->bytes);
    writer.put_string(tensor.name);
    writer.put<std::uint32_t>(static_cast<std::uint32_t>(tensor.shape.size()));
    for (auto dim = tensor.shape.rbegin(); dim != tensor.shape.rend(); ++dim) {
      writer.put<std::uint64_t>(static_cast<std::uint64_t>(*dim));  // innermost first
    }
    writer.put(static_cast<std::uint32_t>(tensor.type));
    writer.put<std::uint64_t>(offset);
    plan.offsets.push_back(offset);
    offset += align_up(extent->bytes, plan.alignment);  // each below 2^63: no overflow in practice
  }
  plan.data_size = offset;
  plan.header.resize(static_cast<std::size_t>(align_up(plan.header.size(), plan.alignment)), 0);
  return plan;
}

}  // namespace

std::vector<std::uint8_t> gguf_bytes(std::span<const std::pair<std::string, GgufValue>> metadata,
                                     std::span<const GgufTensorToWrite> tensors) {
  Plan plan = plan_file(metadata, tensors, "amc::gguf_bytes");
  std::vector<std::uint8_t> image = std::move(plan.header);
  const std::size_t data_offset = image.size();
  image.resize(data_offset + static_cast<std::size_t>(plan.data_size), 0);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].data.empty()) continue;
    std::memcpy(image.data() + data_offset + plan.offsets[i], tensors[i].data.data(),
                tensors[i].data.size());
  }
  return image;
}

void write_gguf(const std::filesystem::path& path,
                std::span<const std::pair<std::string, GgufValue>> metadata,
                std::span<const GgufTensorToWrite> tensors) {
  constexpr const char* where = "amc::write_gguf";
  const Plan plan = plan_file(metadata, tensors, where);  // throws before any file exists
  AtomicFile file(path, where);
  file.write(std::as_bytes(std::span(plan.header)));
  static constexpr std::array<std::byte, 4096> zeros{};
  std::uint64_t written = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::uint64_t pad = plan.offsets[i] - written;
    while (pad > 0) {
      const std::size_t chunk =
          static_cast<std::size_t>(std::min<std::uint64_t>(pad, zeros.size()));
      file.write(std::span(zeros.data(), chunk));
      pad -= chunk;
    }
    file.write(tensors[i].data);
    written = plan.offsets[i] + tensors[i].data.size();
  }
  std::uint64_t pad = plan.data_size - written;
  while (pad > 0) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(pad, zeros.size()));
    file.write(std::span(zeros.data(), chunk));
    pad -= chunk;
  }
  file.commit();
}

}  // namespace amc

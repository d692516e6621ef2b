// GGUF reader (memory-mapped, fully validated before any tensor byte is handed out) and a small
// writer (atomic: temporary file, then rename), the file format of llama.cpp, ollama and LM
// Studio. Format (versions 2 and 3, little-endian): "GGUF", u32 version, u64 tensor count, u64
// metadata count; the metadata as key/value pairs (u64-length strings; 13 value types, arrays of
// any of them, arrays of arrays included); one info per tensor (name, u32 dimension count, u64
// dimensions innermost first, u32 ggml type, u64 offset into the data section); padding to
// general.alignment (32 when absent); the data section. Nothing here is model-specific: the
// reference transformer's GGUF loader (examples/) builds on it; gguf_quants.hpp dequantizes.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace amc {

static_assert(std::endian::native == std::endian::little,
              "amc's GGUF I/O assumes a little-endian host");

/// Metadata value types, numbered as in the file.
enum class GgufValueType : std::uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};

/// "uint8", "int32", "string", "array", ... ("invalid" for a number outside the enum).
std::string_view to_string(GgufValueType type) noexcept;

struct GgufValue;

/// A metadata array: its element type and elements (each of that type).
struct GgufArray {
  GgufValueType element_type = GgufValueType::uint8;
  std::vector<GgufValue> elements;
};

/// One metadata value, with the type the file gave it. Integers are held widened (unsigned
/// types as uint64, signed as int64), floats as double (a float32 converted exactly); `type`
/// keeps the stored type.
struct GgufValue {
  GgufValueType type = GgufValueType::uint8;
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, GgufArray> value;
};

/// ggml tensor types, numbered as in the file (ggml.h). The reader knows those ggml_types()
/// lists; gguf_quants.hpp says which it can dequantize.
enum class GgmlType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

/// The layout of one ggml type: elements per block and bytes per block (1 and the element size
/// for the plain types F32, F16, BF16, I8 ... F64).
struct GgmlTypeLayout {
  std::string_view name;  ///< as ggml spells it: "F32", "Q4_1", "Q6_K", ...
  std::int64_t block_elements;
  std::int64_t block_bytes;
};

/// The layout of the type numbered `type`, or nullopt when ggml has no such type (or amc does
/// not know it).
std::optional<GgmlTypeLayout> ggml_type_layout(std::uint32_t type) noexcept;

/// Every type the reader knows, in ggml's order (one row each of src/ggml_types.hpp's table).
std::span<const GgmlType> ggml_types() noexcept;

/// "Q4_1", ... ("unknown" for a number the reader does not know).
std::string_view to_string(GgmlType type) noexcept;

/// One tensor's entry in a GGUF file.
struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  /// Dimensions outermost first (amc's convention, and the Hugging Face one): the file's
  /// dimensions (ggml's ne, innermost first) reversed. A ggml weight [ne0 = in, ne1 = out] is
  /// shape {out, in}, the [out, in] of a PyTorch Linear.
  std::vector<std::int64_t> shape;
  /// Byte range within the data section (which starts at GgufFile::data_offset()).
  std::uint64_t offset = 0;
  std::uint64_t byte_size = 0;

  /// Number of elements: the product of shape (a validated file guarantees no overflow).
  std::uint64_t numel() const noexcept {
    std::uint64_t count = 1;
    for (const std::int64_t d : shape) count *= static_cast<std::uint64_t>(d);
    return count;
  }
};

/// A validated, read-only GGUF file.
///
/// open() maps the file (POSIX mmap, read-only, private) and from_bytes() takes an in-memory
/// image; both validate the whole header before returning, so every accessor afterwards stays
/// inside the file. Validation, each violation an amc::error "amc::GgufFile::open: <file>:
/// <what> (byte offset <offset>)" naming the field and the value (from_bytes: "amc::GgufFile::
/// from_bytes: <source name>: ...", as SafetensorsFile does): the magic; version 2 or 3 (1 is
/// refused by name: its counts and lengths are 32-bit; a byte-swapped version is refused as a
/// big-endian file);
/// tensor and metadata counts each at most what the remaining bytes could hold; every string
/// length and array length within the remaining bytes (no allocation is sized by a count
/// before the bytes it implies were found to exist); keys valid UTF-8, not empty, unique;
/// arrays nested at most 8 deep; value types among GgufValueType; general.alignment, when
/// present, a uint32 power of two; tensor names unique, 1 to 4 dimensions each in [1, 2^62],
/// their product (and byte size) without overflow, a known ggml type, the innermost dimension
/// a multiple of the type's block; offsets multiples of the alignment, each tensor inside the
/// file and no two overlapping; the padding before the data section present. A truncated file
/// is refused wherever it ends. Boolean values must be 0 or 1. Metadata string values and
/// tensor names are taken as bytes (tokenizer vocabularies hold pieces of UTF-8 characters);
/// messages print their unprintable bytes as \xNN. Gaps between tensors and bytes after the
/// last one are allowed (gguf-py reads such files), as is any order of the offsets.
///
/// Memory: every metadata element is a GgufValue (about 56 bytes however small the element),
/// so a file of N bytes of uint8 arrays costs up to about 56 N bytes parsed.
///
/// If another process truncates a mapped file, reading the lost pages raises SIGBUS, as with
/// any mmap-based reader. A moved-from file is empty (no tensors, no metadata).
class GgufFile {
 public:
  /// Maps and validates the file at `path`; throws amc::error on I/O failure or bad format.
  static GgufFile open(const std::filesystem::path& path);
  /// Validates and takes ownership of an in-memory file image; `source_name` stands in for the
  /// file name in error messages.
  static GgufFile from_bytes(std::vector<std::uint8_t> bytes, std::string source_name = "<memory>");

  GgufFile(GgufFile&& other) noexcept;
  GgufFile& operator=(GgufFile&& other) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  /// The file path, or the source name given to from_bytes().
  const std::string& source() const noexcept { return source_; }
  std::uint32_t version() const noexcept { return version_; }
  /// general.alignment, or 32 when the file does not set it.
  std::uint32_t alignment() const noexcept { return alignment_; }
  /// Offset of the data section within the file.
  std::uint64_t data_offset() const noexcept { return data_offset_; }

  /// Metadata in file order.
  std::span<const std::pair<std::string, GgufValue>> metadata() const noexcept { return metadata_; }
  /// The value of `key`, or nullptr.
  const GgufValue* find_value(std::string_view key) const noexcept;

  // Typed getters. Each throws amc::error "amc::GgufFile::<getter>: <file>: metadata '<key>'
  // ..." naming the key and, for a value of another type, the stored type and the one
  // expected. The optional_ getters return nullopt for an absent key and throw for a present
  // one of another type; the others throw for an absent key too.
  /// The value of an integer key (any of the 8 integer types), range-checked into int64.
  std::int64_t integer(std::string_view key) const;
  std::optional<std::int64_t> optional_integer(std::string_view key) const;
  /// The value of a float32 or float64 key.
  double number(std::string_view key) const;
  std::optional<double> optional_number(std::string_view key) const;
  bool boolean(std::string_view key) const;
  std::optional<bool> optional_boolean(std::string_view key) const;
  std::string string(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  /// An array of strings.
  std::vector<std::string> strings(std::string_view key) const;
  /// An array of any integer type, each element range-checked into int64.
  std::vector<std::int64_t> integers(std::string_view key) const;

  /// All tensors in file order.
  std::span<const GgufTensorInfo> tensors() const noexcept { return tensors_; }
  /// The tensor named `name`, or nullptr.
  const GgufTensorInfo* find(std::string_view name) const noexcept;
  /// The tensor named `name`; throws amc::error naming it and the file if absent.
  const GgufTensorInfo& at(std::string_view name) const;
  /// The tensor's bytes: [byte_size], aligned to alignment() relative to the file start (so in
  /// memory to min(alignment(), page size) for a mapped file).
  /// \param info  an entry of this file's tensors() (not of another file)
  std::span<const std::byte> bytes(const GgufTensorInfo& info) const noexcept;

 private:
  GgufFile() = default;
  struct Mapping;
  void parse(const char* where);
  const std::byte* base() const noexcept;

  std::string source_;
  std::unique_ptr<Mapping> mapping_;  // the mapped file (open), or empty
  std::vector<std::uint8_t> owned_;   // the image (from_bytes)
  std::size_t size_ = 0;
  std::uint32_t version_ = 0;
  std::uint32_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  // name -> position in metadata_ / tensors_ (find_value() and find() in O(log n)).
  std::map<std::string, std::size_t, std::less<>> metadata_index_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

/// A tensor to write: its name, type, shape (outermost first) and bytes (exactly the type's
/// size for that shape).
struct GgufTensorToWrite {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

/// Writes a GGUF version-3 file: `metadata` in the order given (general.alignment, if among
/// it, must be a uint32 power of two and sets the padding; 32 otherwise), then the tensors in
/// order, each padded to the alignment. Atomic (a temporary file renamed into place). Throws
/// amc::error naming the tensor or key for a size that disagrees with its type and shape, a
/// duplicate, or an I/O failure, and for anything the reader would refuse (an empty or
/// non-UTF-8 key, a value whose variant does not match its type or does not fit it, arrays
/// nested deeper than 8, a shape outside 1-4 dimensions in [1, 2^62], an unknown type). float32
/// values are rounded from the double. A file it writes opens with GgufFile::open.
void write_gguf(const std::filesystem::path& path,
                std::span<const std::pair<std::string, GgufValue>> metadata,
                std::span<const GgufTensorToWrite> tensors);

/// As write_gguf, into memory (for tests and fuzz corpora).
std::vector<std::uint8_t> gguf_bytes(std::span<const std::pair<std::string, GgufValue>> metadata,
                                     std::span<const GgufTensorToWrite> tensors);

}  // namespace amc

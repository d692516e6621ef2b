// safetensors reader (memory-mapped, fully validated before any tensor byte is handed out) and
// writer (atomic: temporary file, then rename). Format: 8-byte little-endian header length N,
// N bytes of UTF-8 JSON, then one contiguous byte buffer holding every tensor. Nothing here is
// model-specific; the Qwen2 loader and the tools build on it.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "amc/storage.hpp"

namespace amc {

// The format is little-endian and typed views reinterpret the file's bytes in place; a
// big-endian host would need byte swapping on every access, which amc does not implement.
static_assert(std::endian::native == std::endian::little,
              "amc's safetensors I/O assumes a little-endian host");

/// Element types of the safetensors format, spelled as in the file's "dtype" field.
enum class Dtype : std::uint8_t {
  BOOL,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  F64,
  I64,
  U64
};

/// Bytes per element of `dtype` (1 for BOOL and the F8 types).
std::size_t dtype_size(Dtype dtype) noexcept;

/// The file spelling of `dtype`, e.g. "BF16".
std::string_view to_string(Dtype dtype) noexcept;

/// The dtype spelled `text` (exact, case-sensitive, as in the file), or nullopt if unknown.
std::optional<Dtype> try_parse_dtype(std::string_view text) noexcept;

/// The dtype spelled `text`; throws amc::error naming `text` if it is not a safetensors dtype.
Dtype parse_dtype(std::string_view text);

/// C++ element types with a safetensors dtype of the same size and bit layout, usable with
/// SafetensorsFile::data<T>() and make_tensor_to_write(). BOOL and the F8 types have no C++
/// counterpart here: read them through SafetensorsFile::bytes().
template <class T>
concept SafetensorsElement =
    std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, bf16> ||
    std::same_as<T, f16> || std::same_as<T, std::int8_t> || std::same_as<T, std::uint8_t> ||
    std::same_as<T, std::int16_t> || std::same_as<T, std::uint16_t> ||
    std::same_as<T, std::int32_t> || std::same_as<T, std::uint32_t> ||
    std::same_as<T, std::int64_t> || std::same_as<T, std::uint64_t>;

/// The dtype stored for elements of type T.
template <SafetensorsElement T>
inline constexpr Dtype dtype_of = std::same_as<T, float>           ? Dtype::F32
                                  : std::same_as<T, double>        ? Dtype::F64
                                  : std::same_as<T, bf16>          ? Dtype::BF16
                                  : std::same_as<T, f16>           ? Dtype::F16
                                  : std::same_as<T, std::int8_t>   ? Dtype::I8
                                  : std::same_as<T, std::uint8_t>  ? Dtype::U8
                                  : std::same_as<T, std::int16_t>  ? Dtype::I16
                                  : std::same_as<T, std::uint16_t> ? Dtype::U16
                                  : std::same_as<T, std::int32_t>  ? Dtype::I32
                                  : std::same_as<T, std::uint32_t> ? Dtype::U32
                                  : std::same_as<T, std::int64_t>  ? Dtype::I64
                                                                   : Dtype::U64;

/// One tensor's entry in a safetensors header.
struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  /// Dimensions, outermost first; empty for a 0-rank (scalar) tensor.
  std::vector<std::int64_t> shape;
  /// Byte range [begin, end) within the data buffer (which starts right after the header).
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  /// Number of elements: the product of `shape` (1 for rank 0, 0 if any dimension is 0).
  /// A validated file guarantees this does not overflow.
  std::uint64_t numel() const noexcept {
    std::uint64_t count = 1;
    for (const std::int64_t dim : shape) count *= static_cast<std::uint64_t>(dim);
    return count;
  }
  std::uint64_t byte_size() const noexcept { return end - begin; }
};

/// A validated, read-only safetensors file.
///
/// open() maps the file (POSIX mmap, read-only, private) and from_bytes() takes an in-memory
/// buffer; both validate the whole header before returning, so every accessor afterwards stays
/// inside the buffer. Validation: at least 8 bytes; header length N at most 100,000,000 and
/// within the file; the header one UTF-8 JSON object (no NUL bytes, no duplicate keys at any
/// level, nesting at most 64 deep, trailing spaces allowed); an optional "__metadata__" object
/// of string values; every other entry an object with a known "dtype", a "shape" of
/// non-negative integers and "data_offsets" [begin, end] with begin <= end; each range exactly
/// prod(shape) * dtype_size bytes (overflow-checked); the ranges, sorted, contiguous from 0
/// with no hole or overlap and ending exactly at the end of the file. Zero-size and 0-rank
/// tensors are valid; unknown fields inside an entry are ignored, as the reference reader
/// does. Any violation throws amc::error "amc::SafetensorsFile::open: <file>: <what> (tensor
/// '<name>', byte offset <file offset>)" (from_bytes: its own name and the source name), with
/// whichever of tensor and offset locate the problem.
///
/// Alignment: tensor bytes start at 8 + N + begin in the file. Writers that pad the header to
/// a multiple of 8 (amc's does) make that 8-aligned only if `begin` is, which depends on the
/// sizes of the tensors before it. data<T>() therefore checks alignment and throws instead of
/// handing out a misaligned T pointer; to_f32() and bytes() work on any alignment.
///
/// If another process truncates a mapped file, reading the lost pages raises SIGBUS; amc
/// cannot guard against that, as with any mmap-based reader. A moved-from file is empty (no
/// tensors, no metadata).
class SafetensorsFile {
 public:
  /// Header lengths above this are refused (the limit of the reference implementation).
  static constexpr std::uint64_t max_header_size = 100'000'000;

  /// Maps and validates the file at `path`; throws amc::error on I/O failure or bad format.
  static SafetensorsFile open(const std::filesystem::path& path);

  /// Validates and takes ownership of an in-memory file image. `source_name` stands in for the
  /// file name in error messages.
  static SafetensorsFile from_bytes(std::vector<std::uint8_t> bytes,
                                    std::string source_name = "<memory>");

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  /// The file path, or the source name given to from_bytes().
  const std::string& source() const noexcept { return source_; }

  /// All tensors in file order (ascending data offset).
  std::span<const TensorInfo> tensors() const noexcept { return tensors_; }

  /// The "__metadata__" entries (empty if the file has none).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

  /// The tensor named `name`, or nullptr if there is none.
  const TensorInfo* find(std::string_view name) const noexcept;

  /// The tensor named `name`; throws amc::error naming the tensor and the file if absent.
  const TensorInfo& at(std::string_view name) const;

  /// Offset of the data buffer within the file: 8 + header length.
  std::uint64_t data_offset() const noexcept { return data_offset_; }

  /// The raw little-endian bytes of a tensor: [numel * dtype_size] bytes, any alignment.
  /// \param info  an entry of this file's tensors() (not of another file)
  std::span<const std::byte> bytes(const TensorInfo& info) const noexcept;
  /// The raw bytes of the tensor named `name`; throws amc::error if absent.
  std::span<const std::byte> bytes(std::string_view name) const { return bytes(at(name)); }

  /// Zero-copy typed view of the tensor named `name`: [numel] elements, row-major over its
  /// shape. Throws amc::error if the tensor is absent, if its dtype is not dtype_of<T> (the
  /// message names the tensor, the stored dtype and the requested type), or if its bytes are
  /// not aligned for T in memory (use to_f32() then). The view lives as long as this object.
  template <SafetensorsElement T>
  std::span<const T> data(std::string_view name) const {
    const TensorInfo& info = at(name);
    const std::span<const std::byte> raw = bytes(info);
    check_view(info, dtype_of<T>, alignof(T));
    if (raw.empty()) return {};
    // check_view proved the dtype (hence size and layout) and the alignment; the mapping or
    // buffer is an implicit-lifetime byte array, so viewing it as T is well defined.
    return {reinterpret_cast<const T*>(raw.data()), raw.size() / sizeof(T)};
  }

  /// The tensor named `name` converted to f32: [numel] values. Converts F32, BF16 and F16
  /// exactly, at any alignment; throws amc::error for other dtypes or an absent tensor.
  std::vector<float> to_f32(std::string_view name) const;

  /// As to_f32(name), writing into `out`.
  /// \param out  [numel] destination; throws amc::error if its size differs.
  void to_f32(std::string_view name, std::span<float> out) const;

 private:
  SafetensorsFile() = default;
  const std::byte* base() const noexcept;
  void parse(const char* where);
  void check_view(const TensorInfo& info, Dtype requested, std::size_t alignment) const;
  void release() noexcept;

  std::string source_;
  // Exactly one of the two backings holds the file image: an mmap (open) or a vector
  // (from_bytes). base() picks it, so moves never leave a dangling base pointer.
  void* mapping_ = nullptr;
  std::size_t mapping_size_ = 0;
  std::vector<std::uint8_t> owned_;
  std::uint64_t size_ = 0;
  std::uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

/// One tensor to write: its bytes are borrowed and must stay alive until the write returns.
struct TensorToWrite {
  std::string name;
  Dtype dtype = Dtype::F32;
  /// Dimensions, outermost first; empty for a 0-rank tensor.
  std::vector<std::int64_t> shape;
  /// [prod(shape) * dtype_size(dtype)] little-endian bytes, row-major.
  std::span<const std::byte> bytes;
};

/// A TensorToWrite borrowing `values`, with dtype_of<T>.
/// \param shape   dimensions, outermost first; prod(shape) must equal values.size()
/// \param values  [prod(shape)] row-major elements; must outlive the write
template <SafetensorsElement T>
TensorToWrite make_tensor_to_write(std::string name, std::vector<std::int64_t> shape,
                                   std::span<const T> values) {
  return TensorToWrite{std::move(name), dtype_of<T>, std::move(shape), std::as_bytes(values)};
}

/// The complete safetensors image of `tensors` (laid out contiguously in the given order) and
/// `metadata`, header padded with spaces to a multiple of 8. Throws amc::error, naming the
/// tensor, for an empty, duplicate or reserved ("__metadata__") name, a negative dimension,
/// an element count that overflows, or a byte length that differs from prod(shape) * size.
std::vector<std::uint8_t> serialize_safetensors(
    std::span<const TensorToWrite> tensors,
    const std::map<std::string, std::string>& metadata = {});

/// Writes the image serialize_safetensors() would build to `path`, streaming the tensor bytes.
/// Everything is validated before the first byte is written; the data go to a temporary file
/// in the same directory, which is flushed to disk and then renamed over `path`, so a failure
/// (thrown as amc::error) never leaves a truncated file at `path`.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace amc

// Zero-copy import of NumPy arrays and PyTorch tensors into the module, through DLPack.
//
// An argument is read through its __dlpack__ method (NumPy >= 1.22, PyTorch >= 1.10): the
// capsule's DLManagedTensor gives the data pointer, dtype, shape and strides of the producer's
// own memory, so nothing is copied and the module does not link libtorch. The capsule is held
// (not consumed) for as long as the import lives; dropping it lets the producer free its side.
// Objects without __dlpack__, and NumPy arrays that refuse to export (read-only ones), are read
// through the buffer protocol instead, also without a copy. Shapes and strides are in elements,
// outermost first.
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "amc/error.hpp"
#include "amc/storage.hpp"

namespace amc::python {

namespace py = pybind11;

/// Element types the module reads and writes (those of amc's storage types, and the rest of
/// what safetensors stores).
enum class ElementType : std::uint8_t {
  f32,
  f16,
  bf16,
  f64,
  i8,
  i16,
  i32,
  i64,
  u8,
  u16,
  u32,
  u64,
  boolean,
  unsupported
};

inline const char* to_string(ElementType type) {
  switch (type) {
    case ElementType::f32:
      return "float32";
    case ElementType::f16:
      return "float16";
    case ElementType::bf16:
      return "bfloat16";
    case ElementType::f64:
      return "float64";
    case ElementType::i8:
      return "int8";
    case ElementType::i16:
      return "int16";
    case ElementType::i32:
      return "int32";
    case ElementType::i64:
      return "int64";
    case ElementType::u8:
      return "uint8";
    case ElementType::u16:
      return "uint16";
    case ElementType::u32:
      return "uint32";
    case ElementType::u64:
      return "uint64";
    case ElementType::boolean:
      return "bool";
    case ElementType::unsupported:
      break;
  }
  return "unsupported";
}

inline std::size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::f64:
    case ElementType::i64:
    case ElementType::u64:
      return 8;
    case ElementType::f32:
    case ElementType::i32:
    case ElementType::u32:
      return 4;
    case ElementType::f16:
    case ElementType::bf16:
    case ElementType::i16:
    case ElementType::u16:
      return 2;
    default:
      return 1;
  }
}

/// Dimensions or strides of an imported array, held inline: an import allocates nothing (the
/// Python call overhead of a decode step is a few microseconds; bench/python_overhead.py).
class Dims {
 public:
  static constexpr std::size_t kMax = 16;
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::int64_t operator[](std::size_t i) const { return values_[i]; }
  std::int64_t& operator[](std::size_t i) { return values_[i]; }
  std::int64_t back() const { return values_[size_ - 1]; }
  const std::int64_t* begin() const { return values_.data(); }
  const std::int64_t* end() const { return values_.data() + size_; }
  void resize(std::size_t n, std::int64_t value = 0) {
    for (std::size_t i = size_; i < n; ++i) values_[i] = value;
    size_ = n;
  }
  void push_back(std::int64_t value) { values_[size_++] = value; }
  friend bool operator==(const Dims& a, const Dims& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  std::vector<std::int64_t> vector() const { return {begin(), end()}; }

 private:
  std::array<std::int64_t, kMax> values_{};
  std::size_t size_ = 0;
};

/// One imported array: a borrowed view of its owner's memory.
struct Tensor {
  const void* data = nullptr;
  ElementType type = ElementType::unsupported;
  Dims shape;           // outermost first
  Dims strides;         // in elements, outermost first
  const char* fn = "";  // the function and argument, for messages
  std::string arg;
  const char* via = "";   // "dlpack" or "buffer"
  py::object keep_alive;  // the DLPack capsule, or the buffer owner
  std::shared_ptr<py::buffer_info> buffer;

  /// "<function>: <argument>", how messages name it.
  std::string name() const { return std::string(fn) + ": " + arg; }

  std::int64_t dim() const { return static_cast<std::int64_t>(shape.size()); }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (const std::int64_t s : shape) n *= s;
    return n;
  }
  /// Row-major contiguous (strides of size-1 dimensions do not matter).
  bool contiguous() const {
    std::int64_t expected = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
      if (shape[i] != 1 && strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }
  std::string shape_string() const {
    std::string out = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
      out += (i ? ", " : "") + std::to_string(shape[i]);
    return out + "]";
  }
  std::string strides_string() const {
    std::string out = "(";
    for (std::size_t i = 0; i < strides.size(); ++i)
      out += (i ? ", " : "") + std::to_string(strides[i]);
    return out + ")";
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

namespace detail {

inline ElementType from_dlpack(DLDataType t) {
  if (t.lanes != 1) return ElementType::unsupported;
  switch (t.code) {
    case kDLFloat:
      return t.bits == 32   ? ElementType::f32
             : t.bits == 16 ? ElementType::f16
             : t.bits == 64 ? ElementType::f64
                            : ElementType::unsupported;
    case kDLBfloat:
      return t.bits == 16 ? ElementType::bf16 : ElementType::unsupported;
    case kDLInt:
      return t.bits == 8    ? ElementType::i8
             : t.bits == 16 ? ElementType::i16
             : t.bits == 32 ? ElementType::i32
             : t.bits == 64 ? ElementType::i64
                            : ElementType::unsupported;
    case kDLUInt:
      // PyTorch (1.13) exports bool as an 8-bit unsigned integer; it reads the same.
      return t.bits == 8    ? ElementType::u8
             : t.bits == 16 ? ElementType::u16
             : t.bits == 32 ? ElementType::u32
             : t.bits == 64 ? ElementType::u64
                            : ElementType::unsupported;
    default:
      // DLPack 0.8's kDLBool (6), not in Debian's 0.6 header.
      return t.code == 6 && t.bits == 8 ? ElementType::boolean : ElementType::unsupported;
  }
}

inline ElementType from_buffer_format(const std::string& format, std::size_t itemsize) {
  if (format.empty()) return ElementType::unsupported;
  const char c = format.back();  // skips byte-order prefixes ('<', '=', '@')
  if (format.size() > 1 && format[0] == '>') return ElementType::unsupported;
  switch (c) {
    case 'f':
      return ElementType::f32;
    case 'd':
      return ElementType::f64;
    case 'e':
      return ElementType::f16;
    case '?':
      return ElementType::boolean;
    case 'b':
      return ElementType::i8;
    case 'B':
      return ElementType::u8;
    case 'h':
      return ElementType::i16;
    case 'H':
      return ElementType::u16;
    case 'i':
    case 'l':
    case 'q':
      return itemsize == 4   ? ElementType::i32
             : itemsize == 8 ? ElementType::i64
                             : ElementType::unsupported;
    case 'I':
    case 'L':
    case 'Q':
      return itemsize == 4   ? ElementType::u32
             : itemsize == 8 ? ElementType::u64
                             : ElementType::unsupported;
    default:
      return ElementType::unsupported;
  }
}

inline std::string type_name(py::handle obj) {
  return py::str(py::type::of(obj).attr("__name__")).cast<std::string>();
}

}  // namespace detail

/// PyTorch's C-level DLPack export, once torch is imported: torch.Tensor.__dlpack__ is Python
/// code around it that costs about 0.3 us more per call (argument checks that matter to
/// consumers who take ownership; amc only reads).
struct TorchExport {
  PyObject* tensor_type = nullptr;  // torch.Tensor
  PyObject* to_dlpack = nullptr;    // torch._C._to_dlpack
  bool looked = false;

  void look_up() {
    PyObject* modules = PySys_GetObject("modules");  // borrowed
    PyObject* torch = modules ? PyDict_GetItemString(modules, "torch") : nullptr;
    if (torch == nullptr) return;  // not imported (yet): look again next time
    looked = true;
    py::module_ t = py::reinterpret_borrow<py::module_>(torch);
    try {
      tensor_type = py::object(t.attr("Tensor")).release().ptr();
      to_dlpack = py::object(t.attr("_C").attr("_to_dlpack")).release().ptr();
    } catch (py::error_already_set&) {
      tensor_type = to_dlpack = nullptr;  // another torch: use __dlpack__
    }
  }
};

inline TorchExport& torch_export() {
  static TorchExport e;
  if (!e.looked) e.look_up();
  return e;
}

/// Reads `obj` (a NumPy array, a PyTorch tensor, anything with __dlpack__ or the buffer
/// protocol) without copying. `fn` and `arg` name the function and the argument in messages.
/// Throws amc::error when the object is neither, lives on another device than the CPU, or has
/// an element type or more dimensions than the module knows.
inline Tensor import_tensor(py::handle obj, const char* fn, std::string arg) {
  Tensor t;
  t.fn = fn;
  t.arg = std::move(arg);
  if (obj.is_none()) throw amc::error(t.name() + " is None; expected an array or a tensor");
  std::string dlpack_error;
  py::object capsule;
  const TorchExport& torch = torch_export();
  if (torch.to_dlpack != nullptr &&
      PyObject_TypeCheck(obj.ptr(), reinterpret_cast<PyTypeObject*>(torch.tensor_type))) {
    PyObject* result = PyObject_CallOneArg(torch.to_dlpack, obj.ptr());
    if (result == nullptr) throw py::error_already_set();
    capsule = py::reinterpret_steal<py::object>(result);
  } else if (PyObject* method = PyObject_GetAttrString(obj.ptr(), "__dlpack__")) {
    PyObject* result = PyObject_CallNoArgs(method);
    Py_DECREF(method);
    if (result != nullptr) {
      capsule = py::reinterpret_steal<py::object>(result);
    } else {
      // NumPy refuses to export read-only arrays (DLPack cannot mark them read-only); those
      // still offer the buffer protocol below. Anything else is reported as it is.
      dlpack_error = py::error_already_set().what();
    }
  } else {
    PyErr_Clear();  // no __dlpack__
  }
  if (capsule) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    if (managed == nullptr) {
      PyErr_Clear();
      throw amc::error(t.name() + ": __dlpack__ returned no usable DLPack capsule (" +
                       detail::type_name(obj) + ")");
    }
    const DLTensor& dl = managed->dl_tensor;
    if (dl.device.device_type != kDLCPU) {
      throw amc::error(t.name() + ": the tensor is on DLPack device type " +
                       std::to_string(static_cast<int>(dl.device.device_type)) + " (device " +
                       std::to_string(dl.device.device_id) +
                       "); amc reads CPU memory only: move it with .cpu()");
    }
    t.type = detail::from_dlpack(dl.dtype);
    if (t.type == ElementType::unsupported) {
      throw amc::error(t.name() + ": unsupported DLPack dtype (code " +
                       std::to_string(static_cast<int>(dl.dtype.code)) + ", " +
                       std::to_string(static_cast<int>(dl.dtype.bits)) + " bits, " +
                       std::to_string(static_cast<int>(dl.dtype.lanes)) + " lanes)");
    }
    if (dl.ndim < 0 || static_cast<std::size_t>(dl.ndim) > Dims::kMax) {
      throw amc::error(t.name() + " has " + std::to_string(dl.ndim) + " dimensions, more than " +
                       std::to_string(Dims::kMax));
    }
    const auto ndim = static_cast<std::size_t>(dl.ndim);
    t.shape.resize(ndim);
    t.strides.resize(ndim, 1);
    for (std::size_t i = 0; i < ndim; ++i) t.shape[i] = dl.shape[i];
    if (dl.strides != nullptr) {
      for (std::size_t i = 0; i < ndim; ++i) t.strides[i] = dl.strides[i];
    } else {  // compact row-major
      for (std::size_t i = ndim; i-- > 1;) t.strides[i - 1] = t.strides[i] * t.shape[i];
    }
    t.data = static_cast<const char*>(dl.data) + dl.byte_offset;
    t.via = "dlpack";
    t.keep_alive = std::move(capsule);
    return t;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    if (!dlpack_error.empty()) {
      throw amc::error(t.name() + ": cannot read the " + detail::type_name(obj) +
                       " through DLPack: " + dlpack_error);
    }
    throw amc::error(t.name() + ": expected a NumPy array or a PyTorch tensor (an object with " +
                     "__dlpack__ or the buffer protocol), got " + detail::type_name(obj));
  }
  auto buffer =
      std::make_shared<py::buffer_info>(py::reinterpret_borrow<py::buffer>(obj).request());
  t.type = detail::from_buffer_format(buffer->format, static_cast<std::size_t>(buffer->itemsize));
  if (t.type == ElementType::unsupported ||
      element_size(t.type) != static_cast<std::size_t>(buffer->itemsize)) {
    throw amc::error(t.name() + ": unsupported buffer format '" + buffer->format + "' (" +
                     std::to_string(buffer->itemsize) + "-byte items)");
  }
  if (buffer->shape.size() > Dims::kMax) {
    throw amc::error(t.name() + " has " + std::to_string(buffer->shape.size()) +
                     " dimensions, more than " + std::to_string(Dims::kMax));
  }
  for (const py::ssize_t s : buffer->shape) t.shape.push_back(s);
  for (const py::ssize_t s : buffer->strides) {
    if (s % buffer->itemsize != 0) {
      throw amc::error(t.name() + ": a byte stride of " + std::to_string(s) +
                       " is not a multiple of the item size; pass a contiguous copy");
    }
    t.strides.push_back(s / buffer->itemsize);
  }
  t.data = buffer->ptr;
  t.via = "buffer";
  t.keep_alive = py::reinterpret_borrow<py::object>(obj);
  t.buffer = std::move(buffer);
  return t;
}

}  // namespace amc::python

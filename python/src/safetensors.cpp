// amc.load_safetensors, amc.save_safetensors and the metadata readers: amc's safetensors reader
// and writer (amc/io/safetensors.hpp) with NumPy arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "amc/amc.hpp"
#include "amc/io/safetensors.hpp"
#include "bindings.hpp"
#include "inputs.hpp"
#include "outputs.hpp"

namespace amc::python {
namespace {

py::dtype numpy_dtype(Dtype dtype, const std::string& name, const std::string& bf16) {
  switch (dtype) {
    case Dtype::F32:
      return py::dtype::of<float>();
    case Dtype::F64:
      return py::dtype::of<double>();
    case Dtype::F16:
      return py::dtype("float16");
    case Dtype::BF16:
      return bf16 == "uint16" ? py::dtype::of<std::uint16_t>() : py::dtype::of<float>();
    case Dtype::BOOL:
      return py::dtype::of<bool>();
    case Dtype::U8:
      return py::dtype::of<std::uint8_t>();
    case Dtype::I8:
      return py::dtype::of<std::int8_t>();
    case Dtype::I16:
      return py::dtype::of<std::int16_t>();
    case Dtype::U16:
      return py::dtype::of<std::uint16_t>();
    case Dtype::I32:
      return py::dtype::of<std::int32_t>();
    case Dtype::U32:
      return py::dtype::of<std::uint32_t>();
    case Dtype::I64:
      return py::dtype::of<std::int64_t>();
    case Dtype::U64:
      return py::dtype::of<std::uint64_t>();
    default:
      fail("amc.load_safetensors: tensor '" + name + "' has dtype " +
           std::string(to_string(dtype)) + ", which NumPy has no type for");
  }
}

py::dict load_safetensors(const std::filesystem::path& path, const std::string& bf16) {
  if (bf16 != "float32" && bf16 != "uint16") {
    fail(
        "amc.load_safetensors: bf16 must be 'float32' (converted exactly) or 'uint16' (the raw "
        "bits), got '" +
        bf16 + "'");
  }
  const SafetensorsFile file = SafetensorsFile::open(path);
  py::dict out;
  for (const TensorInfo& info : file.tensors()) {
    std::vector<py::ssize_t> shape(info.shape.begin(), info.shape.end());
    py::array array(numpy_dtype(info.dtype, info.name, bf16), shape);
    const std::span<const std::byte> bytes = file.bytes(info);
    if (info.dtype == Dtype::BF16 && bf16 == "float32") {
      file.to_f32(info.name, std::span<float>(static_cast<float*>(array.mutable_data()),
                                              static_cast<std::size_t>(info.numel())));
    } else if (!bytes.empty()) {
      std::memcpy(array.mutable_data(), bytes.data(), bytes.size());
    }
    out[py::str(info.name)] = array;
  }
  return out;
}

std::map<std::string, std::string> safetensors_metadata(const std::filesystem::path& path) {
  return SafetensorsFile::open(path).metadata();
}

Dtype safetensors_dtype(const Tensor& t) {
  switch (t.type) {
    case ElementType::f32:
      return Dtype::F32;
    case ElementType::f16:
      return Dtype::F16;
    case ElementType::bf16:
      return Dtype::BF16;
    case ElementType::f64:
      return Dtype::F64;
    case ElementType::i8:
      return Dtype::I8;
    case ElementType::i16:
      return Dtype::I16;
    case ElementType::i32:
      return Dtype::I32;
    case ElementType::i64:
      return Dtype::I64;
    case ElementType::u8:
      return Dtype::U8;
    case ElementType::u16:
      return Dtype::U16;
    case ElementType::u32:
      return Dtype::U32;
    case ElementType::u64:
      return Dtype::U64;
    case ElementType::boolean:
      return Dtype::BOOL;
    default:
      fail(t.name() + " has an unsupported dtype");
  }
}

void save_safetensors(const std::filesystem::path& path, const py::dict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> imported;
  std::vector<TensorToWrite> writes;
  imported.reserve(tensors.size());
  for (const auto& [key, value] : tensors) {
    if (!py::isinstance<py::str>(key)) {
      fail("amc.save_safetensors: tensor names must be str, got " + detail::type_name(key));
    }
    const std::string name = key.cast<std::string>();
    Tensor t = import_tensor(value, "amc.save_safetensors", "tensor '" + name + "'");
    if (!t.contiguous()) {
      fail(t.name() + " has strides " + t.strides_string() + " for shape " + t.shape_string() +
           ": it is not contiguous; pass .contiguous() or np.ascontiguousarray()");
    }
    writes.push_back(
        {name, safetensors_dtype(t), t.shape.vector(),
         std::span<const std::byte>(static_cast<const std::byte*>(t.data),
                                    static_cast<std::size_t>(t.numel()) * element_size(t.type))});
    imported.push_back(std::move(t));
  }
  write_safetensors(path, writes, metadata);
}

}  // namespace

void bind_safetensors(py::module_& m) {
  m.def("load_safetensors", &load_safetensors, py::arg("path"), py::arg("bf16") = "float32",
        "Every tensor of a safetensors file as a NumPy array (copies), in file order.");
  m.def("safetensors_metadata", &safetensors_metadata, py::arg("path"));
  m.def(
      "safetensors_dtypes",
      [](const std::filesystem::path& path) {
        std::map<std::string, std::string> out;
        const SafetensorsFile file = SafetensorsFile::open(path);
        for (const TensorInfo& info : file.tensors())
          out[info.name] = std::string(to_string(info.dtype));
        return out;
      },
      py::arg("path"), "{name: dtype as the file spells it, e.g. 'BF16'}");
  m.def("save_safetensors", &save_safetensors, py::arg("path"), py::arg("tensors"),
        py::arg("metadata") = std::map<std::string, std::string>{},
        "Writes contiguous arrays or tensors (read in place) atomically.");
}

}  // namespace amc::python

// amc._amc: the Python bindings of amc (pybind11). The Python package `amc` (python/amc)
// re-exports these and adds the pure-Python parts (the analysis as amc-bounds' JSON, the
// PyTorch attention function).
//
// Inputs are NumPy arrays or PyTorch tensors read in place (tensor_import.hpp); outputs are
// NumPy arrays owned by Python. Every error the library or these bindings detect is an
// amc::error, raised in Python as amc.Error with the same message. Heavy calls release the GIL.
//
// One file per part of the API: config.cpp (amc.SparseConfig, settings, rules), decode.cpp
// (the decoders), summaries.cpp (block summaries), analysis.cpp (amc-bounds' analysis, margins,
// omitted mass), safetensors.cpp; inputs.hpp and outputs.hpp hold what they share.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "amc/amc.hpp"
#include "bindings.hpp"
#include "inputs.hpp"
#include "outputs.hpp"
#include "tensor_import.hpp"

namespace amc::python {
namespace {

py::dict inspect_input(py::handle obj) {
  const Tensor t = import_tensor(obj, "amc._inspect_input", "x");
  return py::dict("address"_a = reinterpret_cast<std::uintptr_t>(t.data),
                  "dtype"_a = to_string(t.type), "shape"_a = t.shape.vector(),
                  "strides"_a = t.strides.vector(), "via"_a = t.via);
}

}  // namespace
}  // namespace amc::python

PYBIND11_MODULE(_amc, m) {
  using namespace amc;
  using namespace amc::python;
  m.doc() = "amc: attention-mass-aware sparse decoding (C++ core; see the amc package)";
  m.attr("__version__") = std::string(version());
  // amc.Error: every amc::error, with its message (a RuntimeError, as amc::error is a
  // std::runtime_error).
  py::register_exception<amc::error>(m, "Error", PyExc_RuntimeError);

  bind_config(m);
  bind_decode(m);
  bind_summaries(m);
  bind_analysis(m);
  m.def(
      "kernels", [] { return std::string(kernels::active().name); },
      "The SIMD kernel table in use (scalar, sse2, avx2, avx512).");
  m.def(
      "bf16_products_available",
      [](const std::string& dtype, std::int64_t head_dim) {
        return bf16_products_available(parse_storage_type(dtype), head_dim);
      },
      py::arg("dtype"), py::arg("head_dim"),
      "Whether DenseDecoder(arithmetic='bf16_products') runs as such for KV of this dtype "
      "('f32', 'bf16', 'f16') and head_dim here (AVX512_BF16, bf16 KV, head_dim a multiple of "
      "32); elsewhere it runs exact_f32.");
  bind_safetensors(m);
  m.def("_inspect_input", &inspect_input, "What the module reads for x: address, dtype, ...");
}

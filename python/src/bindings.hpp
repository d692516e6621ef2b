// The parts of the module amc._amc (module.cpp), one function per file, and the one helper
// they share beyond inputs.hpp and outputs.hpp.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "amc/amc.hpp"

namespace amc::python {

namespace py = pybind11;

void bind_config(py::module_& m);       // config.cpp
void bind_decode(py::module_& m);       // decode.cpp
void bind_summaries(py::module_& m);    // summaries.cpp
void bind_analysis(py::module_& m);     // analysis.cpp
void bind_safetensors(py::module_& m);  // safetensors.cpp

/// `config` (an amc.SparseConfig or None: the defaults) with `settings` applied, validated.
SparseConfig make_config(const std::optional<SparseConfig>& config, const py::kwargs& settings);

}  // namespace amc::python

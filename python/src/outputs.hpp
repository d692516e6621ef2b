// What the bindings return: NumPy arrays owned by Python, copied from amc's results.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "amc/amc.hpp"

namespace amc::python {

namespace py = pybind11;
using namespace pybind11::literals;

template <class T>
inline py::array_t<T> vector_array(const std::vector<T>& values) {
  py::array_t<T> out(static_cast<py::ssize_t>(values.size()));
  if (!values.empty()) std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(T));
  return out;
}

inline py::array_t<std::int64_t> ranges_array(const Support& support) {
  py::array_t<std::int64_t> out(
      {static_cast<py::ssize_t>(support.ranges().size()), static_cast<py::ssize_t>(2)});
  auto w = out.mutable_unchecked<2>();
  for (std::size_t i = 0; i < support.ranges().size(); ++i) {
    w(static_cast<py::ssize_t>(i), 0) = support.ranges()[i].begin;
    w(static_cast<py::ssize_t>(i), 1) = support.ranges()[i].end;
  }
  return out;
}

inline py::array_t<std::int64_t> positions_array(const Support& support) {
  return vector_array(support.positions());
}

/// [rows, cols] float32 copy of a row-major map.
inline py::array_t<float> matrix_array(
    const Eigen::Map<const RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>>& m) {
  py::array_t<float> out({static_cast<py::ssize_t>(m.rows()), static_cast<py::ssize_t>(m.cols())});
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    std::memcpy(out.mutable_data(r, 0), m.row(r).data(), static_cast<std::size_t>(m.cols()) * 4);
  return out;
}

/// A SummaryOptions as {channel_bounds, value_norms, sub_blocks, bf16_copies}.
inline py::dict summary_options_dict(const SummaryOptions& o) {
  return py::dict("channel_bounds"_a = o.channel_bounds, "value_norms"_a = o.value_norms,
                  "sub_blocks"_a = o.sub_blocks, "bf16_copies"_a = o.bf16_copies);
}

}  // namespace amc::python

// amc-bounds' analysis of one decode step (amc._analyse, wrapped by python/amc as the tool's
// JSON), logit margins and the omitted-mass functions.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "amc/amc.hpp"
#include "amc/io/step_analysis_json.hpp"
#include "amc/math/margin.hpp"
#include "amc/math/omitted_mass.hpp"
#include "amc/math/step_analysis.hpp"
#include "bindings.hpp"
#include "inputs.hpp"
#include "outputs.hpp"

namespace amc::python {
namespace {

py::tuple analyse(py::handle q_obj, py::handle k_obj, py::handle v_obj,
                  const SparseConfig& config) {
  constexpr const char* fn = "amc.analyse";
  const Tensor q = import_tensor(q_obj, fn, "q");
  const Tensor k = import_tensor(k_obj, fn, "k");
  const Tensor v = import_tensor(v_obj, fn, "v");
  check_dim(q, 2, "[query heads, head_dim]");
  check_dim(k, 3, "[KV heads, positions, head_dim]");
  check_dim(v, 3, "[KV heads, positions, head_dim]");
  if (k.shape != v.shape) {
    fail(std::string(fn) + ": k " + k.shape_string() + " and v " + v.shape_string() +
         " must have the same shape");
  }
  if (k.shape[2] != q.shape[1]) {
    fail(std::string(fn) + ": k has head_dim " + std::to_string(k.shape[2]) + " but q has " +
         std::to_string(q.shape[1]));
  }
  // As amc-bounds: every input converted to f32 (exact for f16 and bf16); f32 contiguous inputs
  // are read in place.
  const F32Flat qf = f32_flat(q), kf = f32_flat(k), vf = f32_flat(v);
  const StepInputs in{q.shape[0], k.shape[0], k.shape[1], k.shape[2],
                      qf.values,  kf.values,  vf.values};
  StepAnalysis analysis;
  {
    py::gil_scoped_release release;
    analysis = analyse_step(in, config);
  }
  return py::make_tuple(analysis, in.query_heads, in.kv_heads, in.positions, in.head_dim);
}

/// The JSON text amc-bounds --json prints for the same step, less "input" (one schema:
/// amc/io/step_analysis_json.hpp).
std::string analysis_json(const StepAnalysis& analysis, const SparseConfig& config,
                          std::int64_t query_heads, std::int64_t kv_heads, std::int64_t positions,
                          std::int64_t head_dim) {
  const StepInputs shape{query_heads, kv_heads, positions, head_dim, {}, {}, {}};
  return step_analysis_json(analysis, shape, config, kernels::active().name).dump();
}

}  // namespace

void bind_analysis(py::module_& m) {
  py::class_<HeadAnalysis>(m, "HeadAnalysis", "amc-bounds' per-head record")
      .def_readonly("head", &HeadAnalysis::head)
      .def_readonly("kv_head", &HeadAnalysis::kv_head)
      .def_readonly("n", &HeadAnalysis::positions)
      .def_readonly("support_size", &HeadAnalysis::support_size)
      .def_readonly("selected_blocks", &HeadAnalysis::selected_blocks)
      .def_property_readonly("support",
                             [](const HeadAnalysis& a) { return ranges_array(a.support); })
      .def_readonly("lse_support", &HeadAnalysis::lse_support)
      .def_readonly("lse_all", &HeadAnalysis::lse_all)
      .def_readonly("retained_mass", &HeadAnalysis::retained_mass)
      .def_readonly("omitted_mass", &HeadAnalysis::omitted_mass)
      .def_readonly("error_norm", &HeadAnalysis::error_norm)
      .def_readonly("identity_residual", &HeadAnalysis::identity_residual)
      .def_readonly("relative_identity_residual", &HeadAnalysis::relative_identity_residual)
      .def_readonly("dense_operator_error", &HeadAnalysis::dense_operator_error)
      .def_readonly("sparse_operator_error", &HeadAnalysis::sparse_operator_error)
      .def_readonly("value_bound", &HeadAnalysis::value_bound)
      .def_readonly("loose_value_bound", &HeadAnalysis::loose_value_bound)
      .def_readonly("direction_cosine", &HeadAnalysis::direction_cosine)
      .def_readonly("certified_omitted_mass_bound", &HeadAnalysis::certified_omitted_mass_bound)
      .def_readonly("certified_log_omitted_mass_bound",
                    &HeadAnalysis::certified_log_omitted_mass_bound)
      .def_readonly("certified_error_bound", &HeadAnalysis::certified_error_bound)
      .def_readonly("needed_k", &HeadAnalysis::needed_k);
  py::class_<StepSummary>(m, "AnalysisSummary", "amc-bounds' summary: extremes over the heads")
      .def_readonly("max_omitted_mass", &StepSummary::max_omitted_mass)
      .def_readonly("min_retained_mass", &StepSummary::min_retained_mass)
      .def_readonly("max_error_norm", &StepSummary::max_error_norm)
      .def_readonly("max_identity_residual", &StepSummary::max_identity_residual)
      .def_readonly("max_relative_identity_residual", &StepSummary::max_relative_identity_residual)
      .def_readonly("max_operator_error", &StepSummary::max_operator_error)
      .def_readonly("max_certified_omitted_mass_bound",
                    &StepSummary::max_certified_omitted_mass_bound)
      .def_readonly("max_certified_error_bound", &StepSummary::max_certified_error_bound)
      .def_readonly("max_needed_k", &StepSummary::max_needed_k);
  py::class_<StepAnalysis>(m, "StepAnalysis")
      .def_readonly("scale", &StepAnalysis::scale)
      .def_readonly("heads", &StepAnalysis::heads)
      .def_readonly("summary", &StepAnalysis::summary);
  m.def("_analyse", &analyse, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("config"));
  m.def("_analysis_json", &analysis_json, py::arg("analysis"), py::arg("config"),
        py::arg("query_heads"), py::arg("kv_heads"), py::arg("positions"), py::arg("head_dim"));

  // --- margins and omitted mass ---
  py::class_<LogitMargin>(m, "LogitMargin")
      .def_readonly("top", &LogitMargin::top)
      .def_readonly("runner_up", &LogitMargin::runner_up)
      .def_readonly("top_logit", &LogitMargin::top_logit)
      .def_readonly("runner_up_logit", &LogitMargin::runner_up_logit)
      .def_readonly("margin", &LogitMargin::margin)
      .def("__repr__", [](const LogitMargin& l) {
        return "amc.LogitMargin(top=" + std::to_string(l.top) +
               ", runner_up=" + std::to_string(l.runner_up) +
               ", margin=" + py::repr(py::float_(l.margin)).cast<std::string>() + ")";
      });
  const auto vector_input = [](py::handle obj, const char* fn, const char* arg) {
    const Tensor t = import_tensor(obj, fn, arg);
    check_dim(t, 1, "[size]");
    return f32_rows(t);
  };
  const auto matrix_input = [](py::handle obj, const char* fn, const char* arg) {
    const Tensor t = import_tensor(obj, fn, arg);
    check_dim(t, 2, "[vocab, hidden]");
    return f32_rows(t);
  };
  m.def("logit_margin", [vector_input](py::handle logits) {
    const F32Rows z = vector_input(logits, "amc.logit_margin", "logits");
    return logit_margin(z.vector());
  });
  m.def(
      "greedy_token_kept",
      [vector_input, matrix_input](py::handle unembedding, py::handle logits, py::handle delta,
                                   std::int64_t top) {
        const F32Rows w = matrix_input(unembedding, "amc.greedy_token_kept", "unembedding");
        const F32Rows z = vector_input(logits, "amc.greedy_token_kept", "logits");
        const F32Rows e = vector_input(delta, "amc.greedy_token_kept", "delta");
        return greedy_token_kept(w.matrix(), z.vector(), e.vector(), top);
      },
      py::arg("unembedding"), py::arg("logits"), py::arg("delta"), py::arg("top"));
  m.def(
      "sufficient_radius",
      [matrix_input](py::handle unembedding, std::int64_t top, double margin) {
        const F32Rows w = matrix_input(unembedding, "amc.sufficient_radius", "unembedding");
        return sufficient_radius(w.matrix(), top, margin);
      },
      py::arg("unembedding"), py::arg("top"), py::arg("margin"));
  m.def(
      "unembedding_row_norms",
      [matrix_input](py::handle unembedding) {
        const F32Rows w = matrix_input(unembedding, "amc.unembedding_row_norms", "unembedding");
        const Eigen::VectorXd norms = unembedding_row_norms(w.matrix());
        return vector_array(std::vector<double>(norms.data(), norms.data() + norms.size()));
      },
      py::arg("unembedding"));
  m.def(
      "sufficient_radius_from_norms",
      [](py::handle row_norms, std::int64_t top, double margin) {
        const Tensor t = import_tensor(row_norms, "amc.sufficient_radius_from_norms", "row_norms");
        check_dim(t, 1, "[vocab]");
        Eigen::VectorXd norms(t.shape[0]);
        for (std::int64_t i = 0; i < t.shape[0]; ++i) {
          norms[i] = t.type == ElementType::f64 ? t.as<double>()[i * t.strides[0]]
                                                : element_as_float(t, i * t.strides[0]);
        }
        return sufficient_radius_from_norms(norms, top, margin);
      },
      py::arg("row_norms"), py::arg("top"), py::arg("margin"));
  m.def("attention_error_keeps_token", &attention_error_keeps_token, py::arg("omitted_mass"),
        py::arg("omitted_gap_norm"), py::arg("lipschitz"), py::arg("radius"));
  m.def("retained_mass", &retained_mass, py::arg("lse_support"), py::arg("lse_all"));
  m.def("omitted_mass", &omitted_mass, py::arg("lse_support"), py::arg("lse_all"));
}

}  // namespace amc::python

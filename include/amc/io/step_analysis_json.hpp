// One analysed decode step (amc::analyse_step) as JSON: the object `amc-bounds --json` prints
// and the Python package's Analysis.to_dict() returns, written once so that the two cannot
// drift. Header-only; needs nlohmann-json (Debian's nlohmann-json3-dev), as
// sparse_config_json.hpp does.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <string_view>

#include "amc/io/sparse_config_json.hpp"
#include "amc/math/step_analysis.hpp"

namespace amc {

namespace detail {

/// JSON's view of a double: non-finite numbers (the log-sum-exp of an empty support, -inf)
/// are null.
template <class Json>
Json json_number(double x) {
  return std::isfinite(x) ? Json(x) : Json(nullptr);
}

}  // namespace detail

/// {"config": {...}, "heads": [...], "summary": {...}} for `analysis`, computed by
/// analyse_step(`shape`, `config`) with the kernel table named `kernels`:
/// - config: the input's shape (query_heads, kv_heads, positions, head_dim); every selection
///   setting of the table, unset ones as null ("combine" under amc-bounds' historical key
///   "group_combine"; "scale" is the scale used, the default resolved); "adaptive"; "kernels";
/// - heads: per query head, in head order, every HeadAnalysis field ("n" is its positions),
///   "needed_k" only when adaptive;
/// - summary: every StepSummary field, "max_needed_k" only when adaptive.
/// Non-finite numbers are null. (amc-bounds adds "input", the file it read, to config.)
template <class Json = nlohmann::json>
Json step_analysis_json(const StepAnalysis& analysis, const StepInputs& shape,
                        const SparseConfig& config, std::string_view kernels) {
  const auto number = detail::json_number<Json>;
  Json settings = Json::object();
  settings["query_heads"] = shape.query_heads;
  settings["kv_heads"] = shape.kv_heads;
  settings["positions"] = shape.positions;
  settings["head_dim"] = shape.head_dim;
  const Json table = to_json<Json>(config);  // named: items() refers into it
  for (const auto& [key, value] : table.items()) {
    if (key == "scale") continue;  // the resolved scale below
    settings[key == "combine" ? "group_combine" : key] = value;
  }
  settings["scale"] = analysis.scale;
  settings["adaptive"] = config.adaptive();
  settings["kernels"] = std::string(kernels);

  Json heads = Json::array();
  for (const HeadAnalysis& a : analysis.heads) {
    Json record = Json::object();
    record["head"] = a.head;
    record["kv_head"] = a.kv_head;
    record["n"] = a.positions;
    record["support_size"] = a.support_size;
    record["selected_blocks"] = a.selected_blocks;
    record["lse_support"] = number(a.lse_support);
    record["lse_all"] = number(a.lse_all);
    record["retained_mass"] = number(a.retained_mass);
    record["omitted_mass"] = number(a.omitted_mass);
    record["error_norm"] = number(a.error_norm);
    record["identity_residual"] = number(a.identity_residual);
    record["relative_identity_residual"] = number(a.relative_identity_residual);
    record["dense_operator_error"] = number(a.dense_operator_error);
    record["sparse_operator_error"] = number(a.sparse_operator_error);
    record["value_bound"] = number(a.value_bound);
    record["loose_value_bound"] = number(a.loose_value_bound);
    record["direction_cosine"] = number(a.direction_cosine);
    record["certified_omitted_mass_bound"] = number(a.certified_omitted_mass_bound);
    record["certified_log_omitted_mass_bound"] = number(a.certified_log_omitted_mass_bound);
    record["certified_error_bound"] = number(a.certified_error_bound);
    if (a.needed_k) record["needed_k"] = *a.needed_k;
    heads.push_back(std::move(record));
  }

  const StepSummary& s = analysis.summary;
  Json summary = Json::object();
  summary["max_omitted_mass"] = number(s.max_omitted_mass);
  summary["min_retained_mass"] = number(s.min_retained_mass);
  summary["max_error_norm"] = number(s.max_error_norm);
  summary["max_identity_residual"] = number(s.max_identity_residual);
  summary["max_relative_identity_residual"] = number(s.max_relative_identity_residual);
  summary["max_operator_error"] = number(s.max_operator_error);
  summary["max_certified_omitted_mass_bound"] = number(s.max_certified_omitted_mass_bound);
  summary["max_certified_error_bound"] = number(s.max_certified_error_bound);
  if (s.max_needed_k) summary["max_needed_k"] = *s.max_needed_k;

  Json out = Json::object();
  out["config"] = std::move(settings);
  out["heads"] = std::move(heads);
  out["summary"] = std::move(summary);
  return out;
}

}  // namespace amc

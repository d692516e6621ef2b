// amc-bounds: omitted-mass analysis of one decode step, offline, from dumped attention inputs.
//
//   amc-bounds INPUT.safetensors [--block-size B] [--top-k K] [--sinks S] [--window W]
//              [--scope head|group] [--combine sum|max] [--score mean|bound|oracle|twostage|submean]
//              [--target-eps E [--max-k K]]
//              [--scale C] [--json]
//
// INPUT holds q [Hq, d], k [Hkv, n, d] and v [Hkv, n, d] (F32, BF16 or F16). For every query
// head it runs the dense and the block-sparse operator (which choose the support), then reports
// the exact quantities of THEORY.md section 2, computed in double from the stored values, next
// to what the block summaries certify without reading the omitted keys (sections 5 and 8) and
// how far the f32 operators' outputs are from the exact ones. Bad input: one line on stderr,
// exit status 2, nothing on stdout.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "amc/amc.hpp"
#include "amc/cli/sparse_options.hpp"
#include "amc/io/sparse_config_json.hpp"
#include "amc/io/safetensors.hpp"
#include "amc/math/certified_bounds.hpp"
#include "amc/math/omitted_mass.hpp"
#include "bounds_input.hpp"

namespace {

using namespace amc;
using amc::bounds::fail;
using amc::bounds::Inputs;
using nlohmann::json;

struct Options {
  std::string input;
  SparseConfig config;
  bool json_output = false;
};

json number(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

int run(const Options& options) {
  const SparseConfig& config = options.config;
  const Inputs in = bounds::load_inputs(options.input);
  const std::int64_t d = in.head_dim, n = in.positions, group = in.query_heads / in.kv_heads;
  const float scale = config.scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  const bool adaptive = config.adaptive();

  json heads = json::array();
  double max_eps = 0, max_error = 0, max_residual = 0, max_relative_residual = 0, max_operator_error = 0;
  double max_certified_eps = 0, max_certified_error = 0, min_retained = 1;
  std::int64_t max_needed_k = 0;
  DenseDecode dense(scale);
  // The operators' own pipeline: top-k or (with --target-eps) adaptive selection, per head or
  // per group, then attention over what was selected. The tool only reads what they chose.
  BlockSparseDecode<> sparse(config);
  SummaryOptions summary_options = required_summaries(config);  // what the rule reads
  summary_options.channel_bounds = summary_options.value_norms = true;  // certified bounds
  for (std::int64_t g = 0; g < in.kv_heads; ++g) {
    const KvView<float> kv(in.k.data() + g * n * d, in.v.data() + g * n * d, n, d);
    const auto summaries = BlockSummaries::build(kv, config.block_size, summary_options);
    const KvHead<KvView<float>> head{kv, &summaries};
    const Eigen::Map<const RowMatrix> queries(in.q.data() + g * group * d, group, d);
    RowMatrix dense_out(group, d), sparse_out(group, d);
    std::vector<HeadResult> dense_results(group), sparse_results(group);
    dense.decode(queries, head, dense_out, dense_results);
    sparse.decode(queries, head, sparse_out, sparse_results);

    const Eigen::Map<const RowMatrix> values(in.v.data() + g * n * d, n, d);
    for (std::int64_t h = 0; h < group; ++h) {
      // The exact analysis, in double from the stored values (products of f32 numbers are exact
      // in double): scores, o and o_S as an exact operator would compute them.
      const std::span<const float> query(queries.row(h).data(), static_cast<std::size_t>(d));
      const VectorD scores = exact_scores(query, scale, kv);
      const ExactOutputs exact = exact_outputs(scores, values, sparse.support(h));
      const OmissionAnalysis a = analyse_omission(scores, values, sparse.support(h), exact.dense, exact.sparse);
      // How far the f32 operators' outputs are from the identity and from the exact outputs.
      const Vector dense_f32 = dense_out.row(h).transpose(), sparse_f32 = sparse_out.row(h).transpose();
      const IdentityResidual residual = omission_identity_residual(dense_f32, sparse_f32, a.omitted_mass, a.omitted_mean);
      const double dense_operator_error = (dense_f32.cast<double>() - exact.dense).norm();
      const double sparse_operator_error = (sparse_f32.cast<double>() - exact.sparse).norm();
      const Support& support = sparse.support(h);
      const std::span<const std::int64_t> selected = sparse.selected_blocks(h);
      const CertifiedBounds c = certified_bounds(query, scale, kv, summaries, support);
      json record = {{"head", g * group + h},
                     {"kv_head", g},
                     {"n", n},
                     {"support_size", support.size()},
                     {"selected_blocks", std::vector<std::int64_t>(selected.begin(), selected.end())},
                     {"lse_support", number(sparse_results[h].lse)},
                     {"lse_all", number(dense_results[h].lse)},
                     {"retained_mass", a.retained_mass},
                     {"omitted_mass", a.omitted_mass},
                     {"error_norm", a.error_norm},
                     {"identity_residual", residual.absolute},
                     {"relative_identity_residual", residual.relative},
                     {"dense_operator_error", dense_operator_error},
                     {"sparse_operator_error", sparse_operator_error},
                     {"value_bound", a.value_bound},
                     {"loose_value_bound", a.loose_value_bound},
                     {"direction_cosine", a.direction_cosine},
                     {"certified_omitted_mass_bound", c.omitted_mass_bound},
                     {"certified_log_omitted_mass_bound", number(c.log_omitted_mass_bound)},
                     {"certified_error_bound", c.error_bound}};
      if (adaptive) record["needed_k"] = sparse.needed_k(h);
      heads.push_back(record);
      max_eps = std::max(max_eps, a.omitted_mass);
      min_retained = std::min(min_retained, a.retained_mass);
      max_error = std::max(max_error, a.error_norm);
      max_residual = std::max(max_residual, residual.absolute);
      max_relative_residual = std::max(max_relative_residual, residual.relative);
      max_operator_error = std::max({max_operator_error, dense_operator_error, sparse_operator_error});
      max_certified_eps = std::max(max_certified_eps, c.omitted_mass_bound);
      max_certified_error = std::max(max_certified_error, c.error_bound);
      if (adaptive) max_needed_k = std::max(max_needed_k, sparse.needed_k(h));
    }
  }

  // The configuration as the library writes it (its "combine" under this tool's historical
  // name "group_combine"), the resolved scale, and the input's shape.
  json effective = {{"input", options.input},
                    {"query_heads", in.query_heads},
                    {"kv_heads", in.kv_heads},
                    {"positions", n},
                    {"head_dim", d}};
  const json settings = to_json<json>(config, {"block_size", "top_k", "sinks", "window", "scope", "score", "combine"});
  for (const auto& [key, value] : settings.items()) effective[key == "combine" ? "group_combine" : key] = value;
  effective["scale"] = scale;
  effective["adaptive"] = adaptive;
  effective["kernels"] = std::string(kernels::active().name);
  if (adaptive) {
    effective["target_eps"] = *config.target_eps;
    effective["max_k"] = config.max_k ? json(*config.max_k) : json(nullptr);
  }
  json summary = {{"max_omitted_mass", max_eps},
                  {"min_retained_mass", min_retained},
                  {"max_error_norm", max_error},
                  {"max_identity_residual", max_residual},
                  {"max_relative_identity_residual", max_relative_residual},
                  {"max_operator_error", max_operator_error},
                  {"max_certified_omitted_mass_bound", max_certified_eps},
                  {"max_certified_error_bound", max_certified_error}};
  if (adaptive) summary["max_needed_k"] = max_needed_k;

  if (options.json_output) {
    std::cout << json{{"config", effective}, {"heads", heads}, {"summary", summary}}.dump() << '\n';
    return 0;
  }
  std::printf("amc-bounds %s: %lld query heads, %lld KV heads, n = %lld, head_dim %lld\n", options.input.c_str(),
              static_cast<long long>(in.query_heads), static_cast<long long>(in.kv_heads), static_cast<long long>(n),
              static_cast<long long>(d));
  std::printf("selector: score %s, scope %s, block %lld, k %lld, sinks %lld, window %lld, scale %.6g%s\n\n",
              std::string(config.score.name()).c_str(), std::string(to_string(config.scope)).c_str(),
              static_cast<long long>(config.block_size),
              static_cast<long long>(config.top_k), static_cast<long long>(config.sinks),
              static_cast<long long>(config.window), scale, adaptive ? " (adaptive)" : "");
  std::printf("%5s %4s %8s %12s %12s %12s %12s %12s %12s%s\n", "head", "kv", "support", "omitted", "error",
              "value bound", "cert. eps", "cert. error", "residual", adaptive ? "  needed k" : "");
  for (const json& r : heads) {
    std::printf("%5lld %4lld %8lld %12.4e %12.4e %12.4e %12.4e %12.4e %12.2e", r["head"].get<long long>(),
                r["kv_head"].get<long long>(), r["support_size"].get<long long>(), r["omitted_mass"].get<double>(),
                r["error_norm"].get<double>(), r["value_bound"].get<double>(),
                r["certified_omitted_mass_bound"].get<double>(), r["certified_error_bound"].get<double>(),
                r["identity_residual"].get<double>());
    if (adaptive) std::printf(" %10lld", r["needed_k"].get<long long>());
    std::printf("\n");
  }
  std::printf("\nmax omitted mass %.4e, max error norm %.4e, max identity residual %.2e\n", max_eps, max_error,
              max_residual);
  std::printf("retained mass alone does not bound the error: compare 'omitted' with 'error' per head.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"amc-bounds: omitted-mass identity and certified bounds of one decode step, from q/k/v dumped to safetensors"};
  app.add_option("input", options.input, "safetensors file with q [Hq, d], k [Hkv, n, d], v [Hkv, n, d]")->required();
  cli::SparseOptions sparse(app, SparseConfig{});
  app.add_flag("--json", options.json_output, "print one JSON object instead of a table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "amc-bounds: " << e.what() << " (see --help)\n";
    return 2;
  }
  try {
    options.config = sparse.config();
    return run(options);
  } catch (const std::exception& e) {
    const std::string message = e.what();
    std::cerr << (message.rfind("amc-bounds", 0) == 0 ? "" : "amc-bounds: ") << message << '\n';
    return 2;
  }
}

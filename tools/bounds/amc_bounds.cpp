// amc-bounds: omitted-mass analysis of one decode step, offline, from dumped attention inputs.
//
//   amc-bounds INPUT.safetensors [--block-size B] [--top-k K] [--sinks S] [--window W]
//              [--scope head|group] [--combine sum|max]
//              [--rule mean|bound|oracle|twostage|submean]
//              [--target-eps E [--max-k K]]
//              [--scale C] [--json]
//
// INPUT holds q [Hq, d], k [Hkv, n, d] and v [Hkv, n, d] (F32, BF16 or F16). The analysis is
// amc::analyse_step (amc/math/step_analysis.hpp, shared with the Python package): for every query
// head it runs the dense and the block-sparse operator (which choose the support), then reports
// the exact quantities of docs/theory.md section 2, computed in double from the stored values, next
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
#include "amc/io/safetensors.hpp"
#include "amc/io/step_analysis_json.hpp"
#include "amc/math/certified_bounds.hpp"
#include "amc/math/omitted_mass.hpp"
#include "amc/math/step_analysis.hpp"
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

int run(const Options& options) {
  const SparseConfig& config = options.config;
  const Inputs in = bounds::load_inputs(options.input);
  const std::int64_t d = in.head_dim, n = in.positions;
  const bool adaptive = config.adaptive();
  const StepInputs step{in.query_heads, in.kv_heads, n, d, in.q, in.k, in.v};
  const StepAnalysis analysis = analyse_step(step, config);
  const float scale = analysis.scale;

  if (options.json_output) {
    json out = step_analysis_json(analysis, step, config, kernels::active().name);
    out["config"]["input"] = options.input;
    std::cout << out.dump() << '\n';
    return 0;
  }
  const StepSummary& s = analysis.summary;
  std::printf("amc-bounds %s: %lld query heads, %lld KV heads, n = %lld, head_dim %lld\n",
              options.input.c_str(), static_cast<long long>(in.query_heads),
              static_cast<long long>(in.kv_heads), static_cast<long long>(n),
              static_cast<long long>(d));
  std::printf(
      "rule %s (summaries %s), scope %s, block %lld, k %lld, sinks %lld, window %lld, scale "
      "%.6g%s\n\n",
      std::string(config.rule.name()).c_str(),
      std::string(to_string(config.summary_precision)).c_str(),
      std::string(to_string(config.scope)).c_str(), static_cast<long long>(config.block_size),
      static_cast<long long>(config.top_k), static_cast<long long>(config.sinks),
      static_cast<long long>(config.window), scale, adaptive ? " (adaptive)" : "");
  std::printf("%5s %4s %8s %12s %12s %12s %12s %12s %12s%s\n", "head", "kv", "support", "omitted",
              "error", "value bound", "cert. eps", "cert. error", "residual",
              adaptive ? "  needed k" : "");
  for (const HeadAnalysis& a : analysis.heads) {
    std::printf("%5lld %4lld %8lld %12.4e %12.4e %12.4e %12.4e %12.4e %12.2e",
                static_cast<long long>(a.head), static_cast<long long>(a.kv_head),
                static_cast<long long>(a.support_size), a.omitted_mass, a.error_norm, a.value_bound,
                a.certified_omitted_mass_bound, a.certified_error_bound, a.identity_residual);
    if (adaptive) std::printf(" %10lld", static_cast<long long>(a.needed_k.value_or(-1)));
    std::printf("\n");
  }
  std::printf("\nmax omitted mass %.4e, max error norm %.4e, max identity residual %.2e\n",
              s.max_omitted_mass, s.max_error_norm, s.max_identity_residual);
  std::printf(
      "retained mass alone does not bound the error: compare 'omitted' with 'error' per head.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{
      "amc-bounds: omitted-mass identity and certified bounds of one decode step, from q/k/v "
      "dumped to safetensors"};
  app.add_option("input", options.input,
                 "safetensors file with q [Hq, d], k [Hkv, n, d], v [Hkv, n, d]")
      ->required();
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

// The `retrieval` subcommand of amc-eval. See retrieval_command.hpp.
#include "retrieval_command.hpp"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string_view>
#include <vector>

#include "amc/attention/sparse_config.hpp"
#include "amc/cli/sparse_options.hpp"
#include "amc/error.hpp"
#include "flag_values.hpp"
#include "retrieval_report.hpp"

namespace amc::eval {
namespace {

constexpr const char* kWhere = "retrieval";

template <class T>
T parse_number(std::string_view text, const char* flag) {
  return parse_flag_number<T>(text, kWhere, flag);
}

RuleName parse_rule_flag(std::string_view text) { return parse_flag_rule(text, kWhere); }

}  // namespace

RetrievalProbeOptions retrieval_options_from_flags(const RetrievalFlags& flags) {
  RetrievalProbeOptions options;
  auto integers = [](const char* flag) {
    return [flag](std::string_view item) { return parse_number<std::int64_t>(item, flag); };
  };
  options.contexts = parse_flag_list(flags.contexts, integers("--contexts"));
  options.block_sizes = parse_flag_list(flags.block_sizes, integers("--block-sizes"));
  options.ks = parse_flag_list(flags.ks, integers("--ks"));
  options.depths = parse_flag_list(
      flags.depths, [](std::string_view item) { return parse_number<double>(item, "--depths"); });
  options.rules = parse_flag_list(flags.rules, parse_rule_flag);
  options.trials = parse_number<std::int64_t>(flags.trials, "--trials");
  options.strength = parse_number<double>(flags.strength, "--strength");
  options.seed = parse_number<std::uint64_t>(flags.seed, "--seed");
  options.head_dim = parse_number<std::int64_t>(flags.head_dim, "--head-dim");
  options.sinks = flags.sparse.sinks;
  options.window = flags.sparse.window;
  options.rule_settings = flags.sparse.rule_settings;
  options.validate();
  AMC_CHECK(!flags.out.empty(), kWhere, "--out: the output directory must not be empty");
  return options;
}

void add_retrieval_command(CLI::App& app, std::function<int()>& run) {
  CLI::App* command = app.add_subcommand(
      "retrieval",
      "retrieval probe on synthetic keys: is a needle key in the support of the mean, "
      "channel-bound and oracle rules, as block size and k vary (docs/theory.md section 6)");
  // Owned jointly by the App (through the callback) and by `run`, which outlives parsing.
  auto flags = std::make_shared<RetrievalFlags>();
  // Every value is taken as text and parsed by retrieval_options_from_flags.
  auto option = [&](const char* flag, std::string& value, const char* type, const char* help) {
    command->add_option(flag, value, help)->type_name(type)->capture_default_str();
  };
  option("--contexts", flags->contexts, "INT,...", "context lengths, comma-separated");
  option("--block-sizes", flags->block_sizes, "INT,...", "block sizes B, comma-separated");
  option("--ks", flags->ks, "INT,...", "numbers of selected blocks k, comma-separated");
  option("--depths", flags->depths, "NUM,...",
         "needle depths in [0, 1): position floor(depth * context), comma-separated");
  option("--rules,--selectors", flags->rules, "NAME,...",
         ("any of " + detail::rule_choices() + ", comma-separated (--selectors: its former name)")
             .c_str());
  option("--trials", flags->trials, "INT", "needles per cell");
  option("--strength", flags->strength, "NUM",
         "needle score minus the largest distractor score (scores q.k/sqrt(d))");
  option("--seed", flags->seed, "UINT", "random seed");
  option("--head-dim", flags->head_dim, "INT", "channels per key");
  auto sparse = std::make_shared<cli::SparseOptions>(
      *command, SparseConfig{},
      cli::SparseOptions::Only{.names = {"sinks", "window"}, .rule_settings = true});
  command->add_option("--out", flags->out, "output directory (created if missing)")
      ->type_name("DIR")
      ->required();
  command->callback([flags, sparse, &run] {
    run = [flags, sparse] {
      flags->sparse = sparse->config();
      const RetrievalProbeOptions options = retrieval_options_from_flags(*flags);
      const auto start = std::chrono::steady_clock::now();
      const std::vector<RetrievalProbeResult> rows = run_retrieval_probe(options);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const ReportOutputs outputs = write_retrieval_outputs(rows, flags->out);
      std::printf("retrieval: %zu cells x %lld trials in %.2f s\n", rows.size(),
                  static_cast<long long>(options.trials), seconds);
      print_report(outputs);
      return 0;
    };
  });
}

}  // namespace amc::eval

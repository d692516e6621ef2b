// The `passkey` subcommand of amc-eval. See passkey_command.hpp.
#include "passkey_command.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string_view>
#include <system_error>
#include <vector>

#include "amc/cli/sparse_options.hpp"
#include "amc/error.hpp"
#include "flag_values.hpp"
#include "passkey_report.hpp"
#include "progress.hpp"
#include "support_sizes.hpp"

namespace amc::eval {
namespace {

constexpr const char* kWhere = "passkey";

template <class T>
T parse_number(std::string_view text, const char* flag) {
  return parse_flag_number<T>(text, kWhere, flag);
}

}  // namespace

PasskeyOptions passkey_options_from_flags(const PasskeyFlags& flags) {
  PasskeyOptions options;
  options.model = flags.model;
  options.text_files = flags.text_files;
  options.contexts = parse_flag_list(flags.contexts, [](std::string_view item) {
    return parse_number<std::int64_t>(item, "--contexts");
  });
  options.depths = parse_flag_list(
      flags.depths, [](std::string_view item) { return parse_number<double>(item, "--depths"); });
  options.rules = parse_flag_list(
      flags.rules, [](std::string_view item) { return parse_flag_rule(item, kWhere); });
  options.trials = parse_number<std::int64_t>(flags.trials, "--trials");
  options.digits = parse_number<std::int64_t>(flags.digits, "--digits");
  options.seed = parse_number<std::uint64_t>(flags.seed, "--seed");
  options.session = flags.session;  // --threads not given: every hardware thread
  options.sparse = flags.sparse;
  options.out = flags.out;
  // The sweep's mapping of support sizes to k (sinks + window + k x block size), its refusals
  // naming the nearest valid sizes.
  const std::vector<std::int64_t> sizes = parse_flag_list(
      flags.supports,
      [](std::string_view item) { return parse_number<std::int64_t>(item, "--supports"); });
  try {
    options.supports =
        map_supports(sizes, flags.sparse.block_size, flags.sparse.sinks, flags.sparse.window);
  } catch (const amc::error& e) {
    throw amc::error(std::string(kWhere) + ": " + e.what());
  }
  options.validate();
  return options;
}

void add_passkey_command(CLI::App& app, std::function<int()>& run) {
  CLI::App* command = app.add_subcommand(
      "passkey",
      "model-level retrieval probe: plant PASSKEY = \"DIGITS\" at chosen depths of held-out "
      "code, ask for it, answer greedily with dense attention and each rule and support; "
      "accuracy, retained mass, and whether the planted value was in the support");
  // Owned jointly by the App (through the callback) and by `run`, which outlives parsing.
  auto flags = std::make_shared<PasskeyFlags>();
  command
      ->add_option("--model", flags->model,
                   "checkpoint directory (config.json, model.safetensors, tokenizer.json)")
      ->type_name("DIR")
      ->required();
  command->add_option("--text", flags->text_files, "documents (code) as text files")
      ->type_name("FILE")
      ->expected(1, -1)
      ->required();
  // Every other value is taken as text and parsed by passkey_options_from_flags.
  auto option = [&](const char* flag, std::string& value, const char* type, const char* help) {
    command->add_option(flag, value, help)->type_name(type)->capture_default_str();
  };
  option("--contexts", flags->contexts, "INT,...", "prompt lengths in tokens, comma-separated");
  option("--depths", flags->depths, "NUM,...",
         "record depths in (0, 1): the record goes at the first line start at or after depth x "
         "the code's length, comma-separated");
  option("--trials", flags->trials, "INT", "trials (code window and digits) per context");
  option("--supports", flags->supports, "INT,...",
         "support sizes sinks + window + k x block size (k >= 1), comma-separated");
  option("--rules,--selectors", flags->rules, "NAME,...",
         ("any of " + detail::rule_choices() + ", comma-separated (--selectors: its former name)")
             .c_str());
  option("--digits", flags->digits, "INT", "digits of the planted value, in [1, 16]");
  option("--seed", flags->seed, "UINT", "random seed (code windows and digits)");
  transformer::add_session_flags(*command, flags->session);
  auto sparse = std::make_shared<cli::SparseOptions>(
      *command, SparseConfig{},
      cli::SparseOptions::Only{
          .names = {"block_size", "sinks", "window", "scope", "combine", "top_p"},
          .rule_settings = true});
  command->add_option("--out", flags->out, "output directory (created if missing)")
      ->type_name("DIR")
      ->required();
  command->callback([flags, sparse, &run] {
    run = [flags, sparse] {
      flags->sparse = sparse->config();
      const PasskeyOptions options = passkey_options_from_flags(*flags);
      const auto start = std::chrono::steady_clock::now();
      const PasskeySetup setup = prepare_passkey(options);
      // Before the runs: an --out that cannot be a directory is refused now, not after them.
      std::error_code failed;
      std::filesystem::create_directories(options.out, failed);
      AMC_CHECK(!failed && std::filesystem::is_directory(options.out), kWhere,
                "--out: ", options.out, ": cannot create the directory",
                failed ? ": " + failed.message() : std::string());
      Progress progress(static_cast<std::int64_t>(setup.cases.size()),
                        Progress::stderr_is_terminal());
      const PasskeyResults results = run_passkey_probe(options, setup, &progress);
      progress.finish();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const ReportOutputs outputs = write_passkey_outputs(results, options, setup, options.out);
      std::printf("passkey: %zu prompts, %zu answers in %.1f s\n", setup.cases.size(),
                  results.rows.size(), seconds);
      print_report(outputs);
      return 0;
    };
  });
}

}  // namespace amc::eval

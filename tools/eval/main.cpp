// amc-eval: the evaluation harness of the paired fresh-selection protocol (docs/reproduce.md
// section 4) on a Qwen2 checkpoint through examples/transformer.
//
//   amc-eval sweep --model DIR (--text FILE... | --ids FILE...) --contexts 2048,8192,16384
//            --supports 97,193,385,769 [--prefixes 5] [--tokens 128]
//            [--block-size 16 --sinks 1 --window 64 --scope head|group --rule RULE --combine
//            sum|max]
//            [--threads N] [--kv-dtype auto|bf16|f32] [--rope-angles auto|transformers|exact]
//            --out DIR [--resume] [--dense-control] [--shard I/N]
//   amc-eval merge OUT DIR...   (the whole sweep from the output directories of its shards)
//   amc-eval mass  --model DIR (--text ... | --ids ...) --contexts ... --supports ...
//            [--prefixes 5] [--tokens 16] [sparse, --threads, --kv-dtype, --rope-angles options]
//            --out DIR
//   amc-eval retrieval --out DIR [--contexts 2048,8192 --block-sizes 8,16,32,64 --ks 2,8,20
//            --depths ... --trials 64 --strength 6 ...]   (synthetic keys; no model)
//   amc-eval passkey --model DIR --text FILE... --out DIR [--contexts 1024,2048,4096
//            --depths 0.1,0.3,0.5,0.7,0.9 --trials 10 --supports 97,193,385
//            --rules mean,bound,oracle --digits 5 --seed 1] [--block-size --sinks --window
//            --scope ...] [--threads N --kv-dtype ... --rope-angles ...]
//            (a value planted in held-out code, retrieved with dense and sparse decoding)
//
// Results go to files in --out (see docs/reproduce.md), progress to stderr. Bad input: one line
// on stderr, exit status 2.
#include <CLI/CLI.hpp>
#include <amc/cli/sparse_options.hpp>
#include <amc/error.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>

#include "eval_setup.hpp"
#include "mass_probe.hpp"
#include "merge.hpp"
#include "passkey_command.hpp"
#include "retrieval_command.hpp"
#include "sweep.hpp"

namespace {

using amc::eval::CommonArguments;

/// The options every command takes. The selection options (every setting of the library's
/// table but amc::eval::kSettingsNotTaken) are the library's; the returned object turns them
/// into a.sparse after parsing (its config()). top_k comes from --supports.
std::unique_ptr<amc::cli::SparseOptions> add_common_options(CLI::App& command, CommonArguments& a,
                                                            std::int64_t default_tokens) {
  a.tokens = default_tokens;
  command
      .add_option("--model", a.model,
                  "checkpoint directory (config.json, model.safetensors, "
                  "tokenizer.json) or GGUF file")
      ->required();
  command
      .add_option("--text", a.text_files,
                  "documents as text files, encoded with the model's tokenizer")
      ->expected(1, -1);
  command
      .add_option("--ids", a.id_files,
                  "documents as token-id files (decimal ids separated by whitespace or "
                  "commas)")
      ->expected(1, -1);
  command.add_option("--contexts", a.contexts, "context lengths (prefix tokens), comma-separated")
      ->delimiter(',')
      ->required();
  command
      .add_option("--supports", a.supports,
                  "support sizes sinks + window + k * block size, comma-separated")
      ->delimiter(',')
      ->required();
  command.add_option("--prefixes", a.prefixes, "prefixes (documents) per context")
      ->capture_default_str();
  command.add_option("--tokens", a.tokens, "tokens per continuation (T)")->capture_default_str();
  amc::transformer::add_session_flags(command, a.session);
  command.add_option("--out", a.out, "output directory (created if missing)")->required();
  return std::make_unique<amc::cli::SparseOptions>(
      command, amc::SparseConfig{},
      std::span<const std::string_view>(amc::eval::kSettingsNotTaken));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "amc-eval: the paired fresh-selection evaluation of sparse decode attention on a "
      "Qwen2 checkpoint (docs/reproduce.md)"};
  app.require_subcommand(1);
  // Each command sets `run` when it is chosen; main calls it after parsing.
  std::function<int()> run;

  amc::eval::SweepArguments sweep;
  CLI::App* sweep_command = app.add_subcommand(
      "sweep",
      "the study protocol: dense reference, sparse greedy and teacher-forced runs per "
      "context, prefix and support; runs.jsonl, summary.csv, summary.md, plots");
  const auto sweep_sparse = add_common_options(*sweep_command, sweep.common, 128);
  sweep_command->add_flag("--resume", sweep.resume,
                          "continue the runs recorded in OUT/runs.jsonl (same settings)");
  sweep_command->add_flag("--dense-control", sweep.dense_control,
                          "decode every support with dense attention: a control in which every "
                          "run must match the reference exactly");
  std::string shard;
  const CLI::Option* shard_option =
      sweep_command
          ->add_option("--shard", shard,
                       "run shard I of N (0 <= I < N) of the sweep's runs, into this --out; "
                       "`amc-eval merge` combines the shards' outputs")
          ->type_name("I/N");
  sweep_command->callback([&] {
    run = [&] {
      sweep.common.sparse = sweep_sparse->config();
      // Given at all, even empty: run_sweep refuses an empty value rather than running it all.
      if (shard_option->count() > 0) sweep.shard = shard;
      return amc::eval::run_sweep(sweep);
    };
  });

  amc::eval::MassArguments mass;
  CLI::App* mass_command = app.add_subcommand(
      "mass",
      "retained mass vs support size per layer and head, on the dense model's decode "
      "steps; mass.csv and plots");
  const auto mass_sparse = add_common_options(*mass_command, mass.common, 16);
  mass_command->callback([&] {
    run = [&] {
      mass.common.sparse = mass_sparse->config();
      return amc::eval::run_mass(mass);
    };
  });

  amc::eval::add_merge_command(app, run);
  amc::eval::add_retrieval_command(app, run);
  amc::eval::add_passkey_command(app, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "amc-eval: %s\n", e.what());
    return 2;
  }
  try {
    return run();
  } catch (const std::exception& e) {
    std::cout << std::flush;
    std::fprintf(stderr, "amc-eval: %s\n", e.what());
    return 2;
  }
}

// amc-synth: writes a synthetic checkpoint (config.json, model.safetensors, tokenizer.json) of
// any supported family (family.hpp) with seeded random weights, at a tiny test shape or a real
// model's shape.
//
//   amc-synth --out DIR [--shape tiny|qwen2-0.5b|qwen3-0.6b|smollm2-135m|llama-3.2-1b]
//             [--family qwen2|qwen3|llama] [--layers N --hidden N --heads N --kv-heads N
//             --head-dim N --intermediate N --vocab N] [--untied] [--dtype bf16|f32]
//             [--seed S] [--shards N]
//
// (The --shape and --family choices are the family table's: synth_flags.cpp.)
// Bad arguments: one line on stderr, exit status 2.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "synth.hpp"
#include "synth_flags.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "amc-synth: write a synthetic checkpoint of any supported model family with seeded random "
      "weights"};
  amc::transformer::SynthFlags flags;
  amc::transformer::add_synth_flags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "amc-synth: %s\n", e.what());
    return 2;
  }
  try {
    amc::transformer::write_synthetic_checkpoint(flags.out, flags.spec(app));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "amc-synth: %s\n", e.what());
    return 2;
  }
  return 0;
}

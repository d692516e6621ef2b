// amc-synth: writes a synthetic checkpoint (config.json, model.safetensors, tokenizer.json) of
// any supported family (Qwen2, Qwen3, Llama) with seeded random weights, at a tiny test shape
// or a real model's shape.
//
//   amc-synth --out DIR [--shape tiny|qwen2-0.5b|qwen3-0.6b|smollm2-135m|llama-3.2-1b]
//             [--family qwen2|qwen3|llama] [--layers N --hidden N --heads N --kv-heads N
//             --head-dim N --intermediate N --vocab N] [--untied] [--dtype bf16|f32]
//             [--seed S] [--shards N]
//
// Bad arguments: one line on stderr, exit status 2.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "synth.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "amc-synth: write a synthetic Qwen2, Qwen3 or Llama checkpoint with seeded random weights"};
  std::string out, shape = "tiny", dtype = "bf16", family;
  std::uint64_t seed = 0;
  std::int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, intermediate = 0, vocab = 0;
  std::int64_t head_dim = 0;
  bool untied = false;
  std::int64_t tokenizer_vocab = 0;
  int shards = 1;
  app.add_option("--out", out, "output directory (created if needed)")->required();
  app.add_option("--shape", shape,
                 "base shape: tiny (in any family), or a real model's: qwen2-0.5b, qwen3-0.6b, "
                 "smollm2-135m, llama-3.2-1b")
      ->check(CLI::IsMember({"tiny", "qwen2-0.5b", "qwen3-0.6b", "smollm2-135m", "llama-3.2-1b"}));
  app.add_option("--family", family,
                 "model family: qwen2 (Qwen2ForCausalLM), qwen3 (Qwen3ForCausalLM) or llama "
                 "(LlamaForCausalLM); default: the shape's (tiny: qwen2)")
      ->check(CLI::IsMember({"qwen2", "qwen3", "llama"}));
  app.add_option("--layers", layers, "override num_hidden_layers");
  app.add_option("--hidden", hidden, "override hidden_size");
  app.add_option("--heads", heads, "override num_attention_heads");
  app.add_option("--kv-heads", kv_heads, "override num_key_value_heads");
  app.add_option("--head-dim", head_dim,
                 "override head_dim (written to config.json; may differ from hidden / heads)")
      ->check(CLI::PositiveNumber);
  app.add_option("--intermediate", intermediate, "override intermediate_size");
  app.add_option("--vocab", vocab, "override vocab_size");
  app.add_option("--tokenizer-vocab", tokenizer_vocab,
                 "tokens of the synthetic tokenizer (default min(vocab, 4096)); embedding rows "
                 "beyond it are zero and never generated");
  app.add_flag("--untied", untied, "tie_word_embeddings false: write an lm_head.weight of its own");
  app.add_option("--dtype", dtype, "weight dtype: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--seed", seed, "random seed (same seed, same bytes)");
  app.add_option("--shards", shards, "write N safetensors shards and model.safetensors.index.json");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "amc-synth: %s\n", e.what());
    return 2;
  }
  try {
    amc::transformer::SynthSpec spec;
    spec.config = amc::transformer::synth_shape(
        shape, family.empty()
                   ? std::nullopt
                   : std::optional(amc::transformer::parse_architecture(family, "--family")));
    // Overrides apply when given (a given 0 is passed on, and refused by the config check).
    auto set = [&app](const char* flag, std::int64_t value, std::int64_t& field) {
      if (app.count(flag) > 0) field = value;
    };
    set("--layers", layers, spec.config.num_hidden_layers);
    set("--hidden", hidden, spec.config.hidden_size);
    set("--heads", heads, spec.config.num_attention_heads);
    set("--kv-heads", kv_heads, spec.config.num_key_value_heads);
    set("--intermediate", intermediate, spec.config.intermediate_size);
    set("--vocab", vocab, spec.config.vocab_size);
    set("--head-dim", head_dim, spec.config.head_dim);
    if (untied) spec.config.tie_word_embeddings = false;
    spec.dtype = amc::parse_storage_type(dtype);
    spec.seed = seed;
    spec.tokenizer_vocab = tokenizer_vocab;
    spec.shards = shards;
    amc::transformer::write_synthetic_checkpoint(out, spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "amc-synth: %s\n", e.what());
    return 2;
  }
  return 0;
}

// amc-synth's flags (synth_flags.hpp).
#include "synth_flags.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <vector>

#include "family.hpp"

namespace amc::transformer {

void add_synth_flags(CLI::App& app, SynthFlags& flags) {
  // "a real model's: qwen2-0.5b, ...": every shape but tiny.
  const std::vector<std::string> shapes = synth_shapes();
  std::string real;
  for (std::size_t i = 1; i < shapes.size(); ++i) real += (i == 1 ? "" : ", ") + shapes[i];
  // "qwen2 (Qwen2ForCausalLM), ... or llama (LlamaForCausalLM)".
  std::vector<std::string> family_names;
  for (const Family& f : families()) {
    family_names.push_back(std::string(f.model_type) + " (" + std::string(f.class_name) + ")");
  }
  app.add_option("--out", flags.out, "output directory (created if needed)")->required();
  app.add_option("--shape", flags.shape,
                 "base shape: tiny (in any family), or a real model's: " + real)
      ->check(CLI::IsMember(shapes));
  app.add_option("--family", flags.family,
                 "model family: " + either_of(family_names) + "; default: the shape's (tiny: " +
                     std::string(families().front().model_type) + ")")
      ->check(CLI::IsMember(model_types()));
  app.add_option("--layers", flags.layers, "override num_hidden_layers");
  app.add_option("--hidden", flags.hidden, "override hidden_size");
  app.add_option("--heads", flags.heads, "override num_attention_heads");
  app.add_option("--kv-heads", flags.kv_heads, "override num_key_value_heads");
  app.add_option("--head-dim", flags.head_dim,
                 "override head_dim (written to config.json; may differ from hidden / heads)")
      ->check(CLI::PositiveNumber);
  app.add_option("--intermediate", flags.intermediate, "override intermediate_size");
  app.add_option("--vocab", flags.vocab, "override vocab_size");
  app.add_option("--tokenizer-vocab", flags.tokenizer_vocab,
                 "tokens of the synthetic tokenizer (default min(vocab, 4096)); embedding rows "
                 "beyond it are zero and never generated");
  app.add_flag("--untied", flags.untied,
               "tie_word_embeddings false: write an lm_head.weight of its own");
  app.add_option("--dtype", flags.dtype, "weight dtype: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--seed", flags.seed, "random seed (same seed, same bytes)");
  app.add_option("--shards", flags.shards,
                 "write N safetensors shards and model.safetensors.index.json");
}

SynthSpec SynthFlags::spec(const CLI::App& app) const {
  SynthSpec spec;
  spec.config = synth_shape(
      shape, family.empty() ? std::nullopt : std::optional(parse_architecture(family, "--family")));
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
  spec.dtype = parse_storage_type(dtype);
  spec.seed = seed;
  spec.tokenizer_vocab = tokenizer_vocab;
  spec.shards = shards;
  return spec;
}

}  // namespace amc::transformer

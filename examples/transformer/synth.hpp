// Synthetic checkpoints of every family (family.hpp): the exact file layout of a Hugging Face
// model of that family (config.json, model.safetensors with its tensor names and shapes from
// tensor_names.def, tokenizer.json) filled with seeded random weights, for tests, demos and
// benchmarks where the real weights are not available.
#pragma once

#include <amc/storage.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"

namespace amc::transformer {

struct SynthSpec {
  /// Family, shape and constants written to config.json: architecture, attention biases
  /// (qkv_bias; Qwen3 and Llama write it as attention_bias, which also gives o_proj a bias),
  /// tie_word_embeddings (false writes an lm_head.weight), rope_scaling, and head_dim (0: not
  /// written, so the family's default: hidden / heads, or 128 for Qwen3). qk_norm and o_bias
  /// follow from the family as parse_config derives them; bos/eos are ignored: they are set to
  /// the tokenizer's <|endoftext|>.
  Config config;
  StorageType dtype = StorageType::bf16;  ///< bf16 or f32 weights
  std::uint64_t seed = 0;
  /// Tokens of the synthetic tokenizer (>= 260); 0 means min(vocab_size, 4096). Embedding rows
  /// beyond it are zero, so greedy decoding never produces an id the tokenizer lacks.
  std::int64_t tokenizer_vocab = 0;
  /// Number of safetensors files; more than 1 writes model-0000i-of-0000N.safetensors and
  /// model.safetensors.index.json, as Hugging Face does for large models.
  int shards = 1;
};

/// The named shapes, from the family table (family.hpp, Family::tiny and Family::shapes). "tiny"
/// (2 layers, hidden 64, 4 heads, 2 KV heads, intermediate 128, vocab 320, theta 1e6) in the
/// given family (default: the table's first, Qwen2, head_dim 16): as Qwen3 with head_dim 32
/// (not hidden / heads) and the q/k norms; as Llama with theta 1e4, an untied lm_head and llama3
/// RoPE scaling (factor 8, low_freq_factor 1, high_freq_factor 8, original 1024: of its 8
/// frequencies 3 are kept, 2 interpolated and 3 divided by the factor). The real shapes, whose
/// family is their own: "qwen2-0.5b", "qwen3-0.6b", "smollm2-135m", "llama-3.2-1b"
/// (docs/transformer.md, "Model families"). Throws amc::error for another name, or a family other
/// than a real shape's.
Config synth_shape(std::string_view name, std::optional<Architecture> family = std::nullopt);

/// The names synth_shape knows, "tiny" and then every family's shapes in the table's order
/// (amc-synth's --shape choices).
std::vector<std::string> synth_shapes();

/// synth_shapes() for messages: "tiny, qwen2-0.5b, qwen3-0.6b, smollm2-135m, llama-3.2-1b".
std::string_view synth_shape_names();

/// Writes config.json, the weights and tokenizer.json into `dir` (created if needed). The
/// bytes depend only on `spec`: the same spec gives identical files on every machine.
/// Throws amc::error for an invalid spec (checked as parse_config checks a config.json).
void write_synthetic_checkpoint(const std::filesystem::path& dir, const SynthSpec& spec);

}  // namespace amc::transformer

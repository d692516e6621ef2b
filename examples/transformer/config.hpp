// Model configuration, read from a Hugging Face config.json of any supported family
// (family.hpp): the shape, and the family's features as flags the forward pass reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <amc/io/gguf.hpp>

#include "family.hpp"
#include "rope.hpp"

namespace amc::transformer {

/// The fields of config.json the reference transformer needs (docs/transformer.md, "Model
/// families"). Nulls for optional keys ("sliding_window", "rope_scaling") are accepted; missing
/// required keys are refused by name.
struct Config {
  /// The family config.json's "architectures" (or, without it, "model_type") names. Only
  /// parse_config and the synthetic writer read it: the loader and the forward pass read the
  /// feature flags below, which parse_config derives from the family and config.json's keys.
  Architecture architecture = Architecture::qwen2;
  std::int64_t hidden_size = 0;          ///< 896 for Qwen2-0.5B
  std::int64_t intermediate_size = 0;    ///< 4864
  std::int64_t num_hidden_layers = 0;    ///< 24
  std::int64_t num_attention_heads = 0;  ///< 14
  std::int64_t num_key_value_heads = 0;  ///< 2
  /// config.json's "head_dim" when present, else the family's default (family.hpp):
  /// hidden_size / num_attention_heads (64 for Qwen2-0.5B), or 128 for Qwen3. Need not equal
  /// hidden_size / num_attention_heads: q_proj is [heads * head_dim, hidden_size].
  std::int64_t head_dim = 0;
  std::int64_t vocab_size = 0;  ///< 151936
  std::int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;  ///< 1e6 for Qwen2
  double rms_norm_eps = 1e-6;
  /// true (also when absent, as every Qwen2 checkpoint amc has met): the unembedding is the
  /// embedding, unless the checkpoint holds an lm_head.weight, which is then used
  /// (docs/transformer.md: larger Qwen2 models ship one). false: lm_head.weight is required.
  bool tie_word_embeddings = true;
  /// q_proj, k_proj and v_proj have biases (Qwen2 always; Qwen3 and Llama: attention_bias).
  bool qkv_bias = true;
  /// o_proj has a bias (Qwen3 and Llama: attention_bias; Qwen2 never).
  bool o_bias = false;
  /// Per-head RMSNorm of q and k over head_dim after the projections, before RoPE, weights
  /// self_attn.q_norm.weight and self_attn.k_norm.weight [head_dim], eps rms_norm_eps (Qwen3).
  bool qk_norm = false;
  /// config.json's "rope_scaling": none, or Llama 3's frequency bands (rope.hpp).
  RopeScaling rope_scaling;
  std::int64_t bos_token_id = -1;  ///< -1 when absent or null
  std::int64_t eos_token_id = -1;
  /// "amc_rope_angles" ("transformers" or "exact"): the RoPE angle convention the model was
  /// trained with, written by amc's training tools (data/qwen2-tiny: "exact"); nullopt when
  /// absent or null, which means transformers' convention (every pretrained Qwen2 model's).
  std::optional<RopeAngles> rope_angles;

  /// Query heads per KV head.
  std::int64_t group_size() const { return num_attention_heads / num_key_value_heads; }
};

/// Parses config.json text; throws amc::error "amc::transformer::parse_config: <source>: ..."
/// naming a missing key, a key of the wrong type, or an inconsistent value (sizes <= 0, heads not
/// dividing hidden_size when head_dim is derived, KV heads not dividing heads, sizes large
/// enough to exhaust memory, an "amc_rope_angles" other than "transformers" or "exact"), an
/// architecture outside the family table (or none named), and any feature this transformer
/// does not implement (a rope_scaling type other than llama3, mlp_bias true, sliding windows,
/// an activation other than silu).
Config parse_config(std::string_view json_text, const std::string& source = "config.json");

/// Reads and parses DIR/config.json (or the file itself when given a file).
Config load_config(const std::filesystem::path& path);

/// The config a GGUF file's metadata describes (gguf_checkpoint.cpp), for a general.architecture
/// of the family table (Family::gguf_architecture: llama, qwen2, qwen3): sizes from
/// <arch>.embedding_length, .feed_forward_length, .block_count, .attention.head_count,
/// .attention.head_count_kv (default head_count), .attention.key_length (default embedding_length /
/// head_count), .context_length, .rope.freq_base (default 10000),
/// .attention.layer_norm_rms_epsilon, the vocabulary size from token_embd.weight; BOS/EOS from
/// tokenizer.ggml.bos_token_id/eos_token_id; the bias and q/k-norm features from the tensors
/// present (GGUF has no attention_bias key); tied when output.weight is absent. Throws amc::error
/// "amc::transformer::config_from_gguf: <file>: ..." naming the key and value for a missing or
/// ill-typed key, an architecture outside the table, and what this transformer does not implement:
/// a rope.scaling.type other than none, partial RoPE (rope.dimension_count != key_length),
/// value_length != key_length, experts, sliding windows, per-layer head counts.
Config config_from_gguf(const GgufFile& file);

}  // namespace amc::transformer

// The model families the reference transformer runs, and what each one's config.json implies.
//
// Like gemma.cpp, which keeps model differences in configs, the forward pass never asks which
// family it runs: config.json's "architectures" selects a row of the table below, whose
// properties (with the keys config.json may set) become Config's feature flags (q/k/v biases,
// per-head q/k norms, head_dim, RoPE scaling), and the model and loader read only those flags.
// The families differ only in (see docs/transformer.md, "Model families"):
//
//   family  | q/k/v bias            | o_proj bias     | q/k RMSNorm | head_dim absent means
//   Qwen2   | always                | never           | no          | hidden / heads
//   Qwen3   | attention_bias (false) | attention_bias | per head    | 128 (Qwen3Config's default)
//   Llama   | attention_bias (false) | attention_bias | no          | hidden / heads
//
// Everything else (RMSNorm, SwiGLU MLP, rotate-half RoPE with optional llama3 scaling, GQA,
// tied or untied unembedding) is shared.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace amc::transformer {

enum class Architecture : std::uint8_t { qwen2, qwen3, llama };

/// One row of the family table.
struct Family {
  Architecture architecture;
  std::string_view class_name;  ///< config.json "architectures": "Qwen2ForCausalLM", ...
  std::string_view model_type;  ///< config.json "model_type": "qwen2", "qwen3", "llama"
  /// Whether config.json's "attention_bias" decides the q, k, v and o_proj biases (Qwen3,
  /// Llama: transformers' Qwen3Attention and LlamaAttention give all four projections
  /// bias=config.attention_bias). When false (Qwen2) the biases are fixed: q, k, v always,
  /// o_proj never.
  bool attention_bias_key;
  /// attention_bias when config.json leaves it out (Qwen3Config and LlamaConfig: false).
  bool default_attention_bias;
  /// RMSNorm over head_dim of every query and key head, after the projection and before RoPE,
  /// with weights self_attn.q_norm.weight and self_attn.k_norm.weight [head_dim] (Qwen3).
  bool qk_norm;
  /// head_dim when config.json leaves it out; 0 means hidden_size / num_attention_heads.
  std::int64_t default_head_dim;
};

/// Every supported family.
std::span<const Family> families();

/// The row of `architecture`.
const Family& family(Architecture architecture);

/// The row whose class_name (config.json "architectures") is `name`, or nullopt.
std::optional<Architecture> architecture_from_class_name(std::string_view name);
/// The row whose model_type is `name`, or nullopt.
std::optional<Architecture> architecture_from_model_type(std::string_view name);
/// The row whose short name ("qwen2", "qwen3", "llama": the model_type) is `name`; throws
/// amc::error naming `field` and the value otherwise.
Architecture parse_architecture(std::string_view name, std::string_view field = "family");

/// The class name: "Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM".
std::string_view to_string(Architecture architecture);

/// The known class names, for messages: "Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM".
std::string_view known_class_names();

}  // namespace amc::transformer

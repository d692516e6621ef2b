// The model families the reference transformer runs: one table, kFamilies in family.cpp, with a
// row per family that says everything the code needs to know about it. Every list of families
// (the names in messages, amc-synth's --family and --shape choices, the GGUF architectures the
// loader accepts) is read from the table, so a family is one row (plus, if it computes something
// no flag describes yet, the model code that reads its new flag).
//
// Like gemma.cpp, which keeps model differences in configs, the forward pass never asks which
// family it runs: config.json's "architectures" (or a GGUF file's general.architecture) selects
// a row, whose properties (with the keys config.json may set) become Config's feature flags
// (q/k/v biases, per-head q/k norms, head_dim, RoPE scaling), and the model and loader read only
// those flags. The families differ only in (see docs/transformer.md, "Model families"):
//
//   family  | q/k/v bias            | o_proj bias     | q/k RMSNorm | head_dim absent means
//   Qwen2   | always                | never           | no          | hidden / heads
//   Qwen3   | attention_bias (false) | attention_bias | per head    | 128 (Qwen3Config's default)
//   Llama   | attention_bias (false) | attention_bias | no          | hidden / heads
//
// Everything else (RMSNorm, SwiGLU MLP, rotate-half RoPE with optional llama3 scaling, GQA,
// tied or untied unembedding) is shared.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rope.hpp"

namespace amc::transformer {

/// A family, named by its model_type ("qwen2", "qwen3", "llama"): the key of its row in the
/// family table. Made from a row (architecture_from_class_name, parse_architecture, ...) or from
/// a string literal: it keeps a view of the name.
class Architecture {
 public:
  constexpr explicit Architecture(std::string_view model_type) : model_type_(model_type) {}
  constexpr std::string_view model_type() const { return model_type_; }
  friend constexpr bool operator==(const Architecture&, const Architecture&) = default;

  // The built-in families, for code and tests that name one. Not a list of the families (that is
  // the table): a new family needs no constant here.
  static const Architecture qwen2;
  static const Architecture qwen3;
  static const Architecture llama;

 private:
  std::string_view model_type_;
};
inline constexpr Architecture Architecture::qwen2{"qwen2"};
inline constexpr Architecture Architecture::qwen3{"qwen3"};
inline constexpr Architecture Architecture::llama{"llama"};

/// A shape amc-synth writes (synth.hpp, synth_shape). The defaults are the tiny test shape (2
/// layers, hidden 64, 4 heads, 2 KV heads, intermediate 128, vocab 320, theta 1e6); a real
/// model's shape states every size.
struct SynthShape {
  std::string_view name{};  ///< amc-synth's --shape; empty for a family's tiny shape ("tiny")
  std::int64_t hidden_size = 64;
  std::int64_t intermediate_size = 128;
  std::int64_t num_hidden_layers = 2;
  std::int64_t num_attention_heads = 4;
  std::int64_t num_key_value_heads = 2;
  std::int64_t vocab_size = 320;
  std::int64_t head_dim = 0;  ///< 0: not written to config.json, so the family's default
  double rope_theta = 1000000.0;
  double rms_norm_eps = 1e-6;
  std::int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = true;
  RopeScaling rope_scaling{};
};

/// The keys of a family's Hugging Face config class beyond those every family has, which
/// amc-synth writes as transformers saves them (parse_config reads none of them but checks
/// use_sliding_window).
enum class ConfigKeys : std::uint8_t {
  qwen,   ///< max_window_layers, sliding_window, use_sliding_window (Qwen2Config, Qwen3Config)
  llama,  ///< mlp_bias, pretraining_tp (LlamaConfig)
};

/// One row of the family table. tools/checkpoint-to-gguf reads class_name, gguf_architecture,
/// gguf_qk_permuted, attention_bias_key and qk_norm from family.cpp (the format is described
/// above kFamilies there).
struct Family {
  std::string_view class_name;  ///< config.json "architectures": "Qwen2ForCausalLM", ...
  std::string_view model_type;  ///< config.json "model_type", and the family's short name
  /// A GGUF file's general.architecture (llama.cpp's name), which prefixes its metadata keys.
  std::string_view gguf_architecture;
  /// Whether llama.cpp's converter permutes the rows of the q and k projections of this
  /// architecture for its adjacent-pair RoPE (convert_hf_to_gguf.py, LlamaModel.permute), which
  /// the GGUF loader undoes (gguf_checkpoint.cpp).
  bool gguf_qk_permuted = false;
  /// Whether config.json's "attention_bias" decides the q, k, v and o_proj biases (Qwen3,
  /// Llama: transformers' Qwen3Attention and LlamaAttention give all four projections
  /// bias=config.attention_bias). When false (Qwen2) the biases are fixed: q, k, v always,
  /// o_proj never.
  bool attention_bias_key = false;
  /// attention_bias when config.json leaves it out (Qwen3Config and LlamaConfig: false).
  bool default_attention_bias = false;
  /// RMSNorm over head_dim of every query and key head, after the projection and before RoPE,
  /// with weights self_attn.q_norm.weight and self_attn.k_norm.weight [head_dim] (Qwen3).
  bool qk_norm = false;
  /// head_dim when config.json leaves it out; 0 means hidden_size / num_attention_heads.
  std::int64_t default_head_dim = 0;
  ConfigKeys config_keys = ConfigKeys::qwen;
  /// amc-synth's "tiny" shape in this family: the test shape with what shows the family's
  /// traits at test size.
  SynthShape tiny{};
  /// The real models' shapes amc-synth writes in this family; entries without a name are unused.
  std::array<SynthShape, 2> shapes{};

  constexpr Architecture architecture() const { return Architecture(model_type); }
};

/// Every supported family, in the table's order.
std::span<const Family> families();

/// The row of `architecture`; throws amc::error for a name the table does not have.
const Family& family(Architecture architecture);

/// The row whose class_name (config.json "architectures") is `name`, or nullopt.
std::optional<Architecture> architecture_from_class_name(std::string_view name);
/// The row whose model_type is `name`, or nullopt.
std::optional<Architecture> architecture_from_model_type(std::string_view name);
/// The row whose gguf_architecture (general.architecture) is `name`, or nullopt.
std::optional<Architecture> architecture_from_gguf(std::string_view name);
/// The row whose short name (the model_type: "qwen2", "qwen3", "llama") is `name`; throws
/// amc::error "... <field> must be qwen2, qwen3 or llama, got ..." otherwise.
Architecture parse_architecture(std::string_view name, std::string_view field = "family");

/// The class name: "Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM".
std::string_view to_string(Architecture architecture);

/// The model types, in the table's order (amc-synth's --family choices).
std::vector<std::string> model_types();

/// For messages, in the table's order: "Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM".
std::string_view known_class_names();
/// For messages, in the table's order: "qwen2, qwen3, llama".
std::string_view known_model_types();
/// For messages, in alphabetical order: "llama, qwen2 or qwen3".
std::string_view known_gguf_architectures();

/// "a", "a or b", "a, b or c": `names` joined for a message.
std::string either_of(std::span<const std::string> names);

}  // namespace amc::transformer

// The family table (family.hpp): one row per supported family, and every list of them derived
// from it.
#include "family.hpp"

#include <amc/error.hpp>

#include <algorithm>

namespace amc::transformer {
namespace {

// Values from transformers' Qwen2Config / Qwen2Attention, Qwen3Config / Qwen3Attention and
// LlamaConfig / LlamaAttention (docs/transformer.md, "Model families"), and llama.cpp's
// convert_hf_to_gguf.py for the GGUF columns.
//
// One family per row, every row a braced list of designated initialisers that starts with
// .class_name: tools/checkpoint-to-gguf finds the rows by that field and reads .class_name,
// .gguf_architecture, .gguf_qk_permuted, .attention_bias_key and .qk_norm as literals
// ("Name", true, false). tests/CMakeLists.txt appends a row after the last one, before the
// table's closing line (test_family_extension).
constexpr Family kFamilies[] = {
    {
        .class_name = "Qwen2ForCausalLM",
        .model_type = "qwen2",
        .gguf_architecture = "qwen2",
        .gguf_qk_permuted = false,
        .attention_bias_key = false,
        .default_attention_bias = false,
        .qk_norm = false,
        .default_head_dim = 0,
        .config_keys = ConfigKeys::qwen,
        .tiny = {},
        .shapes = {{
            {.name = "qwen2-0.5b",
             .hidden_size = 896,
             .intermediate_size = 4864,
             .num_hidden_layers = 24,
             .num_attention_heads = 14,
             .num_key_value_heads = 2,
             .vocab_size = 151936,
             .max_position_embeddings = 131072},
        }},
    },
    {
        .class_name = "Qwen3ForCausalLM",
        .model_type = "qwen3",
        .gguf_architecture = "qwen3",
        .gguf_qk_permuted = false,
        .attention_bias_key = true,
        .default_attention_bias = false,
        .qk_norm = true,
        .default_head_dim = 128,
        .config_keys = ConfigKeys::qwen,
        // head_dim twice hidden / heads: q_proj [128, 64], o_proj [64, 128].
        .tiny = {.head_dim = 32},
        .shapes = {{
            {.name = "qwen3-0.6b",
             .hidden_size = 1024,
             .intermediate_size = 3072,
             .num_hidden_layers = 28,
             .num_attention_heads = 16,
             .num_key_value_heads = 8,
             .vocab_size = 151936,
             .head_dim = 128,
             .max_position_embeddings = 40960},
        }},
    },
    {
        .class_name = "LlamaForCausalLM",
        .model_type = "llama",
        .gguf_architecture = "llama",
        .gguf_qk_permuted = true,
        .attention_bias_key = true,
        .default_attention_bias = false,
        .qk_norm = false,
        .default_head_dim = 0,
        .config_keys = ConfigKeys::llama,
        // Llama's distinguishing traits at test size: an untied unembedding, and llama3 RoPE
        // scaling whose three bands all occur among theta 1e4's 8 frequencies of head_dim 16
        // (wavelengths 6.3, 20 and 63 kept below 1024 / 8; 199 and 628 interpolated; 1987 and
        // beyond divided by 8).
        .tiny = {.rope_theta = 10000.0,
                 .tie_word_embeddings = false,
                 .rope_scaling = {.type = RopeScaling::Type::llama3,
                                  .factor = 8.0,
                                  .low_freq_factor = 1.0,
                                  .high_freq_factor = 8.0,
                                  .original_max_position_embeddings = 1024.0}},
        .shapes = {{
            {.name = "smollm2-135m",
             .hidden_size = 576,
             .intermediate_size = 1536,
             .num_hidden_layers = 30,
             .num_attention_heads = 9,
             .num_key_value_heads = 3,
             .vocab_size = 49152,
             .head_dim = 64,
             .rope_theta = 100000.0,
             .rms_norm_eps = 1e-5,
             .max_position_embeddings = 8192},
            {.name = "llama-3.2-1b",
             .hidden_size = 2048,
             .intermediate_size = 8192,
             .num_hidden_layers = 16,
             .num_attention_heads = 32,
             .num_key_value_heads = 8,
             .vocab_size = 128256,
             .head_dim = 64,
             .rope_theta = 500000.0,
             .rms_norm_eps = 1e-5,
             .max_position_embeddings = 131072,
             .rope_scaling = {.type = RopeScaling::Type::llama3,
                              .factor = 32.0,
                              .low_freq_factor = 1.0,
                              .high_freq_factor = 4.0,
                              .original_max_position_embeddings = 8192.0}},
        }},
    },
};  // end of kFamilies

/// `names` joined by ", ".
std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::vector<std::string> column(std::string_view Family::*field) {
  std::vector<std::string> out;
  for (const Family& f : kFamilies) out.emplace_back(f.*field);
  return out;
}

}  // namespace

std::span<const Family> families() { return kFamilies; }

const Family& family(Architecture architecture) {
  for (const Family& f : kFamilies) {
    if (f.model_type == architecture.model_type()) return f;
  }
  detail::throw_error("amc::transformer::family", "architecture \"",
                      std::string(architecture.model_type()), "\" is not in the family table");
}

std::optional<Architecture> architecture_from_class_name(std::string_view name) {
  for (const Family& f : kFamilies) {
    if (f.class_name == name) return f.architecture();
  }
  return std::nullopt;
}

std::optional<Architecture> architecture_from_model_type(std::string_view name) {
  for (const Family& f : kFamilies) {
    if (f.model_type == name) return f.architecture();
  }
  return std::nullopt;
}

std::optional<Architecture> architecture_from_gguf(std::string_view name) {
  for (const Family& f : kFamilies) {
    if (f.gguf_architecture == name) return f.architecture();
  }
  return std::nullopt;
}

Architecture parse_architecture(std::string_view name, std::string_view field) {
  if (const auto a = architecture_from_model_type(name)) return *a;
  detail::throw_error("amc::transformer::parse_architecture", std::string(field), " must be ",
                      either_of(model_types()), ", got \"", std::string(name), "\"");
}

std::string_view to_string(Architecture architecture) { return family(architecture).class_name; }

std::vector<std::string> model_types() { return column(&Family::model_type); }

std::string_view known_class_names() {
  static const std::string names = joined(column(&Family::class_name));
  return names;
}

std::string_view known_model_types() {
  static const std::string names = joined(model_types());
  return names;
}

std::string_view known_gguf_architectures() {
  static const std::string names = [] {
    std::vector<std::string> gguf = column(&Family::gguf_architecture);
    std::sort(gguf.begin(), gguf.end());
    return either_of(gguf);
  }();
  return names;
}

std::string either_of(std::span<const std::string> names) {
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return s;
}

}  // namespace amc::transformer

// Qwen2 model configuration, read from a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "rope.hpp"

namespace amc::qwen2 {

/// The fields of config.json the reference transformer needs (see shared QWEN2.md). Nulls for
/// optional keys ("sliding_window", "rope_scaling") are accepted; missing required keys are
/// refused by name.
struct Config {
  std::int64_t hidden_size = 0;           ///< 896 for Qwen2-0.5B
  std::int64_t intermediate_size = 0;     ///< 4864
  std::int64_t num_hidden_layers = 0;     ///< 24
  std::int64_t num_attention_heads = 0;   ///< 14
  std::int64_t num_key_value_heads = 0;   ///< 2
  std::int64_t head_dim = 0;              ///< hidden_size / num_attention_heads (64)
  std::int64_t vocab_size = 0;            ///< 151936
  std::int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;            ///< 1e6 for Qwen2
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = true;
  std::int64_t bos_token_id = -1;         ///< -1 when absent or null
  std::int64_t eos_token_id = -1;
  /// "amc_rope_angles" ("transformers" or "exact"): the RoPE angle convention the model was
  /// trained with, written by amc's training tools (data/qwen2-tiny: "exact"); nullopt when
  /// absent or null, which means transformers' convention (every pretrained Qwen2 model's).
  std::optional<RopeAngles> rope_angles;

  /// Query heads per KV head.
  std::int64_t group_size() const { return num_attention_heads / num_key_value_heads; }
};

/// Parses config.json text; throws amc::error "amc::qwen2::parse_config: <source>: ..." naming
/// a missing key, a key of the wrong type, or an inconsistent value (sizes <= 0, heads not
/// dividing hidden_size, KV heads not dividing heads, sizes large enough to exhaust memory, an
/// "amc_rope_angles" other than "transformers" or "exact").
Config parse_config(std::string_view json_text, const std::string& source = "config.json");

/// Reads and parses DIR/config.json (or the file itself when given a file).
Config load_config(const std::filesystem::path& path);

}  // namespace amc::qwen2

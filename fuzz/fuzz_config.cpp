// libFuzzer target: config.json parsing (Qwen2, Qwen3, Llama) on arbitrary text.
//
// parse_config must either refuse the text with amc::error or return a configuration that
// satisfies everything the loaders size buffers from (positive sizes within their caps, an
// even head_dim that is hidden_size / heads unless config.json states it, KV heads dividing
// heads, valid llama3 RoPE scaling parameters).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "amc/error.hpp"
#include "transformer/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const amc::transformer::Config c = amc::transformer::parse_config(text, "fuzz/config.json");
    if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0 ||
        c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.vocab_size <= 0 ||
        c.max_position_embeddings <= 0 || c.head_dim <= 0) {
      std::abort();
    }
    if (c.head_dim % 2 != 0 || c.num_attention_heads % c.num_key_value_heads != 0 ||
        c.group_size() < 1 || (c.qk_norm && c.qkv_bias) || (c.o_bias && !c.qkv_bias)) {
      std::abort();
    }
    if (c.rope_scaling.type == amc::transformer::RopeScaling::Type::llama3 &&
        !(c.rope_scaling.factor >= 1.0 && c.rope_scaling.low_freq_factor > 0.0 &&
          c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor &&
          c.rope_scaling.original_max_position_embeddings > 0.0)) {
      std::abort();
    }
    if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0) || !(c.rope_theta > 1.0)) std::abort();
  } catch (const amc::error&) {
    // refused with a message naming the key
  }
  return 0;
}

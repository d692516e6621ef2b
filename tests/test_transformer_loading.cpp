// Loading checkpoints of every family: config.json checks (Qwen2, Qwen3 and Llama configs, and
// what is refused), every checkpoint error with its message, and the synthetic writer.
#include <amc/error.hpp>
#include <amc/huge_pages.hpp>
#include <amc/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "catch.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/config.hpp"
#include "transformer/generate.hpp"
#include "transformer/model.hpp"
#include "transformer/synth.hpp"
#include "transformer_test_support.hpp"

namespace {

using namespace amc::transformer;
using amc::transformer::test::read_file;
using amc::transformer::test::TempDir;
namespace fs = std::filesystem;

const char* const kQwen2Config = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 131072, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 131072, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

// The config.json files of Qwen3-0.6B, Llama-3.2-1B and SmolLM2-135M as published
// (docs/transformer.md, "Model families"); SmolLM2's states no head_dim.
const char* const kQwen3Config = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

const char* const kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

const char* const kSmolLM2Config = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
  "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
  "is_llama_config": true, "max_position_embeddings": 8192, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
  "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.40.1",
  "use_cache": true, "vocab_size": 49152})";

/// `base` (kQwen2Config by default) with one key replaced (value given as JSON text) or
/// removed (empty value).
std::string edited(const std::string& key, const std::string& value,
                   const char* base = kQwen2Config) {
  nlohmann::json j = nlohmann::json::parse(base);
  if (value.empty()) {
    j.erase(key);
  } else {
    j[key] = nlohmann::json::parse(value);
  }
  return j.dump();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// Copies a tiny checkpoint's model.safetensors into `dir` through `edit`, which may drop,
/// replace or add tensors (config.json and tokenizer.json are copied unchanged).
void rewrite(const fs::path& from, const fs::path& dir,
             const std::function<void(std::vector<amc::TensorToWrite>&)>& edit) {
  fs::create_directories(dir);
  fs::copy_file(from / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  const amc::SafetensorsFile file = amc::SafetensorsFile::open(from / "model.safetensors");
  std::vector<amc::TensorToWrite> tensors;
  for (const amc::TensorInfo& info : file.tensors()) {
    tensors.push_back({info.name, info.dtype, info.shape, file.bytes(info)});
  }
  edit(tensors);
  amc::write_safetensors(dir / "model.safetensors", tensors);
}

}  // namespace

TEST_CASE("config.json of Qwen2-0.5B parses", "[qwen2][config]") {
  const Config c = parse_config(kQwen2Config);
  CHECK(c.hidden_size == 896);
  CHECK(c.intermediate_size == 4864);
  CHECK(c.num_hidden_layers == 24);
  CHECK(c.num_attention_heads == 14);
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.head_dim == 64);
  CHECK(c.group_size() == 7);
  CHECK(c.vocab_size == 151936);
  CHECK(c.max_position_embeddings == 131072);
  CHECK(c.rope_theta == 1000000.0);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.tie_word_embeddings);
  CHECK(c.bos_token_id == 151643);
  CHECK(c.eos_token_id == 151643);
  CHECK_FALSE(c.rope_angles.has_value());  // no "amc_rope_angles": transformers' angles
  CHECK(auto_rope_angles(c) == RopeAngles::transformers);
}

TEST_CASE("config.json of Qwen3-0.6B, Llama-3.2-1B and SmolLM2-135M parse into their families",
          "[qwen2][config][families]") {
  CHECK(parse_config(kQwen2Config).architecture == Architecture::qwen2);
  const Config qwen2 = parse_config(kQwen2Config);
  CHECK(qwen2.qkv_bias);
  CHECK_FALSE(qwen2.o_bias);
  CHECK_FALSE(qwen2.qk_norm);
  CHECK(qwen2.rope_scaling.type == RopeScaling::Type::none);

  const Config qwen3 = parse_config(kQwen3Config);
  CHECK(qwen3.architecture == Architecture::qwen3);
  CHECK(qwen3.hidden_size == 1024);
  CHECK(qwen3.num_attention_heads == 16);
  CHECK(qwen3.num_key_value_heads == 8);
  CHECK(qwen3.head_dim == 128);  // stated, not 1024 / 16
  CHECK(qwen3.qk_norm);
  CHECK_FALSE(qwen3.qkv_bias);
  CHECK_FALSE(qwen3.o_bias);
  CHECK(qwen3.rope_theta == 1e6);
  CHECK(qwen3.rope_scaling.type == RopeScaling::Type::none);
  CHECK(qwen3.eos_token_id == 151645);
  // Qwen3Config's default head_dim is 128, whatever hidden / heads is.
  CHECK(parse_config(edited("head_dim", "", kQwen3Config)).head_dim == 128);

  const Config llama = parse_config(kLlamaConfig);
  CHECK(llama.architecture == Architecture::llama);
  CHECK(llama.head_dim == 64);
  CHECK_FALSE(llama.qkv_bias);
  CHECK_FALSE(llama.o_bias);
  CHECK_FALSE(llama.qk_norm);
  CHECK(llama.rms_norm_eps == 1e-5);
  CHECK(llama.rope_theta == 500000.0);
  CHECK(llama.rope_scaling == RopeScaling{RopeScaling::Type::llama3, 32.0, 1.0, 4.0, 8192.0});
  CHECK(llama.tie_word_embeddings);
  CHECK(llama.bos_token_id == 128000);

  const Config smol = parse_config(kSmolLM2Config);
  CHECK(smol.architecture == Architecture::llama);
  CHECK(smol.head_dim == 64);  // 576 / 9
  CHECK(smol.group_size() == 3);
  CHECK(smol.rope_scaling.type == RopeScaling::Type::none);

  // The keys that set features: attention_bias (q, k, v and o_proj biases), rope_scaling of
  // type "default" (plain) or llama3 under its older key "type", full-attention layer_types.
  const Config biased = parse_config(edited("attention_bias", "true", kLlamaConfig));
  CHECK(biased.qkv_bias);
  CHECK(biased.o_bias);
  const Config qwen2_biased = parse_config(edited("attention_bias", "true"));
  CHECK(qwen2_biased.qkv_bias);
  CHECK_FALSE(qwen2_biased.o_bias);
  CHECK(parse_config(edited("rope_scaling", R"({"rope_type": "default"})", kLlamaConfig))
            .rope_scaling.type == RopeScaling::Type::none);
  CHECK(parse_config(edited("rope_scaling",
                            R"({"type": "llama3", "factor": 8, "low_freq_factor": 1,
                                "high_freq_factor": 4, "original_max_position_embeddings": 8192})"))
            .rope_scaling == RopeScaling{RopeScaling::Type::llama3, 8.0, 1.0, 4.0, 8192.0});
  CHECK(parse_config(edited("layer_types", R"(["full_attention", "full_attention"])")).head_dim ==
        64);
  // A stated head_dim holds for Qwen2 too (transformers' Qwen2Attention reads it when present).
  CHECK(parse_config(edited("head_dim", "128")).head_dim == 128);
  // Without "architectures", "model_type" names the family.
  nlohmann::json typed = nlohmann::json::parse(kQwen3Config);
  typed.erase("architectures");
  CHECK(parse_config(typed.dump()).architecture == Architecture::qwen3);
}

TEST_CASE("config.json: unknown families and unsupported features are refused by name",
          "[qwen2][config][families]") {
  struct Case {
    std::string key, value, message;
    const char* base = kQwen2Config;
  };
  const std::string llama3 =
      R"("rope_type": "llama3", "low_freq_factor": 1, "high_freq_factor": 4,
         "original_max_position_embeddings": 8192)";
  const std::vector<Case> cases{
      {"architectures", R"(["MistralForCausalLM"])",
       "architecture \"MistralForCausalLM\" (key 'architectures') is not supported; supported: "
       "Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM"},
      {"architectures", R"("Qwen2ForCausalLM")",
       "key 'architectures' must be an array of one class name, got \"Qwen2ForCausalLM\""},
      {"architectures", "[]", "key 'architectures' must be an array of one class name"},
      {"architectures", R"(["Qwen2ForCausalLM", "LlamaForCausalLM"])",
       "key 'architectures' must be an array of one class name"},
      {"model_type", R"("llama")",
       "key 'model_type' = \"llama\" contradicts 'architectures' Qwen2ForCausalLM (model_type "
       "\"qwen2\")"},
      {"model_type", "5", "key 'model_type' must be a string, got 5"},
      {"rope_scaling", R"({"rope_type": "yarn", "factor": 4.0})",
       "rope_scaling type \"yarn\" is not supported (\"llama3\", or null or \"default\" for "
       "plain RoPE)"},
      {"rope_scaling", R"({"type": "linear", "factor": 2.0})",
       "rope_scaling type \"linear\" is not supported"},
      {"rope_scaling", R"({"rope_type": "dynamic", "factor": 2.0})",
       "rope_scaling type \"dynamic\""},
      {"rope_scaling", R"({"factor": 2.0})",
       "key 'rope_scaling' = {\"factor\": 2.0} has no "
       "'rope_type'"},
      {"rope_scaling", R"({"rope_type": 3})", "key 'rope_scaling.rope_type' must be a string"},
      {"rope_scaling", R"("llama3")", "key 'rope_scaling' must be an object or null"},
      {"rope_scaling", "{" + llama3 + "}", "key 'rope_scaling' of type llama3 lacks 'factor'",
       kLlamaConfig},
      {"rope_scaling", R"({"factor": "32", )" + llama3 + "}",
       "key 'rope_scaling.factor' must be a number, got \"32\"", kLlamaConfig},
      {"rope_scaling", R"({"factor": 0.5, )" + llama3 + "}",
       "key 'rope_scaling.factor' must be >= 1, got 0.5", kLlamaConfig},
      {"rope_scaling",
       R"({"factor": 8, "rope_type": "llama3", "low_freq_factor": 4, "high_freq_factor": 4,
           "original_max_position_embeddings": 8192})",
       "key 'rope_scaling.high_freq_factor' (4) must exceed low_freq_factor (4)", kLlamaConfig},
      {"rope_scaling",
       R"({"factor": 8, "rope_type": "llama3", "low_freq_factor": 0, "high_freq_factor": 4,
           "original_max_position_embeddings": 8192})",
       "key 'rope_scaling.low_freq_factor' must be > 0, got 0", kLlamaConfig},
      {"rope_scaling",
       R"({"factor": 8, "rope_type": "llama3", "low_freq_factor": 1, "high_freq_factor": 4,
           "original_max_position_embeddings": 0})",
       "key 'rope_scaling.original_max_position_embeddings' must be positive, got 0", kLlamaConfig},
      {"mlp_bias", "true", "mlp_bias = true is not supported", kLlamaConfig},
      {"mlp_bias", R"("no")", "key 'mlp_bias' must be a boolean, got \"no\"", kLlamaConfig},
      {"attention_bias", "1", "key 'attention_bias' must be a boolean, got 1", kLlamaConfig},
      {"attention_bias", "false",
       "attention_bias = false contradicts Qwen2ForCausalLM, whose q, k and v projections always "
       "have biases"},
      {"layer_types", R"(["full_attention", "sliding_attention"])",
       "layer_types[1] = \"sliding_attention\" is not supported (full attention only"},
      {"layer_types", R"("full_attention")", "key 'layer_types' must be an array"},
      {"head_dim", "-128", "key 'head_dim' must be positive, got -128", kQwen3Config},
      {"head_dim", "100000", "key 'head_dim' = 100000 exceeds the supported maximum", kQwen3Config},
      {"use_sliding_window", "true", "use_sliding_window = true is not supported", kQwen3Config},
      {"hidden_act", R"("gelu")", "key 'hidden_act' must be \"silu\"", kLlamaConfig},
  };
  for (const Case& c : cases) {
    INFO(c.key << " = " << c.value);
    REQUIRE_THROWS_WITH(parse_config(edited(c.key, c.value, c.base), "my/config.json"),
                        AMC_CONTAINS("amc::transformer::parse_config: my/config.json: ") &&
                            AMC_CONTAINS(c.message));
  }
  // Neither key, or only an unknown model_type: the family is not guessed.
  nlohmann::json none = nlohmann::json::parse(kQwen2Config);
  none.erase("architectures");
  none["model_type"] = "mistral";
  REQUIRE_THROWS_WITH(parse_config(none.dump()),
                      AMC_CONTAINS("model_type \"mistral\" is not supported (no 'architectures' "
                                   "key); supported: qwen2, qwen3, llama"));
  none.erase("model_type");
  REQUIRE_THROWS_WITH(parse_config(none.dump()),
                      AMC_CONTAINS("neither 'architectures' nor 'model_type' names the model "
                                   "family; expected one of Qwen2ForCausalLM, Qwen3ForCausalLM, "
                                   "LlamaForCausalLM"));
  REQUIRE_THROWS_WITH(parse_architecture("mistral", "--family"),
                      AMC_CONTAINS("amc::transformer::parse_architecture: --family must be qwen2, "
                                   "qwen3 or llama, got \"mistral\""));
}

TEST_CASE("config.json: amc_rope_angles names the RoPE angle convention", "[qwen2][config]") {
  const Config exact = parse_config(edited("amc_rope_angles", "\"exact\""));
  REQUIRE(exact.rope_angles.has_value());
  CHECK(*exact.rope_angles == RopeAngles::exact);
  CHECK(auto_rope_angles(exact) == RopeAngles::exact);
  const Config transformers = parse_config(edited("amc_rope_angles", "\"transformers\""));
  CHECK(transformers.rope_angles == RopeAngles::transformers);
  CHECK_FALSE(parse_config(edited("amc_rope_angles", "null")).rope_angles.has_value());
}

TEST_CASE("config.json: nulls accepted, defaults as transformers' Qwen2Config", "[qwen2][config]") {
  nlohmann::json j = nlohmann::json::parse(kQwen2Config);
  j["sliding_window"] = nullptr;
  j["rope_scaling"] = nullptr;
  j["bos_token_id"] = nullptr;
  j["num_key_value_heads"] = nullptr;
  j["eos_token_id"] = {151645, 151643};
  j.erase("rope_theta");
  j.erase("max_position_embeddings");
  const Config c = parse_config(j.dump());
  CHECK(c.bos_token_id == -1);
  CHECK(c.eos_token_id == 151645);
  CHECK(c.num_key_value_heads == 14);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.max_position_embeddings == 32768);
}

TEST_CASE("config.json: every bad field is refused by name", "[qwen2][config]") {
  struct Case {
    std::string key, value, message;
  };
  const std::vector<Case> cases{
      {"hidden_size", "", "missing required key 'hidden_size'"},
      {"vocab_size", "", "missing required key 'vocab_size'"},
      {"num_hidden_layers", "null", "required key 'num_hidden_layers' is null"},
      {"intermediate_size", "\"4864\"", "key 'intermediate_size' must be an integer, got \"4864\""},
      {"num_attention_heads", "14.5", "key 'num_attention_heads' must be an integer"},
      {"hidden_size", "0", "key 'hidden_size' must be positive, got 0"},
      {"vocab_size", "-5", "key 'vocab_size' must be positive, got -5"},
      {"num_attention_heads", "15", "num_attention_heads (15) does not divide hidden_size (896)"},
      {"num_key_value_heads", "4",
       "num_key_value_heads (4) does not divide num_attention_heads (14)"},
      {"hidden_size", "1000000000", "key 'hidden_size' = 1000000000 exceeds the supported maximum"},
      {"vocab_size", "1000000000000", "exceeds the supported maximum"},
      {"rope_theta", "\"big\"", "key 'rope_theta' must be a number"},
      {"rms_norm_eps", "0", "key 'rms_norm_eps' must be in (0, 1)"},
      {"tie_word_embeddings", "1", "key 'tie_word_embeddings' must be a boolean"},
      {"hidden_act", "\"gelu\"", "key 'hidden_act' must be \"silu\""},
      {"use_sliding_window", "true", "use_sliding_window = true is not supported"},
      {"rope_scaling", "{\"type\": \"yarn\"}", "rope_scaling"},
      {"head_dim", "0", "key 'head_dim' must be positive, got 0"},
      {"head_dim", "63", "key 'head_dim' = 63 must be even for rotate-half RoPE"},
      {"eos_token_id", "-2", "key 'eos_token_id' must be >= 0"},
      // More wrong types, zero and negative sizes, and integers beyond int64.
      {"hidden_size", "true", "key 'hidden_size' must be an integer, got true"},
      {"num_hidden_layers", "[24]", "key 'num_hidden_layers' must be an integer, got [24]"},
      {"intermediate_size", "{\"value\": 4864}",
       "key 'intermediate_size' must be an integer, got {\"value\": 4864}"},
      {"vocab_size", "1e300", "key 'vocab_size' must be an integer, got 1e+300"},
      {"vocab_size", "-1e300", "key 'vocab_size' must be an integer, got -1e+300"},
      {"hidden_size", "18446744073709551615",
       "key 'hidden_size' = 18446744073709551615 is beyond any supported size"},
      {"hidden_size", "9223372036854775808", "is beyond any supported size"},
      {"num_hidden_layers", "-9223372036854775808", "must be positive, got -9223372036854775808"},
      {"num_hidden_layers", "0", "key 'num_hidden_layers' must be positive, got 0"},
      {"intermediate_size", "-4864", "key 'intermediate_size' must be positive, got -4864"},
      {"num_attention_heads", "0", "key 'num_attention_heads' must be positive, got 0"},
      {"num_key_value_heads", "0", "key 'num_key_value_heads' must be positive, got 0"},
      {"num_key_value_heads", "-2", "key 'num_key_value_heads' must be positive, got -2"},
      {"num_key_value_heads", "\"2\"", "key 'num_key_value_heads' must be an integer"},
      {"num_key_value_heads", "28",
       "num_key_value_heads (28) does not divide num_attention_heads (14)"},
      {"num_attention_heads", "1792",
       "num_attention_heads (1792) does not divide hidden_size (896)"},
      {"max_position_embeddings", "0", "key 'max_position_embeddings' must be positive, got 0"},
      {"max_position_embeddings", "4294967296",
       "key 'max_position_embeddings' = 4294967296 exceeds the supported maximum"},
      {"num_hidden_layers", "100000", "key 'num_hidden_layers' = 100000 exceeds"},
      {"num_attention_heads", "1000000", "key 'num_attention_heads' = 1000000 exceeds"},
      {"intermediate_size", "100000000", "key 'intermediate_size' = 100000000 exceeds"},
      {"rope_theta", "-1", "key 'rope_theta' must be finite and > 1, got -1"},
      {"rms_norm_eps", "-1e-6", "key 'rms_norm_eps' must be in (0, 1)"},
      {"rms_norm_eps", "[1e-6]", "key 'rms_norm_eps' must be a number, got [1e-06]"},
      {"eos_token_id", "\"</s>\"", "key 'eos_token_id' must be an integer"},
      {"bos_token_id", "[[1]]", "key 'bos_token_id' must be an integer, got [1]"},
      {"head_dim", "\"64\"", "key 'head_dim' must be an integer"},
      {"hidden_act", "[\"silu\"]", "key 'hidden_act' must be \"silu\", got [\"silu\"]"},
      {"amc_rope_angles", "\"double\"",
       "key 'amc_rope_angles' must be \"transformers\" or \"exact\", got \"double\""},
      {"amc_rope_angles", "true",
       "key 'amc_rope_angles' must be \"transformers\" or \"exact\", got true"},
      {"amc_rope_angles", "\"Exact\"", "key 'amc_rope_angles' must be"},
  };
  for (const Case& c : cases) {
    INFO(c.key << " = " << c.value);
    REQUIRE_THROWS_WITH(parse_config(edited(c.key, c.value), "my/config.json"),
                        AMC_CONTAINS("amc::transformer::parse_config: my/config.json: ") &&
                            AMC_CONTAINS(c.message));
  }
  nlohmann::json huge = nlohmann::json::parse(kQwen2Config);
  huge["intermediate_size"] = 1000000;  // each size within its limit, the product far beyond
  huge["num_hidden_layers"] = 4000;
  REQUIRE_THROWS_WITH(parse_config(huge.dump()), AMC_CONTAINS("beyond the supported 2^40"));
  REQUIRE_THROWS_WITH(parse_config("{not json"), AMC_CONTAINS("not valid JSON"));
  REQUIRE_THROWS_WITH(parse_config(""), AMC_CONTAINS("not valid JSON"));
  std::string overflow = kQwen2Config;
  overflow.replace(overflow.find("1000000.0"), 9, "1e999");  // rope_theta beyond double
  REQUIRE_THROWS_WITH(parse_config(overflow, "my/config.json"),
                      AMC_CONTAINS("my/config.json: not valid JSON"));
  REQUIRE_THROWS_WITH(parse_config("{\"hidden_size\": \"\xff\"}"), AMC_CONTAINS("not valid JSON"));
  REQUIRE_THROWS_WITH(parse_config("null"), AMC_CONTAINS("must be a JSON object"));
  // A value nested a million deep: the message shows it cut short, with no recursion over it
  // (json::dump would overflow the stack).
  std::string deep = kQwen2Config;
  deep.insert(1,
              "\"hidden_size\": " + std::string(1000000, '[') + std::string(1000000, ']') + ", ");
  deep.erase(deep.find("\"hidden_size\": 896,"), 19);
  REQUIRE_THROWS_WITH(parse_config(deep),
                      AMC_CONTAINS("key 'hidden_size' must be an integer, got [[...]]"));
  REQUIRE_THROWS_WITH(parse_config("[1, 2]"), AMC_CONTAINS("must be a JSON object"));
  nlohmann::json odd = nlohmann::json::parse(kQwen2Config);
  odd["hidden_size"] = 900;
  odd["num_attention_heads"] = 20;  // head_dim 45: RoPE pairs need an even head_dim
  odd["num_key_value_heads"] = 2;
  REQUIRE_THROWS_WITH(parse_config(odd.dump()), AMC_CONTAINS("must be even"));
}

TEST_CASE("checkpoint loading errors name the file, the tensor and the shapes", "[qwen2][load]") {
  TempDir root("load_errors");
  const fs::path good = root / "good";
  write_synthetic_checkpoint(good, amc::transformer::test::tiny_spec(amc::StorageType::bf16));
  REQUIRE_NOTHROW(Checkpoint::load(good));

  SECTION("missing directory and files") {
    REQUIRE_THROWS_WITH(Checkpoint::load(root / "nowhere"),
                        AMC_CONTAINS("nowhere: no such file or directory"));
    const fs::path no_config = root / "no_config";
    fs::create_directories(no_config);
    fs::copy_file(good / "model.safetensors", no_config / "model.safetensors");
    REQUIRE_THROWS_WITH(Checkpoint::load(no_config), AMC_CONTAINS("config.json: file not found"));
    const fs::path no_weights = root / "no_weights";
    fs::create_directories(no_weights);
    fs::copy_file(good / "config.json", no_weights / "config.json");
    REQUIRE_THROWS_WITH(Checkpoint::load(no_weights),
                        AMC_CONTAINS("no model.safetensors or model.safetensors.index.json"));
  }
  SECTION("missing tensor") {
    const fs::path dir = root / "missing_tensor";
    rewrite(good, dir, [](auto& tensors) {
      std::erase_if(tensors, [](const amc::TensorToWrite& t) {
        return t.name == "model.layers.1.mlp.up_proj.weight";
      });
    });
    REQUIRE_THROWS_WITH(Checkpoint::load(dir),
                        AMC_CONTAINS("amc::transformer::Checkpoint::load: ") &&
                            AMC_CONTAINS("tensor 'model.layers.1.mlp.up_proj.weight' is missing "
                                         "(expected shape [128, 64])"));
  }
  SECTION("wrong shape") {
    const fs::path dir = root / "wrong_shape";
    rewrite(good, dir, [](auto& tensors) {
      for (amc::TensorToWrite& t : tensors) {
        if (t.name == "model.layers.0.self_attn.k_proj.weight") {
          t.shape = {64, 32};  // same bytes, transposed-looking shape
        }
      }
    });
    REQUIRE_THROWS_WITH(Checkpoint::load(dir),
                        AMC_CONTAINS("model.safetensors: tensor "
                                     "'model.layers.0.self_attn.k_proj.weight' has shape [64, 32], "
                                     "expected [32, 64]"));
  }
  SECTION("wrong dtype") {
    const fs::path dir = root / "wrong_dtype";
    rewrite(good, dir, [](auto& tensors) {
      for (amc::TensorToWrite& t : tensors) {
        if (t.name == "model.norm.weight") t.dtype = amc::Dtype::I16;
      }
    });
    REQUIRE_THROWS_WITH(Checkpoint::load(dir),
                        AMC_CONTAINS("tensor 'model.norm.weight' has dtype I16; expected BF16, "
                                     "F16 or F32"));
  }
  SECTION("an lm_head.weight is used when present, with its shape checked") {
    const fs::path dir = root / "lm_head";
    std::vector<amc::bf16> head(320 * 64, amc::to_bf16(0.5f));
    rewrite(good, dir, [&](auto& tensors) {
      tensors.push_back(
          amc::make_tensor_to_write("lm_head.weight", {320, 64}, std::span<const amc::bf16>(head)));
    });
    const Checkpoint c = Checkpoint::load(dir);
    CHECK_FALSE(c.weights().tied);
    CHECK(c.weights().lm_head.data != c.weights().embed.data);
    rewrite(good, dir, [&](auto& tensors) {
      tensors.push_back(
          amc::make_tensor_to_write("lm_head.weight", {64, 320}, std::span<const amc::bf16>(head)));
    });
    REQUIRE_THROWS_WITH(
        Checkpoint::load(dir),
        AMC_CONTAINS("tensor 'lm_head.weight' has shape [64, 320], expected [320, 64]"));
  }
  SECTION("bad config.json") {
    const fs::path dir = root / "bad_config";
    rewrite(good, dir, [](auto&) {});
    std::string text = read_file(dir / "config.json");
    text.replace(text.find("\"num_key_value_heads\""), 21, "\"num_kv_heads\"");
    text.replace(text.find("\"num_attention_heads\""), 21, "\"attention_heads\"");
    write_text(dir / "config.json", text);
    REQUIRE_THROWS_WITH(Checkpoint::load(dir),
                        AMC_CONTAINS("config.json: missing required key 'num_attention_heads'"));
  }
  SECTION("corrupt safetensors") {
    const fs::path dir = root / "corrupt";
    rewrite(good, dir, [](auto&) {});
    fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") - 10);
    REQUIRE_THROWS_WITH(Checkpoint::load(dir), AMC_CONTAINS("model.safetensors"));
  }
  SECTION("sharded: missing shard, tensor not in its shard, paths outside the directory") {
    const fs::path dir = root / "sharded";
    SynthSpec spec = amc::transformer::test::tiny_spec(amc::StorageType::bf16);
    spec.shards = 2;
    write_synthetic_checkpoint(dir, spec);
    REQUIRE(Checkpoint::load(dir).shard_count() == 2);
    const std::string index = read_file(dir / "model.safetensors.index.json");
    nlohmann::json j = nlohmann::json::parse(index);

    j["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
    write_text(dir / "model.safetensors.index.json", j.dump());
    REQUIRE_THROWS_WITH(Checkpoint::load(dir),
                        AMC_CONTAINS("shard 'model-00009-of-00009.safetensors' (tensor "
                                     "'model.norm.weight') does not exist"));

    j = nlohmann::json::parse(index);
    j["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
    write_text(dir / "model.safetensors.index.json", j.dump());
    REQUIRE_THROWS_WITH(Checkpoint::load(dir),
                        AMC_CONTAINS("tensor 'model.norm.weight' is listed in "
                                     "model.safetensors.index.json but missing from the shard"));

    j = nlohmann::json::parse(index);
    j["weight_map"]["model.norm.weight"] = "../model.safetensors";
    write_text(dir / "model.safetensors.index.json", j.dump());
    REQUIRE_THROWS_WITH(Checkpoint::load(dir), AMC_CONTAINS("is not a plain file name"));

    j = nlohmann::json::parse(index);
    j["weight_map"].erase("model.layers.0.input_layernorm.weight");
    write_text(dir / "model.safetensors.index.json", j.dump());
    REQUIRE_THROWS_WITH(Checkpoint::load(dir),
                        AMC_CONTAINS("model.safetensors.index.json: tensor "
                                     "'model.layers.0.input_layernorm.weight' is missing"));

    write_text(dir / "model.safetensors.index.json", "{\"metadata\": {}}");
    REQUIRE_THROWS_WITH(Checkpoint::load(dir), AMC_CONTAINS("missing object 'weight_map'"));
  }
}

namespace {

/// Sets config.json's family in `dir` to `architecture` (and its model_type).
void relabel(const fs::path& dir, const std::string& architecture, const std::string& type) {
  nlohmann::json config = nlohmann::json::parse(read_file(dir / "config.json"));
  config["architectures"] = {architecture};
  config["model_type"] = type;
  write_text(dir / "config.json", config.dump(2));
}

}  // namespace

TEST_CASE("checkpoint loading: each family's tensors, and tensors another family would have",
          "[qwen2][load][families]") {
  TempDir root("family_load");
  const fs::path qwen2 = root / "qwen2", qwen3 = root / "qwen3", llama = root / "llama";
  write_synthetic_checkpoint(qwen2, amc::transformer::test::tiny_spec(amc::StorageType::bf16));
  write_synthetic_checkpoint(
      qwen3, amc::transformer::test::family_spec(Architecture::qwen3, amc::StorageType::bf16));
  write_synthetic_checkpoint(
      llama, amc::transformer::test::family_spec(Architecture::llama, amc::StorageType::bf16));
  {
    const Checkpoint c = Checkpoint::load(qwen3);
    const LayerWeights& l = c.weights().layers[1];
    CHECK(l.q_norm.size() == 32);
    CHECK(l.k_norm.size() == 32);
    CHECK(l.q_bias.empty());
    CHECK(l.o_bias.empty());
    CHECK(l.q.rows == 128);
    CHECK(l.o.cols == 128);
    const Checkpoint d = Checkpoint::load(llama);
    CHECK_FALSE(d.weights().tied);
    CHECK(d.weights().lm_head.data != d.weights().embed.data);
    CHECK(d.weights().layers[0].q_norm.empty());
    CHECK(d.config().rope_scaling.type == RopeScaling::Type::llama3);
  }
  auto drop = [](const std::string& name) {
    return [name](std::vector<amc::TensorToWrite>& tensors) {
      std::erase_if(tensors, [&](const amc::TensorToWrite& t) { return t.name == name; });
    };
  };
  SECTION("Qwen3: a missing or misshapen q/k norm weight") {
    rewrite(qwen3, root / "no_k_norm", drop("model.layers.1.self_attn.k_norm.weight"));
    REQUIRE_THROWS_WITH(Checkpoint::load(root / "no_k_norm"),
                        AMC_CONTAINS("tensor 'model.layers.1.self_attn.k_norm.weight' is missing "
                                     "(expected shape [32])"));
    std::vector<amc::bf16> short_norm(16, amc::to_bf16(1.0f));
    rewrite(qwen3, root / "short_q_norm", [&](auto& tensors) {
      for (amc::TensorToWrite& t : tensors) {
        if (t.name != "model.layers.0.self_attn.q_norm.weight") continue;
        t = amc::make_tensor_to_write(t.name, {16}, std::span<const amc::bf16>(short_norm));
      }
    });
    REQUIRE_THROWS_WITH(Checkpoint::load(root / "short_q_norm"),
                        AMC_CONTAINS("tensor 'model.layers.0.self_attn.q_norm.weight' has shape "
                                     "[16], expected [32]"));
  }
  SECTION("Llama: tie_word_embeddings false needs lm_head.weight") {
    rewrite(llama, root / "no_lm_head", drop("lm_head.weight"));
    REQUIRE_THROWS_WITH(Checkpoint::load(root / "no_lm_head"),
                        AMC_CONTAINS("tensor 'lm_head.weight' is missing (expected shape [320, "
                                     "64]: config.json says tie_word_embeddings false)"));
  }
  SECTION("a config.json naming the wrong family: missing or surplus tensors") {
    // Qwen3 weights called Llama: the q/k norms would be ignored.
    rewrite(qwen3, root / "qwen3_as_llama", [](auto&) {});
    relabel(root / "qwen3_as_llama", "LlamaForCausalLM", "llama");
    REQUIRE_THROWS_WITH(Checkpoint::load(root / "qwen3_as_llama"),
                        AMC_CONTAINS("the checkpoint has tensor "
                                     "'model.layers.0.self_attn.q_norm.weight', but config.json "
                                     "describes LlamaForCausalLM (no q/k norms): does it name "
                                     "the right architecture?"));
    // Qwen2 weights called Llama: the q/k/v biases would be ignored.
    rewrite(qwen2, root / "qwen2_as_llama", [](auto&) {});
    relabel(root / "qwen2_as_llama", "LlamaForCausalLM", "llama");
    REQUIRE_THROWS_WITH(Checkpoint::load(root / "qwen2_as_llama"),
                        AMC_CONTAINS("has tensor 'model.layers.0.self_attn.q_proj.bias', but "
                                     "config.json describes LlamaForCausalLM with attention_bias "
                                     "false"));
    // Llama weights called Qwen2: the biases Qwen2 must have are missing.
    rewrite(llama, root / "llama_as_qwen2", [](auto&) {});
    fs::copy_file(llama / "config.json", root / "llama_as_qwen2" / "config.json",
                  fs::copy_options::overwrite_existing);
    nlohmann::json config = nlohmann::json::parse(read_file(llama / "config.json"));
    config["architectures"] = {"Qwen2ForCausalLM"};
    config["model_type"] = "qwen2";
    config.erase("attention_bias");
    write_text(root / "llama_as_qwen2" / "config.json", config.dump());
    REQUIRE_THROWS_WITH(Checkpoint::load(root / "llama_as_qwen2"),
                        AMC_CONTAINS("tensor 'model.layers.0.self_attn.q_proj.bias' is missing"));
  }
  SECTION("biases no family here has: o_proj in Qwen2, MLP biases") {
    std::vector<amc::bf16> bias(128, amc::to_bf16(0.5f));
    rewrite(qwen2, root / "o_bias", [&](auto& tensors) {
      tensors.push_back(amc::make_tensor_to_write("model.layers.1.self_attn.o_proj.bias", {64},
                                                  std::span<const amc::bf16>(bias).first(64)));
    });
    REQUIRE_THROWS_WITH(Checkpoint::load(root / "o_bias"),
                        AMC_CONTAINS("'model.layers.1.self_attn.o_proj.bias', but config.json "
                                     "describes Qwen2ForCausalLM (no o_proj bias)"));
    rewrite(llama, root / "mlp_bias", [&](auto& tensors) {
      tensors.push_back(amc::make_tensor_to_write("model.layers.0.mlp.up_proj.bias", {128},
                                                  std::span<const amc::bf16>(bias)));
    });
    REQUIRE_THROWS_WITH(Checkpoint::load(root / "mlp_bias"),
                        AMC_CONTAINS("'model.layers.0.mlp.up_proj.bias', but config.json "
                                     "describes LlamaForCausalLM (no MLP biases)"));
  }
}

TEST_CASE("synthetic checkpoints: same seed, same bytes; another seed, other weights",
          "[qwen2][synth]") {
  TempDir root("synth");
  for (const auto dtype : {amc::StorageType::bf16, amc::StorageType::f32}) {
    const SynthSpec spec = amc::transformer::test::tiny_spec(dtype, 1234);
    write_synthetic_checkpoint(root / "a", spec);
    write_synthetic_checkpoint(root / "b", spec);
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"}) {
      INFO(file);
      CHECK(read_file(root / "a" / file) == read_file(root / "b" / file));
    }
    SynthSpec other = spec;
    other.seed = 1235;
    write_synthetic_checkpoint(root / "c", other);
    CHECK(read_file(root / "a" / "model.safetensors") !=
          read_file(root / "c" / "model.safetensors"));

    // Exactly Qwen2's names, shapes and count: 2 + 12 per layer (lm_head tied), as the 290
    // tensors of Qwen2-0.5B's 24 layers.
    const amc::SafetensorsFile file = amc::SafetensorsFile::open(root / "a" / "model.safetensors");
    CHECK(file.tensors().size() == 2 + 12 * 2);
    CHECK(file.at("model.embed_tokens.weight").shape == std::vector<std::int64_t>{320, 64});
    CHECK(file.at("model.layers.1.self_attn.k_proj.bias").shape == std::vector<std::int64_t>{32});
    CHECK(file.at("model.layers.0.mlp.down_proj.weight").shape ==
          std::vector<std::int64_t>{64, 128});
    CHECK(file.at("model.norm.weight").dtype ==
          (dtype == amc::StorageType::bf16 ? amc::Dtype::BF16 : amc::Dtype::F32));
    const Config c = load_config(root / "a");
    CHECK(c.eos_token_id == 317);  // the synthetic tokenizer's <|endoftext|>
  }
  // Every family: its names and shapes, the same bytes for the same seed.
  for (const auto family : {Architecture::qwen3, Architecture::llama}) {
    const SynthSpec spec = amc::transformer::test::family_spec(family, amc::StorageType::bf16, 9);
    write_synthetic_checkpoint(root / "fa", spec);
    write_synthetic_checkpoint(root / "fb", spec);
    INFO(to_string(family));
    CHECK(read_file(root / "fa" / "model.safetensors") ==
          read_file(root / "fb" / "model.safetensors"));
    const amc::SafetensorsFile file = amc::SafetensorsFile::open(root / "fa" / "model.safetensors");
    const nlohmann::json config = nlohmann::json::parse(read_file(root / "fa" / "config.json"));
    CHECK(config["architectures"][0] == std::string(to_string(family)));
    CHECK(config["attention_bias"] == false);
    CHECK(file.find("model.layers.0.self_attn.q_proj.bias") == nullptr);
    CHECK(file.find("model.layers.0.self_attn.o_proj.bias") == nullptr);
    if (family == Architecture::qwen3) {
      // 2 + 11 per layer (q_norm and k_norm instead of 3 biases), tied.
      CHECK(file.tensors().size() == 2 + 11 * 2);
      CHECK(config["head_dim"] == 32);
      CHECK(file.at("model.layers.1.self_attn.q_norm.weight").shape ==
            std::vector<std::int64_t>{32});
      CHECK(file.at("model.layers.0.self_attn.q_proj.weight").shape ==
            std::vector<std::int64_t>{128, 64});
      CHECK(file.at("model.layers.0.self_attn.o_proj.weight").shape ==
            std::vector<std::int64_t>{64, 128});
    } else {
      // 3 (embedding, final norm, lm_head) + 9 per layer.
      CHECK(file.tensors().size() == 3 + 9 * 2);
      CHECK(file.at("lm_head.weight").shape == std::vector<std::int64_t>{320, 64});
      CHECK(config["tie_word_embeddings"] == false);
      CHECK(config["rope_scaling"]["rope_type"] == "llama3");
      CHECK(config["mlp_bias"] == false);
    }
  }
  // The real shapes parse as their published configs do.
  CHECK(synth_shape("qwen3-0.6b").head_dim == parse_config(kQwen3Config).head_dim);
  CHECK(synth_shape("qwen3-0.6b").qk_norm);
  CHECK(synth_shape("llama-3.2-1b").rope_scaling == parse_config(kLlamaConfig).rope_scaling);
  CHECK(synth_shape("smollm2-135m").architecture == Architecture::llama);
  CHECK(synth_shape("smollm2-135m").intermediate_size == 1536);

  SynthSpec bad = amc::transformer::test::tiny_spec(amc::StorageType::bf16);
  bad.config.num_key_value_heads = 3;
  REQUIRE_THROWS_WITH(
      write_synthetic_checkpoint(root / "bad", bad),
      AMC_CONTAINS("num_key_value_heads (3) does not divide num_attention_heads (4)"));
  bad = amc::transformer::test::tiny_spec(amc::StorageType::f16);
  REQUIRE_THROWS_WITH(write_synthetic_checkpoint(root / "bad", bad),
                      AMC_CONTAINS("dtype must be bf16 or f32"));
  REQUIRE_THROWS_WITH(synth_shape("huge"),
                      AMC_CONTAINS("shape must be one of tiny, qwen2-0.5b, qwen3-0.6b, "
                                   "smollm2-135m, llama-3.2-1b, got 'huge'"));
  REQUIRE_THROWS_WITH(synth_shape("qwen3-0.6b", Architecture::llama),
                      AMC_CONTAINS("shape 'qwen3-0.6b' is a Qwen3ForCausalLM shape; it cannot be "
                                   "written as LlamaForCausalLM"));
}

// --- fuzzing regressions (fuzz/regressions/fuzz_config/) ---------------------------------------

TEST_CASE("config.json: fuzz_config regressions are refused with amc::error",
          "[qwen2][config][fuzz]") {
  // A number beyond double's range: nlohmann throws out_of_range (406), not parse_error, which
  // escaped parse_config as a non-amc exception. The input exactly as libFuzzer found it, then
  // minimised.
  const std::string found(
      "{\"hidden_size\": 641e400, \"intermediate_size\": 12\xff\xff\xff\xffnum__atte896.0nti\x83"
      "on_heads\":cab_size\": 260}");
  REQUIRE_THROWS_AS(parse_config(found, "fuzz.json"), amc::error);
  REQUIRE_THROWS_WITH(parse_config(found, "fuzz.json"),
                      AMC_CONTAINS("fuzz.json: not valid JSON") && AMC_CONTAINS("number overflow"));
  REQUIRE_THROWS_AS(parse_config("1e440"), amc::error);
  REQUIRE_THROWS_AS(parse_config("{\"hidden_size\": -1e400}"), amc::error);
}

TEST_CASE("non-finite weights: decode flags the attention, generate refuses the logits",
          "[qwen2][numerics]") {
  TempDir root("non_finite");
  const fs::path good = root / "good";
  write_synthetic_checkpoint(good, amc::transformer::test::tiny_spec(amc::StorageType::bf16));
  const Config config = load_config(good);
  const auto vocab = static_cast<std::size_t>(config.vocab_size);
  const auto hidden = static_cast<std::size_t>(config.hidden_size);
  const float nan = std::numeric_limits<float>::quiet_NaN();

  SECTION("NaN in a layer-1 bias: the prefill's logits are refused at step 0") {
    const fs::path dir = root / "nan_bias";
    std::vector<amc::bf16> bias;
    rewrite(good, dir, [&](auto& tensors) {
      for (amc::TensorToWrite& t : tensors) {
        if (t.name != "model.layers.1.self_attn.k_proj.bias") continue;
        bias.assign(static_cast<std::size_t>(t.shape[0]), amc::to_bf16(nan));
        t = amc::make_tensor_to_write(t.name, t.shape, std::span<const amc::bf16>(bias));
      }
    });
    const Checkpoint checkpoint = Checkpoint::load(dir);  // weights are not scanned on load
    Session session(checkpoint);
    GenerationOptions g;
    g.max_tokens = 4;
    const std::vector<std::int32_t> prompt{5, 6, 7};
    REQUIRE_THROWS_WITH(
        generate(session, prompt, g),
        AMC_CONTAINS("amc::transformer::generate: step 0 (prefill): logits[0] = NaN is "
                     "not finite") &&
            AMC_CONTAINS("NaN or Inf weights"));
    // The session itself does not throw: decode reports the heads in StepStats.
    Session raw(checkpoint);
    std::vector<float> logits(vocab);
    raw.prefill(prompt, logits);
    const StepStats& stats = raw.decode(9, logits);
    CHECK(std::isnan(logits[0]));
    CHECK(stats.non_finite_heads == config.num_attention_heads);  // layer 1 only
    CHECK(stats.first_non_finite_layer == 1);
    CHECK(stats.first_non_finite_head == 0);
  }
  SECTION("NaN embeddings of every token but the prompt's: refused at the first decode step") {
    const fs::path dir = root / "nan_embeddings";
    std::vector<amc::bf16> embed, head;
    rewrite(good, dir, [&](auto& tensors) {
      for (amc::TensorToWrite& t : tensors) {
        if (t.name != "model.embed_tokens.weight") continue;
        const auto* stored = reinterpret_cast<const amc::bf16*>(t.bytes.data());
        head.assign(stored, stored + vocab * hidden);  // a finite, untied lm_head
        embed.assign(vocab * hidden, amc::to_bf16(nan));
        std::copy_n(stored + 5 * hidden, hidden,
                    embed.begin() + 5 * static_cast<std::ptrdiff_t>(hidden));
        t = amc::make_tensor_to_write(t.name, t.shape, std::span<const amc::bf16>(embed));
      }
      tensors.push_back(amc::make_tensor_to_write("lm_head.weight",
                                                  {config.vocab_size, config.hidden_size},
                                                  std::span<const amc::bf16>(head)));
    });
    const Checkpoint checkpoint = Checkpoint::load(dir);
    Session session(checkpoint);
    std::vector<float> logits(vocab);
    session.prefill(std::vector<std::int32_t>{5}, logits);
    std::size_t top = 0;
    for (std::size_t i = 1; i < vocab; ++i) top = logits[i] > logits[top] ? i : top;
    REQUIRE(top != 5);  // so the first decode step embeds a NaN row
    Session fresh(checkpoint);
    GenerationOptions g;
    g.max_tokens = 3;
    REQUIRE_THROWS_WITH(
        generate(fresh, std::vector<std::int32_t>{5}, g),
        AMC_CONTAINS("step 1 (decode): logits[0] = NaN is not finite; attention was first "
                     "non-finite in layer 0, query head 0 (8 heads over all layers)"));
  }
  SECTION("a generation longer than max_position_embeddings is refused before allocating") {
    const Checkpoint checkpoint = Checkpoint::load(good);
    Session session(checkpoint);
    GenerationOptions g;
    g.max_tokens = std::numeric_limits<std::int64_t>::max();
    REQUIRE_THROWS_WITH(generate(session, std::vector<std::int32_t>{5, 6}, g),
                        AMC_CONTAINS("the prompt (2 tokens) and max_tokens (9223372036854775807) "
                                     "exceed the model's max_position_embeddings (32768)"));
    g.max_tokens = 32767;
    REQUIRE_THROWS_WITH(generate(session, std::vector<std::int32_t>{5, 6}, g),
                        AMC_CONTAINS("max_position_embeddings"));
    CHECK(session.positions() == 0);
  }
}

namespace {

/// Address ranges of this process mapped from a file named model.safetensors; empty when
/// /proc/self/maps cannot be read. Opened by the caller after the load: qemu-user (the aarch64
/// test run) writes its emulated maps file when it is opened, not when it is read as Linux does.
std::vector<std::pair<std::uintptr_t, std::uintptr_t>> safetensors_mappings(std::istream& maps) {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  for (std::string line; std::getline(maps, line);) {
    if (line.size() < 17 || line.compare(line.size() - 17, 17, "model.safetensors") != 0) continue;
    const std::size_t dash = line.find('-');
    const std::size_t space = line.find(' ');
    ranges.emplace_back(std::stoull(line.substr(0, dash), nullptr, 16),
                        std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16));
  }
  return ranges;
}

bool inside(const std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& ranges, const Matrix& m) {
  const auto begin = reinterpret_cast<std::uintptr_t>(m.data);
  return std::any_of(ranges.begin(), ranges.end(), [&](const auto& range) {
    return begin >= range.first && begin + m.bytes() <= range.second;
  });
}

/// Every matrix a decode step streams: each layer's projections, then the unembedding.
std::vector<const Matrix*> streamed_matrices(const Weights& w) {
  std::vector<const Matrix*> matrices;
  for (const LayerWeights& l : w.layers) {
    for (const Matrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) matrices.push_back(m);
  }
  matrices.push_back(&w.lm_head);
  return matrices;
}

/// Logits of a prefill of three tokens and two decode steps.
std::vector<float> short_run(const Checkpoint& checkpoint) {
  Session session(checkpoint);
  const auto vocab = static_cast<std::size_t>(checkpoint.config().vocab_size);
  std::vector<float> logits(vocab), all;
  session.prefill(std::vector<std::int32_t>{3, 1, 4}, logits);
  all.insert(all.end(), logits.begin(), logits.end());
  for (std::int32_t token : {1, 5}) {
    session.decode(token, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace

TEST_CASE("WeightMemory::mapped: weight matrices are used in place in the file, not copied",
          "[qwen2][load]") {
  TempDir root("mapped");
  write_synthetic_checkpoint(root.path(),
                             amc::transformer::test::tiny_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(
      root.path(), {.weights = WeightMemory::mapped, .weight_dtype = std::nullopt});
  CHECK(checkpoint.weight_memory() == WeightMemory::mapped);
  std::ifstream maps("/proc/self/maps");
  if (!maps) {
    WARN("no /proc/self/maps: the mapping of the weights is not checked");
    return;
  }
  const auto ranges = safetensors_mappings(maps);
  REQUIRE_FALSE(ranges.empty());
  const Weights& w = checkpoint.weights();
  CHECK(inside(ranges, w.embed));
  CHECK(w.lm_head.data == w.embed.data);  // tied: the embedding itself
  for (const Matrix* m : streamed_matrices(w)) CHECK(inside(ranges, *m));
}

TEST_CASE(
    "WeightMemory::huge_pages (the default): streamed matrices are copied byte for byte "
    "into one huge-page block, and decode computes the same bits",
    "[qwen2][load]") {
  TempDir root("huge");
  write_synthetic_checkpoint(root.path(),
                             amc::transformer::test::tiny_spec(amc::StorageType::bf16));
  Checkpoint copied = Checkpoint::load(root.path());
  const Checkpoint mapped = Checkpoint::load(
      root.path(), {.weights = WeightMemory::mapped, .weight_dtype = std::nullopt});
  // Where the kernel refuses the advice the load stays mapped: the copy would gain nothing.
  const bool advised = amc::HugePageBuffer(1).huge_pages_advised();
  REQUIRE(copied.weight_memory() == (advised ? WeightMemory::huge_pages : WeightMemory::mapped));
  if (!advised) return;

  const Weights& w = copied.weights();
  CHECK(w.lm_head.data == w.embed.data);  // tied: still one matrix, now in the block
  const auto copies = streamed_matrices(w);
  const auto originals = streamed_matrices(mapped.weights());
  REQUIRE(copies.size() == originals.size());
  // One block, in decode order, every matrix on a cache line.
  const auto first = reinterpret_cast<std::uintptr_t>(copies.front()->data);
  CHECK(first % amc::HugePageBuffer::kHugePage == 0);
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const Matrix& copy = *copies[i];
    const Matrix& original = *originals[i];
    INFO("matrix " << i);
    CHECK(copy.data != original.data);
    CHECK(reinterpret_cast<std::uintptr_t>(copy.data) % 64 == 0);
    if (i > 0) CHECK(copy.data > copies[i - 1]->data);
    REQUIRE(copy.dtype == original.dtype);
    REQUIRE(copy.bytes() == original.bytes());
    CHECK(std::memcmp(copy.data, original.data, copy.bytes()) == 0);
  }
  std::ifstream maps("/proc/self/maps");
  if (maps) {
    const auto ranges = safetensors_mappings(maps);
    for (const Matrix* m : copies) CHECK_FALSE(inside(ranges, *m));
  }
  // The copied bytes count once: of this load's mapping of the file, only what is not copied
  // (norms, the header) and the pages a matrix shares with a neighbour stay resident. Both
  // loads map the file; `mapped` has read all its matrices (the comparison above), so the
  // smaller of the two mappings' resident sizes is this one's.
  std::ifstream smaps("/proc/self/smaps");
  std::size_t smallest_kib = std::numeric_limits<std::size_t>::max();
  bool in_file = false;
  for (std::string line; std::getline(smaps, line);) {
    const bool header = line.find('-') < line.find(' ') && line.find(':') > line.find(' ');
    if (header) {
      in_file = line.size() >= 17 && line.compare(line.size() - 17, 17, "model.safetensors") == 0;
    } else if (in_file && line.rfind("Rss:", 0) == 0) {
      smallest_kib = std::min<std::size_t>(smallest_kib, std::stoull(line.substr(4)));
    }
  }
  if (smallest_kib == std::numeric_limits<std::size_t>::max()) {
    WARN("no /proc/self/smaps entry for the file: its resident size is not checked");
  } else {
    const auto file_bytes = fs::file_size(root.path() / "model.safetensors");
    std::size_t copied_bytes = 0;
    for (const Matrix* m : copies) copied_bytes += m->bytes();
    const std::size_t page = 4096, shared_pages = 2 * copies.size();
    INFO("resident " << smallest_kib << " KiB of a " << file_bytes << "-byte file");
    CHECK(smallest_kib * 1024 <= file_bytes - copied_bytes + shared_pages * page);
    CHECK(smallest_kib * 1024 < file_bytes / 2);
  }

  const std::vector<float> expected = short_run(mapped);
  CHECK(short_run(copied) == expected);  // bitwise: the same bytes, the same kernels
  // The block moves with the checkpoint.
  const Checkpoint moved = std::move(copied);
  CHECK(moved.weight_memory() == WeightMemory::huge_pages);
  CHECK(short_run(moved) == expected);
}

TEST_CASE("WeightMemory: names, and a value that is none is refused by name", "[qwen2][load]") {
  CHECK(std::string(to_string(WeightMemory::mapped)) == "mapped");
  CHECK(std::string(to_string(WeightMemory::huge_pages)) == "huge_pages");
  const auto invalid = static_cast<WeightMemory>(7);
  CHECK(std::string(to_string(invalid)) == "invalid");
  TempDir root("invalid_memory");
  write_synthetic_checkpoint(root.path(),
                             amc::transformer::test::tiny_spec(amc::StorageType::bf16));
  CHECK_THROWS_WITH(
      Checkpoint::load(root.path(), {.weights = invalid, .weight_dtype = std::nullopt}),
      AMC_CONTAINS("amc::transformer::Checkpoint::load") && AMC_CONTAINS("options.weights is 7"));
}

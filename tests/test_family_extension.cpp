// A model family is one row of the family table (docs/architecture.md, "Where a change goes"):
// this executable links a copy of examples/transformer/family.cpp with one line added, the
// #include of tests/families/test_llama_row.inc (tests/CMakeLists.txt makes the copy), and
// nothing else knows the family. It must then be a family like any other: in every list and
// message derived from the table, a --family and --shape choice of amc-synth, written by the
// synthetic writer, loaded from its config.json and from a GGUF file (whose q/k rows are
// permuted, as the row says), and run through the model against the naive double-precision
// reference.
#include <CLI/CLI.hpp>

#include <amc/error.hpp>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gguf_of_checkpoint.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/config.hpp"
#include "transformer/family.hpp"
#include "transformer/model.hpp"
#include "transformer/synth.hpp"
#include "transformer/synth_flags.hpp"
#include "transformer_test_support.hpp"

namespace {

using namespace amc::transformer;
using amc::transformer::test::TempDir;

const Architecture kTestLlama{"test_llama"};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const amc::error& e) {
    return e.what();
  } catch (const CLI::Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// amc-synth's flags parsed from `args`, and the spec they describe.
SynthSpec synth_flags(std::vector<std::string> args) {
  CLI::App app;
  SynthFlags flags;
  add_synth_flags(app, flags);
  std::vector<const char*> argv{"amc-synth", "--out", "unused"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return flags.spec(app);
}

/// Prefill logits of every position, [tokens][vocab] flattened.
std::vector<float> prefill_logits(const Checkpoint& checkpoint,
                                  const std::vector<std::int32_t>& tokens) {
  SessionOptions o;
  o.kv_dtype = amc::StorageType::f32;
  o.rope_angles = RopeAngles::transformers;
  Session session(checkpoint, o);
  std::vector<float> logits(tokens.size() *
                            static_cast<std::size_t>(checkpoint.config().vocab_size));
  session.prefill(tokens, logits, true);
  return logits;
}

}  // namespace

TEST_CASE("a family added by one row is in every list and message", "[families]") {
  REQUIRE(families().size() == 4);
  const Family& f = families().back();
  CHECK(f.class_name == "TestLlamaForCausalLM");
  CHECK(family(kTestLlama).class_name == "TestLlamaForCausalLM");
  CHECK(to_string(kTestLlama) == "TestLlamaForCausalLM");
  CHECK(architecture_from_class_name("TestLlamaForCausalLM") == kTestLlama);
  CHECK(architecture_from_model_type("test_llama") == kTestLlama);
  CHECK(architecture_from_gguf("test_llama") == kTestLlama);
  CHECK(parse_architecture("test_llama") == kTestLlama);

  CHECK(known_class_names() ==
        "Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM, TestLlamaForCausalLM");
  CHECK(known_model_types() == "qwen2, qwen3, llama, test_llama");
  CHECK(known_gguf_architectures() == "llama, qwen2, qwen3 or test_llama");
  CHECK(model_types() == std::vector<std::string>{"qwen2", "qwen3", "llama", "test_llama"});
  CHECK(message_of([] { parse_architecture("mistral", "--family"); }) ==
        "amc::transformer::parse_architecture: --family must be qwen2, qwen3, llama or "
        "test_llama, got \"mistral\"");

  // config.json's messages.
  CHECK_THAT(message_of([] {
               parse_config(R"({"architectures": ["MistralForCausalLM"], "hidden_size": 64,
                 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "vocab_size": 320})");
             }),
             AMC_CONTAINS("supported: Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM, "
                          "TestLlamaForCausalLM"));
  CHECK_THAT(message_of([] {
               parse_config(R"({"model_type": "mistral", "hidden_size": 64,
                 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "vocab_size": 320})");
             }),
             AMC_CONTAINS("supported: qwen2, qwen3, llama, test_llama"));
  CHECK_THAT(message_of([] {
               parse_config(R"({"hidden_size": 64, "intermediate_size": 128,
                 "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 320})");
             }),
             AMC_CONTAINS("expected one of Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM, "
                          "TestLlamaForCausalLM"));
  const Config by_model_type = parse_config(R"({"model_type": "test_llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 320, "attention_bias": true})");
  CHECK(by_model_type.architecture == kTestLlama);
  CHECK(by_model_type.qkv_bias);  // attention_bias_key: the key decides, as for Llama
  CHECK(by_model_type.o_bias);

  // amc-synth's shapes and flags.
  CHECK(synth_shapes().back() == "test-llama-small");
  CHECK(synth_shape_names() ==
        "tiny, qwen2-0.5b, qwen3-0.6b, smollm2-135m, llama-3.2-1b, test-llama-small");
  CHECK(synth_shape("test-llama-small").architecture == kTestLlama);
  CHECK(synth_shape("test-llama-small").hidden_size == 96);
  CHECK_THAT(message_of([] { synth_shape("nope"); }), AMC_CONTAINS("test-llama-small, got 'nope'"));
  CHECK_THAT(message_of([] { synth_shape("test-llama-small", Architecture::llama); }),
             AMC_CONTAINS("shape 'test-llama-small' is a TestLlamaForCausalLM shape"));
  CHECK(synth_flags({"--family", "test_llama"}).config.architecture == kTestLlama);
  const SynthSpec small = synth_flags({"--shape", "test-llama-small", "--layers", "1"});
  CHECK(small.config.architecture == kTestLlama);
  CHECK(small.config.num_hidden_layers == 1);
  CHECK_THAT(message_of([] { synth_flags({"--family", "mistral"}); }), AMC_CONTAINS("test_llama"));
  CHECK_THAT(message_of([] {
               synth_flags({"--shape", "nope"});
             }),
             AMC_CONTAINS("test-llama-small"));
  CLI::App app;
  SynthFlags flags;
  add_synth_flags(app, flags);
  CHECK_THAT(app.help(), AMC_CONTAINS("or test_llama (TestLlamaForCausalLM)"));
  CHECK_THAT(app.help(), AMC_CONTAINS("llama-3.2-1b, test-llama-small"));
}

TEST_CASE("a family added by one row is written, loaded from config.json and GGUF, and run",
          "[families]") {
  TempDir dir("family_extension");
  SynthSpec spec;
  spec.config = synth_shape("tiny", kTestLlama);
  spec.dtype = amc::StorageType::f32;
  spec.seed = 17;
  write_synthetic_checkpoint(dir / "st", spec);
  const nlohmann::json written = nlohmann::json::parse(test::read_file(dir / "st" / "config.json"));
  CHECK(written["architectures"] == nlohmann::json::array({"TestLlamaForCausalLM"}));
  CHECK(written["model_type"] == "test_llama");
  CHECK(written.contains("mlp_bias"));  // ConfigKeys::llama's keys
  CHECK_FALSE(written.contains("sliding_window"));

  const LoadOptions f32{.weights = WeightMemory::mapped, .weight_dtype = amc::StorageType::f32};
  const Checkpoint checkpoint = Checkpoint::load(dir / "st", f32);
  const Config& c = checkpoint.config();
  CHECK(c.architecture == kTestLlama);
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.head_dim == 16);
  CHECK_FALSE(checkpoint.weights().tied);

  // Through the model: the naive reference reads the same config.json (a class name it does not
  // know computes as Llama does there: biases from attention_bias, no q/k norms).
  const test::NaiveQwen2 naive(dir / "st", test::NaiveRope::transformers);
  const std::vector<std::int32_t> tokens = test::prompt_ids(24, naive.vocab(), 5);
  const auto expected = naive.logits(tokens, false);
  const std::vector<float> logits = prefill_logits(checkpoint, tokens);
  double worst = 0.0;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    worst =
        std::max(worst, test::relative_error(logits.data() + t * expected[t].size(), expected[t]));
  }
  INFO("max relative error against the naive model " << worst);
  CHECK(worst < 1e-4);

  // From GGUF: general.architecture test_llama, its keys, q and k rows permuted as the row says;
  // the loader undoes the permutation, so the logits are the safetensors checkpoint's bitwise.
  REQUIRE(family(kTestLlama).gguf_qk_permuted);
  test::write_gguf_of_checkpoint(dir / "st", dir / "model.gguf");
  const Checkpoint gguf = Checkpoint::load(dir / "model.gguf", f32);
  CHECK(gguf.format() == CheckpointFormat::gguf);
  CHECK(gguf.config().architecture == kTestLlama);
  CHECK(prefill_logits(gguf, tokens) == logits);
  CHECK_THAT(message_of([&] {
               const std::vector<std::pair<std::string, amc::GgufValue>> meta = {
                   {"general.architecture", {amc::GgufValueType::string, std::string("mistral")}}};
               amc::write_gguf(dir / "other.gguf", meta, std::vector<amc::GgufTensorToWrite>{});
               Checkpoint::load(dir / "other.gguf");
             }),
             AMC_CONTAINS("general.architecture 'mistral' is not supported (llama, qwen2, qwen3 "
                          "or test_llama)"));
}

// The trained tiny checkpoint (data/qwen2-tiny) against PyTorch: the training tool
// (tools/train_tiny/train.py) saved the logits of its own Qwen2 implementation, run in float64
// on the exported bf16 weights, for the first 512 tokens of a held-out file: once exact, once
// with keys and values rounded to bf16 as amc's bf16 KV cache stores them. amc's reference
// transformer must reproduce them through prefill and through the decode path, with either KV
// cache type. This is the cross-framework check: the C++ code and the Python model share
// nothing but the checkpoint's files.
#include <amc/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "catch.hpp"
#include "qwen2/checkpoint.hpp"
#include "qwen2/model.hpp"
#include "qwen2/tokenizer.hpp"
#include "qwen2_test_support.hpp"

namespace {

using amc::qwen2::Checkpoint;
using amc::qwen2::Session;
using amc::qwen2::SessionOptions;
using amc::qwen2::test::relative_error;

const std::filesystem::path kModel = AMC_TEST_TINY_MODEL_DIR;

/// The saved inputs and logits: ids [n], logits [n, vocab].
struct Reference {
  std::vector<std::int32_t> ids;
  std::vector<float> logits;
  std::int64_t vocab = 0;
};

/// \param logits "logits" (exact keys and values) or "logits_bf16_kv" (keys and values rounded
///               to bf16, as a bf16 KV cache stores them)
Reference load_reference(const std::string& logits_name) {
  const auto file = amc::SafetensorsFile::open(kModel / "reference_logits.safetensors");
  Reference r;
  const auto ids = file.data<std::int32_t>("ids");
  r.ids.assign(ids.begin(), ids.end());
  const auto logits = file.data<float>(logits_name);
  r.logits.assign(logits.begin(), logits.end());
  r.vocab = file.at(logits_name).shape.at(1);
  return r;
}

struct Errors {
  double prefill = 0.0;  ///< worst position of one batched prefill of every token
  double decode = 0.0;   ///< worst step of a prefill of the first token, then decode
};

Errors errors_against_reference(amc::StorageType kv_dtype) {
  const Checkpoint checkpoint = Checkpoint::load(kModel);
  const Reference ref =
      load_reference(kv_dtype == amc::StorageType::bf16 ? "logits_bf16_kv" : "logits");
  REQUIRE(ref.vocab == checkpoint.config().vocab_size);
  const auto want = [&](std::size_t t) {
    return std::span(ref.logits).subspan(t * ref.vocab, ref.vocab);
  };
  SessionOptions options;
  options.kv_dtype = kv_dtype;
  Errors e;

  Session batched(checkpoint, options);
  std::vector<float> all(ref.logits.size());
  batched.prefill(ref.ids, all, true);
  for (std::size_t t = 0; t < ref.ids.size(); ++t) {
    e.prefill = std::max(e.prefill, relative_error(all.data() + t * ref.vocab, want(t)));
  }

  Session stepwise(checkpoint, options);
  std::vector<float> step(ref.vocab);
  stepwise.prefill(std::span(ref.ids.data(), 1), step);
  e.decode = relative_error(step.data(), want(0));
  for (std::size_t t = 1; t < ref.ids.size(); ++t) {
    stepwise.decode(ref.ids[t], step);
    e.decode = std::max(e.decode, relative_error(step.data(), want(t)));
  }
  return e;
}

}  // namespace

TEST_CASE("the tiny checkpoint loads with its byte-level tokenizer", "[tiny]") {
  const Checkpoint checkpoint = Checkpoint::load(kModel);
  CHECK(checkpoint.config().num_attention_heads > checkpoint.config().num_key_value_heads);
  CHECK(checkpoint.weights().tied);
  const auto tokenizer = amc::qwen2::Tokenizer::load(kModel);
  CHECK(tokenizer.vocab_size() == 257);
  for (int byte = 0; byte < 256; ++byte) {
    INFO("byte " << byte);
    CHECK(tokenizer.token_bytes(byte) == std::string(1, static_cast<char>(byte)));
  }
  CHECK(tokenizer.token_id("<|endoftext|>") == 256);
  const std::string code = "def f(x):\n    return x * 2  # é\n";
  const std::vector<std::int32_t> ids = tokenizer.encode(code);
  REQUIRE(ids.size() == code.size());  // one token per byte
  for (std::size_t i = 0; i < code.size(); ++i) {
    CHECK(ids[i] == static_cast<unsigned char>(code[i]));
  }
}

TEST_CASE("amc's logits on the tiny checkpoint match PyTorch's (f32 KV cache)", "[tiny]") {
  const Errors e = errors_against_reference(amc::StorageType::f32);
  INFO("max relative error: prefill " << e.prefill << ", decode " << e.decode);
  CHECK(e.prefill < 1e-4);
  CHECK(e.decode < 1e-4);
}

TEST_CASE("amc's logits on the tiny checkpoint match PyTorch's (bf16 KV cache)", "[tiny]") {
  const Errors e = errors_against_reference(amc::StorageType::bf16);
  INFO("max relative error: prefill " << e.prefill << ", decode " << e.decode);
  CHECK(e.prefill < 1e-3);
  CHECK(e.decode < 1e-3);
}

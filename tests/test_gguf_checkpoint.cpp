// GGUF checkpoints through the reference transformer: a synthetic safetensors checkpoint of each
// family converted to GGUF by the test's own writer (llama.cpp's tensor names and metadata keys,
// its q/k row permutation for llama files, F32 or blocks quantized by the test's own Q8_0 and
// Q4_0 quantizers), loaded and run against the safetensors checkpoint of the same values; the
// config from metadata; every refusal with its message.
#include <amc/error.hpp>
#include <amc/io/gguf.hpp>
#include <amc/io/gguf_quants.hpp>
#include <amc/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "catch.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/config.hpp"
#include "transformer/generate.hpp"
#include "transformer/linear.hpp"
#include "transformer/model.hpp"
#include "transformer/session_flags.hpp"
#include "transformer/synth.hpp"
#include "transformer_test_support.hpp"

namespace {

using namespace amc::transformer;
using amc::GgmlType;
using amc::GgufValue;
using amc::GgufValueType;
using amc::transformer::test::TempDir;
namespace fs = std::filesystem;

using Metadata = std::vector<std::pair<std::string, GgufValue>>;

GgufValue u32(std::uint64_t v) { return {GgufValueType::uint32, v}; }
GgufValue f32(double v) { return {GgufValueType::float32, v}; }
GgufValue str(std::string v) { return {GgufValueType::string, std::move(v)}; }

/// How the converter stores matrices.
enum class Storage { f32, q8_0, q4_0 };

// --- the test's own quantizers, from the format's definition (ggml-common.h) -------------------
// Q8_0: 32 values per block, an f16 scale d = max|x| / 127, then 32 int8 q = round(x / d).
// Q4_0: 32 values per block, an f16 d = m / -8 where m is the value of largest magnitude, then 16
// bytes, byte j holding q[j] (low nibble) and q[j + 16] (high), q = clamp(round(x / d + 8.5)...)
// as ggml's quantize_row_q4_0_ref: q = min(15, (int)(x * id + 8.5)).

std::uint16_t half_bits(float x) { return amc::to_f16(x).bits; }
float half_value(std::uint16_t bits) { return amc::to_float(amc::f16{bits}); }

/// Quantizes `values` (a multiple of 32) and returns the blocks and, in `dequantized`, what a
/// reader must get back (computed here from the format's definition, in f32).
std::vector<std::byte> quantize(Storage storage, const std::vector<float>& values,
                                std::vector<float>& dequantized) {
  std::vector<std::byte> out;
  dequantized.assign(values.size(), 0.0f);
  auto push = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  for (std::size_t block = 0; block < values.size() / 32; ++block) {
    const float* x = values.data() + block * 32;
    float* y = dequantized.data() + block * 32;
    if (storage == Storage::q8_0) {
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float d = amax / 127.0f;
      const std::uint16_t dh = half_bits(d);
      push(&dh, 2);
      for (int i = 0; i < 32; ++i) {
        const auto q = static_cast<std::int8_t>(d == 0.0f ? 0 : std::lround(x[i] / d));
        push(&q, 1);
        y[i] = static_cast<float>(q) * half_value(dh);
      }
    } else {
      float m = 0.0f;
      for (int i = 0; i < 32; ++i) {
        if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
      }
      const float d = m / -8.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const std::uint16_t dh = half_bits(d);
      push(&dh, 2);
      int q[32];
      for (int i = 0; i < 32; ++i) {
        q[i] = std::min(15, static_cast<int>(x[i] * id + 8.5f));
        y[i] = static_cast<float>(q[i] - 8) * half_value(dh);
      }
      for (int j = 0; j < 16; ++j) {
        const auto byte = static_cast<std::uint8_t>(q[j] | (q[j + 16] << 4));
        push(&byte, 1);
      }
    }
  }
  return out;
}

/// llama.cpp's permutation of q/k rows for its adjacent-pair RoPE (convert_hf_to_gguf.py,
/// LlamaModel.permute), written here as the converter writes it: Hugging Face row
/// h*d + a*d/2 + i goes to the file's row h*d + 2i + a.
std::vector<float> permute_rows(const std::vector<float>& w, std::int64_t heads,
                                std::int64_t cols) {
  const auto rows = static_cast<std::int64_t>(w.size()) / cols;
  const std::int64_t d = rows / heads;
  std::vector<float> out(w.size());
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t a = 0; a < 2; ++a) {
      for (std::int64_t i = 0; i < d / 2; ++i) {
        const std::int64_t from = h * d + a * d / 2 + i, to = h * d + 2 * i + a;
        std::copy_n(w.begin() + from * cols, cols, out.begin() + to * cols);
      }
    }
  }
  return out;
}

/// Converts the safetensors checkpoint in `dir` to `gguf` (llama.cpp's names and keys), and
/// writes `dequantized_dir`, a safetensors checkpoint (the same config.json) holding exactly
/// the values a reader must get back from the GGUF file's quantized matrices.
struct Converted {
  fs::path gguf;
  fs::path dequantized_dir;
};

Converted convert(const fs::path& dir, const fs::path& out, Storage storage,
                  const std::function<void(Metadata&)>& edit_metadata = {}, bool permute = true) {
  const Config c = load_config(dir / "config.json");
  const amc::SafetensorsFile st = amc::SafetensorsFile::open(dir / "model.safetensors");
  const char* arch = c.architecture == Architecture::llama   ? "llama"
                     : c.architecture == Architecture::qwen2 ? "qwen2"
                                                             : "qwen3";
  const std::string a = arch;
  Metadata meta = {
      {"general.architecture", str(a)},
      {"general.name", str("amc test")},
      {a + ".block_count", u32(static_cast<std::uint64_t>(c.num_hidden_layers))},
      {a + ".context_length", u32(static_cast<std::uint64_t>(c.max_position_embeddings))},
      {a + ".embedding_length", u32(static_cast<std::uint64_t>(c.hidden_size))},
      {a + ".feed_forward_length", u32(static_cast<std::uint64_t>(c.intermediate_size))},
      {a + ".attention.head_count", u32(static_cast<std::uint64_t>(c.num_attention_heads))},
      {a + ".attention.head_count_kv", u32(static_cast<std::uint64_t>(c.num_key_value_heads))},
      {a + ".attention.key_length", u32(static_cast<std::uint64_t>(c.head_dim))},
      {a + ".attention.value_length", u32(static_cast<std::uint64_t>(c.head_dim))},
      {a + ".rope.dimension_count", u32(static_cast<std::uint64_t>(c.head_dim))},
      {a + ".rope.freq_base", f32(c.rope_theta)},
      {a + ".attention.layer_norm_rms_epsilon", f32(c.rms_norm_eps)},
      {"tokenizer.ggml.bos_token_id", u32(static_cast<std::uint64_t>(c.bos_token_id))},
      {"tokenizer.ggml.eos_token_id", u32(static_cast<std::uint64_t>(c.eos_token_id))},
  };
  if (edit_metadata) edit_metadata(meta);

  std::map<std::string, std::string> names = {{"model.embed_tokens.weight", "token_embd.weight"},
                                              {"model.norm.weight", "output_norm.weight"},
                                              {"lm_head.weight", "output.weight"}};
  const std::map<std::string, std::string> layer_names = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const auto& [hf, gg] : layer_names) {
      names["model.layers." + std::to_string(l) + "." + hf] = "blk." + std::to_string(l) + "." + gg;
    }
  }

  std::vector<std::vector<std::byte>> storage_bytes;
  std::vector<amc::GgufTensorToWrite> tensors;
  std::vector<amc::TensorToWrite> dequantized;
  std::vector<std::vector<float>> dequantized_values;
  storage_bytes.reserve(st.tensors().size());
  dequantized_values.reserve(st.tensors().size());
  for (const amc::TensorInfo& t : st.tensors()) {
    std::vector<float> v = st.to_f32(t.name);
    const bool matrix = t.shape.size() == 2;
    const std::string& gg = names.at(t.name);
    const bool is_q = gg.find("attn_q.") != std::string::npos;
    const bool is_k = gg.find("attn_k.") != std::string::npos;
    const bool permuted = permute && c.architecture == Architecture::llama && (is_q || is_k);
    if (permuted) {
      const std::int64_t heads = is_q ? c.num_attention_heads : c.num_key_value_heads;
      v = permute_rows(v, heads, matrix ? t.shape[1] : 1);
    }
    std::vector<float> back = v;
    std::vector<std::byte> bytes;
    GgmlType type = GgmlType::F32;
    if (matrix && storage != Storage::f32) {
      bytes = quantize(storage, v, back);
      type = storage == Storage::q8_0 ? GgmlType::Q8_0 : GgmlType::Q4_0;
    } else {
      bytes.resize(v.size() * 4);
      std::memcpy(bytes.data(), v.data(), bytes.size());
    }
    if (permuted) {
      // Back in Hugging Face's order for the safetensors side.
      const std::int64_t heads = is_q ? c.num_attention_heads : c.num_key_value_heads;
      const std::int64_t cols = matrix ? t.shape[1] : 1;
      const std::int64_t d = static_cast<std::int64_t>(back.size()) / cols / heads;
      std::vector<float> hf(back.size());
      for (std::int64_t r = 0; r < static_cast<std::int64_t>(back.size()) / cols; ++r) {
        const std::int64_t h = r / d, w = r % d;
        std::copy_n(back.begin() + r * cols, cols,
                    hf.begin() + (h * d + (w % 2) * d / 2 + w / 2) * cols);
      }
      back = hf;
    }
    storage_bytes.push_back(std::move(bytes));
    tensors.push_back({gg, type, t.shape, storage_bytes.back()});
    dequantized_values.push_back(std::move(back));
    dequantized.push_back(amc::make_tensor_to_write(
        t.name, t.shape, std::span<const float>(dequantized_values.back())));
  }
  Converted result{out / "model.gguf", out / "dequantized"};
  fs::create_directories(result.dequantized_dir);
  amc::write_gguf(result.gguf, meta, tensors);
  amc::write_safetensors(result.dequantized_dir / "model.safetensors", dequantized);
  fs::copy_file(dir / "config.json", result.dequantized_dir / "config.json");
  return result;
}

/// Prefill then a few decode steps: every logit of every step.
std::vector<float> run_logits(const Checkpoint& checkpoint) {
  SessionOptions o;
  o.kv_dtype = amc::StorageType::f32;
  o.rope_angles = RopeAngles::transformers;
  Session session(checkpoint, o);
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const std::vector<std::int32_t> prompt = amc::transformer::test::prompt_ids(9, vocab);
  std::vector<float> all, step(static_cast<std::size_t>(vocab));
  session.prefill(prompt, step);
  all.insert(all.end(), step.begin(), step.end());
  for (std::int32_t t : {5, 17, 3}) {
    session.decode(t, step);
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

SynthSpec gguf_family_spec(Architecture family) {
  SynthSpec spec = amc::transformer::test::family_spec(family, amc::StorageType::f32);
  spec.config.rope_scaling = {};  // llama3 scaling is refused for GGUF (rope_freqs.weight)
  return spec;
}

const char* family_name(Architecture a) {
  return a == Architecture::llama ? "llama" : a == Architecture::qwen2 ? "qwen2" : "qwen3";
}

}  // namespace

TEST_CASE("a GGUF file computes what the safetensors checkpoint of its values computes",
          "[gguf][qwen2]") {
  for (const Architecture family :
       {Architecture::qwen2, Architecture::qwen3, Architecture::llama}) {
    for (const Storage storage : {Storage::f32, Storage::q8_0, Storage::q4_0}) {
      INFO(family_name(family) << ", storage " << static_cast<int>(storage));
      TempDir dir(std::string("gguf_") + family_name(family) +
                  std::to_string(static_cast<int>(storage)));
      write_synthetic_checkpoint(dir / "st", gguf_family_spec(family));
      const Converted files = convert(dir / "st", dir.path(), storage);

      const Checkpoint reference = Checkpoint::load(files.dequantized_dir);
      const Checkpoint gguf = Checkpoint::load(files.gguf, {.weight_dtype = amc::StorageType::f32});
      CHECK(gguf.format() == CheckpointFormat::gguf);
      CHECK(gguf.weight_dtype() == amc::StorageType::f32);
      CHECK(gguf.config().architecture == family);
      CHECK(gguf.config().num_hidden_layers == reference.config().num_hidden_layers);
      CHECK(gguf.config().head_dim == reference.config().head_dim);
      CHECK(gguf.config().qkv_bias == reference.config().qkv_bias);
      CHECK(gguf.config().o_bias == reference.config().o_bias);
      CHECK(gguf.config().qk_norm == reference.config().qk_norm);
      CHECK(gguf.config().tie_word_embeddings == reference.weights().tied);
      CHECK(gguf.config().rope_theta == Approx(reference.config().rope_theta).epsilon(1e-7));
      CHECK(gguf.stored_types().find(storage == Storage::f32    ? "F32"
                                     : storage == Storage::q8_0 ? "Q8_0"
                                                                : "Q4_0") != std::string::npos);
      // Bitwise: the same f32 weights in the same order, so the same arithmetic.
      CHECK(run_logits(gguf) == run_logits(reference));

      // bf16: the f32 values rounded, as a safetensors checkpoint converted at load.
      const Checkpoint gguf_bf16 = Checkpoint::load(files.gguf);
      CHECK(gguf_bf16.weight_dtype() == amc::StorageType::bf16);
      const Checkpoint reference_bf16 =
          Checkpoint::load(files.dequantized_dir, {.weight_dtype = amc::StorageType::bf16});
      CHECK(reference_bf16.weight_dtype() == amc::StorageType::bf16);
      CHECK(run_logits(gguf_bf16) == run_logits(reference_bf16));
      // In ordinary memory instead of huge pages: the same bytes.
      LoadOptions in_ordinary_pages;
      in_ordinary_pages.weights = WeightMemory::mapped;
      const Checkpoint mapped = Checkpoint::load(files.gguf, in_ordinary_pages);
      CHECK(mapped.weight_memory() == WeightMemory::mapped);
      CHECK(run_logits(mapped) == run_logits(gguf_bf16));

      // Blocks kept as stored (--weight-dtype stored), in huge pages and in ordinary memory:
      // plain f32 matrices are the f32 run bitwise; Q8_0 and Q4_0 blocks multiply the same
      // exact values in another order of f32 sums (amc::quantized_dot), so the logits agree to
      // rounding: within 1e-5 of their range (test_real_model measures 6e-7 on SmolLM2).
      const std::vector<float> widened = run_logits(gguf);
      for (const WeightMemory memory : {WeightMemory::huge_pages, WeightMemory::mapped}) {
        const Checkpoint kept =
            Checkpoint::load(files.gguf, {.weights = memory, .keep_blocks = true});
        CHECK(kept.blocks_kept());
        CHECK(kept.weights().layers[0].q.blocks.has_value() == (storage != Storage::f32));
        const std::vector<float> got = run_logits(kept);
        if (storage == Storage::f32) {
          CHECK(got == widened);
          continue;
        }
        REQUIRE(got.size() == widened.size());
        const auto [low, high] = std::minmax_element(widened.begin(), widened.end());
        double largest = 0.0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          largest = std::max(largest, std::abs(static_cast<double>(got[i]) - widened[i]));
        }
        INFO("max |stored - widened| " << largest << " of a range " << (*high - *low));
        CHECK(largest <= 1e-5 * (*high - *low));
      }
    }
  }
}

TEST_CASE("the llama row permutation is what the loader undoes", "[gguf][qwen2]") {
  // Written without the permutation, a llama file must compute something else: the check
  // above would pass for a converter and a loader that both skipped it if this did not fail.
  TempDir dir("gguf_unpermuted");
  write_synthetic_checkpoint(dir / "st", gguf_family_spec(Architecture::llama));
  const Converted permuted = convert(dir / "st", dir.path(), Storage::f32);
  fs::create_directories(dir / "plain");
  const Converted plain = convert(dir / "st", dir / "plain", Storage::f32, {}, false);
  const Checkpoint reference = Checkpoint::load(permuted.dequantized_dir);
  const Checkpoint llama = Checkpoint::load(permuted.gguf, {.weight_dtype = amc::StorageType::f32});
  const Checkpoint other = Checkpoint::load(plain.gguf, {.weight_dtype = amc::StorageType::f32});
  CHECK(run_logits(llama) == run_logits(reference));
  CHECK(run_logits(other) != run_logits(reference));
}

TEST_CASE("a GGUF file's config comes from its metadata, and what is not implemented is refused",
          "[gguf][qwen2]") {
  TempDir dir("gguf_config");
  write_synthetic_checkpoint(dir / "st", gguf_family_spec(Architecture::llama));
  int n = 0;
  auto refused = [&](const std::function<void(Metadata&)>& edit) {
    const fs::path out = dir / ("case" + std::to_string(n++));
    fs::create_directories(out);
    return convert(dir / "st", out, Storage::f32, edit).gguf;
  };
  auto set = [](Metadata& m, const std::string& key, GgufValue v) {
    for (auto& [k, value] : m) {
      if (k == key) {
        value = std::move(v);
        return;
      }
    }
    m.emplace_back(key, std::move(v));
  };
  auto erase = [](Metadata& m, const std::string& key) {
    std::erase_if(m, [&](const auto& kv) { return kv.first == key; });
  };
  REQUIRE_THROWS_WITH(
      Checkpoint::load(refused([&](Metadata& m) { set(m, "general.architecture", str("gemma")); })),
      AMC_CONTAINS("general.architecture 'gemma' is not supported"));
  REQUIRE_THROWS_WITH(
      Checkpoint::load(refused([&](Metadata& m) { erase(m, "llama.block_count"); })),
      AMC_CONTAINS("metadata 'llama.block_count' is missing"));
  REQUIRE_THROWS_WITH(
      Checkpoint::load(refused([&](Metadata& m) { set(m, "llama.block_count", str("two")); })),
      AMC_CONTAINS("llama.block_count"));
  REQUIRE_THROWS_WITH(
      Checkpoint::load(refused([&](Metadata& m) { set(m, "llama.block_count", u32(0)); })),
      AMC_CONTAINS("'llama.block_count' = 0 is outside"));
  REQUIRE_THROWS_WITH(Checkpoint::load(refused(
                          [&](Metadata& m) { set(m, "llama.rope.scaling.type", str("yarn")); })),
                      AMC_CONTAINS("'llama.rope.scaling.type' = 'yarn' is not supported"));
  REQUIRE_THROWS_WITH(
      Checkpoint::load(refused([&](Metadata& m) { set(m, "llama.rope.dimension_count", u32(8)); })),
      AMC_CONTAINS("partial RoPE is not supported"));
  REQUIRE_THROWS_WITH(
      Checkpoint::load(refused([&](Metadata& m) { set(m, "llama.expert_count", u32(8)); })),
      AMC_CONTAINS("mixture-of-experts"));
  REQUIRE_THROWS_WITH(Checkpoint::load(refused(
                          [&](Metadata& m) { set(m, "llama.attention.head_count_kv", u32(3)); })),
                      AMC_CONTAINS("does not divide"));
  REQUIRE_THROWS_WITH(
      Checkpoint::load(refused([&](Metadata& m) { set(m, "llama.vocab_size", u32(7)); })),
      AMC_CONTAINS("'llama.vocab_size' = 7 disagrees"));
  REQUIRE_THROWS_WITH(Checkpoint::load(refused([&](Metadata& m) {
                        set(m, "tokenizer.ggml.eos_token_id", u32(1u << 30));
                      })),
                      AMC_CONTAINS("eos_token_id' = 1073741824 is outside the vocabulary"));
  REQUIRE_THROWS_WITH(Checkpoint::load(refused([&](Metadata& m) {
                        set(m, "llama.attention.layer_norm_rms_epsilon", f32(-1));
                      })),
                      AMC_CONTAINS("must be in (0, 1)"));
  // Options.
  const fs::path good = refused({});
  REQUIRE_THROWS_WITH(Checkpoint::load(good, {.weight_dtype = amc::StorageType::f16}),
                      AMC_CONTAINS("options.weight_dtype is f16; expected bf16 or f32"));
  REQUIRE_THROWS_WITH(
      Checkpoint::load(good, {.weight_dtype = amc::StorageType::f32, .keep_blocks = true}),
      AMC_CONTAINS("options.keep_blocks keeps the stored types, options.weight_dtype (f32) asks "
                   "for another: set one of them"));
  CHECK(is_gguf_file(good));
  CHECK_FALSE(is_gguf_file(dir / "st"));
  CHECK_FALSE(is_gguf_file(dir / "st" / "config.json"));
}

TEST_CASE("a GGUF file whose tensors disagree with its config is refused by tensor name",
          "[gguf][qwen2]") {
  TempDir dir("gguf_tensors");
  write_synthetic_checkpoint(dir / "st", gguf_family_spec(Architecture::qwen2));
  const Converted files = convert(dir / "st", dir.path(), Storage::f32);
  const amc::GgufFile good = amc::GgufFile::open(files.gguf);
  // Rewrites the file with one tensor edited (or dropped, or one added).
  int n = 0;
  auto rewritten = [&](const std::function<void(std::vector<amc::GgufTensorToWrite>&)>& edit) {
    std::vector<amc::GgufTensorToWrite> tensors;
    for (const amc::GgufTensorInfo& t : good.tensors()) {
      tensors.push_back({t.name, t.type, t.shape, good.bytes(t)});
    }
    edit(tensors);
    const fs::path out = dir / std::string("t").append(std::to_string(n++)).append(".gguf");
    std::vector<std::pair<std::string, GgufValue>> meta(good.metadata().begin(),
                                                        good.metadata().end());
    amc::write_gguf(out, meta, tensors);
    return out;
  };
  const std::vector<float> extra(64, 1.0f);
  const std::span<const std::byte> extra_bytes = std::as_bytes(std::span(extra));
  REQUIRE_THROWS_WITH(Checkpoint::load(rewritten([](auto& t) {
                        std::erase_if(
                            t, [](const auto& x) { return x.name == "blk.1.ffn_up.weight"; });
                      })),
                      AMC_CONTAINS("tensor 'blk.1.ffn_up.weight' is missing"));
  REQUIRE_THROWS_WITH(Checkpoint::load(rewritten([](auto& t) {
                        std::erase_if(t,
                                      [](const auto& x) { return x.name == "blk.0.attn_k.bias"; });
                      })),
                      AMC_CONTAINS("tensor 'blk.0.attn_k.bias' is missing"));
  REQUIRE_THROWS_WITH(Checkpoint::load(rewritten([&](auto& t) {
                        t.push_back({"rope_freqs.weight", GgmlType::F32, {64}, extra_bytes});
                      })),
                      AMC_CONTAINS("'rope_freqs.weight' (RoPE frequency factors"));
  REQUIRE_THROWS_WITH(
      Checkpoint::load(rewritten([&](auto& t) {
        t.push_back({"blk.0.attn_q_norm.weight", GgmlType::F32, {16}, extra_bytes.first(64)});
      })),
      AMC_CONTAINS("tensor 'blk.0.attn_q_norm.weight' is present"));
  REQUIRE_THROWS_WITH(Checkpoint::load(rewritten([&](auto& t) {
                        t.push_back({"blk.9.mystery.weight", GgmlType::F32, {64}, extra_bytes});
                      })),
                      AMC_CONTAINS("tensor 'blk.9.mystery.weight' is not part of the"));
  REQUIRE_THROWS_WITH(Checkpoint::load(rewritten([](auto& t) {
                        for (auto& x : t) {
                          if (x.name == "blk.0.ffn_norm.weight") {
                            x.shape = {32};
                            x.data = x.data.first(128);
                          }
                        }
                      })),
                      AMC_CONTAINS("tensor 'blk.0.ffn_norm.weight' has shape [32], expected [64]"));
  REQUIRE_THROWS_WITH(Checkpoint::load(rewritten([](auto& t) {
                        for (auto& x : t) {
                          if (x.name == "blk.0.ffn_norm.weight") x.type = GgmlType::I32;
                        }
                      })),
                      AMC_CONTAINS("tensor 'blk.0.ffn_norm.weight' has type I32"));
}

TEST_CASE("int8 activations: rows of every type with an int8 kernel go through it, others not",
          "[gguf]") {
  // --activations int8 on stored blocks (matvec_int8): a stack of Q4_K, BF16, Q5_0, Q6_K, Q5_K,
  // Q8_0, Q5_1 and Q4_1 matrices of 512 columns (two super-blocks a row). The block rows (every
  // block type amc keeps has an int8 kernel) must give exactly amc::int8_dot_kernel's value on
  // the quantized activations (plus the bias), the plain BF16 one's (no int8 kernel) exactly
  // matvec's on the f32 ones; rows outside [begin, end) are not written. No synthetic GGUF
  // checkpoint has k-quant or Q5 matrices (checkpoint-to-gguf writes Q8_0 and Q4_0, the test's
  // hidden sizes are not multiples of 256), so this checks the dispatch directly; the kernels'
  // arithmetic is test_gguf_quants's.
  constexpr std::int64_t cols = 512;
  constexpr std::int64_t rows = 3;
  std::mt19937 rng(35);
  const std::optional<GgmlType> types[] = {GgmlType::Q4_K, std::nullopt,   GgmlType::Q5_0,
                                           GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q8_0,
                                           GgmlType::Q5_1, GgmlType::Q4_1};
  std::vector<std::vector<std::byte>> bytes;
  std::vector<Matrix> matrices;
  bytes.reserve(std::size(types));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const std::optional<GgmlType> blocks_type : types) {
    if (!blocks_type) {  // plain BF16 rows
      std::vector<std::byte>& b = bytes.emplace_back(rows * cols * sizeof(amc::bf16));
      for (std::size_t k = 0; k < b.size() / sizeof(amc::bf16); ++k) {
        const amc::bf16 v = amc::to_bf16(uniform(rng));
        std::memcpy(b.data() + k * sizeof v, &v, sizeof v);
      }
      matrices.push_back({.dtype = amc::StorageType::bf16,
                          .data = b.data(),
                          .rows = rows,
                          .cols = cols,
                          .blocks = std::nullopt,
                          .block_row_bytes = 0});
      continue;
    }
    const GgmlType type = *blocks_type;
    const amc::GgmlTypeLayout layout = *amc::ggml_type_layout(static_cast<std::uint32_t>(type));
    const auto row_bytes =
        static_cast<std::size_t>(cols / layout.block_elements * layout.block_bytes);
    std::vector<std::byte>& b = bytes.emplace_back(rows * row_bytes);
    for (std::byte& v : b) v = static_cast<std::byte>(rng() & 0xFF);
    // Every f16 scale field (d, dmin or m at bytes 0 and 2 of a block; Q6_K's d at 208) finite:
    // exponent 01000 (2^-7), sign and low mantissa bits random.
    const std::size_t blocks = b.size() / static_cast<std::size_t>(layout.block_bytes);
    for (std::size_t k = 0; k < blocks; ++k) {
      std::byte* block = b.data() + k * static_cast<std::size_t>(layout.block_bytes);
      for (const int at : type == GgmlType::Q6_K ? std::vector<int>{208} : std::vector<int>{0, 2})
        block[at + 1] = (block[at + 1] & std::byte{0x83}) | std::byte{0x20};
    }
    matrices.push_back({.data = b.data(),
                        .rows = rows,
                        .cols = cols,
                        .blocks = type,
                        .block_row_bytes = row_bytes});
  }
  std::vector<const Matrix*> parts;
  for (const Matrix& m : matrices) parts.push_back(&m);
  const Stack stack{parts};
  CHECK(has_int8_kernel(stack));
  CHECK_FALSE(has_int8_kernel(Stack{std::span(parts).subspan(1, 1)}));  // BF16 alone
  for (std::size_t k = 0; k < parts.size(); ++k) {
    CHECK(has_int8_kernel(Stack{std::span(parts).subspan(k, 1)}) == parts[k]->blocks.has_value());
  }

  std::vector<float> x(cols), bias(static_cast<std::size_t>(stack.rows()));
  for (float& v : x) v = uniform(rng);
  for (float& v : bias) v = uniform(rng);
  amc::Int8Activations xq;
  amc::quantize_activations(x, xq);
  const std::int64_t begin = 1, end = stack.rows() - 1;
  std::vector<float> y(bias.size(), -999.0f);
  matvec_int8(stack, x.data(), xq, bias.data(), begin, end, y.data());
  CHECK(y.front() == -999.0f);
  CHECK(y.back() == -999.0f);
  std::int64_t r = 0;
  for (const Matrix& m : matrices) {
    for (std::int64_t i = 0; i < m.rows; ++i, ++r) {
      if (r < begin || r >= end) continue;
      float dot = 0.0f;
      if (m.blocks) {
        const amc::GgmlTypeLayout layout =
            *amc::ggml_type_layout(static_cast<std::uint32_t>(*m.blocks));
        const auto blocks = static_cast<std::size_t>(cols / layout.block_elements);
        dot = amc::int8_dot_kernel(*m.blocks)(xq, static_cast<const std::byte*>(m.row(i)), blocks);
      } else {
        std::vector<float> one(static_cast<std::size_t>(m.rows));
        matvec(m, x.data(), nullptr, i, i + 1, one.data());
        dot = one[static_cast<std::size_t>(i)];
      }
      INFO((m.blocks ? amc::to_string(*m.blocks) : "BF16") << " row " << i);
      CHECK(y[static_cast<std::size_t>(r)] == dot + bias[static_cast<std::size_t>(r)]);
    }
  }
}

TEST_CASE("--activations int8, and q8, its old name", "[gguf]") {
  CHECK(parse_activations("int8", "--activations") == Activations::int8);
  CHECK(parse_activations("q8", "--activations") == Activations::int8);
  CHECK(parse_activations("f32", "--activations") == Activations::f32);
  CHECK(std::string(to_string(Activations::int8)) == "int8");
  REQUIRE_THROWS_WITH(parse_activations("int4", "--activations"),
                      AMC_CONTAINS("--activations: expected f32 or int8, got 'int4'"));
  SessionFlags flags;
  flags.weight_dtype = "stored";
  for (const char* activations : {"int8", "q8"}) {
    INFO(activations);
    flags.activations = activations;
    CHECK_NOTHROW(flags.validate("test"));
    CHECK(flags.load_options().interleave_rows);
  }
  flags.activations = "f32";
  CHECK_FALSE(flags.load_options().interleave_rows);
}

TEST_CASE("stored blocks with f32 and int8 activations: speculative tokens are dense decoding's",
          "[gguf][speculative]") {
  TempDir dir("gguf_speculative");
  // head_dim 64, groups of 3; an intermediate size of whole blocks of 32 (Q8_0, Q4_0).
  SynthSpec spec = amc::transformer::test::wide_spec(amc::StorageType::f32, 53);
  spec.config.intermediate_size = 256;
  write_synthetic_checkpoint(dir / "st", spec);
  for (const Storage storage : {Storage::q8_0, Storage::q4_0}) {
    const Converted files =
        convert(dir / "st", dir / (storage == Storage::q8_0 ? "q8" : "q4"), storage);
    for (const bool interleave : {false, true}) {
      const Checkpoint kept =
          Checkpoint::load(files.gguf, {.keep_blocks = true, .interleave_rows = interleave});
      REQUIRE(kept.blocks_kept());
      const std::int64_t vocab = kept.config().vocab_size;
      const std::vector<std::int32_t> prompt = amc::transformer::test::prompt_ids(41, vocab, 17);
      for (const Activations activations : {Activations::f32, Activations::int8}) {
        for (const int threads : {1, 2}) {
          INFO("storage " << static_cast<int>(storage) << ", interleaved " << interleave
                          << ", activations " << to_string(activations) << ", threads " << threads);
          SessionOptions dense_options;
          dense_options.activations = activations;
          dense_options.threads = threads;
          SessionOptions draft_options = dense_options;
          amc::SparseConfig draft;
          draft.block_size = 8;
          draft.top_k = 1;
          draft.sinks = 1;
          draft.window = 4;
          draft_options.attention = draft;
          GenerationOptions g;
          g.max_tokens = 48;
          g.keep_logits = true;
          Session dense_session(kept, dense_options);
          const GenerationResult dense = generate(dense_session, prompt, g);
          g.decoding = Decoding::speculative;
          g.speculation.draft_tokens = 4;
          Session speculative_session(kept, draft_options);
          const GenerationResult speculative = generate(speculative_session, prompt, g);
          REQUIRE(speculative.tokens.size() == dense.tokens.size());
          for (std::size_t i = 0; i < dense.tokens.size(); ++i)
            CHECK(speculative.tokens[i].token == dense.tokens[i].token);
          CHECK(std::memcmp(speculative.logits.data(), dense.logits.data(),
                            dense.logits.size() * sizeof(float)) == 0);
          CHECK(speculative.verify_passes < 47);  // drafts were kept: the verify passes batched
        }
      }
    }
  }
}

// Synthetic checkpoint writer: seeded weights with each family's names and shapes.
#include "synth.hpp"

#include <amc/error.hpp>
#include <amc/io/atomic_file.hpp>
#include <amc/io/safetensors.hpp>
#include <amc/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "synth_tokenizer.hpp"
#include "tensor_names.hpp"

namespace amc::transformer {
namespace {

constexpr const char* kWhere = "amc::transformer::write_synthetic_checkpoint";

/// A seeded source of approximately standard normal values, identical on every platform:
/// std::normal_distribution's algorithm is implementation-defined and Box-Muller needs log and
/// cos, whose last bits differ between math libraries. The sum of eight 16-bit uniforms (two
/// 64-bit draws) is exact integer arithmetic; standardised, it is an Irwin-Hall approximation
/// of a normal (tails cut at 4.9 sigma), which is all random weights need.
class NormalSource {
 public:
  explicit NormalSource(std::uint64_t seed) : rng_(seed) {}
  float operator()() {
    std::uint64_t sum = 0;
    for (int draw = 0; draw < 2; ++draw) {
      const std::uint64_t r = rng_();
      sum += (r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48);
    }
    // Mean 8 * 32767.5, variance 8 * (65536^2 - 1) / 12.
    return static_cast<float>((static_cast<double>(sum) - 262140.0) * (1.0 / 53509.93));
  }

 private:
  std::mt19937_64 rng_;
};

/// splitmix64 finaliser: a per-tensor seed from the run seed and the tensor's index, so tensors
/// can be generated in parallel and each one's values do not depend on the others'.
std::uint64_t mix(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// One tensor being generated: its values in f32, converted to the file dtype at the end.
struct Pending {
  std::optional<LayerTensorId> row;  // the layer tensor it is, if it is one
  std::string name;
  std::vector<std::int64_t> shape;
  std::function<void(std::vector<float>&, NormalSource&)> fill;
  std::vector<float> f32;  // filled values; released after conversion for bf16 files
  std::vector<bf16> bf16_values;
};

/// config.json as Hugging Face writes it for the family (keys in alphabetical order, as
/// transformers saves them; Qwen2's exactly as amc-synth always wrote them).
nlohmann::ordered_json config_json(const Config& c, StorageType dtype) {
  const Family& f = family(c.architecture);
  const bool qwen = f.config_keys == ConfigKeys::qwen;
  nlohmann::ordered_json j;
  j["architectures"] = {std::string(f.class_name)};
  if (f.attention_bias_key) j["attention_bias"] = c.qkv_bias;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  if (c.head_dim > 0) j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  if (qwen) j["max_window_layers"] = c.num_hidden_layers;
  if (!qwen) j["mlp_bias"] = false;
  j["model_type"] = std::string(f.model_type);
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  if (!qwen) j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = c.rms_norm_eps;
  if (c.rope_scaling.type == RopeScaling::Type::llama3) {
    const RopeScaling& r = c.rope_scaling;
    nlohmann::ordered_json scaling;
    scaling["factor"] = r.factor;
    scaling["high_freq_factor"] = r.high_freq_factor;
    scaling["low_freq_factor"] = r.low_freq_factor;
    // An integer in Llama 3's files (8192); written as one when it is one.
    const double original = r.original_max_position_embeddings;
    if (original == std::trunc(original) && std::abs(original) < 9.0e15) {
      scaling["original_max_position_embeddings"] = static_cast<std::int64_t>(original);
    } else {
      scaling["original_max_position_embeddings"] = original;
    }
    scaling["rope_type"] = "llama3";
    j["rope_scaling"] = scaling;
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["rope_theta"] = c.rope_theta;
  if (qwen) j["sliding_window"] = nullptr;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = dtype == StorageType::bf16 ? "bfloat16" : "float32";
  j["use_cache"] = true;
  if (qwen) j["use_sliding_window"] = false;
  j["vocab_size"] = c.vocab_size;
  j["amc_synthetic"] = true;  // not a trained model: random weights written by amc-synth
  return j;
}

/// Fills [rows, cols] with N(0, std^2).
auto gaussian(double std) {
  return [std](std::vector<float>& out, NormalSource& normal) {
    for (float& x : out) x = static_cast<float>(std * normal());
  };
}

/// Fills [n] with 1 + N(0, std^2): norm weights near 1, as in trained models.
auto near_one(double std) {
  return [std](std::vector<float>& out, NormalSource& normal) {
    for (float& x : out) x = static_cast<float>(1.0 + std * normal());
  };
}

}  // namespace

Config synth_shape(std::string_view name, std::optional<Architecture> family_override) {
  constexpr const char* where = "amc::transformer::synth_shape";
  const Family* fam = nullptr;
  const SynthShape* shape = nullptr;
  if (name == "tiny") {
    fam = &family(family_override.value_or(families().front().architecture()));
    shape = &fam->tiny;
  } else {
    for (const Family& f : families()) {
      for (const SynthShape& s : f.shapes) {
        if (!s.name.empty() && s.name == name) {
          fam = &f;
          shape = &s;
        }
      }
    }
    if (shape == nullptr) {
      detail::throw_error(where, "shape must be one of ", synth_shape_names(), ", got '", name,
                          "'");
    }
    if (family_override && *family_override != fam->architecture()) {
      detail::throw_error(where, "shape '", name, "' is a ", fam->class_name,
                          " shape; it cannot be written as ", to_string(*family_override));
    }
  }
  Config c;
  c.architecture = fam->architecture();
  c.hidden_size = shape->hidden_size;
  c.intermediate_size = shape->intermediate_size;
  c.num_hidden_layers = shape->num_hidden_layers;
  c.num_attention_heads = shape->num_attention_heads;
  c.num_key_value_heads = shape->num_key_value_heads;
  c.vocab_size = shape->vocab_size;
  c.head_dim = shape->head_dim;  // 0: not written to config.json, so the family's default
  c.rope_theta = shape->rope_theta;
  c.rms_norm_eps = shape->rms_norm_eps;
  c.max_position_embeddings = shape->max_position_embeddings;
  c.tie_word_embeddings = shape->tie_word_embeddings;
  c.rope_scaling = shape->rope_scaling;
  // The family's fixed features; q/k/v biases as its config.json default (Qwen2: always).
  c.qkv_bias = fam->attention_bias_key ? fam->default_attention_bias : true;
  c.o_bias = fam->attention_bias_key && c.qkv_bias;
  c.qk_norm = fam->qk_norm;
  return c;
}

std::vector<std::string> synth_shapes() {
  std::vector<std::string> names{"tiny"};
  for (const Family& f : families()) {
    for (const SynthShape& s : f.shapes) {
      if (!s.name.empty()) names.emplace_back(s.name);
    }
  }
  return names;
}

std::string_view synth_shape_names() {
  static const std::string names = [] {
    std::string s;
    for (const std::string& n : synth_shapes()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }();
  return names;
}

void write_synthetic_checkpoint(const std::filesystem::path& dir, const SynthSpec& spec) {
  AMC_CHECK(spec.dtype == StorageType::bf16 || spec.dtype == StorageType::f32, kWhere,
            "dtype must be bf16 or f32, got ", to_string(spec.dtype));
  AMC_CHECK(spec.shards >= 1 && spec.shards <= 99, kWhere, "shards must be in 1..99, got ",
            spec.shards);
  Config c = spec.config;
  const std::int64_t tokenizer_vocab =
      spec.tokenizer_vocab > 0 ? spec.tokenizer_vocab : std::min<std::int64_t>(c.vocab_size, 4096);
  AMC_CHECK(tokenizer_vocab >= 260 && tokenizer_vocab <= c.vocab_size, kWhere,
            "the synthetic tokenizer needs 260 <= tokens <= vocab_size (", c.vocab_size, "), got ",
            tokenizer_vocab);
  c.bos_token_id = c.eos_token_id = tokenizer_vocab - 3;  // <|endoftext|>
  // Validate exactly as a loader will: the config written is the config checked.
  const std::string config_text = config_json(c, spec.dtype).dump(2) + "\n";
  c = parse_config(config_text, "synthetic config");

  const std::int64_t hidden = c.hidden_size, head_dim = c.head_dim;
  const std::int64_t q_rows = c.num_attention_heads * head_dim;
  const std::int64_t kv_rows = c.num_key_value_heads * head_dim;
  const std::int64_t group = c.group_size();
  const std::int64_t inter = c.intermediate_size;
  const double in_std = 1.0 / std::sqrt(static_cast<double>(hidden));

  // Scales chosen so activations stay sane at any width: projections of a unit-RMS input have
  // unit-scale outputs, residual updates are half that, and logits have std ~2.5.
  std::vector<Pending> tensors;
  using Fill = std::function<void(std::vector<float>&, NormalSource&)>;
  // The embedding, and the unembedding of an untied checkpoint: rows the tokenizer cannot spell
  // stay zero (as Qwen2's padding rows are close to zero): their logit is 0, below the maximum of
  // the others, so they are never chosen.
  const Fill embedding = [=](std::vector<float>& out, NormalSource& normal) {
    gaussian(2.5 * in_std)(out, normal);
    std::fill(out.begin() + tokenizer_vocab * hidden, out.end(), 0.0f);
  };
  // The values of a layer tensor; `q_index` is the layer's query projection, which its key
  // projection reads.
  auto layer_fill = [&](LayerTensorId id, std::optional<std::size_t> q_index) -> Fill {
    switch (id) {
      case LayerTensorId::pre_attention_norm:
      case LayerTensorId::pre_mlp_norm:
        return near_one(0.05);
      case LayerTensorId::q:
        return gaussian(1.4 * in_std);
      case LayerTensorId::k:
        // Structure: each KV head's key projection is partly the mean of its query heads'
        // projections, so a query scores high on keys of tokens like its own (a copy/induction
        // pattern): attention has peaks for block-sparse selection to find, unlike pure noise.
        AMC_CHECK(q_index.has_value(), kWhere,
                  "tensor_names.def lists the key projection before the query projection");
        return [q = *q_index, &tensors, kv_rows, hidden, head_dim, group, in_std](
                   std::vector<float>& out, NormalSource& normal) {
          // Filled after the query projection (the two waves below guarantee it).
          const std::vector<float>& query = tensors[q].f32;
          constexpr double kShared = 0.6;
          const double own = std::sqrt(1.0 - kShared * kShared);
          const double mean_scale = kShared / std::sqrt(static_cast<double>(group));
          for (std::int64_t r = 0; r < kv_rows; ++r) {
            const std::int64_t g = r / head_dim, channel = r % head_dim;
            for (std::int64_t i = 0; i < hidden; ++i) {
              double shared = 0.0;
              for (std::int64_t hd = 0; hd < group; ++hd) {
                shared += query[static_cast<std::size_t>(
                    ((g * group + hd) * head_dim + channel) * hidden + i)];
              }
              out[static_cast<std::size_t>(r * hidden + i)] =
                  static_cast<float>(mean_scale * shared + own * 1.4 * in_std * normal());
            }
          }
        };
      case LayerTensorId::v:
      case LayerTensorId::gate:
      case LayerTensorId::up:
        return gaussian(in_std);
      case LayerTensorId::q_bias:
      case LayerTensorId::k_bias:
      case LayerTensorId::v_bias:
      case LayerTensorId::o_bias:
        return gaussian(0.1);
      case LayerTensorId::q_norm:
      case LayerTensorId::k_norm:
        // Spread wider than the other norms' so that tests can tell a per-channel weight applied
        // before RoPE from one applied after it (or not at all).
        return near_one(0.25);
      case LayerTensorId::o:
        return gaussian(0.5 / std::sqrt(static_cast<double>(q_rows)));
      case LayerTensorId::down:
        return gaussian(0.5 / std::sqrt(static_cast<double>(inter)));
    }
    detail::throw_error(kWhere, "no values for tensor ", layer_tensor(id).field);
  };
  auto add_global = [&](GlobalTensorId id, Fill fill) {
    const GlobalTensor& t = global_tensor(id);
    if (!present(t.presence, c)) return;
    tensors.push_back(
        {std::nullopt, std::string(t.hugging_face), shape_of(t.shape, c), std::move(fill), {}, {}});
  };
  // Every tensor of tensor_names.def the config calls for, in its order.
  add_global(GlobalTensorId::embed, embedding);
  for (std::int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    std::optional<std::size_t> q_index;
    for (const LayerTensor& t : kLayerTensors) {
      if (!present(t.presence, c)) continue;
      if (t.id == LayerTensorId::q) q_index = tensors.size();
      tensors.push_back({t.id,
                         hugging_face_name(t, layer),
                         shape_of(t.shape, c),
                         layer_fill(t.id, q_index),
                         {},
                         {}});
    }
  }
  add_global(GlobalTensorId::final_norm, near_one(0.05));
  add_global(GlobalTensorId::lm_head, embedding);

  // Generate in two waves (everything but the key projections, then those, which read the
  // query projections), in parallel over tensors; each tensor has its own seed. A bf16 tensor
  // is converted as soon as nothing reads its f32 values any more, so the f32 copies never
  // coexist (peak memory about one checkpoint, not three).
  auto is_key = [&](std::size_t i) { return tensors[i].row == LayerTensorId::k; };
  auto is_query = [&](std::size_t i) { return tensors[i].row == LayerTensorId::q; };
  auto convert = [&](std::size_t i) {
    Pending& t = tensors[i];
    if (spec.dtype != StorageType::bf16) return;
    t.bf16_values.resize(t.f32.size());
    std::transform(t.f32.begin(), t.f32.end(), t.bf16_values.begin(), to_bf16);
    std::vector<float>().swap(t.f32);
  };
  {
    ThreadPool pool(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u)));
    for (const bool keys : {false, true}) {
      pool.parallel_for(static_cast<std::int64_t>(tensors.size()), [&](std::int64_t index) {
        const auto i = static_cast<std::size_t>(index);
        if (is_key(i) != keys) return;
        Pending& t = tensors[i];
        std::int64_t count = 1;
        for (const std::int64_t d : t.shape) count *= d;
        t.f32.assign(static_cast<std::size_t>(count), 0.0f);
        NormalSource normal(mix(spec.seed, i));
        t.fill(t.f32, normal);
        if (!is_query(i)) convert(i);
      });
    }
    pool.parallel_for(static_cast<std::int64_t>(tensors.size()), [&](std::int64_t index) {
      if (is_query(static_cast<std::size_t>(index))) convert(static_cast<std::size_t>(index));
    });
  }

  std::filesystem::create_directories(dir);
  // Shards: consecutive tensors, each shard about total / shards bytes.
  std::vector<TensorToWrite> all;
  std::uint64_t total = 0;
  for (const Pending& t : tensors) {
    if (spec.dtype == StorageType::bf16) {
      all.push_back(make_tensor_to_write(t.name, t.shape, std::span<const bf16>(t.bf16_values)));
    } else {
      all.push_back(make_tensor_to_write(t.name, t.shape, std::span<const float>(t.f32)));
    }
    total += all.back().bytes.size();
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  // A loader prefers model.safetensors over an index: remove what a previous run of the other
  // layout left, so the directory holds exactly one checkpoint.
  std::filesystem::remove(
      dir / (spec.shards == 1 ? "model.safetensors.index.json" : "model.safetensors"));
  if (spec.shards == 1) {
    write_safetensors(dir / "model.safetensors", all, metadata);
  } else {
    nlohmann::ordered_json index;
    index["metadata"]["total_size"] = total;
    nlohmann::ordered_json& weight_map = index["weight_map"];
    std::size_t next = 0;
    std::uint64_t written = 0;
    for (int shard = 0; shard < spec.shards; ++shard) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", shard + 1, spec.shards);
      const std::uint64_t target =
          total * static_cast<std::uint64_t>(shard + 1) / static_cast<std::uint64_t>(spec.shards);
      const std::size_t first = next;
      while (next < all.size() && (written < target || shard + 1 == spec.shards)) {
        written += all[next].bytes.size();
        weight_map[all[next].name] = name;
        ++next;
      }
      write_safetensors(dir / name, std::span(all).subspan(first, next - first), metadata);
    }
    write_file_atomically(dir / "model.safetensors.index.json", index.dump(2) + "\n", kWhere);
  }
  write_file_atomically(dir / "config.json", config_text, kWhere);
  write_file_atomically(dir / "tokenizer.json", synthetic_tokenizer_json(tokenizer_vocab), kWhere);
}

}  // namespace amc::transformer

// Shared by the model tests: temporary checkpoints and an independent double-precision forward
// pass of the Qwen2, Qwen3 and Llama families written with plain loops (it reads config.json and
// the safetensors file itself and shares no code with examples/transformer beyond amc's file
// reader).
#pragma once

#include <amc/io/safetensors.hpp>
#include <amc/storage.hpp>

#include <unistd.h>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "transformer/synth.hpp"

namespace amc::transformer::test {

/// A fresh directory under the system's temporary directory, removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = std::filesystem::temp_directory_path() /
            ("amc_transformer_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// The tiny test shape with overrides.
inline SynthSpec tiny_spec(StorageType dtype, std::uint64_t seed = 7) {
  SynthSpec spec;
  spec.config = synth_shape("tiny");
  spec.dtype = dtype;
  spec.seed = seed;
  return spec;
}

/// The tiny shape as a member of `family` (synth_shape: Qwen3 with head_dim 32 and q/k norms,
/// Llama untied with llama3 RoPE scaling).
inline SynthSpec family_spec(Architecture family, StorageType dtype, std::uint64_t seed = 7) {
  SynthSpec spec = tiny_spec(dtype, seed);
  spec.config = synth_shape("tiny", family);
  return spec;
}

/// A second shape with head_dim 64 (amc's specialised kernels), GQA groups of 3 and odd sizes.
inline SynthSpec wide_spec(StorageType dtype, std::uint64_t seed = 11) {
  SynthSpec spec = tiny_spec(dtype, seed);
  spec.config.hidden_size = 384;
  spec.config.num_attention_heads = 6;
  spec.config.num_key_value_heads = 2;
  spec.config.intermediate_size = 200;
  spec.config.num_hidden_layers = 2;
  spec.config.vocab_size = 300;
  return spec;
}

/// `n` pseudo-random token ids in [0, vocab), the same for the same seed (an LCG: tests need
/// reproducible prompts, not good randomness).
inline std::vector<std::int32_t> prompt_ids(std::int64_t n, std::int64_t vocab,
                                            std::uint64_t seed = 3) {
  std::vector<std::int32_t> ids;
  std::uint64_t s = seed;
  for (std::int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    ids.push_back(static_cast<std::int32_t>((s >> 33) % static_cast<std::uint64_t>(vocab)));
  }
  return ids;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// How the naive forward pass computes RoPE angles (it shares no code with examples/transformer's
/// RotaryTable): exactly in double, or as transformers' Qwen2RotaryEmbedding does in float32.
enum class NaiveRope { exact, transformers };

/// float32 rounding of a double (the one rounding an IEEE float operation makes: +, -, *, / of
/// two floats computed in double and rounded once give the correctly rounded float result).
inline double round_to_float(double x) { return static_cast<double>(static_cast<float>(x)); }

/// Llama 3's RoPE scaling parameters (config.json "rope_scaling", rope_type "llama3").
struct NaiveLlama3 {
  double factor = 1.0, low = 1.0, high = 1.0, original = 0.0;
};

/// The inverse frequency of pair i of a head of `head_dim` channels, base `theta`, rescaled as
/// llama3 says when `llama3` is given. transformers: 1 / theta ** (arange(0, d, 2).float() / d)
/// in float32 (the power correctly rounded; torch's float pow may be one ulp away), and the
/// llama3 steps of transformers' _compute_llama3_parameters each rounded to float32 as torch
/// computes them (Python numbers rounded to float32 where they meet the tensor; number / tensor
/// taken as reciprocal(tensor) * number). exact: all in double.
inline double naive_inverse_frequency(NaiveRope rope, double theta, int head_dim, int i,
                                      const NaiveLlama3* llama3 = nullptr) {
  const double pi2 = 2.0 * 3.14159265358979323846;
  if (rope == NaiveRope::exact) {
    const double f = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    if (llama3 == nullptr) return f;
    const double wavelen = pi2 / f;
    if (wavelen < llama3->original / llama3->high) return f;
    if (wavelen > llama3->original / llama3->low) return f / llama3->factor;
    const double s = (llama3->original / wavelen - llama3->low) / (llama3->high - llama3->low);
    return (1.0 - s) * f / llama3->factor + s * f;
  }
  const auto rf = round_to_float;
  const double exponent = rf(2.0 * i / head_dim);
  const double power = rf(std::pow(rf(theta), exponent));
  const double f = rf(1.0 / power);
  if (llama3 == nullptr) return f;
  const double wavelen = rf(rf(1.0 / f) * rf(pi2));
  const double low_wavelen = rf(llama3->original / llama3->low);
  const double high_wavelen = rf(llama3->original / llama3->high);
  const double factor = rf(llama3->factor);
  const double llama = wavelen > low_wavelen ? rf(f / factor) : f;
  const double s = rf(rf(rf(rf(1.0 / wavelen) * rf(llama3->original)) - rf(llama3->low)) /
                      rf(llama3->high - llama3->low));
  const double smoothed = rf(rf(rf(rf(1.0 - s) * llama) / factor) + rf(s * llama));
  const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
  return medium ? smoothed : llama;
}

/// The RoPE angle of pair i at `position`: position * inv_freq, in double (exact) or as
/// float(position) * inv_freq rounded to float32 (transformers).
inline double naive_rope_angle(NaiveRope rope, double theta, int head_dim, std::int64_t position,
                               int i, const NaiveLlama3* llama3 = nullptr) {
  const double f = naive_inverse_frequency(rope, theta, head_dim, i, llama3);
  if (rope == NaiveRope::exact) return static_cast<double>(position) * f;
  return round_to_float(round_to_float(static_cast<double>(position)) * f);
}

/// Deliberate departures of the naive model from the families' definition, so that tests can
/// show they would notice each mistake: Qwen3's q/k norms left out or applied after RoPE
/// rather than before, llama3 RoPE scaling ignored.
enum class NaiveVariant { as_defined, no_qk_norm, qk_norm_after_rope, no_rope_scaling };

/// Qwen2, Qwen3 or Llama in double precision, straight from the formulas (docs/transformer.md and
/// transformers' modeling_qwen2.py, modeling_qwen3.py, modeling_llama.py), position by
/// position, with the RoPE angles of `rope`. The family comes from config.json's
/// "architectures" and decides, as in transformers: Qwen2 has q/k/v biases; Qwen3 and Llama have
/// q/k/v and o_proj biases when "attention_bias" is true; Qwen3 normalises every query and key
/// head (q_norm, k_norm) before RoPE and defaults head_dim to 128; "rope_scaling" of type llama3
/// rescales the inverse frequencies; tie_word_embeddings false unembeds with lm_head.weight.
class NaiveQwen2 {
 public:
  NaiveQwen2(const std::filesystem::path& dir, NaiveRope rope,
             NaiveVariant variant = NaiveVariant::as_defined)
      : rope_(rope), variant_(variant) {
    const nlohmann::json c = nlohmann::json::parse(read_file(dir / "config.json"));
    hidden_ = c["hidden_size"].get<int>();
    heads_ = c["num_attention_heads"].get<int>();
    kv_heads_ = c["num_key_value_heads"].get<int>();
    inter_ = c["intermediate_size"].get<int>();
    layers_ = c["num_hidden_layers"].get<int>();
    vocab_ = c["vocab_size"].get<int>();
    theta_ = c["rope_theta"].get<double>();
    eps_ = c["rms_norm_eps"].get<double>();
    const std::string architecture = c["architectures"][0].get<std::string>();
    qk_norm_ = architecture == "Qwen3ForCausalLM";
    const bool attention_bias = c.value("attention_bias", false);
    qkv_bias_ = architecture == "Qwen2ForCausalLM" || attention_bias;
    o_bias_ = architecture != "Qwen2ForCausalLM" && attention_bias;
    head_dim_ = c.contains("head_dim") ? c["head_dim"].get<int>()
                : qk_norm_             ? 128
                                       : hidden_ / heads_;
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null() &&
        variant != NaiveVariant::no_rope_scaling) {
      const nlohmann::json& r = c["rope_scaling"];
      if (r["rope_type"] == "llama3") {
        llama3_ = NaiveLlama3{r["factor"].get<double>(), r["low_freq_factor"].get<double>(),
                              r["high_freq_factor"].get<double>(),
                              r["original_max_position_embeddings"].get<double>()};
        scaled_ = true;
      }
    }
    untied_ = !c.value("tie_word_embeddings", true);
    const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
    for (const TensorInfo& info : file.tensors()) {
      const std::vector<float> values = file.to_f32(info.name);
      tensors_[info.name] = std::vector<double>(values.begin(), values.end());
    }
  }

  int vocab() const { return vocab_; }

  /// The first layer's queries after RoPE, [heads * head_dim], of `token` at `position` (they
  /// depend on nothing else, so a long context need not be computed to get them).
  std::vector<double> layer0_queries(std::int32_t token, std::int64_t position) const {
    const std::vector<double> x = row("model.embed_tokens.weight", token, hidden_);
    const std::vector<double> xn = rms(x, "model.layers.0.input_layernorm.weight");
    std::vector<double> q = linear("model.layers.0.self_attn.q_proj", xn, qkv_bias_);
    norm_and_rope(q, heads_, "model.layers.0.self_attn.q_norm.weight", position);
    return q;
  }

  /// How the reference rounds keys (after RoPE) and values, as a cache of that dtype stores them.
  enum class KvRounding { none, bf16, q8_0 };

  /// Logits [tokens][vocab] of every position. With bf16_kv, keys (after RoPE) and values are
  /// rounded to bf16 as a bf16 cache stores them.
  std::vector<std::vector<double>> logits(const std::vector<std::int32_t>& tokens,
                                          bool bf16_kv) const {
    return logits(tokens, bf16_kv ? KvRounding::bf16 : KvRounding::none);
  }

  /// q8_0 as ggml defines it, written out here (not amc's quantize_q8_0_row): per 32 values of
  /// a head, the f32 value x, d = max|x| / 127 in f32, q = roundf(x * (1 / d)), stored f16(d) * q.
  static void round_q8_0(std::vector<double>& row) {
    for (std::size_t b = 0; b < row.size(); b += 32) {
      float amax = 0.0f;
      for (std::size_t j = b; j < b + 32; ++j)
        amax = std::max(amax, std::fabs(static_cast<float>(row[j])));
      const float d = amax / 127.0f;
      const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
      const double scale = to_float(to_f16(d));
      for (std::size_t j = b; j < b + 32; ++j)
        row[j] = scale * std::roundf(static_cast<float>(row[j]) * inverse);
    }
  }

  std::vector<std::vector<double>> logits(const std::vector<std::int32_t>& tokens,
                                          KvRounding kv_rounding) const {
    const int n = static_cast<int>(tokens.size());
    const int group = heads_ / kv_heads_;
    std::vector<std::vector<double>> x(static_cast<std::size_t>(n));
    for (int t = 0; t < n; ++t) x[t] = row("model.embed_tokens.weight", tokens[t], hidden_);
    for (int l = 0; l < layers_; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      std::vector<std::vector<double>> q(n), k(n), v(n);
      for (int t = 0; t < n; ++t) {
        const std::vector<double> xn = rms(x[t], p + "input_layernorm.weight");
        q[t] = linear(p + "self_attn.q_proj", xn, qkv_bias_);
        k[t] = linear(p + "self_attn.k_proj", xn, qkv_bias_);
        v[t] = linear(p + "self_attn.v_proj", xn, qkv_bias_);
        norm_and_rope(q[t], heads_, p + "self_attn.q_norm.weight", t);
        norm_and_rope(k[t], kv_heads_, p + "self_attn.k_norm.weight", t);
        if (kv_rounding == KvRounding::bf16) {
          for (double& e : k[t]) e = to_float(to_bf16(static_cast<float>(e)));
          for (double& e : v[t]) e = to_float(to_bf16(static_cast<float>(e)));
        } else if (kv_rounding == KvRounding::q8_0) {
          round_q8_0(k[t]);
          round_q8_0(v[t]);
        }
      }
      for (int t = 0; t < n; ++t) {
        std::vector<double> attn(static_cast<std::size_t>(heads_ * head_dim_), 0.0);
        for (int h = 0; h < heads_; ++h) {
          const int g = h / group;
          std::vector<double> scores(static_cast<std::size_t>(t + 1));
          double max = -1e300;
          for (int j = 0; j <= t; ++j) {
            double s = 0.0;
            for (int i = 0; i < head_dim_; ++i)
              s += q[t][h * head_dim_ + i] * k[j][g * head_dim_ + i];
            scores[j] = s / std::sqrt(static_cast<double>(head_dim_));
            max = std::max(max, scores[j]);
          }
          double sum = 0.0;
          for (double& s : scores) sum += (s = std::exp(s - max));
          for (int j = 0; j <= t; ++j) {
            for (int i = 0; i < head_dim_; ++i) {
              attn[h * head_dim_ + i] += scores[j] / sum * v[j][g * head_dim_ + i];
            }
          }
        }
        add(x[t], linear(p + "self_attn.o_proj", attn, o_bias_));
        const std::vector<double> xn = rms(x[t], p + "post_attention_layernorm.weight");
        const std::vector<double> gate = linear(p + "mlp.gate_proj", xn, false);
        std::vector<double> up = linear(p + "mlp.up_proj", xn, false);
        for (std::size_t i = 0; i < up.size(); ++i) up[i] *= gate[i] / (1.0 + std::exp(-gate[i]));
        add(x[t], linear(p + "mlp.down_proj", up, false));
      }
    }
    // Untied: lm_head.weight (tensors_.at throws when it is missing). Tied: the embedding, or
    // an lm_head.weight when the checkpoint has one anyway (docs/transformer.md: use it when
    // present).
    const std::string unembedding = untied_ || tensors_.count("lm_head.weight") != 0
                                        ? "lm_head.weight"
                                        : "model.embed_tokens.weight";
    std::vector<std::vector<double>> out(static_cast<std::size_t>(n));
    for (int t = 0; t < n; ++t) {
      const std::vector<double> xn = rms(x[t], "model.norm.weight");
      out[t] = matvec(tensors_.at(unembedding), xn, vocab_);
    }
    return out;
  }

 private:
  std::vector<double> row(const std::string& name, int r, int cols) const {
    const std::vector<double>& m = tensors_.at(name);
    return {m.begin() + static_cast<std::ptrdiff_t>(r) * cols,
            m.begin() + static_cast<std::ptrdiff_t>(r + 1) * cols};
  }
  static std::vector<double> matvec(const std::vector<double>& m, const std::vector<double>& x,
                                    int rows) {
    const auto cols = static_cast<int>(x.size());
    std::vector<double> y(static_cast<std::size_t>(rows), 0.0);
    for (int r = 0; r < rows; ++r) {
      double s = 0.0;
      for (int c = 0; c < cols; ++c) s += m[static_cast<std::size_t>(r) * cols + c] * x[c];
      y[r] = s;
    }
    return y;
  }
  std::vector<double> linear(const std::string& name, const std::vector<double>& x,
                             bool bias) const {
    const std::vector<double>& w = tensors_.at(name + ".weight");
    const auto rows = static_cast<int>(w.size() / x.size());
    std::vector<double> y = matvec(w, x, rows);
    if (bias) add(y, tensors_.at(name + ".bias"));
    return y;
  }
  std::vector<double> rms(const std::vector<double>& x, const std::string& weight) const {
    double ss = 0.0;
    for (const double e : x) ss += e * e;
    const double inverse = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps_);
    const std::vector<double>& w = tensors_.at(weight);
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inverse * w[i];
    return y;
  }
  /// RMSNorm of each head of `x` [heads * head_dim] with `weight` [head_dim], in place.
  void head_norm(std::vector<double>& x, int heads, const std::string& weight) const {
    const std::vector<double>& w = tensors_.at(weight);
    for (int h = 0; h < heads; ++h) {
      double ss = 0.0;
      for (int i = 0; i < head_dim_; ++i) ss += x[h * head_dim_ + i] * x[h * head_dim_ + i];
      const double inverse = 1.0 / std::sqrt(ss / head_dim_ + eps_);
      for (int i = 0; i < head_dim_; ++i) x[h * head_dim_ + i] *= inverse * w[i];
    }
  }
  /// Qwen3's q/k norm (when the family has it) then RoPE of every head, at `position`.
  void norm_and_rope(std::vector<double>& x, int heads, const std::string& norm_weight,
                     std::int64_t position) const {
    const bool norm = qk_norm_ && variant_ != NaiveVariant::no_qk_norm;
    const bool after = variant_ == NaiveVariant::qk_norm_after_rope;
    if (norm && !after) head_norm(x, heads, norm_weight);
    for (int h = 0; h < heads; ++h) rope(x.data() + h * head_dim_, position, head_dim_ / 2);
    if (norm && after) head_norm(x, heads, norm_weight);
  }
  void rope(double* x, std::int64_t position, int half) const {
    for (int i = 0; i < half; ++i) {
      const double angle =
          naive_rope_angle(rope_, theta_, 2 * half, position, i, scaled_ ? &llama3_ : nullptr);
      const double a = x[i], b = x[i + half];
      x[i] = a * std::cos(angle) - b * std::sin(angle);
      x[i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  static void add(std::vector<double>& x, const std::vector<double>& y) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }

  int hidden_ = 0, heads_ = 0, kv_heads_ = 0, inter_ = 0, layers_ = 0, vocab_ = 0, head_dim_ = 0;
  double theta_ = 0.0, eps_ = 0.0;
  bool qk_norm_ = false, qkv_bias_ = true, o_bias_ = false, untied_ = false, scaled_ = false;
  NaiveLlama3 llama3_;
  NaiveRope rope_ = NaiveRope::exact;
  NaiveVariant variant_ = NaiveVariant::as_defined;
  std::map<std::string, std::vector<double>> tensors_;
};

/// max_i |a_i - b_i| / max_i |b_i| over b's elements (b: any sized range of float or double,
/// e.g. a reference's logits; a: at least as many elements).
template <class Reference>
double relative_error(const float* a, const Reference& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const auto want = static_cast<double>(b[i]);
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - want));
    scale = std::max(scale, std::abs(want));
  }
  return diff / scale;
}

}  // namespace amc::transformer::test

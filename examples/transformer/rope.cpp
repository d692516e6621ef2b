// RoPE tables under the transformers (float32) and exact (double) angle conventions.
#include "rope.hpp"

#include <amc/error.hpp>

#include <cmath>
#include <string>

namespace amc::transformer {

std::string_view to_string(RopeAngles angles) {
  return angles == RopeAngles::exact ? "exact" : "transformers";
}

RopeAngles parse_rope_angles(std::string_view text, std::string_view field) {
  if (text == "transformers") return RopeAngles::transformers;
  if (text == "exact") return RopeAngles::exact;
  detail::throw_error("amc::transformer::parse_rope_angles", std::string(field),
                      " must be \"transformers\" or \"exact\", got \"", std::string(text), "\"");
}

namespace {

constexpr double kTwoPi = 6.283185307179586;

/// Llama 3's rescaling of one inverse frequency in double (the exact convention).
double llama3_exact(double f, const RopeScaling& s) {
  const double wavelen = kTwoPi / f;
  const double original = s.original_max_position_embeddings;
  if (wavelen < original / s.high_freq_factor) return f;
  if (wavelen > original / s.low_freq_factor) return f / s.factor;
  const double smooth =
      (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * f / s.factor + smooth * f;
}

/// The same in float32, step by step as transformers' _compute_llama3_parameters takes it in
/// torch: a Python number meeting a float32 tensor is rounded to float32 first, and
/// `number / tensor` is tensor.reciprocal() * number (torch's Tensor.__rtruediv__). Every step
/// is one IEEE float operation, so these are torch's values bitwise
/// (tests/test_transformer_model.cpp compares them with PyTorch's).
float llama3_float(float f, const RopeScaling& s) {
  const auto factor = static_cast<float>(s.factor);
  const auto low = static_cast<float>(s.low_freq_factor);
  const auto original = static_cast<float>(s.original_max_position_embeddings);
  // Python computes these bounds and the band's width in double before they meet a tensor.
  const auto low_wavelen =
      static_cast<float>(s.original_max_position_embeddings / s.low_freq_factor);
  const auto high_wavelen =
      static_cast<float>(s.original_max_position_embeddings / s.high_freq_factor);
  const auto width = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  const float wavelen = (1.0f / f) * static_cast<float>(kTwoPi);
  // torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
  const float scaled = wavelen > low_wavelen ? f / factor : f;
  const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
  if (!medium) return scaled;
  const float reciprocal = 1.0f / wavelen;
  const float smooth = (reciprocal * original - low) / width;
  const float kept_part = (1.0f - smooth) * scaled;
  const float scaled_part = kept_part / factor;
  const float smooth_part = smooth * scaled;
  return scaled_part + smooth_part;
}

}  // namespace

RotaryTable::RotaryTable(RopeAngles angles, double theta, std::int64_t head_dim,
                         const RopeScaling& scaling)
    : angles_(angles) {
  AMC_CHECK(head_dim > 0 && head_dim % 2 == 0, "amc::transformer::RotaryTable",
            "head_dim must be even and positive, got ", head_dim);
  AMC_CHECK(theta > 1.0 && std::isfinite(theta), "amc::transformer::RotaryTable",
            "theta must be finite and > 1, got ", theta);
  const bool llama3 = scaling.type == RopeScaling::Type::llama3;
  if (llama3) {
    // parse_config refuses these with the config.json key; this guards direct callers.
    AMC_CHECK(scaling.factor >= 1.0 && std::isfinite(scaling.factor),
              "amc::transformer::RotaryTable", "rope scaling factor must be finite and >= 1, got ",
              scaling.factor);
    AMC_CHECK(scaling.low_freq_factor > 0.0 && scaling.high_freq_factor > scaling.low_freq_factor &&
                  std::isfinite(scaling.high_freq_factor),
              "amc::transformer::RotaryTable", "rope scaling needs 0 < low_freq_factor (",
              scaling.low_freq_factor, ") < high_freq_factor (", scaling.high_freq_factor, ")");
    AMC_CHECK(scaling.original_max_position_embeddings > 0.0 &&
                  std::isfinite(scaling.original_max_position_embeddings),
              "amc::transformer::RotaryTable",
              "rope scaling original_max_position_embeddings must be positive, got ",
              scaling.original_max_position_embeddings);
  }
  const std::int64_t half = head_dim / 2;
  inverse_frequency_.resize(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    double f = 0.0;
    if (angles == RopeAngles::exact) {
      f = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      if (llama3) f = llama3_exact(f, scaling);
    } else {
      // transformers: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), every step in
      // float32. The quotient and the reciprocal are IEEE float operations (correctly
      // rounded); the power is computed in double and rounded once, where torch's float pow
      // may be one ulp away (rope.hpp).
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      const auto power = static_cast<float>(
          std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(exponent)));
      float g = 1.0f / power;
      if (llama3) g = llama3_float(g, scaling);
      f = static_cast<double>(g);
    }
    inverse_frequency_[static_cast<std::size_t>(i)] = f;
  }
}

double RotaryTable::angle(std::int64_t position, std::int64_t i) const {
  const double f = inverse_frequency_[static_cast<std::size_t>(i)];
  if (angles_ == RopeAngles::exact) return static_cast<double>(position) * f;
  // float32(position) * inv_freq, the product rounded to float32 (transformers: position_ids
  // .float() times inv_freq in a float32 matrix product with one term).
  return static_cast<double>(static_cast<float>(position) * static_cast<float>(f));
}

void RotaryTable::cos_sin(std::int64_t position, float* cos, float* sin) const {
  for (std::int64_t i = 0; i < half(); ++i) {
    const double a = angle(position, i);
    cos[i] = static_cast<float>(std::cos(a));
    sin[i] = static_cast<float>(std::sin(a));
  }
}

}  // namespace amc::transformer

// RoPE tables under the transformers (float32) and exact (double) angle conventions.
#include "rope.hpp"

#include <amc/error.hpp>

#include <cmath>
#include <string>

namespace amc::qwen2 {

std::string_view to_string(RopeAngles angles) {
  return angles == RopeAngles::exact ? "exact" : "transformers";
}

RopeAngles parse_rope_angles(std::string_view text, std::string_view field) {
  if (text == "transformers") return RopeAngles::transformers;
  if (text == "exact") return RopeAngles::exact;
  detail::throw_error("amc::qwen2::parse_rope_angles", std::string(field),
                      " must be \"transformers\" or \"exact\", got \"", std::string(text), "\"");
}

RotaryTable::RotaryTable(RopeAngles angles, double theta, std::int64_t head_dim) : angles_(angles) {
  AMC_CHECK(head_dim > 0 && head_dim % 2 == 0, "amc::qwen2::RotaryTable",
            "head_dim must be even and positive, got ", head_dim);
  AMC_CHECK(theta > 1.0 && std::isfinite(theta), "amc::qwen2::RotaryTable",
            "theta must be finite and > 1, got ", theta);
  const std::int64_t half = head_dim / 2;
  inverse_frequency_.resize(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    double f = 0.0;
    if (angles == RopeAngles::exact) {
      f = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    } else {
      // transformers: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), every step in
      // float32. The quotient and the reciprocal are IEEE float operations (correctly
      // rounded); the power is computed in double and rounded once, where torch's float pow
      // may be one ulp away (rope.hpp).
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      const auto power = static_cast<float>(
          std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(exponent)));
      f = static_cast<double>(1.0f / power);
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

}  // namespace amc::qwen2

// Shared test utilities: seeded random data, storage round-trips and a double-precision
// attention reference written with plain loops (independent of the code under test).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "amc/storage.hpp"
#include "catch.hpp"

namespace amc::test {

inline std::mt19937_64& rng() {
  static std::mt19937_64 engine(0x5eed'a11c'0de5ULL);
  return engine;
}

inline std::vector<float> random_floats(std::size_t n, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = normal(rng());
  return out;
}

/// Storage copy of `values`; `stored` receives the floats the storage really holds.
template <KvStorage T>
std::vector<T> to_storage(const std::vector<float>& values, std::vector<float>* stored = nullptr) {
  std::vector<T> out(values.size());
  if (stored) stored->resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    out[i] = from_float<T>(values[i]);
    if (stored) (*stored)[i] = to_float(out[i]);
  }
  return out;
}

/// An f16 bit pattern as double, from the binary16 definition (independent of amc's f16
/// conversions). NaN for every NaN pattern (payloads are compared separately where they survive).
inline double f16_value(std::uint16_t bits) {
  const int sign = (bits >> 15) != 0 ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  if (exponent == 31)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

template <KvStorage T>
std::string storage_name() {
  return std::string(to_string(storage_type_of<T>));
}

/// Reference decode for one query head over the listed positions, in double.
/// keys/values: [n, row_stride] holding the values as stored (already rounded).
struct ReferenceResult {
  std::vector<double> out;
  double lse = -std::numeric_limits<double>::infinity();
  /// max over channels of sum_j p_j |v_ji|: the size of the terms each output channel sums.
  /// An f32 sum's rounding error scales with it, not with the sum itself, which can cancel.
  double term_magnitude = 0.0;
  /// gamma_d * max over positions of scale * sum_i |q_i k_i|: how far any f32 evaluation of a
  /// score, in any summation order, can be from the exact one (THEORY section 8), and so the
  /// lse too (its derivative in each score is a softmax weight). With a needle key 4x the
  /// others, scores of about 1 are sums of terms adding up to over 1000 in size.
  double score_rounding = 0.0;
};

inline ReferenceResult reference_attention(const float* query, std::int64_t head_dim,
                                           const std::vector<float>& keys,
                                           const std::vector<float>& values,
                                           std::int64_t row_stride,
                                           const std::vector<std::int64_t>& positions,
                                           double scale) {
  ReferenceResult r;
  r.out.assign(static_cast<std::size_t>(head_dim), 0.0);
  if (positions.empty()) return r;
  std::vector<double> scores;
  double max = -std::numeric_limits<double>::infinity();
  const double unit_roundoff = std::ldexp(1.0, -24);  // f32
  const double gamma = static_cast<double>(head_dim) * unit_roundoff /
                       (1.0 - static_cast<double>(head_dim) * unit_roundoff);
  for (std::int64_t p : positions) {
    double s = 0.0, size = 0.0;
    for (std::int64_t i = 0; i < head_dim; ++i) {
      const double product =
          static_cast<double>(query[i]) * keys[static_cast<std::size_t>(p * row_stride + i)];
      s += product;
      size += std::abs(product);
    }
    s *= scale;
    r.score_rounding = std::max(r.score_rounding, gamma * size * std::abs(scale));
    scores.push_back(s);
    max = std::max(max, s);
  }
  double sum = 0.0;
  std::vector<double> magnitude(static_cast<std::size_t>(head_dim), 0.0);
  for (std::size_t j = 0; j < positions.size(); ++j) {
    const double w = std::exp(scores[j] - max);
    sum += w;
    for (std::int64_t i = 0; i < head_dim; ++i) {
      const double v = values[static_cast<std::size_t>(positions[j] * row_stride + i)];
      r.out[static_cast<std::size_t>(i)] += w * v;
      magnitude[static_cast<std::size_t>(i)] += w * std::abs(v);
    }
  }
  for (double& x : r.out) x /= sum;
  for (double m : magnitude) r.term_magnitude = std::max(r.term_magnitude, m / sum);
  r.lse = max + std::log(sum);
  return r;
}

/// max_i |a_i - b_i| / max(max_i |b_i|, floor): a max error relative to the output's scale.
inline double max_relative_error(const float* got, const std::vector<double>& want,
                                 double floor = 1e-3) {
  double scale = floor, err = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  return err / scale;
}

/// max_i |a_i - b_i| / the reference's term magnitude: the error of an attention output relative
/// to the size of what its f32 sums add up (see ReferenceResult::term_magnitude).
inline double max_error_per_term_magnitude(const float* got, const ReferenceResult& want) {
  double err = 0.0;
  for (std::size_t i = 0; i < want.out.size(); ++i)
    err = std::max(err, std::abs(got[i] - want.out[i]));
  return err / std::max(want.term_magnitude, 1e-30);
}

}  // namespace amc::test

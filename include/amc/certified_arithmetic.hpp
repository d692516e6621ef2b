// Double-precision arithmetic with certified error bounds, for quantities that must hold for
// the exact values of the stored q, k and v (docs/theory.md section 3, "Certification under
// rounding"), not for what f32 kernels produced from them.
//
// Every helper returns a computed value together with a bound on its absolute error, derived
// from the standard model of IEEE-754 double arithmetic (each +, -, *, /, sqrt correctly
// rounded; glibc's exp, log and log1p within 1 ulp): with u = 2^-53, a product of two f32
// numbers is exact in double, a sum of n terms is within gamma_n = n u / (1 - n u) of their
// absolute sum (Higham, Accuracy and Stability of Numerical Algorithms, ch. 3). The bounds are
// deliberately generous (factors of 2 to 8 on the textbook constants) so that no step of the
// derivation is tight; they stay below 1e-12 relative for every realistic input, and grow, as
// they must, when scores are huge or cancel (a score of 1e60 is only known to about 1e45).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "amc/storage.hpp"

namespace amc::certified {

/// Unit roundoff of IEEE-754 double: every correctly rounded result is within u relative.
inline constexpr double kUnitRoundoff = 0x1p-53;

/// Beyond this distance below a running maximum, exp() of a term underflows to (sub)normals
/// whose absolute error is below 2^-1074: the term's relative error no longer matters.
inline constexpr double kExpUnderflowDistance = 746.0;

/// A computed value and a bound on its absolute distance from the exact value.
struct Bounded {
  double value = 0.0;
  double error = 0.0;
};

/// Sums of d terms and of their absolute values, in four interleaved partial sums held in
/// registers: the additions of one lane do not wait for the other lanes' (one dependent chain
/// of additions is latency-bound). Any order of summing d terms stays within gamma_{d-1} of
/// their absolute sum, so the error bounds below do not depend on it.
/// term(i) -> double; returns {c * sum, 2 (d + 2) u c sum |terms|}.
template <class Term>
Bounded scaled_sum(std::size_t d, double scale, Term&& term) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
  std::size_t i = 0;
  for (; i + 4 <= d; i += 4) {
    const double t0 = term(i), t1 = term(i + 1), t2 = term(i + 2), t3 = term(i + 3);
    s0 += t0;
    s1 += t1;
    s2 += t2;
    s3 += t3;
    a0 += std::abs(t0);
    a1 += std::abs(t1);
    a2 += std::abs(t2);
    a3 += std::abs(t3);
  }
  for (; i < d; ++i) {
    const double t = term(i);
    s0 += t;
    a0 += std::abs(t);
  }
  const double total = (s0 + s1) + (s2 + s3);
  const double absolute = (a0 + a1) + (a2 + a3);
  return {scale * total, 2.0 * (static_cast<double>(d) + 2.0) * kUnitRoundoff * scale * absolute};
}

/// c * <q, k> in double: q is f32, k any storage type (converted exactly), c a double. The
/// products are exact; the d-term sum and the scaling are within
/// 2 (d + 2) u c sum_i |q_i k_i| of the exact score.
/// \param query [head_dim], unscaled
/// \param key   [head_dim]
template <KvStorage T>
Bounded score(std::span<const float> query, double scale, const T* key) {
  return scaled_sum(query.size(), scale, [&](std::size_t i) {
    return static_cast<double>(query[i]) * static_cast<double>(to_float(key[i]));
  });
}

/// c * sum_i max(q_i lo_i, q_i hi_i) >= c <q, k> for every k with lo <= k <= hi channel-wise
/// (docs/theory.md section 3), with the same error bound as score(); value + error is an upper
/// bound on every such score. NaN if a channel bound is NaN or infinite (a NaN key in the
/// block must not vanish from the bound).
/// \param query [head_dim]; lo, hi [head_dim] channel-wise min and max keys
inline Bounded score_upper_bound(std::span<const float> query, double scale,
                                 std::span<const float> lo, std::span<const float> hi) {
  return scaled_sum(query.size(), scale, [&](std::size_t i) {
    const double q = query[i], low = lo[i], high = hi[i];
    // (x - x) is 0 for a finite x and NaN otherwise: a NaN bound reaches the sum either way.
    return std::max(q * low, q * high) + ((low - low) + (high - high));
  });
}

/// ||v|| rounded up: never below the exact Euclidean norm of the stored values.
/// \param value [head_dim]
template <KvStorage T>
double norm_upper(const T* value, std::size_t head_dim) {
  // Each square is exact; the sum is within gamma_d relative (all terms are positive).
  const double squared = scaled_sum(head_dim, 1.0, [&](std::size_t i) {
                           const double v = to_float(value[i]);
                           return v * v;
                         }).value;
  const double d = static_cast<double>(head_dim);
  const double upper = std::sqrt(squared * (1.0 + 2.0 * (d + 2.0) * kUnitRoundoff));
  return upper * (1.0 + 4.0 * kUnitRoundoff);
}

/// Rounds a non-negative value computed with relative error <= 2^-50 up, past its own rounding:
/// the result is >= the exact value and > 0 whenever `positive` says the exact value is.
inline double round_up(double value, bool positive) {
  if (std::isnan(value)) return value;
  double up = value + value * 0x1p-48;
  up = std::nextafter(up, std::numeric_limits<double>::infinity());
  if (positive && !(up > 0.0)) up = std::numeric_limits<double>::denorm_min();
  return up;
}

/// log(sum_j exp(t_j)) over terms t_j known to within e_j, accumulated in one pass with a
/// running maximum, with a bound on the distance of the result from the log-sum-exp of the
/// exact terms: lower() and upper() enclose it.
///
/// Error accounting (absolute, on the result): max_j e_j for the terms' own errors; for the
/// arithmetic, each term's exp(t_j - m) carries (2 + min(m - t_j, 746)) u relative (the
/// subtraction's rounding magnified by exp, and exp's own ulp; deeper terms underflow and weigh
/// < 2^-1074), each rescale of the running sum (3 + min(jump, 746)) u, each addition u, and
/// the final log and addition u (|m| + log n + 1). The sum of relative errors is at most
/// 2x'd and taken as the absolute error of the log (|log(1 + x)| <= 2|x| for |x| <= 1/2).
class LogSumExp {
 public:
  /// Adds one term; t may be -inf (contributes nothing), not NaN (the result turns NaN).
  void add(double t, double error = 0.0) {
    if (std::isnan(t) || std::isnan(error)) {
      nan_ = true;
      return;
    }
    if (t == -std::numeric_limits<double>::infinity()) return;
    max_term_error_ = std::max(max_term_error_, error);
    ++count_;
    if (count_ == 1) {
      max_ = t;
      sum_ = 1.0;
      term_relative_ = 2.0;
      return;
    }
    if (t > max_) {
      const double jump = t - max_;
      sum_ = sum_ * std::exp(-jump) + 1.0;
      rescale_relative_ += 3.0 + std::min(jump, kExpUnderflowDistance);
      max_ = t;
    } else {
      const double depth = max_ - t;
      sum_ += std::exp(-depth);
      term_relative_ = std::max(term_relative_, 2.0 + std::min(depth, kExpUnderflowDistance));
    }
  }

  bool empty() const { return count_ == 0 && !nan_; }
  std::int64_t count() const { return count_; }

  /// The computed log-sum-exp (-inf when empty, NaN after a NaN term).
  double value() const {
    if (nan_) return std::numeric_limits<double>::quiet_NaN();
    if (count_ == 0) return -std::numeric_limits<double>::infinity();
    return max_ + std::log(sum_);
  }

  /// Bound on |value() - exact log-sum-exp| (0 when empty).
  double error() const {
    if (nan_) return std::numeric_limits<double>::quiet_NaN();
    if (count_ == 0) return 0.0;
    const auto n = static_cast<double>(count_);
    const double relative =
        (term_relative_ + rescale_relative_ + n + 4.0) * kUnitRoundoff;  // of the sum
    const double log_rounding = (std::abs(max_) + std::log(n) + 2.0) * kUnitRoundoff;
    return max_term_error_ + 4.0 * relative + 2.0 * log_rounding;
  }

  double lower() const { return value() - error(); }
  double upper() const { return value() + error(); }

 private:
  std::int64_t count_ = 0;
  double max_ = 0.0;
  double sum_ = 0.0;  // sum_j exp(t_j - max_)
  double max_term_error_ = 0.0;
  double term_relative_ = 0.0;     // largest per-term relative error, in units of u
  double rescale_relative_ = 0.0;  // summed relative error of the rescales, in units of u
  bool nan_ = false;
};

/// log(U / (Z_S + U)) >= log eps, from a lower bound on L_S = log Z_S and an upper bound on
/// log U >= log Z_O, evaluated as -softplus(L_S - log U) (no overflow on either tail), with
/// its own rounding added so the result is an upper bound. -inf when log U is -inf (nothing
/// omitted), 0 when L_S is -inf (nothing read).
inline double log_omitted_mass_upper(double lse_support_lower, double log_omitted_upper) {
  constexpr double minus_infinity = -std::numeric_limits<double>::infinity();
  if (std::isnan(lse_support_lower) || std::isnan(log_omitted_upper)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (log_omitted_upper == minus_infinity) return minus_infinity;
  if (lse_support_lower == minus_infinity) return 0.0;
  const double x = lse_support_lower - log_omitted_upper;
  const double softplus = x > 0.0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  // Rounding of x, exp, log1p and the addition: within 4 u (|x| + 2) of -softplus(x).
  return std::min(0.0, -softplus + 4.0 * kUnitRoundoff * (std::abs(x) + 2.0));
}

/// exp(log_bound) rounded up: an upper bound on a mass whose log is at most log_bound, > 0
/// whenever `positive` (something was omitted), at most 1.
inline double mass_from_log_upper(double log_bound, bool positive) {
  if (std::isnan(log_bound)) return log_bound;
  if (log_bound == -std::numeric_limits<double>::infinity()) return 0.0;
  return std::min(1.0, round_up(std::exp(log_bound), positive));
}

}  // namespace amc::certified

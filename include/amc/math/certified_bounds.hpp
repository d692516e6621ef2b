// Certified bounds on a sparse step's omitted mass and output error from block summaries and
// the support the step read (docs/theory.md section 3, with its "Certification under rounding").
// Adaptive selection, which grows a support until the same bound meets a target, is an operator:
// attention/adaptive_selection.hpp.
//
// Per block b the summaries hold the channel-wise min and max key and the largest value norm.
// For any query q, ub_b = c sum_i max(q_i kmin_{b,i}, q_i kmax_{b,i}) >= max_{j in b} s_j, so
// the unnormalised mass outside the support S is at most U = sum_b |b \ S| exp(ub_b), and since
// eps = Z_O / (Z_S + Z_O) grows with Z_O,
//     eps <= U / (Z_S + U)                        (Z_S = exp(L_S), in log space here)
//     ||o - o_S|| <= eps_bound (max_{b with omitted positions} vmax_b + ||o_S||).
// Neither reads an omitted key or value.
//
// What "certified" means here: the bounds hold for the exact real-arithmetic quantities of the
// stored (rounded) q, k and v, for every finite input, with no assumption about the kernels.
// L_S and o_S are recomputed in double over the support (products of f32, bf16 or f16 numbers
// are exact in double), and every rounding of that computation and of ub_b, log U and the final
// ratio is bounded and added in the safe direction (certified_arithmetic.hpp). The f32
// log-sum-exp an operator returns is not used: its rounding depends on the kernels (an f32 L_S
// overstated the exact one by more than any fixed slack when scores cancel or the support is
// large). Cost: one more pass over the support's keys and values and one over every block's
// channel bounds, in scalar double: for a Qwen2-0.5B group about 44x the sparse step at 16K
// positions (BM_CertifiedBounds, docs/performance.md). An analysis path, not a decoding one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "amc/attention/adaptive_selection.hpp"
#include "amc/attention/block_summaries.hpp"
#include "amc/attention/registered_rule.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/attention/support.hpp"
#include "amc/certified_arithmetic.hpp"
#include "amc/error.hpp"
#include "amc/kv_view.hpp"

namespace amc {

/// What the summaries and the support certify about one sparse step of one query head. Every
/// field is an outward-rounded bound on the exact quantity it names.
struct CertifiedBounds {
  double lse_support_lower = -std::numeric_limits<double>::infinity();       ///< <= L_S
  double log_omitted_mass_upper = -std::numeric_limits<double>::infinity();  ///< log U >= log Z_O
  /// >= log eps; -inf when nothing is omitted. Use it for masses below 1e-308.
  double log_omitted_mass_bound = -std::numeric_limits<double>::infinity();
  /// U / (Z_S + U) >= eps: 0 exactly when nothing is omitted, > 0 (at least the smallest
  /// double) whenever something is, at most 1.
  double omitted_mass_bound = 0.0;
  double sparse_norm_upper = 0.0;  ///< >= ||o_S|| (exact sparse output over the support)
  /// omitted_mass_bound * (max vmax + ||o_S||) >= ||o - o_S||.
  double error_bound = 0.0;
  std::int64_t omitted_positions = 0;
};

namespace detail {

/// Counts the positions of consecutive, increasing position ranges that lie outside a
/// (normalized) support, walking the support once: O(blocks + ranges) over a whole cache, not
/// O(blocks x ranges).
class OutsideCounter {
 public:
  explicit OutsideCounter(const Support& support) : ranges_(support.ranges()) {}

  /// Positions of [lo, hi) outside the support; lo must not decrease between calls.
  std::int64_t operator()(std::int64_t lo, std::int64_t hi) {
    while (next_ < ranges_.size() && ranges_[next_].end <= lo) ++next_;
    std::int64_t inside = 0;
    for (std::size_t r = next_; r < ranges_.size() && ranges_[r].begin < hi; ++r) {
      inside += std::min(hi, ranges_[r].end) - std::max(lo, ranges_[r].begin);
    }
    return (hi - lo) - inside;
  }

 private:
  std::span<const PositionRange> ranges_;
  std::size_t next_ = 0;
};

/// The support's exact log-sum-exp L_S and sparse output o_S, recomputed in double from the
/// stored keys and values, with bounds on their rounding.
struct SupportRecomputation {
  certified::LogSumExp lse;        ///< over the support's scores
  double sparse_norm_upper = 0.0;  ///< >= ||o_S||
};

/// Two passes over the support: scores (kept) into the log-sum-exp, then the weights and the
/// weighted values. ||o_S|| is bounded by the smaller of
///   ||computed o_S|| + its distance from the exact o_S, and max_{j in S} ||v_j||
/// (o_S is a convex combination of the v_j). With every weight within a factor exp(+-D) of its
/// exact value (D: the largest score error plus the shift's and exp's rounding), the
/// normalised weights are within exp(2D) - 1 relative, which moves o_S by at most
/// (exp(2D) - 1) max ||v_j||; the double sums add 2 gamma_{n+2} max ||v_j||.
template <KvViewLike View>
SupportRecomputation recompute_support(std::span<const float> query, double scale, const View& kv,
                                       const Support& support) {
  SupportRecomputation out;
  const auto d = static_cast<std::size_t>(kv.head_dim());
  std::vector<double> scores;
  scores.reserve(static_cast<std::size_t>(support.size()));
  double max_score_error = 0.0;
  for (const PositionRange& r : support.ranges()) {
    for (std::int64_t p = r.begin; p < r.end; ++p) {
      const certified::Bounded s = certified::score(query, scale, kv.key(p));
      scores.push_back(s.value);
      max_score_error = std::max(max_score_error, s.error);
      out.lse.add(s.value, s.error);
    }
  }
  if (scores.empty() || std::isnan(out.lse.value())) {
    out.sparse_norm_upper = scores.empty() ? 0.0 : std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  const double shift = *std::max_element(scores.begin(), scores.end());
  std::vector<double> weighted(d, 0.0);
  double total = 0.0, max_value_norm = 0.0, largest_depth = 0.0;
  std::size_t j = 0;
  for (const PositionRange& r : support.ranges()) {
    for (std::int64_t p = r.begin; p < r.end; ++p, ++j) {
      const double depth = shift - scores[j];
      largest_depth = std::max(largest_depth, std::min(depth, certified::kExpUnderflowDistance));
      const double w = std::exp(-depth);
      total += w;
      const auto* v = kv.value(p);
      double* out_row = weighted.data();
      for (std::size_t i = 0; i < d; ++i) out_row[i] += w * static_cast<double>(to_float(v[i]));
      const double norm = certified::norm_upper(v, d);
      if (!(norm <= max_value_norm)) max_value_norm = norm;  // NaN-propagating
    }
  }
  double squared = 0.0;
  for (const double x : weighted) squared += (x / total) * (x / total);
  const auto n = static_cast<double>(scores.size());
  const double u = certified::kUnitRoundoff;
  const double weight_error = max_score_error + (largest_depth + 4.0) * u;
  const double perturbation = std::expm1(2.0 * weight_error) * (1.0 + 4.0 * u);
  const double computed_norm = std::sqrt(squared) * (1.0 + (static_cast<double>(d) + 8.0) * u);
  const double bound =
      computed_norm + (perturbation + 4.0 * (n + 4.0) * u) * max_value_norm * (1.0 + 4.0 * u);
  out.sparse_norm_upper = std::isnan(bound) ? bound : std::min(bound, max_value_norm);
  return out;
}

/// omitted_mass_bound and error_bound from the support's recomputation, log U (already an
/// upper bound) and the largest omitted value norm; fills the rest of `out`.
inline void finish_bounds(const SupportRecomputation& support, double max_omitted_value_norm,
                          CertifiedBounds& out) {
  const bool something_omitted = out.omitted_positions > 0;
  out.lse_support_lower = support.lse.lower();
  out.sparse_norm_upper = support.sparse_norm_upper;
  out.log_omitted_mass_bound =
      certified::log_omitted_mass_upper(out.lse_support_lower, out.log_omitted_mass_upper);
  out.omitted_mass_bound =
      certified::mass_from_log_upper(out.log_omitted_mass_bound, something_omitted);
  if (!something_omitted) {
    out.error_bound = 0.0;
    return;
  }
  // In log space too, so that a subnormal mass times a norm cannot round down to 0.
  const double norms =
      (max_omitted_value_norm + out.sparse_norm_upper) * (1.0 + 4.0 * certified::kUnitRoundoff);
  if (std::isnan(norms) || std::isnan(out.log_omitted_mass_bound)) {
    out.error_bound = std::numeric_limits<double>::quiet_NaN();
  } else if (norms == 0.0) {
    out.error_bound = 0.0;  // every omitted value and o_S are 0: so is the error
  } else {
    const double log_error = out.log_omitted_mass_bound + std::log(norms);
    out.error_bound = certified::round_up(
        std::exp(log_error + 4.0 * certified::kUnitRoundoff * (std::abs(log_error) + 1.0)), true);
  }
}

}  // namespace detail

/// Certified bounds for one query head whose sparse step read `support`: what the exact
/// (real-arithmetic) sparse step over `support` omits, for the stored keys and values of `kv`.
/// Reads the summaries and the support's keys and values, nothing else.
/// \param query     [head_dim], unscaled (the bound is computed for scores c <q, k>)
/// \param scale     attention scale c
/// \param kv        the KV head the step read
/// \param summaries built with channel_bounds and value_norms, covering the whole of `kv`
/// \param support   the positions the sparse step read (normalized)
/// A NaN in a key or value the bound depends on makes the affected bounds NaN: nothing is
/// certified over it.
template <KvViewLike View>
CertifiedBounds certified_bounds(std::span<const float> query, double scale, const View& kv,
                                 const BlockSummaries& summaries, const Support& support) {
  constexpr const char* where = "amc::certified_bounds";
  detail::check_certified_inputs(where, query, scale, summaries);
  detail::check_view_matches(where, kv, summaries);
  AMC_CHECK(support.end() <= summaries.positions(), where, "support reaches position ",
            support.end() - 1, " beyond the ", summaries.positions(), " summarised positions");
  CertifiedBounds out;
  certified::LogSumExp omitted;  // log U over blocks with omitted positions
  double max_value_norm = 0.0;
  const auto value_norms = summaries.value_norm_max();
  detail::OutsideCounter outside(support);
  for (std::int64_t b = 0; b < summaries.blocks(); ++b) {
    const std::int64_t count = outside(summaries.block_begin(b), summaries.block_end(b));
    if (count == 0) continue;
    out.omitted_positions += count;
    const double log_count = std::log(static_cast<double>(count));
    omitted.add(log_count + block_score_upper_bound(query, scale, summaries, b),
                4.0 * certified::kUnitRoundoff * (log_count + 1.0));
    const double norm = value_norms[static_cast<std::size_t>(b)];
    if (!std::isnan(max_value_norm) && !(norm <= max_value_norm)) max_value_norm = norm;
  }
  out.log_omitted_mass_upper = omitted.upper();
  detail::finish_bounds(detail::recompute_support(query, scale, kv, support), max_value_norm, out);
  return out;
}

}  // namespace amc

// The exact omitted-mass identity of docs/theory.md section 2, as pure functions.
//
// A sparse decode step that reads only the positions of a support S and renormalises over them
// returns o_S; the dense step returns o. With eps the softmax mass of the positions outside S and
// mu_O their softmax-weighted mean value,
//
//     o = (1 - eps) * o_S + eps * mu_O        hence        o - o_S = eps * (mu_O - o_S).
//
// This is an identity, not a bound: the error of a sparse step is the omitted mass times the
// distance between what was omitted and what was kept. The functions here compute eps from the
// log-sum-exp values an operator returns, and analyse a dense/sparse pair of outputs against the
// identity and its value bounds. They need no operator; everything is computed in double.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <span>
#include <vector>

#include "amc/attention/support.hpp"
#include "amc/error.hpp"
#include "amc/kv_view.hpp"
#include "amc/storage.hpp"
#include "amc/tensor.hpp"

namespace amc {

/// Absolute part of the slack by which `lse_support` may exceed `lse_all` in retained_mass() and
/// omitted_mass(). Operators accumulate log-sum-exp in f32, so when almost nothing is omitted
/// the log-sum-exp over the support can come out a few f32 rounding steps above the one over
/// all positions. Within the slack the excess is treated as rounding (eps = 0); beyond it the
/// inputs cannot come from the same scores and the call throws.
inline constexpr double kLseAbsoluteSlack = 1e-4;
/// Relative part of that slack, multiplied by |lse_all|: one f32 ulp of a log-sum-exp near 100
/// is about 7.6e-6, so large scores need proportionally more room.
inline constexpr double kLseRelativeSlack = 1e-6;

/// The slack allowed for `lse_support - lse_all`: kLseAbsoluteSlack + kLseRelativeSlack *
/// |lse_all|.
inline double lse_slack(double lse_all) {
  return kLseAbsoluteSlack + kLseRelativeSlack * std::abs(lse_all);
}

/// How far above 1 an omitted mass handed in by a caller may lie and still count as 1: a mass
/// summed from softmax weights in double can come out a few ulps above 1.
inline constexpr double kMassRoundingSlack = 1e-12;

/// Norms below this count as zero when an output norm is used as a denominator.
inline constexpr double kTinyNorm = 1e-30;

namespace detail {

/// Validates a (lse_support, lse_all) pair and returns min(lse_support - lse_all, 0), which is
/// -inf when the support read nothing.
inline double checked_log_retained(double lse_support, double lse_all, const char* where) {
  AMC_CHECK(!std::isnan(lse_all), where, "lse_all is NaN");
  AMC_CHECK(std::isfinite(lse_all), where, "lse_all must be finite (-inf would mean no positions ",
            "at all), got ", lse_all);
  AMC_CHECK(!std::isnan(lse_support), where, "lse_support is NaN");
  if (lse_support == -std::numeric_limits<double>::infinity()) {
    return lse_support;
  }
  const double log_retained = lse_support - lse_all;
  const double slack = lse_slack(lse_all);
  AMC_CHECK(log_retained <= slack, where, std::setprecision(17), "lse_support = ", lse_support,
            " exceeds lse_all = ", lse_all, " by ", log_retained, ", more than the rounding slack ",
            slack);
  return std::min(log_retained, 0.0);
}

/// log(exp(a) + exp(b)) without overflow; either may be -inf, not both +inf.
inline double log_add_exp(double a, double b) {
  // NaN propagates: std::max and std::min would drop it, and a NaN term (a block's bound over
  // a NaN key, a NaN score) would vanish from a sum it makes meaningless.
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  const double hi = std::max(a, b);
  const double lo = std::min(a, b);
  if (lo == -std::numeric_limits<double>::infinity()) {
    return hi;
  }
  return hi + std::log1p(std::exp(lo - hi));
}

/// 1 / (1 + exp(-x)), accurate relative to its value on both tails (x may be +-inf).
inline double logistic(double x) {
  if (x >= 0.0) {
    return 1.0 / (1.0 + std::exp(-x));
  }
  const double e = std::exp(x);
  return e / (1.0 + e);
}

/// Validates a caller's omitted mass, allowing kMassRoundingSlack above 1, and clamps it to [0, 1].
inline double checked_omitted_mass(double omitted_mass, const char* where) {
  AMC_CHECK(omitted_mass >= 0.0 && omitted_mass <= 1.0 + kMassRoundingSlack, where,
            std::setprecision(17), "omitted_mass must lie in [0, 1], got ", omitted_mass);
  return std::min(omitted_mass, 1.0);
}

/// Throws naming `name` and the first non-finite element of a vector.
template <class Vec>
void check_finite_vector(const Vec& vector, const char* where, const char* name) {
  for (Eigen::Index i = 0; i < vector.size(); ++i) {
    AMC_CHECK(std::isfinite(vector[i]), where, name, "[", i, "] = ", vector[i], " is not finite");
  }
}

/// Throws naming `name` and the first non-finite element of a matrix.
inline void check_finite_matrix(const ConstMatrixRef& matrix, const char* where, const char* name) {
  if (matrix.allFinite()) {
    return;
  }
  for (Eigen::Index r = 0; r < matrix.rows(); ++r) {
    for (Eigen::Index c = 0; c < matrix.cols(); ++c) {
      AMC_CHECK(std::isfinite(matrix(r, c)), where, name, "(", r, ", ", c, ") = ", matrix(r, c),
                " is not finite");
    }
  }
}

}  // namespace detail

/// Retained mass P_S = exp(L_S - L_all) of a support, from the log-sum-exp over the support
/// (`lse_support`, -inf when the support read nothing) and over all positions (`lse_all`).
/// Throws amc::error on NaN, on a non-finite `lse_all`, and when `lse_support` exceeds
/// `lse_all` by more than lse_slack(lse_all); an excess within the slack is rounding and gives 1.
inline double retained_mass(double lse_support, double lse_all) {
  return std::exp(detail::checked_log_retained(lse_support, lse_all, "amc::retained_mass"));
}

/// Omitted mass eps = 1 - P_S = -expm1(L_S - L_all). The expm1 form keeps eps accurate to its
/// own size when it is tiny (1 - exp(x) would cancel to 0 or to multiples of 1.1e-16). Returns 1
/// when `lse_support` is -inf (nothing read). Same argument checks as retained_mass().
///
/// The accuracy is that of the difference L_S - L_all: both rounded to double at magnitude |L|
/// leave eps an absolute uncertainty of about |L| * 1.1e-16, and f32 log-sum-exp values from an
/// operator one of about |L| * 6e-8. Below that eps is noise; analyse_omission() computes eps
/// from the scores without that limit.
inline double omitted_mass(double lse_support, double lse_all) {
  return -std::expm1(detail::checked_log_retained(lse_support, lse_all, "amc::omitted_mass"));
}

/// Everything docs/theory.md section 2 says about one sparse step, computed in double from the
/// scores and values of all positions and the two outputs. Vectors are [head_dim].
struct OmissionAnalysis {
  /// L_S: log-sum-exp of the scores in the support; -inf when the support is empty.
  double lse_support = 0.0;
  /// L_O: log-sum-exp of the omitted scores; -inf when the support covers every position.
  double lse_omitted = 0.0;
  /// L_all = log(exp(L_S) + exp(L_O)).
  double lse_all = 0.0;
  /// P_S = 1 - eps.
  double retained_mass = 0.0;
  /// eps: the softmax mass of the omitted positions.
  double omitted_mass = 0.0;
  /// Number of positions in [0, n) outside the support.
  std::int64_t omitted_positions = 0;
  /// mu_O: the omitted positions' values averaged with their softmax weights renormalised over
  /// the omitted set. Empty when nothing is omitted. Computed whenever something is omitted,
  /// even if eps underflows to 0, because it is defined by the omitted weights alone.
  Eigen::VectorXd omitted_mean;
  /// ||mu_O - o_S||: the factor that multiplies eps in the error; 0 when nothing is omitted.
  double omitted_gap_norm = 0.0;
  /// dense_out - sparse_out as given.
  Eigen::VectorXd error;
  /// ||dense_out - sparse_out||.
  double error_norm = 0.0;
  /// eps * (mu_O - o_S), with o_S = sparse_out: what the identity says the error is.
  Eigen::VectorXd predicted_error;
  /// ||error - predicted_error||: how far the outputs are from satisfying the identity. Nonzero
  /// only through rounding in the operator that produced them (or a bug in it).
  double identity_residual = 0.0;
  /// identity_residual / max(||dense_out||, ||sparse_out||, kTinyNorm).
  double relative_identity_residual = 0.0;
  /// eps * max_{j not in S} ||v_j - o_S||: bounds error_norm; 0 when nothing is omitted.
  double value_bound = 0.0;
  /// eps * (max_{j not in S} ||v_j|| + ||o_S||): looser, needs only value norms.
  double loose_value_bound = 0.0;
  /// Cosine between the error and o_S (0 if either is zero): near +1 the omitted values only
  /// lengthen the output along the retained average, near -1 they pull it back against it, near 0
  /// they turn it sideways. Retained mass alone does not say which; this does.
  double direction_cosine = 0.0;
};

/// Analyses one sparse step against the dense one (docs/theory.md section 2), in double.
///
/// @param scores     [positions] the scaled scores s_j = c * <q, k_j> of every cached position
///                   (exact_scores() computes them in double from the stored keys).
/// @param values     [positions, head_dim] the value rows v_j.
/// @param support    the positions the sparse step read; sorted, disjoint, within [0, positions).
/// @param dense_out  [head_dim] o, the dense output.
/// @param sparse_out [head_dim] o_S, the sparse output renormalised over the support.
///
/// The masses come from max-shifted log-sum-exps of the support and of the omitted positions, in
/// double, as eps = 1 / (1 + exp(L_S - L_O)) and P_S = 1 / (1 + exp(L_O - L_S)): this is the
/// expm1 form -expm1(L_S - L_all) rewritten so that it never subtracts two nearly equal
/// log-sum-exps, so eps keeps full relative accuracy however tiny it is, and so does P_S when eps
/// is near 1. omitted_mass(lse_support, lse_all) on the returned fields agrees to within the
/// rounding of L_all.
///
/// Throws amc::error naming the argument when positions < 1, head_dim < 1, shapes disagree, the
/// support is unsorted or reaches outside [0, positions), or any input is not finite.
inline OmissionAnalysis analyse_omission(const Eigen::Ref<const VectorD>& scores,
                                         const ConstMatrixRef& values, const Support& support,
                                         const Eigen::Ref<const VectorD>& dense_out,
                                         const Eigen::Ref<const VectorD>& sparse_out) {
  constexpr const char* where = "amc::analyse_omission";
  constexpr double minus_infinity = -std::numeric_limits<double>::infinity();
  const Eigen::Index positions = scores.size();
  AMC_CHECK(positions >= 1, where, "scores must hold at least one position, got size ", positions);
  AMC_CHECK(values.rows() == positions, where, "values has ", values.rows(),
            " rows but scores has ", positions, " positions");
  const Eigen::Index head_dim = values.cols();
  AMC_CHECK(head_dim >= 1, where, "values must have at least one column, got ", head_dim);
  AMC_CHECK(dense_out.size() == head_dim, where, "dense_out has size ", dense_out.size(),
            " but values has width ", head_dim);
  AMC_CHECK(sparse_out.size() == head_dim, where, "sparse_out has size ", sparse_out.size(),
            " but values has width ", head_dim);

  // Membership by a mask rather than Support::contains: it also validates the ranges, and
  // contains() silently misanswers on an unsorted support.
  std::vector<char> in_support(static_cast<std::size_t>(positions), 0);
  std::int64_t previous_end = 0;
  for (const PositionRange& range : support.ranges()) {
    AMC_CHECK(range.begin >= previous_end && range.begin < range.end, where,
              "support must be sorted disjoint non-empty ranges, got [", range.begin, ", ",
              range.end, ") after a range ending at ", previous_end);
    AMC_CHECK(range.end <= positions, where, "support range [", range.begin, ", ", range.end,
              ") reaches outside [0, ", positions, ") (positions = scores size)");
    for (std::int64_t p = range.begin; p < range.end; ++p) {
      in_support[static_cast<std::size_t>(p)] = 1;
    }
    previous_end = range.end;
  }
  detail::check_finite_vector(scores, where, "scores");
  detail::check_finite_matrix(values, where, "values");
  detail::check_finite_vector(dense_out, where, "dense_out");
  detail::check_finite_vector(sparse_out, where, "sparse_out");

  OmissionAnalysis result;

  // Max-shifted log-sum-exp of each side, in double.
  double max_support = minus_infinity;
  double max_omitted = minus_infinity;
  for (Eigen::Index j = 0; j < positions; ++j) {
    const double s = scores[j];
    if (in_support[static_cast<std::size_t>(j)] != 0) {
      max_support = std::max(max_support, s);
    } else {
      max_omitted = std::max(max_omitted, s);
      ++result.omitted_positions;
    }
  }
  double sum_support = 0.0;
  double sum_omitted = 0.0;
  for (Eigen::Index j = 0; j < positions; ++j) {
    const double s = scores[j];
    if (in_support[static_cast<std::size_t>(j)] != 0) {
      sum_support += std::exp(s - max_support);
    } else {
      sum_omitted += std::exp(s - max_omitted);
    }
  }
  result.lse_support =
      max_support == minus_infinity ? minus_infinity : max_support + std::log(sum_support);
  result.lse_omitted =
      max_omitted == minus_infinity ? minus_infinity : max_omitted + std::log(sum_omitted);
  result.lse_all = detail::log_add_exp(result.lse_support, result.lse_omitted);
  // log(eps / P_S) = L_O - L_S; the logistic of it is eps, of its negation P_S (section comment
  // above: no cancellation on either tail). Infinite differences land on exact 0 and 1.
  const double log_odds_omitted = result.lse_omitted - result.lse_support;
  result.omitted_mass = detail::logistic(log_odds_omitted);
  result.retained_mass = detail::logistic(-log_odds_omitted);

  const Eigen::VectorXd& dense = dense_out;
  const Eigen::VectorXd& sparse = sparse_out;
  const double eps = result.omitted_mass;

  result.error = dense - sparse;
  result.error_norm = result.error.norm();
  result.predicted_error = Eigen::VectorXd::Zero(head_dim);
  if (result.omitted_positions > 0) {
    result.omitted_mean = Eigen::VectorXd::Zero(head_dim);
    double max_gap = 0.0;
    double max_value_norm = 0.0;
    for (Eigen::Index j = 0; j < positions; ++j) {
      if (in_support[static_cast<std::size_t>(j)] != 0) {
        continue;
      }
      const Eigen::VectorXd v = values.row(j).transpose().cast<double>();
      result.omitted_mean += std::exp(static_cast<double>(scores[j]) - result.lse_omitted) * v;
      max_gap = std::max(max_gap, (v - sparse).norm());
      max_value_norm = std::max(max_value_norm, v.norm());
    }
    const Eigen::VectorXd gap = result.omitted_mean - sparse;
    result.omitted_gap_norm = gap.norm();
    result.predicted_error = eps * gap;
    result.value_bound = eps * max_gap;
    result.loose_value_bound = eps * (max_value_norm + sparse.norm());
  }

  result.identity_residual = (result.error - result.predicted_error).norm();
  const double scale = std::max({dense.norm(), sparse.norm(), kTinyNorm});
  result.relative_identity_residual = result.identity_residual / scale;

  const double sparse_norm = sparse.norm();
  if (result.error_norm > 0.0 && sparse_norm > 0.0) {
    result.direction_cosine = result.error.dot(sparse) / (result.error_norm * sparse_norm);
  }
  return result;
}

/// The same for f32 scores and outputs (an operator's), converted to double first.
inline OmissionAnalysis analyse_omission(const ConstVectorRef& scores, const ConstMatrixRef& values,
                                         const Support& support, const ConstVectorRef& dense_out,
                                         const ConstVectorRef& sparse_out) {
  return analyse_omission(VectorD(scores.cast<double>()), values, support,
                          VectorD(dense_out.cast<double>()), VectorD(sparse_out.cast<double>()));
}

/// The scores c <q, k_j> of every position of `kv`, in double: each product of the f32 query
/// and a stored key element is exact, and the sum is within head_dim * 2^-53 of
/// sum_i |q_i k_ji| (not f32's 2^-24), so cancellation costs digits of double, not of f32.
/// \param query [head_dim], unscaled; returns [positions]
template <KvViewLike View>
VectorD exact_scores(std::span<const float> query, double scale, const View& kv) {
  AMC_CHECK(query.size() == static_cast<std::size_t>(kv.head_dim()), "amc::exact_scores",
            "query has ", query.size(), " elements, the KV view has head_dim ", kv.head_dim());
  VectorD scores(kv.positions());
  for (std::int64_t p = 0; p < kv.positions(); ++p) {
    const auto* key = kv.key(p);
    double dot = 0.0;
    for (std::size_t i = 0; i < query.size(); ++i) {
      dot += static_cast<double>(query[i]) * static_cast<double>(to_float(key[i]));
    }
    scores[p] = scale * dot;
  }
  return scores;
}

/// Dense and sparse outputs of one query head computed in double from its scores: what an
/// exact operator would return. [head_dim] each; `sparse` is 0 for an empty support.
struct ExactOutputs {
  VectorD dense;
  VectorD sparse;
};

/// \param scores [positions] (exact_scores()); values [positions, head_dim]; support sorted
///        ranges within [0, positions)
inline ExactOutputs exact_outputs(const Eigen::Ref<const VectorD>& scores,
                                  const ConstMatrixRef& values, const Support& support) {
  constexpr const char* where = "amc::exact_outputs";
  AMC_CHECK(values.rows() == scores.size(), where, "values has ", values.rows(),
            " rows but scores has ", scores.size(), " positions");
  AMC_CHECK(support.end() <= scores.size(), where, "support reaches position ", support.end() - 1,
            " beyond the ", scores.size(), " positions");
  const Eigen::Index d = values.cols();
  ExactOutputs out{VectorD::Zero(d), VectorD::Zero(d)};
  if (scores.size() == 0) return out;
  const double shift = scores.maxCoeff();
  double total = 0.0;
  for (Eigen::Index j = 0; j < scores.size(); ++j) {
    const double w = std::exp(scores[j] - shift);
    total += w;
    out.dense += w * values.row(j).transpose().cast<double>();
  }
  out.dense /= total;
  double support_shift = -std::numeric_limits<double>::infinity();
  for (const PositionRange& r : support.ranges())
    for (std::int64_t p = r.begin; p < r.end; ++p)
      support_shift = std::max(support_shift, scores[p]);
  double support_total = 0.0;
  for (const PositionRange& r : support.ranges()) {
    for (std::int64_t p = r.begin; p < r.end; ++p) {
      const double w = std::exp(scores[p] - support_shift);
      support_total += w;
      out.sparse += w * values.row(p).transpose().cast<double>();
    }
  }
  if (support_total > 0.0) out.sparse /= support_total;
  return out;
}

/// How far a dense/sparse pair is from the identity o - o_S = eps * (mu_O - o_S).
struct IdentityResidual {
  /// ||(dense_out - sparse_out) - eps * (mu_O - sparse_out)||.
  double absolute = 0.0;
  /// absolute / max(||dense_out||, ||sparse_out||, kTinyNorm).
  double relative = 0.0;
};

/// The identity check for callers that already have eps and mu_O (e.g. from an operator's
/// log-sum-exps and a pass over the omitted positions), without the scores and values.
///
/// @param dense_out     [head_dim] o.
/// @param sparse_out    [head_dim] o_S.
/// @param omitted_mass  eps in [0, 1] (up to kMassRoundingSlack above 1 counts as 1).
/// @param omitted_mean  [head_dim] mu_O; may be empty when omitted_mass is 0 (mu_O undefined).
///
/// Throws amc::error naming the argument on mismatched sizes, non-finite inputs or eps outside
/// [0, 1].
inline IdentityResidual omission_identity_residual(
    const ConstVectorRef& dense_out, const ConstVectorRef& sparse_out, double omitted_mass,
    const Eigen::Ref<const Eigen::VectorXd>& omitted_mean) {
  constexpr const char* where = "amc::omission_identity_residual";
  AMC_CHECK(sparse_out.size() == dense_out.size(), where, "sparse_out has size ", sparse_out.size(),
            " but dense_out has size ", dense_out.size());
  const double eps = detail::checked_omitted_mass(omitted_mass, where);
  AMC_CHECK(
      omitted_mean.size() == dense_out.size() || (omitted_mean.size() == 0 && omitted_mass == 0.0),
      where, "omitted_mean has size ", omitted_mean.size(), " but dense_out has size ",
      dense_out.size(), " (it may be empty only when omitted_mass is 0)");
  detail::check_finite_vector(dense_out, where, "dense_out");
  detail::check_finite_vector(sparse_out, where, "sparse_out");
  for (Eigen::Index i = 0; i < omitted_mean.size(); ++i) {
    AMC_CHECK(std::isfinite(omitted_mean[i]), where, "omitted_mean[", i, "] = ", omitted_mean[i],
              " is not finite");
  }
  const Eigen::VectorXd dense = dense_out.cast<double>();
  const Eigen::VectorXd sparse = sparse_out.cast<double>();
  Eigen::VectorXd residual = dense - sparse;
  if (omitted_mean.size() != 0) {
    residual -= eps * (omitted_mean - sparse);
  }
  IdentityResidual result;
  result.absolute = residual.norm();
  result.relative = result.absolute / std::max({dense.norm(), sparse.norm(), kTinyNorm});
  return result;
}

}  // namespace amc

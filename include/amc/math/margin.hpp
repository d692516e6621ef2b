// The downstream margin condition of docs/theory.md section 5, as pure functions.
//
// Greedy decoding picks a = argmax_b z_b of the logits z = W_U h. A perturbation delta of the
// final hidden state h (for instance the effect of a sparse attention error) moves the logits to
// z + W_U delta. These functions say exactly whether a perturbation keeps the greedy token, give
// radii below which every perturbation keeps it, and link such a radius back to the attention
// error eps * ||mu_O - o_S|| of omitted_mass.hpp. All arithmetic that decides is done in double.
//
// Everything here is about one decoding step. After the first changed token every later context
// differs, and even while tokens agree the cache of generated positions holds keys and values
// computed from perturbed hidden states, so errors compound: per-step guarantees do not give
// sequence-level identity.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "amc/error.hpp"
#include "amc/math/omitted_mass.hpp"
#include "amc/tensor.hpp"

namespace amc {

/// The greedy token, its closest competitor, and the gap between them.
struct LogitMargin {
  /// a = argmax_b z_b; the lowest index among equal maxima.
  std::int64_t top = 0;
  /// argmax_{b != a} z_b; the lowest index among equal maxima.
  std::int64_t runner_up = 0;
  float top_logit = 0.0f;
  float runner_up_logit = 0.0f;
  /// gamma = z_a - z_runner_up >= 0; 0 on a tie, +inf when every other logit is -inf. The
  /// difference is exact in double and rounded toward zero to float, so gamma never overstates
  /// the true gap and a radius built from it stays sufficient.
  float margin = 0.0f;
};

namespace detail {

/// Throws naming the first non-finite element of row `row` of `matrix`; called only once a
/// row's result came out non-finite, so clean inputs cost no extra pass.
inline void throw_non_finite_row(const ConstMatrixRef& matrix, Eigen::Index row, const char* where,
                                 const char* name) {
  for (Eigen::Index c = 0; c < matrix.cols(); ++c) {
    AMC_CHECK(std::isfinite(matrix(row, c)), where, name, "(", row, ", ", c, ") = ", matrix(row, c),
              " is not finite");
  }
  detail::throw_error(where, name, " row ", row, " overflows in double");
}

inline void check_top(std::int64_t top, Eigen::Index vocab, const char* where) {
  AMC_CHECK(top >= 0 && top < vocab, where, "top = ", top, " is outside [0, ", vocab,
            ") (vocab size)");
}

inline void check_margin(double margin, const char* where) {
  AMC_CHECK(!std::isnan(margin) && margin >= 0.0, where, "margin must be >= 0 (+inf allowed), got ",
            margin);
}

/// The radius margin / worst_distance with its limits spelled out: a zero margin admits no
/// perturbation (a tie already counts as a flip); a zero distance means every perturbation moves
/// all logits alike, so any positive margin survives all of them.
inline double radius_from(double margin, double worst_distance) {
  if (margin == 0.0) {
    return 0.0;
  }
  if (worst_distance == 0.0) {
    return std::numeric_limits<double>::infinity();
  }
  return margin / worst_distance;
}

}  // namespace detail

/// The greedy token and its margin over the runner-up.
///
/// @param logits [vocab] z, vocab >= 2. -inf entries (masked tokens) are allowed as long as one
///               entry is finite; NaN and +inf are not.
///
/// Throws amc::error naming the offending index on NaN or +inf, and on vocab < 2 or all -inf.
inline LogitMargin logit_margin(const ConstVectorRef& logits) {
  constexpr const char* where = "amc::logit_margin";
  const Eigen::Index vocab = logits.size();
  AMC_CHECK(vocab >= 2, where, "logits must hold at least 2 entries, got size ", vocab);
  Eigen::Index top = 0;
  for (Eigen::Index b = 0; b < vocab; ++b) {
    AMC_CHECK(!std::isnan(logits[b]), where, "logits[", b, "] is NaN");
    AMC_CHECK(logits[b] != std::numeric_limits<float>::infinity(), where, "logits[", b,
              "] is +inf");
    if (logits[b] > logits[top]) {
      top = b;  // strict: the first of equal maxima stays
    }
  }
  AMC_CHECK(std::isfinite(logits[top]), where, "every logit is -inf (logits size ", vocab, ")");
  Eigen::Index runner_up = top == 0 ? 1 : 0;
  for (Eigen::Index b = runner_up + 1; b < vocab; ++b) {
    if (b != top && logits[b] > logits[runner_up]) {
      runner_up = b;
    }
  }
  LogitMargin result;
  result.top = top;
  result.runner_up = runner_up;
  result.top_logit = logits[top];
  result.runner_up_logit = logits[runner_up];
  const double gap = static_cast<double>(logits[top]) - static_cast<double>(logits[runner_up]);
  float margin = static_cast<float>(gap);
  if (static_cast<double>(margin) > gap) {
    margin = std::nextafter(margin, 0.0f);
  }
  result.margin = margin;
  return result;
}

/// Exact test: whether the perturbation `delta` of the final hidden state keeps `top` as the
/// greedy token, i.e. (w_b - w_a) . delta < z_a - z_b for every b != a (a = `top`). Equality
/// counts as a flip, matching a decoder that could break the tie either way. Computed in double
/// with the differences formed before the dot product, so nothing cancels in f32.
///
/// @param unembedding [vocab, hidden] W_U, rows w_b.
/// @param logits      [vocab] z = W_U h (any constant bias per token cancels out); entries other
///                    than z_top may be -inf.
/// @param delta       [hidden] the perturbation of h.
/// @param top         a; normally logit_margin(logits).top. Any index is accepted: the answer
///                    is whether it strictly beats every other token after the perturbation.
///
/// Throws amc::error naming the argument on mismatched shapes, top out of range, vocab < 2,
/// NaN or +inf logits, a non-finite z_top, or non-finite delta or unembedding entries.
inline bool greedy_token_kept(const ConstMatrixRef& unembedding, const ConstVectorRef& logits,
                              const ConstVectorRef& delta, std::int64_t top) {
  constexpr const char* where = "amc::greedy_token_kept";
  const Eigen::Index vocab = unembedding.rows();
  const Eigen::Index hidden = unembedding.cols();
  AMC_CHECK(vocab >= 2, where, "unembedding must have at least 2 rows, got ", vocab);
  AMC_CHECK(logits.size() == vocab, where, "logits has size ", logits.size(),
            " but unembedding has ", vocab, " rows");
  AMC_CHECK(delta.size() == hidden, where, "delta has size ", delta.size(), " but unembedding has ",
            hidden, " columns");
  detail::check_top(top, vocab, where);
  for (Eigen::Index b = 0; b < vocab; ++b) {
    AMC_CHECK(!std::isnan(logits[b]) && logits[b] != std::numeric_limits<float>::infinity(), where,
              "logits[", b, "] = ", logits[b], " is NaN or +inf");
  }
  AMC_CHECK(std::isfinite(logits[top]), where, "logits[top = ", top, "] = ", logits[top],
            " is not finite");
  for (Eigen::Index i = 0; i < hidden; ++i) {
    AMC_CHECK(std::isfinite(delta[i]), where, "delta[", i, "] = ", delta[i], " is not finite");
  }

  const Eigen::RowVectorXd top_row = unembedding.row(top).cast<double>();
  const Eigen::RowVectorXd delta_d = delta.transpose().cast<double>();
  const double top_logit = logits[top];
  bool kept = true;
  // No early exit: a clean input costs the same full pass either way, and a non-finite row is
  // reported wherever it is.
  for (Eigen::Index b = 0; b < vocab; ++b) {
    if (b == top) {
      continue;
    }
    const double shift = (unembedding.row(b).cast<double>() - top_row).dot(delta_d);
    if (!std::isfinite(shift)) {
      detail::throw_non_finite_row(unembedding, std::isfinite(top_row.sum()) ? b : top, where,
                                   "unembedding");
    }
    const double gap = top_logit - static_cast<double>(logits[b]);  // +inf for a masked b
    if (!(shift < gap)) {
      kept = false;
    }
  }
  return kept;
}

/// Sufficient radius, exact form: r = margin / max_{b != a} ||w_a - w_b|| (in double). Every
/// perturbation with ||delta|| < r keeps the greedy token, since (w_b - w_a) . delta <=
/// ||w_b - w_a|| ||delta|| < margin <= z_a - z_b. It is sufficient only: larger perturbations
/// that do not point along a worst w_b - w_a usually keep it too; use greedy_token_kept() for
/// the exact answer on a given delta.
///
/// @param unembedding [vocab, hidden] W_U, rows w_b, vocab >= 2.
/// @param top         a, the greedy token.
/// @param margin      gamma = z_a - max_{b != a} z_b >= 0 (e.g. logit_margin().margin).
///
/// Returns 0 for margin 0 and +inf when every row equals w_a and margin > 0. Costs one pass
/// over W_U; sufficient_radius_from_norms() reuses precomputed row norms instead.
/// Throws amc::error naming the argument on vocab < 2, top out of range, a negative or NaN
/// margin, or a non-finite unembedding entry.
inline double sufficient_radius(const ConstMatrixRef& unembedding, std::int64_t top,
                                double margin) {
  constexpr const char* where = "amc::sufficient_radius";
  const Eigen::Index vocab = unembedding.rows();
  AMC_CHECK(vocab >= 2, where, "unembedding must have at least 2 rows, got ", vocab);
  detail::check_top(top, vocab, where);
  detail::check_margin(margin, where);
  const Eigen::RowVectorXd top_row = unembedding.row(top).cast<double>();
  double worst_distance = 0.0;
  for (Eigen::Index b = 0; b < vocab; ++b) {
    if (b == top) {
      continue;
    }
    const double distance = (unembedding.row(b).cast<double>() - top_row).norm();
    if (!std::isfinite(distance)) {
      detail::throw_non_finite_row(unembedding, std::isfinite(top_row.sum()) ? b : top, where,
                                   "unembedding");
    }
    worst_distance = std::max(worst_distance, distance);
  }
  return detail::radius_from(margin, worst_distance);
}

/// Row norms ||w_b|| of W_U in double, [vocab]: computed once per model so that
/// sufficient_radius_from_norms() costs O(vocab) per step instead of O(vocab * hidden).
/// Throws amc::error naming the first non-finite entry of `unembedding` ([vocab, hidden]).
inline Eigen::VectorXd unembedding_row_norms(const ConstMatrixRef& unembedding) {
  constexpr const char* where = "amc::unembedding_row_norms";
  Eigen::VectorXd norms(unembedding.rows());
  for (Eigen::Index b = 0; b < unembedding.rows(); ++b) {
    norms[b] = unembedding.row(b).cast<double>().norm();
    if (!std::isfinite(norms[b])) {
      detail::throw_non_finite_row(unembedding, b, where, "unembedding");
    }
  }
  return norms;
}

/// Sufficient radius, cheap form: r = margin / (||w_a|| + max_{b != a} ||w_b||). Since
/// ||w_a - w_b|| <= ||w_a|| + ||w_b||, it is at most the exact form's radius, so it is
/// sufficient too, and sufficient only: it can be far smaller than what flips the token.
///
/// @param row_norms [vocab] ||w_b||, from unembedding_row_norms(); vocab >= 2.
/// @param top       a, the greedy token.
/// @param margin    gamma >= 0 (e.g. logit_margin().margin).
///
/// Returns 0 for margin 0 and +inf when every row norm is 0 and margin > 0.
/// Throws amc::error naming the argument on vocab < 2, top out of range, a negative or NaN
/// margin, or a negative or non-finite row norm.
inline double sufficient_radius_from_norms(const Eigen::VectorXd& row_norms, std::int64_t top,
                                           double margin) {
  constexpr const char* where = "amc::sufficient_radius_from_norms";
  const Eigen::Index vocab = row_norms.size();
  AMC_CHECK(vocab >= 2, where, "row_norms must hold at least 2 entries, got size ", vocab);
  detail::check_top(top, vocab, where);
  detail::check_margin(margin, where);
  double largest_other = 0.0;
  for (Eigen::Index b = 0; b < vocab; ++b) {
    AMC_CHECK(std::isfinite(row_norms[b]) && row_norms[b] >= 0.0, where, "row_norms[", b,
              "] = ", row_norms[b], " is not a finite non-negative norm");
    if (b != top) {
      largest_other = std::max(largest_other, row_norms[b]);
    }
  }
  return detail::radius_from(margin, row_norms[top] + largest_other);
}

/// Links the attention error back to the greedy token (docs/theory.md sections 2 and 5): if the
/// rest of the network maps an attention-output error e to a final-state error of norm at most
/// lipschitz * ||e||, then, since ||e|| = eps * ||mu_O - o_S|| exactly,
/// eps * ||mu_O - o_S|| * lipschitz < radius keeps the greedy token at this step.
///
/// Sufficient only, and only as good as `lipschitz` (the caller's estimate or bound). It says
/// nothing about later steps: once any token differs every later context differs, and even while
/// tokens agree the cached keys and values of generated positions come from perturbed hidden
/// states, so errors compound over steps.
///
/// @param omitted_mass     eps in [0, 1] (up to kMassRoundingSlack above 1 counts as 1).
/// @param omitted_gap_norm ||mu_O - o_S|| >= 0 (OmissionAnalysis::omitted_gap_norm).
/// @param lipschitz        >= 0, finite.
/// @param radius           a sufficient radius >= 0 (+inf allowed).
///
/// Throws amc::error naming the argument on NaN, negative or (except radius) infinite inputs,
/// or eps above 1 + kMassRoundingSlack.
inline bool attention_error_keeps_token(double omitted_mass, double omitted_gap_norm,
                                        double lipschitz, double radius) {
  constexpr const char* where = "amc::attention_error_keeps_token";
  const double eps = detail::checked_omitted_mass(omitted_mass, where);
  AMC_CHECK(std::isfinite(omitted_gap_norm) && omitted_gap_norm >= 0.0, where,
            "omitted_gap_norm must be finite and >= 0, got ", omitted_gap_norm);
  AMC_CHECK(std::isfinite(lipschitz) && lipschitz >= 0.0, where,
            "lipschitz must be finite and >= 0, got ", lipschitz);
  AMC_CHECK(!std::isnan(radius) && radius >= 0.0, where, "radius must be >= 0, got ", radius);
  return eps * omitted_gap_norm * lipschitz < radius;
}

}  // namespace amc

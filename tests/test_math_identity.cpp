// Property tests for amc/math/omitted_mass.hpp (docs/theory.md section 2).
//
// Every reference here is written with plain loops in double (long double where the reference must
// be finer than the code under test), independently of the library: dense and sparse outputs are
// computed in double and handed to the library as f32, the way an operator would hand them over.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "amc/attention/support.hpp"
#include "amc/error.hpp"
#include "amc/math/omitted_mass.hpp"
#include "amc/tensor.hpp"
#include "catch.hpp"
#include "math_property.hpp"

namespace {

using amc_test::close;
using amc_test::require_error_naming;

constexpr int kCasesPerProperty = 12000;
constexpr double kInf = std::numeric_limits<double>::infinity();

/// One decode step: f32 scores and values, and a support given as a per-position mask.
struct AttentionCase {
  std::string kind;
  Eigen::VectorXf scores;  // [n]
  amc::RowMatrix values;   // [n, d]
  std::vector<bool> in_support;
  amc::Support support;
};

/// The reference quantities, by plain loops in double.
struct Reference {
  std::vector<double> dense;         // o
  std::vector<double> sparse;        // o_S, 0 when the support is empty
  std::vector<double> omitted_mean;  // mu_O, empty when nothing is omitted
  double omitted_mass = 0.0;         // sum of the omitted softmax weights
  double retained_mass = 0.0;        // sum of the retained softmax weights
  double max_omitted_value_norm = 0.0;
  double max_omitted_gap = 0.0;  // max_{j not in S} ||v_j - o_S||
};

amc::Support support_from_mask(const std::vector<bool>& mask) {
  amc::Support support;
  const auto n = static_cast<std::int64_t>(mask.size());
  for (std::int64_t j = 0; j < n;) {
    if (!mask[static_cast<std::size_t>(j)]) {
      ++j;
      continue;
    }
    std::int64_t end = j;
    while (end < n && mask[static_cast<std::size_t>(end)]) ++end;
    support.add(j, end, n);
    j = end;
  }
  support.normalize();
  return support;
}

double norm_of(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x * x;
  return std::sqrt(sum);
}

AttentionCase make_case(std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  AttentionCase c;
  const int n = pick(1, 64);
  const int d = pick(1, 16);
  std::vector<double> scores(static_cast<std::size_t>(n));
  std::vector<std::vector<double>> values(static_cast<std::size_t>(n),
                                          std::vector<double>(static_cast<std::size_t>(d)));
  for (auto& row : values)
    for (double& x : row) x = normal(rng);
  std::vector<bool> mask(static_cast<std::size_t>(n), false);
  const auto random_mask = [&]() {
    if (uniform(rng) < 0.5) {  // block-like ranges, as rules produce
      const int ranges = pick(0, 4);
      for (int r = 0; r < ranges; ++r) {
        const int begin = pick(0, n - 1);
        const int end = std::min(n, begin + pick(1, 16));
        for (int j = begin; j < end; ++j) mask[static_cast<std::size_t>(j)] = true;
      }
    } else {
      const double keep = uniform(rng);
      for (int j = 0; j < n; ++j) mask[static_cast<std::size_t>(j)] = uniform(rng) < keep;
    }
  };
  // Scores from a query and keys with the 1/sqrt(d) scale.
  const auto scores_from_keys = [&](double query_scale, double key_noise) {
    std::vector<double> q(static_cast<std::size_t>(d));
    std::vector<double> base(static_cast<std::size_t>(d));
    for (double& x : q) x = query_scale * normal(rng);
    for (double& x : base) x = normal(rng);
    for (int j = 0; j < n; ++j) {
      double dot = 0.0;
      for (int i = 0; i < d; ++i) {
        const double key = key_noise < 0
                               ? normal(rng)
                               : base[static_cast<std::size_t>(i)] + key_noise * normal(rng);
        dot += q[static_cast<std::size_t>(i)] * key;
      }
      scores[static_cast<std::size_t>(j)] = dot / std::sqrt(static_cast<double>(d));
    }
  };

  switch (pick(0, 7)) {
    case 0:
      c.kind = "random";
      scores_from_keys(0.1 + 3.0 * uniform(rng), -1.0);
      random_mask();
      break;
    case 1: {
      c.kind = "needle";
      for (double& s : scores) s = normal(rng);
      const int needle = pick(0, n - 1);
      scores[static_cast<std::size_t>(needle)] += 5.0 + 20.0 * uniform(rng);
      random_mask();
      mask[static_cast<std::size_t>(needle)] = uniform(rng) < 0.5;
      break;
    }
    case 2:
      c.kind = "near-duplicate keys";
      scores_from_keys(0.5 + 3.0 * uniform(rng), 1e-4);
      random_mask();
      break;
    case 3:
      c.kind = "scores in the hundreds";
      for (double& s : scores) s = 100.0 + 500.0 * uniform(rng);
      random_mask();
      break;
    case 4: {
      c.kind = "near-zero eps";
      for (double& s : scores) s = normal(rng);
      const double top = *std::max_element(scores.begin(), scores.end());
      std::fill(mask.begin(), mask.end(), true);
      const int omitted = pick(1, std::max(1, n / 8));
      for (int r = 0; r < omitted; ++r) {
        const int j = pick(0, n - 1);
        mask[static_cast<std::size_t>(j)] = false;
        scores[static_cast<std::size_t>(j)] =
            top - 18.0 - 14.0 * uniform(rng);  // eps ~ 1e-8..1e-14
      }
      break;
    }
    case 5: {
      c.kind = "eps near 1";
      for (double& s : scores) s = normal(rng);
      const int kept = pick(1, std::max(1, n / 4));
      for (int r = 0; r < kept; ++r) {
        const int j = pick(0, n - 1);
        mask[static_cast<std::size_t>(j)] = true;
        scores[static_cast<std::size_t>(j)] -= 10.0 + 25.0 * uniform(rng);
      }
      break;
    }
    case 6: {
      c.kind = "opposite values";
      for (double& s : scores) s = 2.0 * normal(rng);
      random_mask();
      std::vector<double> direction(static_cast<std::size_t>(d));
      for (double& x : direction) x = normal(rng);
      const double spread = 1.0 + 9.0 * uniform(rng);
      for (int j = 0; j < n; ++j) {
        const double sign = mask[static_cast<std::size_t>(j)] ? 1.0 : -spread;
        for (int i = 0; i < d; ++i) {
          values[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)] =
              sign * direction[static_cast<std::size_t>(i)] + 0.01 * normal(rng);
        }
      }
      break;
    }
    default:
      c.kind = uniform(rng) < 0.5 ? "empty support" : "full support";
      for (double& s : scores) s = 3.0 * normal(rng);
      std::fill(mask.begin(), mask.end(), c.kind == "full support");
      break;
  }

  c.scores.resize(n);
  c.values.resize(n, d);
  for (int j = 0; j < n; ++j) {
    c.scores[j] = static_cast<float>(scores[static_cast<std::size_t>(j)]);
    for (int i = 0; i < d; ++i) {
      c.values(j, i) =
          static_cast<float>(values[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)]);
    }
  }
  c.in_support = mask;
  c.support = support_from_mask(mask);
  return c;
}

/// Dense and sparse attention by plain loops over the f32 inputs, in double.
Reference reference_of(const AttentionCase& c) {
  const Eigen::Index n = c.scores.size();
  const Eigen::Index d = c.values.cols();
  const auto ud = static_cast<std::size_t>(d);
  Reference r;
  r.dense.assign(ud, 0.0);
  r.sparse.assign(ud, 0.0);

  double max_all = -kInf, max_support = -kInf, max_omitted = -kInf;
  for (Eigen::Index j = 0; j < n; ++j) {
    const double s = c.scores[j];
    max_all = std::max(max_all, s);
    if (c.in_support[static_cast<std::size_t>(j)]) {
      max_support = std::max(max_support, s);
    } else {
      max_omitted = std::max(max_omitted, s);
    }
  }
  double z_all = 0.0, z_support = 0.0, z_omitted = 0.0;
  for (Eigen::Index j = 0; j < n; ++j) {
    const double s = c.scores[j];
    z_all += std::exp(s - max_all);
    if (c.in_support[static_cast<std::size_t>(j)]) {
      z_support += std::exp(s - max_support);
    } else {
      z_omitted += std::exp(s - max_omitted);
    }
  }
  const bool any_omitted = max_omitted > -kInf;
  if (any_omitted) r.omitted_mean.assign(ud, 0.0);
  for (Eigen::Index j = 0; j < n; ++j) {
    const double s = c.scores[j];
    const double p = std::exp(s - max_all) / z_all;
    const bool kept = c.in_support[static_cast<std::size_t>(j)];
    (kept ? r.retained_mass : r.omitted_mass) += p;
    const double w_local =
        kept ? std::exp(s - max_support) / z_support : std::exp(s - max_omitted) / z_omitted;
    for (Eigen::Index i = 0; i < d; ++i) {
      const double v = c.values(j, i);
      r.dense[static_cast<std::size_t>(i)] += p * v;
      (kept ? r.sparse : r.omitted_mean)[static_cast<std::size_t>(i)] += w_local * v;
    }
  }
  for (Eigen::Index j = 0; j < n; ++j) {
    if (c.in_support[static_cast<std::size_t>(j)]) continue;
    double value_sq = 0.0, gap_sq = 0.0;
    for (Eigen::Index i = 0; i < d; ++i) {
      const double v = c.values(j, i);
      value_sq += v * v;
      gap_sq +=
          (v - r.sparse[static_cast<std::size_t>(i)]) * (v - r.sparse[static_cast<std::size_t>(i)]);
    }
    r.max_omitted_value_norm = std::max(r.max_omitted_value_norm, std::sqrt(value_sq));
    r.max_omitted_gap = std::max(r.max_omitted_gap, std::sqrt(gap_sq));
  }
  return r;
}

Eigen::VectorXf to_float(const std::vector<double>& v) {
  Eigen::VectorXf out(static_cast<Eigen::Index>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i)
    out[static_cast<Eigen::Index>(i)] = static_cast<float>(v[i]);
  return out;
}

double max_value_norm(const AttentionCase& c) {
  double largest = 0.0;
  for (Eigen::Index j = 0; j < c.values.rows(); ++j) {
    largest = std::max(largest, c.values.row(j).cast<double>().norm());
  }
  return largest;
}

}  // namespace

TEST_CASE("analyse_omission satisfies the identity and reproduces eps and mu_O",
          "[math][identity]") {
  std::mt19937_64 rng(0x5eed0001);
  int failures = 0;
  for (int t = 0; t < kCasesPerProperty; ++t) {
    const AttentionCase c = make_case(rng);
    const Reference r = reference_of(c);
    const Eigen::VectorXf dense = to_float(r.dense);
    const Eigen::VectorXf sparse = to_float(r.sparse);
    const amc::OmissionAnalysis a =
        amc::analyse_omission(c.scores, c.values, c.support, dense, sparse);
    const std::string where = "case " + std::to_string(t) + " (" + c.kind + ")";

    // The identity holds up to the f32 rounding of the two outputs.
    PROPERTY_CHECK(a.relative_identity_residual < 1e-5,
                   where << ": relative residual " << a.relative_identity_residual);
    // Masses: relative accuracy however tiny, including eps near 1 (P_S tiny).
    PROPERTY_CHECK(close(a.omitted_mass, r.omitted_mass, 1e-10, 1e-300),
                   where << ": eps " << a.omitted_mass << " vs " << r.omitted_mass);
    PROPERTY_CHECK(close(a.retained_mass, r.retained_mass, 1e-10, 1e-300),
                   where << ": P_S " << a.retained_mass << " vs " << r.retained_mass);
    // omitted_mass() on the returned log-sum-exps agrees to the rounding of L_all.
    PROPERTY_CHECK(close(amc::omitted_mass(a.lse_support, a.lse_all), a.omitted_mass, 1e-12,
                         4e-16 * std::max(1.0, std::abs(a.lse_all))),
                   where << ": omitted_mass(L_S, L_all) disagrees with the analysis");
    // mu_O, and the light overload on the reference's mu_O.
    const double scale = std::max(1.0, max_value_norm(c));
    PROPERTY_CHECK(a.omitted_mean.size() == static_cast<Eigen::Index>(r.omitted_mean.size()),
                   where << ": mu_O size " << a.omitted_mean.size());
    if (!r.omitted_mean.empty() && a.omitted_mean.size() == c.values.cols()) {
      double diff = 0.0;
      for (std::size_t i = 0; i < r.omitted_mean.size(); ++i) {
        diff = std::max(diff,
                        std::abs(a.omitted_mean[static_cast<Eigen::Index>(i)] - r.omitted_mean[i]));
      }
      PROPERTY_CHECK(diff <= 1e-12 * scale, where << ": mu_O differs by " << diff);
      const Eigen::VectorXd mean = Eigen::Map<const Eigen::VectorXd>(
          r.omitted_mean.data(), static_cast<Eigen::Index>(r.omitted_mean.size()));
      const amc::IdentityResidual light =
          amc::omission_identity_residual(dense, sparse, r.omitted_mass, mean);
      PROPERTY_CHECK(light.relative < 1e-5, where << ": light residual " << light.relative);
    } else {
      const amc::IdentityResidual light =
          amc::omission_identity_residual(dense, sparse, 0.0, Eigen::VectorXd());
      PROPERTY_CHECK(light.relative < 1e-5,
                     where << ": light residual without mu_O " << light.relative);
    }
    // error and its norm are dense_out - sparse_out as given.
    double error_sq = 0.0;
    for (Eigen::Index i = 0; i < dense.size(); ++i) {
      const double e = static_cast<double>(dense[i]) - static_cast<double>(sparse[i]);
      error_sq += e * e;
    }
    PROPERTY_CHECK(close(a.error_norm, std::sqrt(error_sq), 1e-14, 0.0), where << ": error_norm");
    PROPERTY_CHECK(a.direction_cosine >= -1.0 - 1e-12 && a.direction_cosine <= 1.0 + 1e-12,
                   where << ": cosine " << a.direction_cosine);
    // The cosine against the reference, where the error stands clear of f32 rounding.
    std::vector<double> true_error(r.dense.size());
    for (std::size_t i = 0; i < r.dense.size(); ++i) true_error[i] = r.dense[i] - r.sparse[i];
    const double true_error_norm = norm_of(true_error);
    const double sparse_norm = norm_of(r.sparse);
    if (true_error_norm > 1e-3 * std::max(sparse_norm, norm_of(r.dense)) && sparse_norm > 1e-6) {
      double dot = 0.0;
      for (std::size_t i = 0; i < true_error.size(); ++i) dot += true_error[i] * r.sparse[i];
      const double cosine = dot / (true_error_norm * sparse_norm);
      PROPERTY_CHECK(std::abs(a.direction_cosine - cosine) < 1e-3,
                     where << ": cosine " << a.direction_cosine << " vs " << cosine);
    }
  }
  REQUIRE(failures == 0);
}

TEST_CASE("value bounds dominate the true error norm", "[math][identity]") {
  // Slack: the analysis measures v_j - o_S against o_S as handed over in f32, off from the
  // double o_S by at most ~6e-8 * ||o_S|| (1e-6 allowed), and the double reference error itself
  // carries rounding of the two sums of at most n <= 64 terms (1e-13 * max ||v_j|| allowed).
  std::mt19937_64 rng(0x5eed0002);
  int failures = 0;
  int nontrivial = 0;
  for (int t = 0; t < kCasesPerProperty; ++t) {
    const AttentionCase c = make_case(rng);
    const Reference r = reference_of(c);
    const amc::OmissionAnalysis a =
        amc::analyse_omission(c.scores, c.values, c.support, to_float(r.dense), to_float(r.sparse));
    const std::string where = "case " + std::to_string(t) + " (" + c.kind + ")";
    std::vector<double> true_error(r.dense.size());
    for (std::size_t i = 0; i < r.dense.size(); ++i) true_error[i] = r.dense[i] - r.sparse[i];
    const double true_error_norm = norm_of(true_error);
    const double sparse_norm = norm_of(r.sparse);
    const double slack = r.omitted_mass * 1e-6 * (sparse_norm + r.max_omitted_value_norm) +
                         1e-13 * max_value_norm(c);

    PROPERTY_CHECK(a.value_bound + slack >= true_error_norm,
                   where << ": value bound " << a.value_bound << " < error " << true_error_norm);
    PROPERTY_CHECK(
        a.loose_value_bound + slack >= true_error_norm,
        where << ": loose bound " << a.loose_value_bound << " < error " << true_error_norm);
    PROPERTY_CHECK(a.value_bound <= a.loose_value_bound * (1 + 1e-12) + 1e-300,
                   where << ": value bound above the loose bound");
    // The bounds against their reference formulas.
    PROPERTY_CHECK(
        close(a.value_bound, r.omitted_mass * r.max_omitted_gap, 1e-6, slack),
        where << ": value bound " << a.value_bound << " vs " << r.omitted_mass * r.max_omitted_gap);
    PROPERTY_CHECK(close(a.loose_value_bound,
                         r.omitted_mass * (r.max_omitted_value_norm + sparse_norm), 1e-6, slack),
                   where << ": loose bound");
    // The error norm is eps * ||mu_O - o_S|| (the identity, in its norm form).
    PROPERTY_CHECK(close(a.omitted_mass * a.omitted_gap_norm, true_error_norm, 1e-6, slack),
                   where << ": eps * gap " << a.omitted_mass * a.omitted_gap_norm << " vs error "
                         << true_error_norm);
    if (true_error_norm > 1e-3) ++nontrivial;
  }
  REQUIRE(failures == 0);
  // The cases must not all be trivially tiny errors.
  REQUIRE(nontrivial > kCasesPerProperty / 4);
}

TEST_CASE("omitted_mass and retained_mass from log-sum-exps", "[math][identity]") {
  std::mt19937_64 rng(0x5eed0003);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int failures = 0;
  for (int t = 0; t < kCasesPerProperty; ++t) {
    // eps log-uniform over [1e-15, 0.5] or 1 - eps log-uniform over [1e-15, 0.5].
    const double tail = std::pow(10.0, -15.0 + 14.7 * uniform(rng));
    const bool near_one = t % 2 == 1;
    const double lse_all = -100.0 + 700.0 * uniform(rng);
    const double log_retained = near_one ? std::log(tail) : std::log1p(-tail);
    const double lse_support = lse_all + log_retained;
    const std::string where = "case " + std::to_string(t) + " eps " +
                              std::to_string(near_one ? 1 - tail : tail) + " L_all " +
                              std::to_string(lse_all);

    // Reference for the doubles actually passed: the Taylor series of 1 - exp(d) where exp(d)
    // is near 1 (no expm1), plain 1 - exp(d) where it is not.
    const double d = lse_support - lse_all;
    double eps_ref;
    if (d > -0.5) {
      double term = 1.0, sum = 0.0;
      for (int k = 1; k < 40; ++k) {
        term *= d / k;
        sum += term;
      }
      eps_ref = -sum;
    } else {
      eps_ref = 1.0 - std::exp(d);
    }
    const double eps = amc::omitted_mass(lse_support, lse_all);
    const double kept = amc::retained_mass(lse_support, lse_all);
    PROPERTY_CHECK(close(eps, eps_ref, 1e-14, 1e-300),
                   where << ": eps " << eps << " vs " << eps_ref);
    PROPERTY_CHECK(close(kept, std::exp(d), 1e-15, 0.0), where << ": P_S " << kept);
    PROPERTY_CHECK(close(eps + kept, 1.0, 1e-15, 0.0), where << ": eps + P_S = " << eps + kept);
    // Against the eps the inputs were made from: limited only by rounding L_S to double.
    const double target = near_one ? 1.0 - tail : tail;
    PROPERTY_CHECK(close(eps, target, 1e-14, 2.3e-16 * std::max(1.0, std::abs(lse_all))),
                   where << ": eps " << eps << " vs target " << target);

    // f32 inputs, as an operator returns them: never throws, stays in [0, 1], and is off by at
    // most the f32 rounding of the log-sum-exps.
    const auto lse_support_f = static_cast<double>(static_cast<float>(lse_support));
    const auto lse_all_f = static_cast<double>(static_cast<float>(lse_all));
    const double eps_f = amc::omitted_mass(lse_support_f, lse_all_f);
    PROPERTY_CHECK(eps_f >= 0.0 && eps_f <= 1.0, where << ": f32 eps " << eps_f);
    PROPERTY_CHECK(
        std::abs(eps_f - target) <= 1.2e-7 * std::max(1.0, std::abs(lse_all)) + 1e-9 * target,
        where << ": f32 eps " << eps_f << " vs " << target);
  }
  REQUIRE(failures == 0);

  const double l = 12.5;
  CHECK(amc::omitted_mass(-kInf, l) == 1.0);
  CHECK(amc::retained_mass(-kInf, l) == 0.0);
  CHECK(amc::omitted_mass(l, l) == 0.0);
  CHECK(amc::retained_mass(l, l) == 1.0);
  CHECK(amc::omitted_mass(l + 0.9 * amc::lse_slack(l), l) == 0.0);  // rounding: clamped
  CHECK(amc::retained_mass(l + 0.9 * amc::lse_slack(l), l) == 1.0);
  // Tiny eps survives (1 - exp would give a multiple of 1.1e-16); 0.75 keeps L_S - L_all exact
  // to 1e-4 relative.
  CHECK(amc::omitted_mass(0.75 - 1e-12, 0.75) == Approx(1e-12).epsilon(1e-3));
  CHECK(amc::omitted_mass(l - 800.0, l) == 1.0);
  CHECK(amc::retained_mass(l - 700.0, l) == Approx(std::exp(-700.0)).epsilon(1e-12));
}

TEST_CASE("omitted-mass functions reject bad arguments, naming them", "[math][identity][errors]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  require_error_naming([&] { amc::omitted_mass(nan, 1.0); }, "lse_support");
  require_error_naming([&] { amc::omitted_mass(1.0, nan); }, "lse_all");
  require_error_naming([&] { amc::omitted_mass(1.0, -kInf); }, "lse_all");
  require_error_naming([&] { amc::omitted_mass(1.0, kInf); }, "lse_all");
  require_error_naming([&] { amc::omitted_mass(kInf, 1.0); }, "lse_support");
  require_error_naming([&] { amc::omitted_mass(1.0 + 2.0 * amc::lse_slack(1.0), 1.0); },
                       "lse_support");
  require_error_naming([&] { amc::retained_mass(2.0, 1.0); }, "lse_support");
  require_error_naming([&] { amc::retained_mass(0.0, -kInf); }, "lse_all");
  require_error_naming([&] { amc::omitted_mass(nan, 1.0); }, "amc::omitted_mass");

  // A valid small case to break one argument at a time.
  Eigen::VectorXf scores(4);
  scores << 0.5f, -1.0f, 2.0f, 0.0f;
  amc::RowMatrix values(4, 2);
  values << 1, 2, 3, 4, 5, 6, 7, 8;
  amc::Support support;
  support.add(0, 2, 4);
  support.normalize();
  Eigen::VectorXf out(2);
  out << 1.0f, 1.0f;
  const auto analyse = [&](const Eigen::VectorXf& s, const amc::RowMatrix& v,
                           const amc::Support& sup, const Eigen::VectorXf& dense,
                           const Eigen::VectorXf& sparse) {
    return amc::analyse_omission(s, v, sup, dense, sparse);
  };
  CHECK_NOTHROW(analyse(scores, values, support, out, out));

  require_error_naming(
      [&] { analyse(Eigen::VectorXf(), amc::RowMatrix(0, 2), amc::Support(), out, out); },
      "scores");
  require_error_naming([&] { analyse(scores, amc::RowMatrix::Zero(3, 2), support, out, out); },
                       "values has 3 rows");
  require_error_naming(
      [&] { analyse(scores, amc::RowMatrix(4, 0), support, Eigen::VectorXf(), Eigen::VectorXf()); },
      "values");
  require_error_naming([&] { analyse(scores, values, support, Eigen::VectorXf::Zero(3), out); },
                       "dense_out has size 3");
  require_error_naming([&] { analyse(scores, values, support, out, Eigen::VectorXf::Zero(1)); },
                       "sparse_out has size 1");
  amc::Support outside;
  outside.add(2, 6, 6);  // valid for 6 positions, not for 4
  outside.normalize();
  require_error_naming([&] { analyse(scores, values, outside, out, out); }, "support");
  amc::Support unsorted;
  unsorted.add(3, 4, 4);
  unsorted.add(0, 2, 4);  // not normalized: out of order
  require_error_naming([&] { analyse(scores, values, unsorted, out, out); }, "support");

  Eigen::VectorXf bad_scores = scores;
  bad_scores[2] = std::numeric_limits<float>::quiet_NaN();
  require_error_naming([&] { analyse(bad_scores, values, support, out, out); }, "scores[2]");
  bad_scores[2] = std::numeric_limits<float>::infinity();
  require_error_naming([&] { analyse(bad_scores, values, support, out, out); }, "scores[2]");
  amc::RowMatrix bad_values = values;
  bad_values(1, 0) = -std::numeric_limits<float>::infinity();
  require_error_naming([&] { analyse(scores, bad_values, support, out, out); }, "values(1, 0)");
  Eigen::VectorXf bad_out = out;
  bad_out[1] = std::numeric_limits<float>::quiet_NaN();
  require_error_naming([&] { analyse(scores, values, support, bad_out, out); }, "dense_out[1]");
  require_error_naming([&] { analyse(scores, values, support, out, bad_out); }, "sparse_out[1]");

  const Eigen::VectorXd mean = Eigen::VectorXd::Ones(2);
  CHECK_NOTHROW(amc::omission_identity_residual(out, out, 0.25, mean));
  // A mass summed in double may land a few ulps above 1: accepted as 1.
  CHECK_NOTHROW(amc::omission_identity_residual(out, out, 1.0 + 1e-13, mean));
  require_error_naming([&] { amc::omission_identity_residual(out, out, 1.0 + 1e-9, mean); },
                       "omitted_mass");
  require_error_naming(
      [&] { amc::omission_identity_residual(out, Eigen::VectorXf::Zero(3), 0.25, mean); },
      "sparse_out");
  require_error_naming([&] { amc::omission_identity_residual(out, out, 1.5, mean); },
                       "omitted_mass");
  require_error_naming([&] { amc::omission_identity_residual(out, out, nan, mean); },
                       "omitted_mass");
  require_error_naming([&] { amc::omission_identity_residual(out, out, 0.25, Eigen::VectorXd()); },
                       "omitted_mean");
  require_error_naming(
      [&] { amc::omission_identity_residual(out, out, 0.25, Eigen::VectorXd::Ones(3)); },
      "omitted_mean");
  Eigen::VectorXd bad_mean = mean;
  bad_mean[0] = nan;
  require_error_naming([&] { amc::omission_identity_residual(out, out, 0.25, bad_mean); },
                       "omitted_mean[0]");
  require_error_naming([&] { amc::omission_identity_residual(bad_out, out, 0.25, mean); },
                       "dense_out[1]");
}

TEST_CASE("analyse_omission edge cases", "[math][identity]") {
  Eigen::VectorXf scores(3);
  scores << 1.0f, 2.0f, 3.0f;
  amc::RowMatrix values(3, 2);
  values << 1, 0, 0, 1, -1, -1;
  Eigen::VectorXf dense(2);
  dense.setZero();

  SECTION("full support: nothing omitted") {
    amc::Support all;
    all.add(0, 3, 3);
    all.normalize();
    const amc::OmissionAnalysis a = amc::analyse_omission(scores, values, all, dense, dense);
    CHECK(a.omitted_mass == 0.0);
    CHECK(a.retained_mass == 1.0);
    CHECK(a.omitted_positions == 0);
    CHECK(a.omitted_mean.size() == 0);
    CHECK(a.lse_omitted == -kInf);
    CHECK(a.value_bound == 0.0);
    CHECK(a.loose_value_bound == 0.0);
    CHECK(a.identity_residual == 0.0);
    CHECK(a.direction_cosine == 0.0);
  }
  SECTION("empty support: everything omitted") {
    const amc::OmissionAnalysis a =
        amc::analyse_omission(scores, values, amc::Support(), dense, dense);
    CHECK(a.omitted_mass == 1.0);
    CHECK(a.retained_mass == 0.0);
    CHECK(a.lse_support == -kInf);
    CHECK(a.omitted_positions == 3);
    CHECK(a.lse_all == Approx(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0))));
  }
}

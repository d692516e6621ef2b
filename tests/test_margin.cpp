// Property tests for amc/math/margin.hpp (docs/theory.md section 5).
//
// The decisive reference is always a recomputed argmax of z + W_U delta, by plain loops in long
// double (finer than the double arithmetic of the code under test), never the library's formula.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "amc/error.hpp"
#include "amc/math/margin.hpp"
#include "amc/tensor.hpp"
#include "catch.hpp"
#include "math_property.hpp"

namespace {

using amc_test::close;
using amc_test::require_error_naming;

constexpr int kCasesPerProperty = 12000;
constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// Naive greedy choice: the first index of the largest logit.
Eigen::Index naive_argmax(const Eigen::VectorXf& z) {
  Eigen::Index best = 0;
  for (Eigen::Index b = 1; b < z.size(); ++b)
    if (z[b] > z[best]) best = b;
  return best;
}

/// The first index of the largest logit other than `top`.
Eigen::Index naive_runner_up(const Eigen::VectorXf& z, Eigen::Index top) {
  Eigen::Index best = -1;
  for (Eigen::Index b = 0; b < z.size(); ++b)
    if (b != top && (best < 0 || z[b] > z[best])) best = b;
  return best;
}

/// y = z + W delta in long double.
std::vector<long double> perturbed_logits(const amc::RowMatrix& w, const Eigen::VectorXf& z,
                                          const Eigen::VectorXf& delta) {
  std::vector<long double> y(static_cast<std::size_t>(z.size()));
  for (Eigen::Index b = 0; b < w.rows(); ++b) {
    long double sum = z[b];
    for (Eigen::Index i = 0; i < w.cols(); ++i)
      sum += static_cast<long double>(w(b, i)) * static_cast<long double>(delta[i]);
    y[static_cast<std::size_t>(b)] = sum;
  }
  return y;
}

/// min_{b != top} (y_top - y_b): positive iff `top` strictly wins after the perturbation.
long double decisive_gap(const std::vector<long double>& y, Eigen::Index top) {
  long double gap = std::numeric_limits<long double>::infinity();
  for (std::size_t b = 0; b < y.size(); ++b)
    if (static_cast<Eigen::Index>(b) != top)
      gap = std::min(gap, y[static_cast<std::size_t>(top)] - y[b]);
  return gap;
}

double distance(const amc::RowMatrix& w, Eigen::Index a, Eigen::Index b) {
  double sum = 0.0;
  for (Eigen::Index i = 0; i < w.cols(); ++i) {
    const double diff = static_cast<double>(w(a, i)) - static_cast<double>(w(b, i));
    sum += diff * diff;
  }
  return std::sqrt(sum);
}

double norm_d(const Eigen::VectorXf& v) {
  double sum = 0.0;
  for (Eigen::Index i = 0; i < v.size(); ++i) sum += static_cast<double>(v[i]) * v[i];
  return std::sqrt(sum);
}

/// An unembedding and logits z = W h (or, for ties, logits snapped to a few integers).
struct MarginCase {
  std::string kind;
  amc::RowMatrix w;   // [vocab, hidden]
  Eigen::VectorXf z;  // [vocab]
};

MarginCase make_margin_case(std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  MarginCase c;
  const int kind = pick(0, 4);
  const int vocab = kind == 4 ? 2 : pick(2, 32);
  const int hidden = pick(1, 16);
  const double w_scale = 0.05 + 2.0 * uniform(rng);
  c.w.resize(vocab, hidden);
  for (int b = 0; b < vocab; ++b)
    for (int i = 0; i < hidden; ++i) c.w(b, i) = static_cast<float>(w_scale * normal(rng));
  double h_scale = 1.0;
  switch (kind) {
    case 0:
      c.kind = "random";
      break;
    case 1: {
      c.kind = "near-duplicate rows";
      const int source = pick(0, vocab - 1);
      const int copies = pick(1, vocab - 1);
      for (int r = 0; r < copies; ++r) {
        const int target = pick(0, vocab - 1);
        for (int i = 0; i < hidden; ++i)
          c.w(target, i) = c.w(source, i) + static_cast<float>(1e-5 * normal(rng));
      }
      break;
    }
    case 2:
      c.kind = "logits in the hundreds";
      h_scale = 100.0 / w_scale;
      break;
    case 3:
      c.kind = "ties";
      break;
    default:
      c.kind = "vocab 2";
      break;
  }
  std::vector<double> h(static_cast<std::size_t>(hidden));
  for (double& x : h) x = h_scale * normal(rng);
  c.z.resize(vocab);
  for (int b = 0; b < vocab; ++b) {
    double sum = 0.0;
    for (int i = 0; i < hidden; ++i)
      sum += static_cast<double>(c.w(b, i)) * h[static_cast<std::size_t>(i)];
    c.z[b] = static_cast<float>(kind == 3 ? std::round(std::clamp(sum, -2.0, 2.0)) : sum);
  }
  return c;
}

}  // namespace

TEST_CASE("logit_margin matches a naive argmax", "[math][margin]") {
  std::mt19937_64 rng(0x5eed0101);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int failures = 0;
  for (int t = 0; t < kCasesPerProperty; ++t) {
    const int vocab = std::uniform_int_distribution<int>(2, 64)(rng);
    const int kind = t % 5;
    Eigen::VectorXf z(vocab);
    for (int b = 0; b < vocab; ++b) {
      switch (kind) {
        case 0:
          z[b] = static_cast<float>(3.0 * normal(rng));
          break;
        case 1:
          z[b] = static_cast<float>(std::floor(4.0 * uniform(rng)));
          break;  // many ties
        case 2:
          z[b] = static_cast<float>(100.0 + 900.0 * uniform(rng));
          break;  // hundreds
        case 3:
          z[b] = static_cast<float>(normal(rng));
          break;
        default:
          z[b] = uniform(rng) < 0.5 ? -kInfF : static_cast<float>(normal(rng));
          break;
      }
    }
    if (kind == 3) {  // near ties: some entries one f32 step below or equal to the maximum
      const float top = z.maxCoeff();
      for (int b = 0; b < vocab; ++b)
        if (uniform(rng) < 0.3) z[b] = uniform(rng) < 0.5 ? top : std::nextafter(top, -kInfF);
    }
    if (kind == 4 && !std::isfinite(z.maxCoeff())) z[vocab - 1] = 0.5f;  // keep one finite
    const std::string where = "case " + std::to_string(t) + " kind " + std::to_string(kind);

    const amc::LogitMargin m = amc::logit_margin(z);
    const Eigen::Index top = naive_argmax(z);
    const Eigen::Index runner_up = naive_runner_up(z, top);
    PROPERTY_CHECK(m.top == top, where << ": top " << m.top << " vs " << top);
    PROPERTY_CHECK(m.runner_up == runner_up,
                   where << ": runner-up " << m.runner_up << " vs " << runner_up);
    PROPERTY_CHECK(m.top_logit == z[top] && m.runner_up_logit == z[runner_up], where << ": logits");
    const double gap = static_cast<double>(z[top]) - static_cast<double>(z[runner_up]);
    if (std::isinf(gap)) {
      PROPERTY_CHECK(m.margin == kInfF,
                     where << ": margin " << m.margin << " for a masked runner-up");
    } else {
      // Rounded toward zero: never above the true gap, and the next f32 up is above it.
      PROPERTY_CHECK(m.margin >= 0.0f && static_cast<double>(m.margin) <= gap &&
                         static_cast<double>(std::nextafter(m.margin, kInfF)) > gap,
                     where << ": margin " << m.margin << " vs gap " << gap);
    }
  }
  REQUIRE(failures == 0);
}

TEST_CASE("greedy_token_kept agrees with a recomputed argmax", "[math][margin]") {
  std::mt19937_64 rng(0x5eed0102);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int failures = 0;
  int ambiguous = 0;
  int kept_count = 0;
  int flipped_count = 0;
  for (int t = 0; t < kCasesPerProperty; ++t) {
    const MarginCase c = make_margin_case(rng);
    const Eigen::Index vocab = c.w.rows();
    const Eigen::Index hidden = c.w.cols();
    const Eigen::Index a = naive_argmax(c.z);
    const Eigen::Index b = [&] {
      Eigen::Index other = std::uniform_int_distribution<Eigen::Index>(0, vocab - 2)(rng);
      return other >= a ? other + 1 : other;
    }();
    // Perturbations: along w_b - w_a, landing just short of / just past / anywhere around the
    // tie with b; random directions of random size; zero.
    Eigen::VectorXf delta = Eigen::VectorXf::Zero(hidden);
    const int mode = static_cast<int>(t % 5);
    const double dist = distance(c.w, a, b);
    const double gap_ab = static_cast<double>(c.z[a]) - static_cast<double>(c.z[b]);
    if (mode <= 2 && dist > 0.0 && gap_ab > 0.0) {
      const double fraction = mode == 0 ? 1.0 - 1e-4 : mode == 1 ? 1.0 + 1e-4 : 2.0 * uniform(rng);
      const double step = fraction * gap_ab / (dist * dist);
      for (Eigen::Index i = 0; i < hidden; ++i)
        delta[i] = static_cast<float>(step * (static_cast<double>(c.w(b, i)) - c.w(a, i)));
    } else if (mode != 4) {
      const double size = std::pow(10.0, -3.0 + 4.0 * uniform(rng)) * (1.0 + std::abs(gap_ab));
      for (Eigen::Index i = 0; i < hidden; ++i) delta[i] = static_cast<float>(size * normal(rng));
    }
    const std::string where =
        "case " + std::to_string(t) + " (" + c.kind + ") mode " + std::to_string(mode);

    const bool kept = amc::greedy_token_kept(c.w, c.z, delta, a);
    const std::vector<long double> y = perturbed_logits(c.w, c.z, delta);
    const long double gap = decisive_gap(y, a);
    // Gaps within the double rounding of the code under test cannot be decided by it; skip them
    // (counted: they must stay rare). A zero delta is exact either way.
    long double scale = 1.0L;  // the largest magnitude the double arithmetic rounds against
    for (Eigen::Index r = 0; r < vocab; ++r) {
      long double terms = std::abs(static_cast<long double>(c.z[r]));
      for (Eigen::Index i = 0; i < hidden; ++i)
        terms += std::abs(static_cast<long double>(c.w(r, i)) * delta[i]);
      scale = std::max(scale, terms);
    }
    if (delta.squaredNorm() != 0.0f && std::abs(gap) <= 1e-12L * scale) {
      ++ambiguous;
      continue;
    }
    const bool kept_ref = gap > 0.0L;
    (kept_ref ? kept_count : flipped_count) += 1;
    PROPERTY_CHECK(kept == kept_ref, where << ": kept " << kept << " vs recomputed argmax "
                                           << kept_ref << " (gap " << static_cast<double>(gap)
                                           << ")");
  }
  REQUIRE(failures == 0);
  CHECK(ambiguous < kCasesPerProperty / 100);
  CHECK(kept_count > kCasesPerProperty / 5);
  CHECK(flipped_count > kCasesPerProperty / 5);
}

TEST_CASE("greedy_token_kept counts equality as a flip", "[math][margin]") {
  amc::RowMatrix w(2, 1);
  w << 0.0f, 1.0f;
  Eigen::VectorXf z(2);
  z << 1.0f, 0.0f;
  Eigen::VectorXf delta(1);
  delta << 1.0f;  // (w_1 - w_0) . delta = 1 = z_0 - z_1: a tie
  CHECK_FALSE(amc::greedy_token_kept(w, z, delta, 0));
  delta << 0.999f;
  CHECK(amc::greedy_token_kept(w, z, delta, 0));
  z << 0.0f, 0.0f;  // tied logits, no perturbation
  delta << 0.0f;
  CHECK_FALSE(amc::greedy_token_kept(w, z, delta, 0));
  // A masked competitor never wins.
  z << 0.0f, -kInfF;
  delta << 1e30f;
  CHECK(amc::greedy_token_kept(w, z, delta, 0));
}

TEST_CASE("sufficient radii never admit a flip, and the exact one is tight", "[math][margin]") {
  std::mt19937_64 rng(0x5eed0103);
  std::normal_distribution<double> normal(0.0, 1.0);
  int failures = 0;
  int checked = 0;
  int tight_checked = 0;
  for (int t = 0; t < kCasesPerProperty; ++t) {
    const MarginCase c = make_margin_case(rng);
    const Eigen::Index vocab = c.w.rows();
    const Eigen::Index hidden = c.w.cols();
    const amc::LogitMargin m = amc::logit_margin(c.z);
    const Eigen::Index a = m.top;
    const double radius = amc::sufficient_radius(c.w, a, m.margin);
    const double cheap_radius =
        amc::sufficient_radius_from_norms(amc::unembedding_row_norms(c.w), a, m.margin);
    const std::string where = "case " + std::to_string(t) + " (" + c.kind + ")";
    PROPERTY_CHECK(cheap_radius <= radius * (1.0 + 1e-12),
                   where << ": cheap radius " << cheap_radius << " above exact " << radius);
    if (m.margin == 0.0f) {
      PROPERTY_CHECK(radius == 0.0 && cheap_radius == 0.0, where << ": radius at a tie");
      continue;
    }

    // Adversarial directions: towards the farthest row, the runner-up, a random row; and random.
    Eigen::Index farthest = a == 0 ? 1 : 0;
    for (Eigen::Index b = 0; b < vocab; ++b)
      if (b != a && distance(c.w, a, b) > distance(c.w, a, farthest)) farthest = b;
    const Eigen::Index random_row = [&] {
      Eigen::Index other = std::uniform_int_distribution<Eigen::Index>(0, vocab - 2)(rng);
      return other >= a ? other + 1 : other;
    }();
    const Eigen::Index rows[3] = {farthest, m.runner_up, random_row};
    for (int direction = 0; direction < 4; ++direction) {
      std::vector<double> u(static_cast<std::size_t>(hidden));
      for (Eigen::Index i = 0; i < hidden; ++i) {
        u[static_cast<std::size_t>(i)] =
            direction < 3 ? static_cast<double>(c.w(rows[direction], i)) - c.w(a, i) : normal(rng);
      }
      double u_norm = 0.0;
      for (double x : u) u_norm += x * x;
      u_norm = std::sqrt(u_norm);
      if (u_norm == 0.0) continue;
      for (const double r : {radius, cheap_radius}) {
        const double target = std::isinf(r) ? 1e6 : r * (1.0 - 1e-7);  // just below the radius
        Eigen::VectorXf delta(hidden);
        for (Eigen::Index i = 0; i < hidden; ++i)
          delta[i] = static_cast<float>(target * u[static_cast<std::size_t>(i)] / u_norm);
        while (norm_d(delta) >= r) delta *= 1.0f - 1e-6f;  // f32 rounding must not step past r
        const long double gap = decisive_gap(perturbed_logits(c.w, c.z, delta), a);
        ++checked;
        PROPERTY_CHECK(gap > 0.0L, where << ": ||delta|| = " << norm_d(delta) << " < radius " << r
                                         << " flipped the token (direction " << direction
                                         << ", gap " << static_cast<double>(gap) << ")");
        PROPERTY_CHECK(amc::greedy_token_kept(c.w, c.z, delta, a),
                       where << ": exact test disagrees");
      }
    }

    // Tightness with two tokens: the runner-up is the farthest row, so stepping just past the
    // radius towards it must flip.
    if (vocab == 2 && std::isfinite(radius)) {
      const Eigen::Index b = 1 - a;
      const double dist = distance(c.w, a, b);
      Eigen::VectorXf delta(hidden);
      for (Eigen::Index i = 0; i < hidden; ++i)
        delta[i] = static_cast<float>(radius * (1.0 + 1e-5) *
                                      (static_cast<double>(c.w(b, i)) - c.w(a, i)) / dist);
      const long double gap = decisive_gap(perturbed_logits(c.w, c.z, delta), a);
      ++tight_checked;
      PROPERTY_CHECK(gap < 0.0L, where << ": a step of 1.00001 * radius did not flip (gap "
                                       << static_cast<double>(gap) << ")");
      PROPERTY_CHECK(!amc::greedy_token_kept(c.w, c.z, delta, a),
                     where << ": exact test says kept");
    }
  }
  REQUIRE(failures == 0);
  CHECK(checked > 4 * kCasesPerProperty);
  CHECK(tight_checked > kCasesPerProperty / 10);
}

TEST_CASE("radius special values", "[math][margin]") {
  amc::RowMatrix same(3, 2);
  same << 1, 2, 1, 2, 1, 2;  // every row equal: perturbations move all logits alike
  CHECK(amc::sufficient_radius(same, 1, 0.5) == kInf);
  CHECK(amc::sufficient_radius(same, 1, 0.0) == 0.0);
  CHECK(amc::sufficient_radius_from_norms(Eigen::VectorXd::Zero(3), 0, 0.5) == kInf);
  amc::RowMatrix w(2, 2);
  w << 3, 0, 0, 4;
  CHECK(amc::sufficient_radius(w, 0, 10.0) == Approx(2.0));  // 10 / ||(3,-4)||
  CHECK(amc::sufficient_radius_from_norms(amc::unembedding_row_norms(w), 0, 14.0) ==
        Approx(2.0));  // 14 / (3 + 4)
  CHECK(amc::sufficient_radius(w, 0, kInf) == kInf);
  CHECK(amc::attention_error_keeps_token(0.5, 2.0, 3.0, 3.0000001));
  CHECK_FALSE(amc::attention_error_keeps_token(0.5, 2.0, 3.0, 3.0));  // equality is not enough
  CHECK_FALSE(amc::attention_error_keeps_token(0.0, 2.0, 3.0, 0.0));  // strict
  CHECK(amc::attention_error_keeps_token(1.0, 2.0, 3.0, kInf));
}

TEST_CASE("attention_error_keeps_token is sufficient end to end", "[math][margin]") {
  // An attention error e = eps * (mu_O - o_S) enters the final hidden state through a random
  // linear map M (hidden x head_dim); its Frobenius norm bounds its spectral norm, so it is a
  // valid Lipschitz constant. Whenever the condition holds, the recomputed argmax must not move.
  std::mt19937_64 rng(0x5eed0104);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int failures = 0;
  int admitted = 0;
  int refused = 0;
  for (int t = 0; t < kCasesPerProperty; ++t) {
    const MarginCase c = make_margin_case(rng);
    const Eigen::Index hidden = c.w.cols();
    const amc::LogitMargin m = amc::logit_margin(c.z);
    const double radius = amc::sufficient_radius(c.w, m.top, m.margin);
    const int head_dim = std::uniform_int_distribution<int>(1, 8)(rng);
    std::vector<double> gap_vector(static_cast<std::size_t>(head_dim));
    for (double& x : gap_vector) x = normal(rng);  // mu_O - o_S
    double gap_norm = 0.0;
    for (double x : gap_vector) gap_norm += x * x;
    gap_norm = std::sqrt(gap_norm);
    std::vector<std::vector<double>> map(static_cast<std::size_t>(hidden),
                                         std::vector<double>(static_cast<std::size_t>(head_dim)));
    double lipschitz = 0.0;
    for (auto& row : map)
      for (double& x : row) {
        x = normal(rng);
        lipschitz += x * x;
      }
    lipschitz = std::sqrt(lipschitz);
    // eps chosen so eps * gap * Lip lands anywhere in [0, 2 r] (or at random when r is 0 or inf).
    double eps = uniform(rng);
    if (std::isfinite(radius) && radius > 0.0)
      eps = std::min(1.0, 2.0 * uniform(rng) * radius / (gap_norm * lipschitz));
    if (t % 7 == 0) eps *= 1e-9;  // near-zero eps
    const std::string where = "case " + std::to_string(t) + " (" + c.kind + ")";

    const bool admits = amc::attention_error_keeps_token(eps, gap_norm, lipschitz, radius);
    PROPERTY_CHECK(admits == (eps * gap_norm * lipschitz < radius), where << ": condition");
    if (!admits) {
      ++refused;
      continue;
    }
    ++admitted;
    // delta = M e in long double, then y = z + W delta: the final-state perturbation itself.
    std::vector<long double> y(static_cast<std::size_t>(c.z.size()));
    std::vector<long double> delta(static_cast<std::size_t>(hidden), 0.0L);
    for (std::size_t i = 0; i < delta.size(); ++i)
      for (std::size_t k = 0; k < gap_vector.size(); ++k)
        delta[i] += static_cast<long double>(map[i][k]) * eps * gap_vector[k];
    for (Eigen::Index b = 0; b < c.z.size(); ++b) {
      long double sum = c.z[b];
      for (Eigen::Index i = 0; i < hidden; ++i)
        sum += static_cast<long double>(c.w(b, i)) * delta[static_cast<std::size_t>(i)];
      y[static_cast<std::size_t>(b)] = sum;
    }
    PROPERTY_CHECK(decisive_gap(y, m.top) > 0.0L,
                   where << ": admitted eps " << eps << " but the greedy token changed");
  }
  REQUIRE(failures == 0);
  CHECK(admitted > kCasesPerProperty / 5);
  CHECK(refused > kCasesPerProperty / 5);
}

TEST_CASE("margin functions reject bad arguments, naming them", "[math][margin][errors]") {
  const float nan_f = std::numeric_limits<float>::quiet_NaN();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  amc::RowMatrix w(3, 2);
  w << 1, 0, 0, 1, 1, 1;
  Eigen::VectorXf z(3);
  z << 0.5f, 2.0f, 1.0f;
  Eigen::VectorXf delta(2);
  delta << 0.1f, -0.1f;

  require_error_naming([&] { amc::logit_margin(Eigen::VectorXf::Ones(1)); }, "logits");
  Eigen::VectorXf bad_z = z;
  bad_z[2] = nan_f;
  require_error_naming([&] { amc::logit_margin(bad_z); }, "logits[2]");
  bad_z[2] = kInfF;
  require_error_naming([&] { amc::logit_margin(bad_z); }, "logits[2]");
  require_error_naming([&] { amc::logit_margin(Eigen::VectorXf::Constant(3, -kInfF)); }, "-inf");
  require_error_naming([&] { amc::logit_margin(bad_z); }, "amc::logit_margin");

  CHECK_NOTHROW(amc::greedy_token_kept(w, z, delta, 1));
  require_error_naming([&] { amc::greedy_token_kept(w.topRows(1), z.head(1), delta.head(2), 0); },
                       "unembedding");
  require_error_naming([&] { amc::greedy_token_kept(w, z.head(2), delta, 1); },
                       "logits has size 2");
  require_error_naming([&] { amc::greedy_token_kept(w, z, delta.head(1), 1); }, "delta has size 1");
  require_error_naming([&] { amc::greedy_token_kept(w, z, delta, 3); }, "top = 3");
  require_error_naming([&] { amc::greedy_token_kept(w, z, delta, -1); }, "top = -1");
  require_error_naming([&] { amc::greedy_token_kept(w, bad_z, delta, 1); }, "logits[2]");
  Eigen::VectorXf masked_top = z;
  masked_top[1] = -kInfF;
  require_error_naming([&] { amc::greedy_token_kept(w, masked_top, delta, 1); }, "logits[top = 1]");
  Eigen::VectorXf bad_delta = delta;
  bad_delta[1] = nan_f;
  require_error_naming([&] { amc::greedy_token_kept(w, z, bad_delta, 1); }, "delta[1]");
  amc::RowMatrix bad_w = w;
  bad_w(2, 1) = nan_f;
  require_error_naming([&] { amc::greedy_token_kept(bad_w, z, delta, 1); }, "unembedding(2, 1)");
  require_error_naming([&] { amc::greedy_token_kept(bad_w, z, delta, 2); }, "unembedding(2, 1)");

  require_error_naming([&] { amc::sufficient_radius(w.topRows(1), 0, 1.0); }, "unembedding");
  require_error_naming([&] { amc::sufficient_radius(w, 5, 1.0); }, "top = 5");
  require_error_naming([&] { amc::sufficient_radius(w, 1, -1.0); }, "margin");
  require_error_naming([&] { amc::sufficient_radius(w, 1, nan); }, "margin");
  require_error_naming([&] { amc::sufficient_radius(bad_w, 1, 1.0); }, "unembedding(2, 1)");
  require_error_naming([&] { amc::unembedding_row_norms(bad_w); }, "unembedding(2, 1)");

  const Eigen::VectorXd norms = amc::unembedding_row_norms(w);
  CHECK_NOTHROW(amc::sufficient_radius_from_norms(norms, 1, 1.0));
  require_error_naming([&] { amc::sufficient_radius_from_norms(Eigen::VectorXd::Ones(1), 0, 1.0); },
                       "row_norms");
  require_error_naming([&] { amc::sufficient_radius_from_norms(norms, 3, 1.0); }, "top = 3");
  require_error_naming([&] { amc::sufficient_radius_from_norms(norms, 1, -0.5); }, "margin");
  Eigen::VectorXd bad_norms = norms;
  bad_norms[1] = -1.0;
  require_error_naming([&] { amc::sufficient_radius_from_norms(bad_norms, 0, 1.0); },
                       "row_norms[1]");
  bad_norms[1] = nan;
  require_error_naming([&] { amc::sufficient_radius_from_norms(bad_norms, 0, 1.0); },
                       "row_norms[1]");

  CHECK_NOTHROW(amc::attention_error_keeps_token(0.5, 1.0, 1.0, 1.0));
  CHECK_NOTHROW(amc::attention_error_keeps_token(1.0 + 1e-13, 1.0, 1.0, 1.0));  // rounding
  require_error_naming([&] { amc::attention_error_keeps_token(1.0 + 1e-9, 1.0, 1.0, 1.0); },
                       "omitted_mass");
  require_error_naming([&] { amc::attention_error_keeps_token(-0.1, 1.0, 1.0, 1.0); },
                       "omitted_mass");
  require_error_naming([&] { amc::attention_error_keeps_token(1.1, 1.0, 1.0, 1.0); },
                       "omitted_mass");
  require_error_naming([&] { amc::attention_error_keeps_token(nan, 1.0, 1.0, 1.0); },
                       "omitted_mass");
  require_error_naming([&] { amc::attention_error_keeps_token(0.5, -1.0, 1.0, 1.0); },
                       "omitted_gap_norm");
  require_error_naming([&] { amc::attention_error_keeps_token(0.5, kInf, 1.0, 1.0); },
                       "omitted_gap_norm");
  require_error_naming([&] { amc::attention_error_keeps_token(0.5, 1.0, nan, 1.0); }, "lipschitz");
  require_error_naming([&] { amc::attention_error_keeps_token(0.5, 1.0, kInf, 1.0); }, "lipschitz");
  require_error_naming([&] { amc::attention_error_keeps_token(0.5, 1.0, 1.0, -1.0); }, "radius");
  require_error_naming([&] { amc::attention_error_keeps_token(0.5, 1.0, 1.0, nan); }, "radius");
}

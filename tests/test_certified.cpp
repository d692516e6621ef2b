// Certified bounds (docs/theory.md section 3, with its "Certification under rounding") as
// properties over 10^5 random and adversarial cases: a certified quantity below the exact one
// fails. The reference is independent of the library: scores are exact dot products of the stored
// numbers (a fixed-point accumulator wide enough for any product of two floats), decoded from the
// storage bits here, then scaled and exponentiated in long double (64-bit mantissa, exponents to
// 1e4932), so it is 2^11 times more precise than the double arithmetic under test and never
// overflows or underflows where double would.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "amc/amc.hpp"
#include "amc/math/certified_bounds.hpp"
#include "test_helpers.hpp"

using namespace amc;
using Real = long double;

namespace {

/// The sizes below are divided by AMC_TEST_CERTIFIED_DIVISOR where the build defines it: the
/// aarch64 build, whose tests run under qemu-aarch64 (tests/CMakeLists.txt), where long double
/// is IEEE binary128 in software and the full sizes took 114 s per run. A quarter of the random
/// cases (the same generator, its first quarter) and supports of 2^18 rather than 2^20
/// positions run the same code; every regime below is still reached.
#ifdef AMC_TEST_CERTIFIED_DIVISOR
constexpr int kSizeDivisor = AMC_TEST_CERTIFIED_DIVISOR;
#else
constexpr int kSizeDivisor = 1;
#endif

// --- the independent reference ---------------------------------------------------------------

/// The stored number as a float, decoded from its bits here (not with amc::to_float).
float stored_value(float x) { return x; }
float stored_value(bf16 x) {
  const std::uint32_t bits = static_cast<std::uint32_t>(x.bits) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}
float stored_value(f16 x) {
  const int sign = (x.bits & 0x8000) ? -1 : 1;
  const int exponent = (x.bits >> 10) & 0x1F;
  const int mantissa = x.bits & 0x3FF;
  if (exponent == 0x1F) FAIL("a test case stored an infinite or NaN f16");
  if (exponent == 0) return static_cast<float>(sign * std::ldexp(mantissa, -24));
  return static_cast<float>(sign * std::ldexp(1024 + mantissa, exponent - 25));
}

/// The exact sum of products of floats. Every product of two floats is an integer of at most
/// 48 bits times 2^e with e >= -344; the accumulator holds such integers at bit e + 352 of a
/// 640-bit two's-complement number in 32-bit limbs (carries deferred in int64), which covers
/// sums of up to 2^20 products of the largest floats.
class ExactDot {
 public:
  void add_product(float a, float b) {
    if (a == 0.0f || b == 0.0f) return;
    int ea = 0, eb = 0;
    const auto ma = static_cast<std::int64_t>(std::ldexp(std::frexp(a, &ea), 24));
    const auto mb = static_cast<std::int64_t>(std::ldexp(std::frexp(b, &eb), 24));
    const std::int64_t product = ma * mb;  // exact: |ma|, |mb| <= 2^24
    const int shift = ea + eb - 48 + kLsbOffset;
    if (shift < 0) FAIL("ExactDot: product below its range");
    const auto magnitude = static_cast<std::uint64_t>(std::llabs(product));  // < 2^48
    const std::int64_t sign = product < 0 ? -1 : 1;
    add_shifted(sign, magnitude & 0xFFFFFFFFu, shift);
    add_shifted(sign, magnitude >> 32, shift + 32);
  }

  /// The sum, rounded once to long double (within 2^-62 relative).
  Real value() const {
    std::array<std::int64_t, kLimbs> limbs = limbs_;
    normalize(limbs);
    int sign = 1;
    if (limbs[kLimbs - 1] < 0) {
      for (std::int64_t& limb : limbs) limb = -limb;
      normalize(limbs);
      sign = -1;
    }
    int top = kLimbs - 1;
    while (top >= 0 && limbs[static_cast<std::size_t>(top)] == 0) --top;
    if (top < 0) return 0.0L;
    Real mantissa = 0.0L;
    for (int i = top; i >= std::max(0, top - 2); --i) {
      mantissa = mantissa * 4294967296.0L + static_cast<Real>(limbs[static_cast<std::size_t>(i)]);
    }
    return sign * std::ldexp(mantissa, 32 * std::max(0, top - 2) - kLsbOffset);
  }

 private:
  static constexpr int kLimbs = 20;
  static constexpr int kLsbOffset = 352;
  /// Adds sign * part * 2^bit, part < 2^32, as two limbs' worth (part << (bit % 32) < 2^63).
  void add_shifted(std::int64_t sign, std::uint64_t part, int bit) {
    const std::uint64_t shifted = part << (bit % 32);
    limbs_[static_cast<std::size_t>(bit / 32)] +=
        sign * static_cast<std::int64_t>(shifted & 0xFFFFFFFFu);
    limbs_[static_cast<std::size_t>(bit / 32 + 1)] +=
        sign * static_cast<std::int64_t>(shifted >> 32);
  }
  static void normalize(std::array<std::int64_t, kLimbs>& limbs) {
    for (int i = 0; i + 1 < kLimbs; ++i) {
      const std::int64_t carry = limbs[static_cast<std::size_t>(i)] >> 32;  // floor division
      limbs[static_cast<std::size_t>(i)] -= carry * 4294967296LL;
      limbs[static_cast<std::size_t>(i + 1)] += carry;
    }
  }
  std::array<std::int64_t, kLimbs> limbs_{};
};

struct Truth {
  Real lse_support;  // L_S; -inf for an empty support
  Real log_eps;      // log of the omitted mass; -inf when nothing is omitted
  Real eps;
  Real error;        // ||o - o_S|| = eps ||mu_O - o_S||
  Real sparse_norm;  // ||o_S||
  std::int64_t omitted;
};

Real log_sum_exp(const std::vector<Real>& terms) {
  Real max = -std::numeric_limits<Real>::infinity();
  for (const Real t : terms) max = std::max(max, t);
  if (terms.empty()) return max;
  Real sum = 0.0L;
  for (const Real t : terms) sum += std::exp(t - max);
  return max + std::log(sum);
}

/// Exact omitted mass and error of the sparse step over `in_support`.
/// keys, values: [n, d] as stored; query [d].
template <class T>
Truth truth(const std::vector<float>& query, double scale, const std::vector<T>& keys,
            const std::vector<T>& values, std::int64_t n, std::int64_t d,
            const std::vector<char>& in_support) {
  std::vector<Real> scores(static_cast<std::size_t>(n));
  for (std::int64_t p = 0; p < n; ++p) {
    ExactDot dot;
    for (std::int64_t i = 0; i < d; ++i) {
      dot.add_product(query[static_cast<std::size_t>(i)],
                      stored_value(keys[static_cast<std::size_t>(p * d + i)]));
    }
    scores[static_cast<std::size_t>(p)] = static_cast<Real>(scale) * dot.value();
  }
  std::vector<Real> kept, left;
  for (std::int64_t p = 0; p < n; ++p) {
    (in_support[static_cast<std::size_t>(p)] ? kept : left).push_back(scores[p]);
  }
  Truth t{};
  t.omitted = static_cast<std::int64_t>(left.size());
  t.lse_support = log_sum_exp(kept);
  const Real lse_omitted = log_sum_exp(left);
  // log eps = -softplus(L_S - L_O), exact in long double's range on both tails.
  constexpr Real inf = std::numeric_limits<Real>::infinity();
  if (left.empty()) {
    t.log_eps = -inf;
  } else if (kept.empty()) {
    t.log_eps = 0.0L;
  } else {
    const Real x = t.lse_support - lse_omitted;
    t.log_eps = -(x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)));
  }
  t.eps = std::exp(t.log_eps);
  // o_S and mu_O: weighted means over each side.
  std::vector<Real> o_s(static_cast<std::size_t>(d), 0.0L), mu_o(static_cast<std::size_t>(d), 0.0L);
  for (std::int64_t p = 0; p < n; ++p) {
    const bool kept_p = in_support[static_cast<std::size_t>(p)];
    const Real lse = kept_p ? t.lse_support : lse_omitted;
    const Real w = std::exp(scores[static_cast<std::size_t>(p)] - lse);
    for (std::int64_t i = 0; i < d; ++i) {
      (kept_p ? o_s : mu_o)[static_cast<std::size_t>(i)] +=
          w * stored_value(values[static_cast<std::size_t>(p * d + i)]);
    }
  }
  Real gap = 0.0L, norm = 0.0L;
  for (std::int64_t i = 0; i < d; ++i) {
    const Real diff = mu_o[static_cast<std::size_t>(i)] - o_s[static_cast<std::size_t>(i)];
    gap += diff * diff;
    norm += o_s[static_cast<std::size_t>(i)] * o_s[static_cast<std::size_t>(i)];
  }
  t.sparse_norm = std::sqrt(norm);
  t.error = left.empty() ? 0.0L : std::exp(t.log_eps + 0.5L * std::log(gap));
  return t;
}

std::vector<char> membership(const Support& support, std::int64_t n) {
  std::vector<char> in(static_cast<std::size_t>(n), 0);
  for (const PositionRange& r : support.ranges())
    for (std::int64_t p = r.begin; p < r.end; ++p) in[static_cast<std::size_t>(p)] = 1;
  return in;
}

// --- the cases ---------------------------------------------------------------------------------

enum class Mode {
  random,
  needle,           // one key aligned with the query
  near_duplicate,   // keys equal up to 1e-6: channel bounds nearly tight
  identical_keys,   // channel bounds exactly tight: ub_b is the exact score
  huge_logits,      // scores in the hundreds
  opposite_values,  // omitted values opposite to the kept ones: the error bound is nearly tight
  cancellation,     // keys of size up to 2^40 nearly orthogonal to q: scores cancel
  huge_magnitude,   // q, k, v up to 1e30 (f16 cases: up to 1e4)
  deep_omission,    // omitted mass below 1e-308 (subnormal or below double's range)
  count
};

enum class Storage { f32, bf16, f16 };

struct Case {
  std::int64_t n = 0, d = 0, block = 0;
  double scale = 0.0;
  std::vector<float> query, keys, values;  // [d], [n, d], [n, d] before storage rounding
};

Case make_case(std::mt19937_64& rng, Mode mode, Storage storage) {
  auto uniform_int = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  std::normal_distribution<double> normal(0.0, 1.0);
  Case c;
  c.n = uniform_int(1, 64);
  c.d = uniform_int(mode == Mode::cancellation ? 2 : 1, 8);
  c.block = uniform_int(0, 3) == 0 ? 1 : uniform_int(1, 8);
  c.scale =
      std::array{1.0 / std::sqrt(static_cast<double>(c.d)), 0.37, 1e-3, 3.0}[uniform_int(0, 3)];
  const auto nd = static_cast<std::size_t>(c.n * c.d);
  c.query.resize(static_cast<std::size_t>(c.d));
  c.keys.resize(nd);
  c.values.resize(nd);
  for (float& x : c.query) x = static_cast<float>(normal(rng));
  for (float& x : c.keys) x = static_cast<float>(normal(rng));
  for (float& x : c.values) x = static_cast<float>(normal(rng));
  const double max_magnitude = storage == Storage::f16 ? 1e4 : 1e30;
  switch (mode) {
    case Mode::random:
    case Mode::count:
      break;
    case Mode::needle: {
      const std::int64_t p = uniform_int(0, c.n - 1);
      for (std::int64_t i = 0; i < c.d; ++i) c.keys[p * c.d + i] = 8.0f * c.query[i];
      break;
    }
    case Mode::near_duplicate:
    case Mode::identical_keys:
      for (std::int64_t p = 1; p < c.n; ++p)
        for (std::int64_t i = 0; i < c.d; ++i)
          c.keys[p * c.d + i] =
              c.keys[i] +
              (mode == Mode::near_duplicate ? 1e-6f * static_cast<float>(normal(rng)) : 0.0f);
      break;
    case Mode::huge_logits:
      for (float& x : c.keys) x *= 60.0f;
      break;
    case Mode::opposite_values:
      for (std::int64_t p = 0; p < c.n; ++p)
        for (std::int64_t i = 0; i < c.d; ++i)
          c.values[p * c.d + i] = (p % 2 ? 1.0f : -1.0f) * c.values[i];
      break;
    case Mode::cancellation: {
      // w: a direction orthogonal to q (in double, then rounded to float); keys M w + r.
      std::vector<double> w(static_cast<std::size_t>(c.d));
      double qq = 0.0, qw = 0.0;
      for (std::int64_t i = 0; i < c.d; ++i) {
        w[i] = normal(rng);
        qq += static_cast<double>(c.query[i]) * c.query[i];
        qw += static_cast<double>(c.query[i]) * w[i];
      }
      for (std::int64_t i = 0; i < c.d; ++i) w[i] -= qw / qq * c.query[i];
      const double big =
          std::ldexp(1.0, static_cast<int>(uniform_int(storage == Storage::f16 ? 4 : 10,
                                                       storage == Storage::f16 ? 12 : 40)));
      for (std::int64_t p = 0; p < c.n; ++p)
        for (std::int64_t i = 0; i < c.d; ++i)
          c.keys[p * c.d + i] = static_cast<float>(big * w[i] + normal(rng));
      break;
    }
    case Mode::huge_magnitude: {
      const double exponent_range = std::log10(max_magnitude);
      auto magnitude = [&] {
        return std::pow(
            10.0, std::uniform_real_distribution<double>(-exponent_range, exponent_range)(rng));
      };
      const double qs = magnitude(), ks = magnitude(), vs = magnitude();
      for (float& x : c.query) x = static_cast<float>(x * std::min(qs, max_magnitude / 8));
      for (float& x : c.keys) x = static_cast<float>(x * std::min(ks, max_magnitude / 8));
      for (float& x : c.values) x = static_cast<float>(x * std::min(vs, max_magnitude / 8));
      break;
    }
    case Mode::deep_omission: {
      // Position 0 (a sink) scores 800 to 3000 above the rest.
      const double lift = std::uniform_real_distribution<double>(800.0, 3000.0)(rng);
      double qq = 0.0;
      for (const float q : c.query) qq += static_cast<double>(q) * q;
      double largest = 0.0;
      for (const float q : c.query) largest = std::max(largest, std::abs(static_cast<double>(q)));
      const double factor =
          std::min(lift / (c.scale * qq), (storage == Storage::f16 ? 6e4 : 1e30) / largest);
      for (std::int64_t i = 0; i < c.d; ++i) c.keys[i] = static_cast<float>(factor * c.query[i]);
      break;
    }
  }
  return c;
}

template <KvStorage T>
std::vector<T> stored(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = from_float<T>(x[i]);
  return out;
}

struct Tally {
  std::int64_t cases = 0, subnormal = 0, below_double = 0, nothing_omitted = 0, everything = 0;
};

/// Every certified field of one step over `support` against the exact reference.
template <class T>
void check_bounds(const Case& c, const std::vector<T>& keys, const std::vector<T>& values,
                  const KvView<T>& kv, const BlockSummaries& summaries, const Support& support,
                  Tally& tally) {
  const CertifiedBounds b = certified_bounds(c.query, c.scale, kv, summaries, support);
  const Truth t = truth(c.query, c.scale, keys, values, c.n, c.d, membership(support, c.n));
  CAPTURE(c.n, c.d, c.block, c.scale, support.size(), static_cast<double>(t.eps),
          static_cast<double>(t.log_eps), b.omitted_mass_bound, b.log_omitted_mass_bound,
          static_cast<double>(t.error), b.error_bound, static_cast<double>(t.lse_support),
          b.lse_support_lower, static_cast<double>(t.sparse_norm), b.sparse_norm_upper);
  REQUIRE(b.omitted_positions == t.omitted);
  REQUIRE(static_cast<Real>(b.lse_support_lower) <= t.lse_support);
  REQUIRE(static_cast<Real>(b.sparse_norm_upper) >= t.sparse_norm);
  REQUIRE(static_cast<Real>(b.log_omitted_mass_bound) >= t.log_eps);
  REQUIRE(static_cast<Real>(b.omitted_mass_bound) >= t.eps);
  REQUIRE(b.omitted_mass_bound <= 1.0);
  REQUIRE(static_cast<Real>(b.error_bound) >= t.error);
  if (t.omitted == 0) {
    REQUIRE(b.omitted_mass_bound == 0.0);
    REQUIRE(b.error_bound == 0.0);
    ++tally.nothing_omitted;
  } else {
    REQUIRE(b.omitted_mass_bound > 0.0);  // never rounds to 0 while something is omitted
  }
  if (t.eps > 0 && t.eps < std::numeric_limits<double>::min()) ++tally.subnormal;
  if (t.omitted > 0 && t.eps < std::numeric_limits<double>::denorm_min()) ++tally.below_double;
  if (t.omitted == c.n) ++tally.everything;
  ++tally.cases;
}

/// One case: supports at random, from the operator (each rule, this kernel table), and from
/// adaptive selection, all checked.
template <class T>
void run_case(std::mt19937_64& rng, Mode mode, Storage storage, Tally& tally) {
  const Case c = make_case(rng, mode, storage);
  const std::vector<T> keys = stored<T>(c.keys), values = stored<T>(c.values);
  const KvView<T> kv(keys.data(), values.data(), c.n, c.d);
  const auto summaries =
      BlockSummaries::build(kv, c.block, {.channel_bounds = true, .value_norms = true});
  auto uniform_int = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  SparseConfig config;
  config.block_size = c.block;
  config.sinks = mode == Mode::deep_omission ? 1 : uniform_int(0, 3);
  config.window = uniform_int(0, 4) == 0 ? c.n : uniform_int(0, c.n / 2);
  config.top_k = uniform_int(0, 4);
  config.rule = std::array{RuleName::mean_pooled, RuleName::channel_bound,
                           RuleName::oracle}[uniform_int(0, 2)];
  config.scale = static_cast<float>(c.scale);

  // A random set of blocks.
  std::vector<std::int64_t> blocks;
  const double share = std::array{0.0, 0.3, 0.9}[uniform_int(0, 2)];
  for (std::int64_t b = 0; b < summaries.blocks(); ++b)
    if (std::bernoulli_distribution(share)(rng)) blocks.push_back(b);
  Support support;
  build_support(c.n, config, blocks, support);
  check_bounds(c, keys, values, kv, summaries, support, tally);

  // The operator's own selection (the active kernel table scores the blocks).
  BlockSparseDecode<> sparse(config);
  const Eigen::Map<const RowMatrix> query(c.query.data(), 1, c.d);
  sparse.select(query, KvHead<KvView<T>>{kv, &summaries});
  check_bounds(c, keys, values, kv, summaries, sparse.support(0), tally);

  // Adaptive selection: the bound it reports is certified, and a met target is met exactly.
  const double target = std::array{0.0, 1e-300, 1e-3, 0.05, 0.5, 1.0}[uniform_int(0, 5)];
  const AdaptiveSelection a = adaptive_select(c.query, c.scale, kv, summaries, config,
                                              sparse.block_scores(), target, uniform_int(0, 6));
  const Truth t = truth(c.query, c.scale, keys, values, c.n, c.d, membership(a.support, c.n));
  CAPTURE(target, a.needed_k, a.omitted_mass_bound, static_cast<double>(t.eps));
  REQUIRE(static_cast<Real>(a.omitted_mass_bound) >= t.eps);
  REQUIRE(static_cast<Real>(a.lse_support_lower) <= t.lse_support);
  REQUIRE(a.target_met == (a.omitted_mass_bound <= target));
  if (a.target_met) REQUIRE(t.eps <= static_cast<Real>(target));
  REQUIRE(a.needed_k == static_cast<std::int64_t>(a.blocks.size()));
  // Fewest blocks: without the last one added (the lowest-ranked), the bound was above target.
  if (a.needed_k > 0 && a.target_met) {
    const std::span<const float> ranking = sparse.block_scores();
    std::vector<std::int64_t> fewer = a.blocks;
    fewer.erase(std::min_element(fewer.begin(), fewer.end(), [&](auto x, auto y) {
      const float rx = std::isnan(ranking[x]) ? -INFINITY : ranking[x];
      const float ry = std::isnan(ranking[y]) ? -INFINITY : ranking[y];
      return rx < ry || (rx == ry && x > y);
    }));
    Support smaller;
    build_support(c.n, config, fewer, smaller);
    REQUIRE(certified_bounds(c.query, c.scale, kv, summaries, smaller).omitted_mass_bound >
            target * (1 - 1e-9));
  }
}

}  // namespace

TEST_CASE("certified bounds are never below the exact values (10^5 cases, every storage type)",
          "[certified]") {
  std::mt19937_64 rng(20261201);
  Tally tally;
  // x 2 supports checked in full + 1 adaptive selection each
  constexpr int kTrials = 36000 / kSizeDivisor;
  for (int trial = 0; trial < kTrials; ++trial) {
    const auto mode = static_cast<Mode>(trial % static_cast<int>(Mode::count));
    const auto storage = static_cast<Storage>((trial / static_cast<int>(Mode::count)) % 3);
    CAPTURE(trial, static_cast<int>(mode), static_cast<int>(storage));
    switch (storage) {
      case Storage::f32:
        run_case<float>(rng, mode, storage, tally);
        break;
      case Storage::bf16:
        run_case<bf16>(rng, mode, storage, tally);
        break;
      case Storage::f16:
        run_case<f16>(rng, mode, storage, tally);
        break;
    }
  }
  // The adversarial regimes were actually reached.
  CHECK(tally.cases + kTrials >= 100000 / kSizeDivisor);
  CHECK(tally.subnormal > 100);
  CHECK(tally.below_double > 100);
  CHECK(tally.nothing_omitted > 1000);
  CHECK(tally.everything > 100);
}

TEST_CASE("certified bounds hold on supports of up to 2^20 positions", "[certified]") {
  constexpr std::int64_t kLong = (std::int64_t{1} << 20) / kSizeDivisor;
  std::mt19937_64 rng(1048576);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tally tally;
  for (const std::int64_t block : {1, 16, 1024}) {
    Case c;
    c.n = kLong + 37;
    c.d = 2;
    c.block = block;
    c.scale = 0.7;
    c.query = {normal(rng), normal(rng)};
    c.keys.resize(static_cast<std::size_t>(c.n * c.d));
    c.values.resize(c.keys.size());
    for (float& x : c.keys) x = 3.0f * normal(rng);
    for (float& x : c.values) x = normal(rng);
    const KvView<float> kv(c.keys.data(), c.values.data(), c.n, c.d);
    const auto summaries =
        BlockSummaries::build(kv, c.block, {.channel_bounds = true, .value_norms = true});
    SparseConfig config;
    config.block_size = block;
    config.sinks = 4;
    config.window = kLong;  // all but 33 positions: a support of kLong + 4
    Support support;
    build_support(c.n, config, {}, support);
    check_bounds(c, c.keys, c.values, kv, summaries, support, tally);
    config.window = 1000;  // and most of it omitted
    std::vector<std::int64_t> blocks;
    for (std::int64_t b = 0; b < summaries.blocks(); b += 3) blocks.push_back(b);
    build_support(c.n, config, blocks, support);
    check_bounds(c, c.keys, c.values, kv, summaries, support, tally);
  }
  REQUIRE(tally.cases == 6);
}

namespace {

/// A reproducer of cancellation: 16 equal keys whose score is a difference of products of 2^24
/// (f32 gets it wrong by 1/8), values -e1 at the sink and +e1 elsewhere.
template <KvStorage T>
void check_cancellation_reproducer() {
  constexpr std::int64_t d = 64, n = 16;
  std::vector<float> query(d, 0.0f), keys(n * d, 0.0f), values(n * d, 0.0f);
  query[0] = 1.5f;
  query[1] = 1.0f;
  for (std::int64_t p = 0; p < n; ++p) {
    keys[p * d] = 16777216.0f + 2.0f;  // 2^24 + 2
    keys[p * d + 1] = -1.5f * 16777216.0f;
    values[p * d] = p == 0 ? -1.0f : 1.0f;
  }
  const std::vector<T> k = stored<T>(keys), v = stored<T>(values);
  const KvView<T> kv(k.data(), v.data(), n, d);
  const auto summaries =
      BlockSummaries::build(kv, 16, {.channel_bounds = true, .value_norms = true});
  SparseConfig config;
  config.block_size = 16;
  config.sinks = 1;
  config.window = 0;
  config.top_k = 0;
  Support support;
  build_support(n, config, {}, support);
  const CertifiedBounds b = certified_bounds(query, 0.125, kv, summaries, support);
  // All scores are equal: eps = 15/16 exactly, and the error is eps * ||e1 - (-e1)||.
  CHECK(b.omitted_mass_bound >= 0.9375);
  CHECK(b.omitted_mass_bound <= 0.9375 * (1 + 1e-6));  // and not vacuous
  CHECK(b.error_bound >= 1.875);
  CHECK(b.error_bound <= 1.875 * (1 + 1e-6));
  const std::vector<float> ranking(1, 0.0f);
  const AdaptiveSelection a =
      adaptive_select(query, 0.125, kv, summaries, config, ranking, 0.93, 1);
  CHECK(a.needed_k == 1);  // 0.9375 > 0.93: the block must be added
  CHECK(a.omitted_mass_bound == 0.0);
}

}  // namespace

TEST_CASE("cancellation reproducer: cancelling scores do not lower the bound (f32, bf16 keys)",
          "[certified]") {
  check_cancellation_reproducer<float>();
  check_cancellation_reproducer<bf16>();
}

TEST_CASE("cancellation reproducer: a subnormal omitted mass has a positive bound",
          "[certified]") {
  // q = [1], keys [720, 0 x 15], block 1, sink 1: eps = 15 e^-720 / (1 + 15 e^-720) ~ 3.0e-312.
  const std::vector<float> query{1.0f};
  std::vector<float> keys(16, 0.0f), values(16, 1.0f);
  keys[0] = 720.0f;
  values[0] = -1.0f;
  const KvView<float> kv(keys.data(), values.data(), 16, 1);
  const auto summaries =
      BlockSummaries::build(kv, 1, {.channel_bounds = true, .value_norms = true});
  Support support;
  support.add(0, 1, 16);
  support.normalize();
  const CertifiedBounds b = certified_bounds(query, 1.0, kv, summaries, support);
  const double log_eps = std::log(15.0) - 720.0;  // to 1e-16 relative; eps's log1p term is 1e-312
  CHECK(b.log_omitted_mass_bound >= log_eps);
  CHECK(b.log_omitted_mass_bound <= log_eps + 1e-9);
  CHECK(b.omitted_mass_bound > 0.0);
  CHECK(b.omitted_mass_bound >= std::exp(log_eps));
  CHECK(b.omitted_mass_bound <= std::exp(log_eps) * 1.0001);  // subnormal: 1e-12 resolution
  // error = eps ||1 - (-1)|| = 2 eps
  CHECK(b.error_bound >= 2.0 * std::exp(log_eps));
}

TEST_CASE("certified bounds reject summaries without channel bounds or value norms",
          "[certified]") {
  std::vector<float> keys(32, 1.0f);
  const KvView<float> kv(keys.data(), keys.data(), 8, 4);
  const auto means_only = BlockSummaries::build(kv, 4);
  std::vector<float> q(4, 1.0f);
  Support s;
  REQUIRE_THROWS_AS(certified_bounds(q, 0.5, kv, means_only, s), amc::error);
  const auto full = BlockSummaries::build(kv, 4, {.channel_bounds = true, .value_norms = true});
  REQUIRE_THROWS_AS(certified_bounds(std::span(q).first(3), 0.5, kv, full, s), amc::error);
  REQUIRE_THROWS_AS(certified_bounds(q, -1.0, kv, full, s), amc::error);
  const KvView<float> shorter(keys.data(), keys.data(), 7, 4);
  REQUIRE_THROWS_AS(certified_bounds(q, 0.5, shorter, full, s), amc::error);
  std::vector<float> ranking(2, 0.0f);
  SparseConfig config;
  config.block_size = 4;
  REQUIRE_THROWS_AS(adaptive_select(q, 0.5, kv, full, config, ranking, 1.5, 2), amc::error);
  REQUIRE_THROWS_AS(adaptive_select(q, 0.5, kv, full, config, std::span(ranking).first(1), 0.1, 2),
                    amc::error);
}

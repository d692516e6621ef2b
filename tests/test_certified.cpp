// Certified bounds (THEORY.md section 5) as properties over 10,000+ random and adversarial cases:
// never below the true omitted mass or error, computed here in double from the keys and values.
#include <algorithm>
#include <cmath>
#include <vector>

#include "amc/amc.hpp"
#include "amc/math/certified_bounds.hpp"
#include "test_helpers.hpp"

using namespace amc;

namespace {

enum class Mode { random, needle, near_duplicate, huge_logits, opposite_values, count };

struct Case {
  std::int64_t n, d, block;
  std::vector<float> keys, values, query;  // [n, d], [n, d], [d]
  double scale;
};

Case make_case(std::mt19937_64& rng, Mode mode) {
  std::uniform_int_distribution<std::int64_t> n_dist(1, 64), d_dist(1, 8), b_dist(1, 8);
  Case c{n_dist(rng), d_dist(rng), b_dist(rng), {}, {}, {}, 0.0};
  c.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  c.keys.resize(static_cast<std::size_t>(c.n * c.d));
  c.values.resize(c.keys.size());
  c.query.resize(static_cast<std::size_t>(c.d));
  for (float& x : c.query) x = normal(rng);
  std::vector<float> base(static_cast<std::size_t>(c.d));
  for (float& x : base) x = normal(rng);
  for (std::int64_t p = 0; p < c.n; ++p) {
    for (std::int64_t i = 0; i < c.d; ++i) {
      float& k = c.keys[p * c.d + i];
      float& v = c.values[p * c.d + i];
      k = normal(rng);
      v = normal(rng);
      if (mode == Mode::near_duplicate) k = base[i] + 1e-6f * normal(rng);
      if (mode == Mode::huge_logits) k *= 60.0f;
      if (mode == Mode::opposite_values)
        v = (p % 2 ? 1.0f : -1.0f) * (base[i] + 0.01f * normal(rng));
    }
  }
  if (mode == Mode::needle) {
    const std::int64_t p = std::uniform_int_distribution<std::int64_t>(0, c.n - 1)(rng);
    for (std::int64_t i = 0; i < c.d; ++i) c.keys[p * c.d + i] = 8.0f * c.query[i];
  }
  return c;
}

struct Truth {
  double eps;
  double error;  // ||o - o_S|| in double
};

Truth truth(const Case& c, const Support& support) {
  std::vector<double> s(static_cast<std::size_t>(c.n));
  double max = -INFINITY;
  for (std::int64_t p = 0; p < c.n; ++p) {
    double dot = 0.0;
    for (std::int64_t i = 0; i < c.d; ++i)
      dot += static_cast<double>(c.query[i]) * c.keys[p * c.d + i];
    s[p] = c.scale * dot;
    max = std::max(max, s[p]);
  }
  double z_all = 0.0, z_s = 0.0, z_o = 0.0;
  std::vector<double> o(static_cast<std::size_t>(c.d), 0.0),
      o_s(static_cast<std::size_t>(c.d), 0.0);
  for (std::int64_t p = 0; p < c.n; ++p) {
    const double w = std::exp(s[p] - max);
    z_all += w;
    const bool kept = support.contains(p);
    (kept ? z_s : z_o) += w;
    for (std::int64_t i = 0; i < c.d; ++i) {
      o[i] += w * c.values[p * c.d + i];
      if (kept) o_s[i] += w * c.values[p * c.d + i];
    }
  }
  double err = 0.0;
  for (std::int64_t i = 0; i < c.d; ++i) {
    const double dense = o[i] / z_all, sparse = z_s > 0 ? o_s[i] / z_s : 0.0;
    err += (dense - sparse) * (dense - sparse);
  }
  return {z_o / z_all, std::sqrt(err)};
}

// Runs the sparse step over `support` (the operator, f32) and returns what the summaries
// certify about it, from the step's lse and output.
CertifiedBounds bounds_of_sparse_step(const Case& c, const KvView<float>& kv,
                                      const BlockSummaries& summaries, const Support& support) {
  RowMatrix out(1, c.d);
  std::vector<HeadResult> result(1);
  decode_support(Eigen::Map<const RowMatrix>(c.query.data(), 1, c.d), kv, support,
                 static_cast<float>(c.scale), out, result);
  return certified_bounds(c.query, c.scale, summaries, support, result[0].lse,
                          std::span<const float>(out.data(), static_cast<std::size_t>(c.d)));
}

}  // namespace

TEST_CASE("certified omitted-mass and error bounds are never below the truth", "[certified]") {
  std::mt19937_64 rng(20261129);
  int cases = 0;
  for (int trial = 0; trial < 12000; ++trial) {
    const auto mode = static_cast<Mode>(trial % static_cast<int>(Mode::count));
    const Case c = make_case(rng, mode);
    const KvView<float> kv(c.keys.data(), c.values.data(), c.n, c.d);
    const auto summaries =
        BlockSummaries::build(kv, c.block, {.channel_bounds = true, .value_norms = true});
    // A random support: random sinks/window and a random subset of blocks.
    SparseConfig config;
    config.block_size = c.block;
    config.sinks = std::uniform_int_distribution<std::int64_t>(0, 3)(rng);
    config.window = std::uniform_int_distribution<std::int64_t>(0, c.n)(rng);
    std::vector<std::int64_t> blocks;
    for (std::int64_t b = 0; b < summaries.blocks(); ++b)
      if (std::bernoulli_distribution(trial % 3 == 0 ? 0.9 : 0.3)(rng)) blocks.push_back(b);
    Support support;
    build_support(c.n, config, blocks, support);

    const auto bounds = bounds_of_sparse_step(c, kv, summaries, support);
    const Truth t = truth(c, support);
    CAPTURE(trial, static_cast<int>(mode), c.n, c.d, c.block, t.eps, bounds.omitted_mass_bound,
            t.error, bounds.error_bound);
    REQUIRE(bounds.omitted_positions == c.n - support.size());
    REQUIRE(bounds.omitted_mass_bound >= t.eps);
    REQUIRE(bounds.omitted_mass_bound <= 1.0);
    // The operator's o_S carries f32 rounding the bound cannot see: allow that, absolutely.
    REQUIRE(bounds.error_bound + 1e-6 >= t.error);
    if (support.size() == c.n) REQUIRE(bounds.omitted_mass_bound == 0.0);
    ++cases;
  }
  REQUIRE(cases >= 10000);
}

TEST_CASE("adaptive selection meets the target with the fewest best-first blocks", "[certified]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto mode = static_cast<Mode>(trial % static_cast<int>(Mode::count));
    const Case c = make_case(rng, mode);
    const KvView<float> kv(c.keys.data(), c.values.data(), c.n, c.d);
    const auto summaries =
        BlockSummaries::build(kv, c.block, {.channel_bounds = true, .value_norms = true});
    SparseConfig config;
    config.block_size = c.block;
    config.sinks = 1;
    config.window = std::uniform_int_distribution<std::int64_t>(0, 8)(rng);
    const double target = std::array{1e-3, 0.05, 0.3}[trial % 3];
    const std::int64_t max_k = std::uniform_int_distribution<std::int64_t>(0, 10)(rng);
    // Rank by the channel upper bound (any ranking works; the bound must hold regardless).
    std::vector<float> ranking(static_cast<std::size_t>(summaries.blocks()));
    for (std::int64_t b = 0; b < summaries.blocks(); ++b)
      ranking[b] = static_cast<float>(block_score_upper_bound(c.query, c.scale, summaries, b));
    const auto sel =
        adaptive_select(c.query, c.scale, kv, summaries, config, ranking, target, max_k);
    CAPTURE(trial, c.n, c.block, target, max_k, sel.needed_k, sel.omitted_mass_bound);
    REQUIRE(sel.needed_k == static_cast<std::int64_t>(sel.blocks.size()));
    REQUIRE(sel.needed_k <= max_k);
    REQUIRE(sel.target_met == (sel.omitted_mass_bound <= target));
    const Truth t = truth(c, sel.support);
    REQUIRE(sel.omitted_mass_bound >= t.eps);
    if (sel.target_met) REQUIRE(t.eps <= target);
    if (!sel.target_met) {
      REQUIRE((sel.needed_k == max_k || sel.needed_k == candidate_blocks(c.n, config).count()));
    }
    // Minimality: with one block fewer (the last one added, the lowest-ranked) the bound was above
    // target.
    if (sel.needed_k > 0 && sel.target_met) {
      std::vector<std::int64_t> fewer = sel.blocks;
      const auto weakest = std::min_element(fewer.begin(), fewer.end(), [&](auto a, auto b) {
        return ranking[a] < ranking[b] || (ranking[a] == ranking[b] && a > b);
      });
      fewer.erase(weakest);
      Support smaller;
      build_support(c.n, config, fewer, smaller);
      const auto bounds = bounds_of_sparse_step(c, kv, summaries, smaller);
      REQUIRE(bounds.omitted_mass_bound > target * (1 - 1e-6));
    }
  }
}

TEST_CASE("certified bounds reject summaries without channel bounds or value norms",
          "[certified]") {
  std::vector<float> keys(32, 1.0f);
  const KvView<float> kv(keys.data(), keys.data(), 8, 4);
  const auto means_only = BlockSummaries::build(kv, 4);
  std::vector<float> q(4, 1.0f), o(4, 0.0f);
  Support s;
  REQUIRE_THROWS_AS(certified_bounds(q, 0.5, means_only, s, 0.0, o), amc::error);
  const auto full = BlockSummaries::build(kv, 4, {.channel_bounds = true, .value_norms = true});
  REQUIRE_THROWS_AS(certified_bounds(std::span(q).first(3), 0.5, full, s, 0.0, o), amc::error);
  REQUIRE_THROWS_AS(certified_bounds(q, -1.0, full, s, 0.0, o), amc::error);
  std::vector<float> ranking(2, 0.0f);
  SparseConfig config;
  config.block_size = 4;
  REQUIRE_THROWS_AS(adaptive_select(q, 0.5, kv, full, config, ranking, 1.5, 2), amc::error);
  REQUIRE_THROWS_AS(adaptive_select(q, 0.5, kv, full, config, std::span(ranking).first(1), 0.1, 2),
                    amc::error);
}

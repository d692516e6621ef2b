// Rules and block summaries against independent double-precision computations.
#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "amc/amc.hpp"
#include "test_cache.hpp"

using namespace amc;

namespace {

using test::true_scores;

// Independent top-k: sort candidate blocks by (score desc, index asc).
std::vector<std::int64_t> expected_top_k(const std::vector<double>& block_scores,
                                         std::int64_t first, std::int64_t last, std::int64_t k) {
  std::vector<std::int64_t> blocks;
  for (std::int64_t b = first; b < last; ++b) blocks.push_back(b);
  std::stable_sort(blocks.begin(), blocks.end(), [&](std::int64_t a, std::int64_t b) {
    return block_scores[a] > block_scores[b];
  });
  blocks.resize(static_cast<std::size_t>(
      std::min<std::int64_t>(k, static_cast<std::int64_t>(blocks.size()))));
  std::sort(blocks.begin(), blocks.end());
  return blocks;
}

std::vector<std::int64_t> selected(const BlockSparseDecode<>& op, std::int64_t head) {
  return {op.selected_blocks(head).begin(), op.selected_blocks(head).end()};
}

// Runs a one-head sparse decode with `rule` and returns the selected blocks.
std::vector<std::int64_t> select_with(RuleName rule, const test::TestCache<float>& cache,
                                      const BlockSummaries& summaries, const std::vector<float>& q,
                                      SparseConfig config) {
  config.rule = rule;
  BlockSparseDecode<> op(config);
  RowMatrix out(1, cache.head_dim);
  std::vector<HeadResult> results(1);
  op.decode(Eigen::Map<const RowMatrix>(q.data(), 1, cache.head_dim),
            KvHead<KvView<float>>{cache.view(), &summaries}, out, results);
  return selected(op, 0);
}

}  // namespace

TEST_CASE("mean-pooled selection is the top-k of mean scores, ties to the lower index",
          "[rules]") {
  for (const SummaryPrecision precision : {SummaryPrecision::f32, SummaryPrecision::bf16}) {
    const bool bf16_means = precision == SummaryPrecision::bf16;
    for (int trial = 0; trial < 40; ++trial) {
      const std::int64_t n = 200 + 37 * trial;
      const test::TestCache<float> cache(n, 32);
      SparseConfig config;
      config.block_size = 8 + trial % 3 * 8;
      config.top_k = 1 + trial % 7;
      config.sinks = trial % 4;
      config.window = 16 * (trial % 3);
      config.summary_precision = precision;
      const auto summaries =
          BlockSummaries::build(cache.view(), config.block_size, required_summaries(config));
      const auto q = test::random_floats(32);
      const double scale = 1.0 / std::sqrt(32.0);
      const auto s = true_scores(cache, q, scale);
      // shat_b: what the rule scores, each block's mean key rounded to f32 (and at bf16
      // precision then to the nearest bf16), in double from the keys: the mean of the block's
      // scores (linearity of the mean key) within f32 rounding, or within 2^-8 of it relative
      // to the sum of |c q_i kbar_i| with bf16 means.
      const auto shat = test::mean_pooled_scores(cache, q, scale, config.block_size, bf16_means);
      for (std::int64_t b = 0; b < summaries.blocks(); ++b) {
        const std::int64_t lo = b * config.block_size, hi = std::min(n, lo + config.block_size);
        double magnitude = 0.0;
        for (std::int64_t i = 0; i < 32; ++i) {
          double sum = 0.0;
          for (std::int64_t p = lo; p < hi; ++p) sum += cache.keys_f[p * cache.stride + i];
          magnitude += std::abs(scale * q[i] * sum / static_cast<double>(hi - lo));
        }
        const double mean_score =
            std::accumulate(s.begin() + lo, s.begin() + hi, 0.0) / static_cast<double>(hi - lo);
        const double rounding = bf16_means ? 0x1p-8 : 0x1p-24;
        REQUIRE(std::abs(shat[b] - mean_score) <= rounding * magnitude + 1e-12);
      }
      const auto c = candidate_blocks(n, config);
      const auto want = expected_top_k(shat, c.first, c.last, config.top_k);
      const auto got = select_with(RuleName::mean_pooled, cache, summaries, q, config);
      CAPTURE(to_string(precision), trial, n, config.block_size, config.top_k);
      if (got != want) {
        // Only a near-tie (f32 rounding of the dot products) may swap blocks: the k-th best
        // score is shared.
        double kth = INFINITY;
        for (auto b : want) kth = std::min(kth, shat[b]);
        for (auto b : got) REQUIRE(shat[b] >= kth - 1e-5);
      }
    }
  }

  // Exact ties: every block has the same keys, so every mean score is equal: the lowest indices
  // win.
  test::TestCache<float> flat(160, 8);
  for (std::int64_t p = 0; p < 160; ++p)
    for (std::int64_t i = 0; i < 8; ++i)
      flat.keys_f[p * flat.stride + i] = flat.keys[p * flat.stride + i] = 0.5f;
  SparseConfig config;
  config.block_size = 16;
  config.top_k = 3;
  config.sinks = 0;
  config.window = 0;
  const auto summaries = BlockSummaries::build(flat.view(), 16);
  const auto q = test::random_floats(8);
  REQUIRE(select_with(RuleName::mean_pooled, flat, summaries, q, config) ==
          std::vector<std::int64_t>{0, 1, 2});
  config.sinks = 17;  // block 0 entirely kept, block 1 partly: block 1 stays a candidate
  REQUIRE(select_with(RuleName::mean_pooled, flat, summaries, q, config) ==
          std::vector<std::int64_t>{1, 2, 3});
}

TEST_CASE("summary precision: f32 ranks as exact mean pooling where bf16 rounding reorders",
          "[rules]") {
  // Blocks of 4 positions with equal keys, so each mean key is exact. With q = (1, 1), block 1
  // (mean (1 + 2^-8 - 2^-14, 0)) outscores block 2 (mean (1, 2^-8 - 2^-12)) by 2^-12 - 2^-14,
  // but block 1's first channel rounds to 1.0 in bf16 while block 2's keeps its small second
  // channel nearly exactly: at bf16 precision block 2 ranks first. Blocks 0 and 3 are far below.
  constexpr std::int64_t d = 2, block = 4, n = 4 * block;
  const float means[4][2] = {
      {0.25f, 0.0f}, {1.0f + 0x1p-8f - 0x1p-14f, 0.0f}, {1.0f, 0x1p-8f - 0x1p-12f}, {0.5f, 0.0f}};
  std::vector<float> keys(n * d), values(n * d, 1.0f);
  for (std::int64_t p = 0; p < n; ++p) {
    keys[static_cast<std::size_t>(p * d)] = means[p / block][0];
    keys[static_cast<std::size_t>(p * d + 1)] = means[p / block][1];
  }
  const KvView<float> kv(keys.data(), values.data(), n, d);
  const std::vector<float> q = {1.0f, 1.0f};
  for (const RuleName rule : {RuleName::mean_pooled, RuleName::sub_block_means}) {
    for (const SummaryPrecision precision : {SummaryPrecision::f32, SummaryPrecision::bf16}) {
      CAPTURE(rule.name(), to_string(precision));
      SparseConfig config;
      config.block_size = block;
      config.top_k = 1;
      config.sinks = 0;
      config.window = 0;
      config.rule = rule;
      config.summary_precision = precision;
      if (rule == RuleName::sub_block_means) config.set("sub_blocks", "2");
      const auto summaries = BlockSummaries::build(kv, block, required_summaries(config));
      REQUIRE(summaries.options().bf16_copies == (precision == SummaryPrecision::bf16));
      BlockSparseDecode<> op(config);
      RowMatrix out(1, d);
      std::vector<HeadResult> results(1);
      op.decode(Eigen::Map<const RowMatrix>(q.data(), 1, d), KvHead<KvView<float>>{kv, &summaries},
                out, results);
      REQUIRE(selected(op, 0) ==
              std::vector<std::int64_t>{precision == SummaryPrecision::f32 ? 1 : 2});
    }
  }
  // bf16 precision needs the copies: summaries built without them are refused by name.
  SparseConfig config;
  config.block_size = block;
  config.sinks = 0;
  config.window = 0;
  config.summary_precision = SummaryPrecision::bf16;
  const auto f32_only = BlockSummaries::build(kv, block);
  BlockSparseDecode<> op(config);
  RowMatrix out(1, d);
  std::vector<HeadResult> results(1);
  REQUIRE_THROWS_WITH(
      op.decode(Eigen::Map<const RowMatrix>(q.data(), 1, d), KvHead<KvView<float>>{kv, &f32_only},
                out, results),
      Catch::Contains("bf16_copies=1; these were built with") && Catch::Contains("bf16_copies=0"));
}

TEST_CASE("channel bound is never below the true block max score, and close to Quest's bound",
          "[rules]") {
  for (const SummaryPrecision precision : {SummaryPrecision::f32, SummaryPrecision::bf16}) {
    CAPTURE(to_string(precision));
    const bool bf16_rows = precision == SummaryPrecision::bf16;
    const ChannelBoundRule rule(precision);
    for (int trial = 0; trial < 200; ++trial) {
      const std::int64_t n = 50 + trial * 7;
      const test::TestCache<float> cache(n, 16, 16, trial % 2 ? 1.0f : 30.0f);
      const std::int64_t block_size = 1 + trial % 20;
      const auto summaries = BlockSummaries::build(
          cache.view(), block_size, {.channel_bounds = true, .bf16_copies = bf16_rows});
      auto q = test::random_floats(16, trial % 3 == 0 ? 10.0f : 1.0f);
      const float scale = 0.25f;
      std::vector<float> scaled(q);
      for (float& x : scaled) x *= scale;
      SparseConfig config;
      config.block_size = block_size;
      config.sinks = 0;
      config.window = 0;
      const auto c = candidate_blocks(n, config);
      std::vector<float> scores(static_cast<std::size_t>(summaries.blocks()));
      rule.score_blocks(BlockScoringInput{scaled, summaries, c}, cache.view(), scores);
      const auto s = true_scores(cache, q, scale);
      for (std::int64_t b = 0; b < summaries.blocks(); ++b) {
        const std::int64_t lo = b * block_size, hi = std::min(n, lo + block_size);
        const double max = *std::max_element(s.begin() + lo, s.begin() + hi);
        // The rule sums <min(q, 0), lower> + <max(q, 0), upper> in f32 over the rows it reads:
        // allow the standard rounding bound of a 32-term f32 sum, (terms + 1) * 2^-24 * sum of
        // |terms|, and nothing more.
        const auto end = [&](std::size_t i) {
          const auto at = static_cast<std::size_t>(b * 32) + i;
          return bf16_rows ? static_cast<double>(to_float(summaries.channel_bound_rows_bf16()[at]))
                           : static_cast<double>(summaries.channel_bound_rows()[at]);
        };
        double magnitude = 0.0;
        for (std::size_t i = 0; i < 16; ++i) {
          magnitude += std::abs(scaled[i] * end(i)) + std::abs(scaled[i] * end(16 + i));
        }
        REQUIRE(scores[b] >= max - 33 * 0x1p-24 * magnitude);
        // And c sum_i max(q_i lo_i, q_i hi_i) from the f32 minima and maxima, in double: the
        // f32 rows give it within rounding; rounding an end outward to bf16 moves it by at most
        // 2^-7 of its magnitude, and only upward.
        double quest = 0.0, widening = 0.0;
        for (std::int64_t i = 0; i < 16; ++i) {
          const double qi = scaled[static_cast<std::size_t>(i)];
          const double lo_i = summaries.channel_min()(b, i), hi_i = summaries.channel_max()(b, i);
          quest += std::max(qi * lo_i, qi * hi_i);
          widening += std::abs(qi) * 0x1p-7 * std::max(std::abs(lo_i), std::abs(hi_i));
        }
        const double rounding = 33 * 0x1p-24 * magnitude;
        if (bf16_rows) {
          REQUIRE(scores[b] >= quest - rounding);
          REQUIRE(scores[b] <= quest + widening + rounding);
        } else {
          REQUIRE(std::abs(scores[b] - quest) <= rounding);
        }
      }
      // Every head of a group in one pass gives each head's own scores.
      std::vector<float> group_queries(scaled);
      for (const float x : scaled) group_queries.push_back(-2.0f * x);
      std::vector<float> group(static_cast<std::size_t>(2 * summaries.blocks()));
      rule.score_blocks_group(GroupScoringInput{group_queries.data(), 2, summaries, c},
                              cache.view(), group);
      std::vector<float> second(static_cast<std::size_t>(summaries.blocks()));
      rule.score_blocks(BlockScoringInput{std::span(group_queries).subspan(16), summaries, c},
                        cache.view(), second);
      for (std::int64_t b = c.first; b < c.last; ++b) {
        REQUIRE(group[static_cast<std::size_t>(b)] == scores[static_cast<std::size_t>(b)]);
        REQUIRE(group[static_cast<std::size_t>(summaries.blocks() + b)] ==
                second[static_cast<std::size_t>(b)]);
      }
    }
  }
}

TEST_CASE("oracle picks the blocks of largest true mass outside sinks and window", "[rules]") {
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t n = 300 + 11 * trial;
    const test::TestCache<float> cache(n, 16, 16, 3.0f);
    SparseConfig config;
    config.block_size = 16;
    config.top_k = 1 + trial % 5;
    config.sinks = 5;
    config.window = 40;
    const auto summaries = BlockSummaries::build(cache.view(), 16);
    const auto q = test::random_floats(16);
    const auto s = true_scores(cache, q, 0.25);
    const auto c = candidate_blocks(n, config);
    std::vector<double> mass(static_cast<std::size_t>(summaries.blocks()), 0.0);
    for (std::int64_t p = c.kept_prefix; p < c.kept_suffix_begin; ++p)
      mass[p / 16] += std::exp(s[p]);
    const auto want = expected_top_k(mass, c.first, c.last, config.top_k);
    config.scale = 0.25f;
    const auto got = select_with(RuleName::oracle, cache, summaries, q, config);
    if (got != want) {
      double kth = INFINITY;
      for (auto b : want) kth = std::min(kth, mass[b]);
      for (auto b : got) REQUIRE(mass[b] >= kth * (1.0 - 1e-5));
    }
  }
}

TEST_CASE("per-group scope combines softmax-normalised head scores", "[rules]") {
  // Two heads, four candidate blocks. Head 0 strongly wants block 3; head 1 mildly prefers 1 and 2.
  const std::vector<float> scores = {0.0f, 0.0f, 0.0f, 10.0f,  // head 0
                                     0.0f, 1.0f, 1.0f, 0.0f};  // head 1
  const CandidateBlocks c{0, 4, 0, 64};
  std::vector<float> combined(4);
  CombineScratch scratch;
  combine_group_scores(scores, 2, 4, c, GroupCombine::sum, combined, scratch);
  double p0[4], p1[4], z0 = 3 + std::exp(10.0), z1 = 2 + 2 * std::exp(1.0);
  for (int b = 0; b < 4; ++b) {
    p0[b] = std::exp(static_cast<double>(scores[b])) / z0;
    p1[b] = std::exp(static_cast<double>(scores[4 + b])) / z1;
    REQUIRE(combined[b] == Approx(p0[b] + p1[b]).epsilon(1e-6));
  }
  std::vector<std::int64_t> top;
  select_top_k(combined, c, 1, top);
  REQUIRE(top == std::vector<std::int64_t>{3});
  combine_group_scores(scores, 2, 4, c, GroupCombine::max, combined, scratch);
  for (int b = 0; b < 4; ++b) REQUIRE(combined[b] == Approx(std::max(p0[b], p1[b])).epsilon(1e-6));
}

TEST_CASE("per-group combination of rows scored at a few blocks, -inf or NaN elsewhere",
          "[rules]") {
  // What a two-stage rule's second stage leaves (its shortlist scored, the rest -inf), which
  // combine_group_scores exponentiates at the listed blocks only; and rows scored throughout,
  // in the same call; rows long enough to be listed (kListedFrom). Against softmaxes in double;
  // combined scores outside the candidates stay.
  constexpr std::int64_t heads = 5, blocks = kListedFrom + 500;
  const CandidateBlocks c{3, blocks - 10, 0, 1 << 20};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> scores(static_cast<std::size_t>(heads * blocks));
    for (std::int64_t h = 0; h < heads; ++h) {
      // Head 0 scores every block, head 1 none; the others about 2-120 (listed up to 94).
      const float density = h == 0 ? 1.0f : (h == 1 ? 0.0f : 0.001f * float(trial + 1) * float(h));
      for (std::int64_t b = 0; b < blocks; ++b) {
        float& s = scores[static_cast<std::size_t>(h * blocks + b)];
        s = uniform(rng) < density ? 6.0f * uniform(rng) - 3.0f : (b % 7 == 0 ? NAN : -INFINITY);
      }
    }
    for (const GroupCombine combine : {GroupCombine::sum, GroupCombine::max}) {
      CAPTURE(trial, combine == GroupCombine::sum);
      std::vector<float> combined(blocks, 42.0f);
      CombineScratch scratch;
      combine_group_scores(scores, heads, blocks, c, combine, combined, scratch);
      // Each head's softmax is within (n + 4) u of its value (a sum of n positive terms in any
      // order, u = 2^-24, the scale and the combination's add), plus the kernels' exp bound
      // (2.5e-7 relative) twice, in its numerator and its sum; so is their sum or max over heads.
      const double tolerance = double(c.count() + 4) * 0x1p-24 + 2 * 2.5e-7;
      std::vector<double> want(blocks, 0.0);
      for (std::int64_t h = 0; h < heads; ++h) {
        const float* row = scores.data() + h * blocks;
        double max = -INFINITY, z = 0.0;
        for (std::int64_t b = c.first; b < c.last; ++b)
          if (row[b] == row[b]) max = std::max<double>(max, row[b]);
        if (!std::isfinite(max)) continue;
        for (std::int64_t b = c.first; b < c.last; ++b)
          if (row[b] == row[b]) z += std::exp(row[b] - max);
        for (std::int64_t b = c.first; b < c.last; ++b) {
          const double p = row[b] == row[b] ? std::exp(row[b] - max) / z : 0.0;
          want[b] = combine == GroupCombine::sum ? want[b] + p : std::max(want[b], p);
        }
      }
      for (std::int64_t b = 0; b < blocks; ++b) {
        if (b < c.first || b >= c.last) {
          REQUIRE(combined[b] == 42.0f);
        } else {
          REQUIRE(std::abs(combined[b] - want[b]) <= tolerance * want[b]);
        }
      }
    }
  }
}

TEST_CASE("top-k ranks NaN last and keeps indices sorted", "[rules]") {
  const std::vector<float> scores = {std::nanf(""), 1.0f, 3.0f, 3.0f, -INFINITY, 2.0f};
  std::vector<std::int64_t> top;
  select_top_k(scores, CandidateBlocks{0, 6, 0, 0}, 3, top);
  REQUIRE(top == std::vector<std::int64_t>{2, 3, 5});
  select_top_k(scores, CandidateBlocks{1, 4, 0, 0}, 10, top);  // k beyond candidates: all of them
  REQUIRE(top == std::vector<std::int64_t>{1, 2, 3});
  select_top_k(scores, CandidateBlocks{0, 6, 0, 0}, 0, top);
  REQUIRE(top.empty());
}

namespace {

/// The k best candidates by (score descending, index ascending), NaN as -inf, in increasing
/// order: a stable sort, the reference for select_top_k.
std::vector<std::int64_t> top_k_by_sorting(const std::vector<float>& scores,
                                           const CandidateBlocks& c, std::int64_t k) {
  std::vector<std::int64_t> order;
  for (std::int64_t b = c.first; b < c.last; ++b) order.push_back(b);
  auto rank_key = [&](std::int64_t b) {
    const float x = scores[static_cast<std::size_t>(b)];
    return std::isnan(x) ? -INFINITY : x;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return rank_key(a) > rank_key(b); });
  order.resize(static_cast<std::size_t>(std::min<std::int64_t>(k, c.count())));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

TEST_CASE("top-k equals sorting by (score desc, index asc) on ties, NaN and infinities",
          "[rules]") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> level(0, 9);  // few distinct values: many ties
  for (std::int64_t n : {1, 2, 15, 16, 17, 40, 100, 513, 4096}) {
    for (std::int64_t k : {1, 2, 5, 16, 31}) {
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<float> scores(static_cast<std::size_t>(n));
        for (float& x : scores) {
          const int l = level(rng);
          x = l == 0 ? NAN
                     : (l == 1 ? -INFINITY
                               : (l == 9 && trial == 3 ? INFINITY : 0.5f * static_cast<float>(l)));
        }
        if (trial == 2) {  // decreasing (NaN as -inf): later blocks never get in
          std::sort(scores.begin(), scores.end(), [](float a, float b) {
            return (std::isnan(a) ? -INFINITY : a) > (std::isnan(b) ? -INFINITY : b);
          });
        }
        const CandidateBlocks c{n / 5, n - n / 7, 0, 0};
        CAPTURE(n, k, trial, c.first, c.last);
        std::vector<std::int64_t> top;
        select_top_k(scores, c, k, top);
        REQUIRE(top == top_k_by_sorting(scores, c, k));
      }
    }
  }
}

TEST_CASE("top-k over many candidates (a lower bound on the k-th score first) equals sorting",
          "[rules]") {
  // From kTopKFloorFrom candidates on select_top_k ranks only the scores that reach a bound on
  // the k-th best: continuous scores (few ties), coarse ones (many ties at the bound), sorted
  // increasing (every later block gets in), with NaN, -inf, +inf and denormals sprinkled in.
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> sprinkle(0, 199);
  for (const std::int64_t n :
       {kTopKFloorFrom, kTopKFloorFrom + 37, std::int64_t{4100}, std::int64_t{9000}}) {
    for (std::int64_t k : {1, 7, 16, 64, 130}) {
      for (int trial = 0; trial < 6; ++trial) {
        std::vector<float> scores(static_cast<std::size_t>(n));
        for (float& x : scores) {
          x = normal(rng);
          if (trial == 1) x = std::round(x * 4.0f) / 4.0f;  // coarse: many ties
          if (trial == 2) x *= 1e-38f;                      // near and below FLT_MIN
          if (trial >= 3) {
            const int s = sprinkle(rng);
            x = s == 0 ? NAN : (s == 1 ? -INFINITY : (s == 2 && trial == 4 ? INFINITY : x));
          }
        }
        if (trial == 5) std::sort(scores.begin(), scores.end());  // increasing: all beat the worst
        const CandidateBlocks c{3, n - 2, 0, 0};
        CAPTURE(n, k, trial);
        std::vector<std::int64_t> top;
        select_top_k(scores, c, k, top);
        REQUIRE(top == top_k_by_sorting(scores, c, k));
      }
    }
  }
}

TEMPLATE_TEST_CASE("block summaries: incremental appends equal a rebuild and a reference",
                   "[summaries]", float, amc::bf16, amc::f16) {
  using T = TestType;
  for (std::int64_t block_size : {1, 5, 16}) {
    const std::int64_t n = 123, d = 12;
    const test::TestCache<T> cache(n, d);
    const SummaryOptions all{.channel_bounds = true, .value_norms = true, .bf16_copies = true};
    BlockSummaries incremental(block_size, d, all);
    for (std::int64_t p = 0; p < n; ++p) {
      incremental.append(std::span(cache.keys.data() + p * cache.stride, d),
                         std::span(cache.values.data() + p * cache.stride, d));
      REQUIRE(incremental.positions() == p + 1);
      REQUIRE(incremental.blocks() == p / block_size + 1);
    }
    const auto rebuilt = BlockSummaries::build(cache.paged(), block_size, all);
    REQUIRE(rebuilt.blocks() == (n + block_size - 1) / block_size);
    for (std::int64_t b = 0; b < rebuilt.blocks(); ++b) {
      const std::int64_t lo = b * block_size, hi = std::min(n, lo + block_size);
      double vmax = 0.0;
      for (std::int64_t p = lo; p < hi; ++p) {
        double sq = 0.0;
        for (std::int64_t i = 0; i < d; ++i)
          sq += std::pow(static_cast<double>(cache.values_f[p * cache.stride + i]), 2);
        vmax = std::max(vmax, std::sqrt(sq));
      }
      REQUIRE(rebuilt.value_norm_max()[b] >= vmax);
      REQUIRE(rebuilt.value_norm_max()[b] <= vmax * (1 + 1e-6));
      REQUIRE(incremental.value_norm_max()[b] == rebuilt.value_norm_max()[b]);
      for (std::int64_t i = 0; i < d; ++i) {
        double sum = 0.0, lo_k = INFINITY, hi_k = -INFINITY;
        for (std::int64_t p = lo; p < hi; ++p) {
          const double k = cache.keys_f[p * cache.stride + i];
          sum += k;
          lo_k = std::min(lo_k, k);
          hi_k = std::max(hi_k, k);
        }
        const double mean = sum / static_cast<double>(hi - lo);
        REQUIRE(std::abs(rebuilt.mean_keys()(b, i) - mean) <= 1e-7 * (1.0 + std::abs(mean)));
        REQUIRE(incremental.mean_keys()(b, i) == rebuilt.mean_keys()(b, i));
        // The copy the mean-pooled rule scores at bf16 precision: the f32 mean rounded to the
        // nearest bf16.
        const auto at = static_cast<std::size_t>(b * d + i);
        REQUIRE(to_float(rebuilt.mean_keys_bf16()[at]) ==
                test::nearest_bf16(rebuilt.mean_keys()(b, i)));
        REQUIRE(incremental.mean_keys_bf16()[at].bits == rebuilt.mean_keys_bf16()[at].bits);
        REQUIRE(rebuilt.channel_min()(b, i) == lo_k);
        REQUIRE(rebuilt.channel_max()(b, i) == hi_k);
        // The bound rule's rows: [min | max] per block.
        const auto f32_row =
            rebuilt.channel_bound_rows().subspan(static_cast<std::size_t>(b * 2 * d));
        REQUIRE(f32_row[static_cast<std::size_t>(i)] == lo_k);
        REQUIRE(f32_row[static_cast<std::size_t>(d + i)] == hi_k);
        // The same intervals rounded outward to bf16: enclosing, and by at most one bf16 step
        // (2^-7 relative) at each end.
        const auto row =
            rebuilt.channel_bound_rows_bf16().subspan(static_cast<std::size_t>(b * 2 * d));
        const double lower = to_float(row[static_cast<std::size_t>(i)]);
        const double upper = to_float(row[static_cast<std::size_t>(d + i)]);
        REQUIRE(lower <= lo_k);
        REQUIRE(upper >= hi_k);
        REQUIRE(lo_k - lower <= 0x1p-7 * std::abs(lo_k));
        REQUIRE(upper - hi_k <= 0x1p-7 * std::abs(hi_k));
        REQUIRE(
            incremental.channel_bound_rows_bf16()[static_cast<std::size_t>(b * 2 * d + i)].bits ==
            row[static_cast<std::size_t>(i)].bits);
        REQUIRE(incremental.channel_bound_rows_bf16()[static_cast<std::size_t>(b * 2 * d + d + i)]
                    .bits == row[static_cast<std::size_t>(d + i)].bits);
      }
    }
  }
}

bool same_bits(std::span<const amc::bf16> a, std::span<const amc::bf16> b) {
  return std::ranges::equal(a, b, [](amc::bf16 x, amc::bf16 y) { return x.bits == y.bits; });
}

TEST_CASE("block summaries: truncate equals a build over the positions kept", "[summaries]") {
  const std::int64_t n = 123, d = 12;
  const test::TestCache<amc::bf16> cache(n, d);
  const auto first = [&](std::int64_t positions) {
    return KvView<amc::bf16>(cache.keys.data(), cache.values.data(), positions, d, cache.stride);
  };
  for (const std::int64_t sub_blocks : {0, 4}) {
    const SummaryOptions all{
        .channel_bounds = true, .value_norms = true, .sub_blocks = sub_blocks, .bf16_copies = true};
    for (const std::int64_t keep : {0, 1, 15, 16, 17, 50, 122, 123}) {
      CAPTURE(sub_blocks, keep);
      auto cut = BlockSummaries::build(first(n), 16, all);
      cut.truncate(first(n), keep);
      const auto built = BlockSummaries::build(first(keep), 16, all);
      REQUIRE(cut.positions() == keep);
      REQUIRE(cut.blocks() == built.blocks());
      REQUIRE(cut.mean_keys() == built.mean_keys());
      REQUIRE(same_bits(cut.mean_keys_bf16(), built.mean_keys_bf16()));
      REQUIRE(cut.channel_min() == built.channel_min());
      REQUIRE(cut.channel_max() == built.channel_max());
      REQUIRE(std::ranges::equal(cut.channel_bound_rows(), built.channel_bound_rows()));
      REQUIRE(same_bits(cut.channel_bound_rows_bf16(), built.channel_bound_rows_bf16()));
      REQUIRE(std::ranges::equal(cut.value_norm_max(), built.value_norm_max()));
      if (sub_blocks > 0) {
        REQUIRE(cut.sub_block_means() == built.sub_block_means());
        REQUIRE(same_bits(cut.sub_block_means_bf16(), built.sub_block_means_bf16()));
      }
      // Appending after a truncation continues as if the cut positions had never been there.
      for (std::int64_t p = keep; p < n; ++p)
        cut.append(std::span(cache.keys.data() + p * cache.stride, d),
                   std::span(cache.values.data() + p * cache.stride, d));
      const auto whole = BlockSummaries::build(first(n), 16, all);
      REQUIRE(cut.mean_keys() == whole.mean_keys());
      REQUIRE(same_bits(cut.mean_keys_bf16(), whole.mean_keys_bf16()));
      REQUIRE(cut.channel_max() == whole.channel_max());
      REQUIRE(same_bits(cut.channel_bound_rows_bf16(), whole.channel_bound_rows_bf16()));
      REQUIRE(std::ranges::equal(cut.value_norm_max(), whole.value_norm_max()));
      if (sub_blocks > 0) {
        REQUIRE(same_bits(cut.sub_block_means_bf16(), whole.sub_block_means_bf16()));
      }
    }
  }
  BlockSummaries summaries = BlockSummaries::build(first(20), 16);
  REQUIRE_THROWS_WITH(summaries.truncate(first(20), 21),
                      AMC_CONTAINS("amc::BlockSummaries::truncate: positions must be in [0, 20]"));
  REQUIRE_THROWS_WITH(summaries.truncate(first(5), 10), AMC_CONTAINS("the view holds 5 positions"));
}

TEST_CASE("summaries keep their rows on cache lines", "[summaries]") {
  // The rules read mean keys (and the bound rows) with 64-byte vector loads; rows that
  // straddle cache lines made scoring 1.6x slower.
  const std::int64_t head_dim = 64;
  BlockSummaries summaries(32, head_dim, {.channel_bounds = true, .bf16_copies = true});
  const auto key = test::random_floats(static_cast<std::size_t>(head_dim));
  for (std::int64_t p = 0; p < 5000; ++p) {  // grows through several reallocations
    summaries.append(std::span<const float>(key));
    if (p % 997 == 0 || p == 4999) {
      CAPTURE(p);
      REQUIRE(reinterpret_cast<std::uintptr_t>(summaries.mean_keys().data()) % kCacheLine == 0);
      REQUIRE(reinterpret_cast<std::uintptr_t>(summaries.channel_min().data()) % kCacheLine == 0);
      REQUIRE(reinterpret_cast<std::uintptr_t>(summaries.channel_max().data()) % kCacheLine == 0);
      REQUIRE(reinterpret_cast<std::uintptr_t>(summaries.channel_bound_rows().data()) %
                  kCacheLine ==
              0);
      REQUIRE(reinterpret_cast<std::uintptr_t>(summaries.mean_keys_bf16().data()) % kCacheLine ==
              0);
      REQUIRE(reinterpret_cast<std::uintptr_t>(summaries.channel_bound_rows_bf16().data()) %
                  kCacheLine ==
              0);
    }
  }
  AlignedVector<float> small(3), large(1 << 20);
  REQUIRE(reinterpret_cast<std::uintptr_t>(small.data()) % kCacheLine == 0);
  REQUIRE(reinterpret_cast<std::uintptr_t>(large.data()) % kCacheLine == 0);
}

TEST_CASE("large aligned vectors start on huge pages, small ones on cache lines", "[summaries]") {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  AlignedVector<float> below(kHugePageAllocation / sizeof(float) - 1);
  AlignedVector<float> at(kHugePageAllocation / sizeof(float));
  AlignedVector<amc::bf16> keys(std::size_t{5} << 20);  // 10 MiB, as a long KV head
  REQUIRE(reinterpret_cast<std::uintptr_t>(below.data()) % kCacheLine == 0);
  REQUIRE(reinterpret_cast<std::uintptr_t>(at.data()) % kHuge == 0);
  REQUIRE(reinterpret_cast<std::uintptr_t>(keys.data()) % kHuge == 0);
  // The memory is whole and usable: written end to end and read back, also after growing.
  for (std::size_t i = 0; i < at.size(); ++i) at[i] = static_cast<float>(i);
  at.resize(at.size() * 3);
  REQUIRE(at[at.size() / 3 - 1] == static_cast<float>(at.size() / 3 - 1));
  REQUIRE(reinterpret_cast<std::uintptr_t>(at.data()) % kHuge == 0);
  // The advice is reported as the kernel's setting allows it (read here independently).
  bool thp = false;
#if defined(__linux__)
  if (std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r")) {
    char line[128] = {};
    if (std::fgets(line, sizeof line, f) != nullptr) {
      const std::string setting(line);
      thp = setting.find("[always]") != std::string::npos ||
            setting.find("[madvise]") != std::string::npos;
    }
    std::fclose(f);
  }
#endif
  REQUIRE(large_allocations_advised_for_huge_pages() == thp);
}

TEST_CASE("block summary memory: the means are 1/B of the keys in f32, half again in bf16",
          "[summaries]") {
  const test::TestCache<bf16> cache(4096, 64);
  const auto means = BlockSummaries::build(cache.view(), 32);
  // 128 blocks x 64 channels x 4 bytes, plus the open block's f64 running sum (64 x 8).
  REQUIRE(means.memory_bytes() == 128 * 64 * 4 + 64 * 8);
  const auto means_bf16 = BlockSummaries::build(cache.view(), 32, {.bf16_copies = true});
  REQUIRE(means_bf16.memory_bytes() == 128 * 64 * (4 + 2) + 64 * 8);
  const auto full =
      BlockSummaries::build(cache.view(), 32, {.channel_bounds = true, .value_norms = true});
  // Means, f32 minima and maxima, value norms.
  REQUIRE(full.memory_bytes() == 128 * 64 * 4 + 2 * 128 * 64 * 4 + 128 * 4 + 64 * 8);
  const auto full_bf16 = BlockSummaries::build(
      cache.view(), 32, {.channel_bounds = true, .value_norms = true, .bf16_copies = true});
  // The same, and the means, minima and maxima again in bf16 (3 x 2 bytes per channel).
  REQUIRE(full_bf16.memory_bytes() ==
          128 * 64 * 4 + 2 * 128 * 64 * 4 + 3 * 128 * 64 * 2 + 128 * 4 + 64 * 8);
}

// The rules' former names still compile (with a
// deprecation warning, silenced here) and mean the new ones.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static_assert(std::same_as<amc::RuleSelector, amc::RegisteredRule>);
static_assert(std::same_as<amc::ScoreRule, amc::RuleName>);
#pragma GCC diagnostic pop
static_assert(amc::BlockSelector<amc::MeanPooledRule, amc::KvView<float>>);
static_assert(amc::BlockRuleLike<amc::RegisteredRule, amc::KvView<amc::bf16>>);

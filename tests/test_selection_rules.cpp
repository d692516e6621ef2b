// The two-stage and sub-block-means rules and top-p budgets, against
// independent double-precision computations with plain loops.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "amc/amc.hpp"
#include "test_cache.hpp"

using namespace amc;

namespace {

using test::true_scores;

// The blocks of `pool` ranked by (score desc, index asc), the best `k`, in index order.
std::vector<std::int64_t> best_of(std::vector<std::int64_t> pool, const std::vector<double>& score,
                                  std::int64_t k) {
  std::stable_sort(pool.begin(), pool.end(),
                   [&](std::int64_t a, std::int64_t b) { return score[a] > score[b]; });
  pool.resize(
      std::min<std::size_t>(pool.size(), static_cast<std::size_t>(std::max<std::int64_t>(k, 0))));
  std::sort(pool.begin(), pool.end());
  return pool;
}

std::vector<std::int64_t> range(std::int64_t first, std::int64_t last) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(last - first));
  std::iota(out.begin(), out.end(), first);
  return out;
}

// Runs a one-head sparse decode with `config` and returns the selected blocks.
std::vector<std::int64_t> select_with(const SparseConfig& config,
                                      const test::TestCache<float>& cache,
                                      const BlockSummaries& summaries,
                                      const std::vector<float>& q) {
  BlockSparseDecode<> op(config);
  RowMatrix out(1, cache.head_dim);
  std::vector<HeadResult> results(1);
  op.decode(Eigen::Map<const RowMatrix>(q.data(), 1, cache.head_dim),
            KvHead<KvView<float>>{cache.view(), &summaries}, out, results);
  return {op.selected_blocks(0).begin(), op.selected_blocks(0).end()};
}

// Accepts `got` for `want` when they differ only by blocks whose scores tie within the f32
// rounding of the operator's arithmetic: every chosen block scores at least the k-th best.
void require_same_up_to_ties(const std::vector<std::int64_t>& got,
                             const std::vector<std::int64_t>& want,
                             const std::vector<double>& score, double tolerance) {
  REQUIRE(got.size() == want.size());
  if (got == want) return;
  double kth = std::numeric_limits<double>::infinity();
  for (auto b : want) kth = std::min(kth, score[b]);
  for (auto b : got) REQUIRE(score[b] >= kth - tolerance);
}

}  // namespace

TEMPLATE_TEST_CASE("sub-block means: incremental appends equal a rebuild and a reference",
                   "[summaries]", float, amc::bf16) {
  using T = TestType;
  for (const auto& [block_size, sub_blocks] :
       {std::pair{16, 4}, std::pair{16, 16}, std::pair{8, 1}, std::pair{12, 3}}) {
    const std::int64_t n = 141, d = 10;
    const test::TestCache<T> cache(n, d);
    const SummaryOptions options{.sub_blocks = sub_blocks};
    BlockSummaries incremental(block_size, d, options);
    for (std::int64_t p = 0; p < n; ++p)
      incremental.append(std::span(cache.keys.data() + p * cache.stride, d));
    const auto rebuilt = BlockSummaries::build(cache.paged(), block_size, options);
    const std::int64_t sub = block_size / sub_blocks;
    REQUIRE(rebuilt.sub_block_size() == sub);
    REQUIRE(rebuilt.sub_block_means().rows() == rebuilt.blocks() * sub_blocks);
    for (std::int64_t row = 0; row < rebuilt.blocks() * sub_blocks; ++row) {
      const std::int64_t lo = row * sub, hi = std::min(n, lo + sub);
      for (std::int64_t i = 0; i < d; ++i) {
        double sum = 0.0;
        for (std::int64_t p = lo; p < hi; ++p) sum += cache.keys_f[p * cache.stride + i];
        const double mean = hi > lo ? sum / static_cast<double>(hi - lo) : 0.0;
        CAPTURE(block_size, sub_blocks, row, i);
        REQUIRE(std::abs(rebuilt.sub_block_means()(row, i) - mean) <=
                1e-7 * (1.0 + std::abs(mean)));
        REQUIRE(incremental.sub_block_means()(row, i) == rebuilt.sub_block_means()(row, i));
      }
    }
    // The block means are untouched by the option.
    const auto plain = BlockSummaries::build(cache.view(), block_size);
    REQUIRE(plain.mean_keys() == rebuilt.mean_keys());
  }
  // Memory: sub_blocks times the f32 means, plus one more running sum; with bf16 copies, the
  // means and sub-block means again at half the bytes.
  const test::TestCache<T> cache(4096, 64);
  const auto summaries = BlockSummaries::build(cache.view(), 32, {.sub_blocks = 4});
  REQUIRE(summaries.memory_bytes() == 5 * 128 * 64 * 4 + 2 * 64 * 8);
  const auto copies =
      BlockSummaries::build(cache.view(), 32, {.sub_blocks = 4, .bf16_copies = true});
  REQUIRE(copies.memory_bytes() == 5 * 128 * 64 * (4 + 2) + 2 * 64 * 8);
}

TEST_CASE("sub-block means: bad options are refused, and accessors name what they need",
          "[summaries]") {
  REQUIRE_THROWS_WITH(BlockSummaries(16, 8, {.sub_blocks = 3}),
                      Catch::Contains("sub_blocks must be 0 or divide block_size 16, got 3"));
  REQUIRE_THROWS_WITH(BlockSummaries(16, 8, {.sub_blocks = -1}),
                      Catch::Contains("sub_blocks must be 0 or divide block_size 16, got -1"));
  const BlockSummaries none(16, 8);
  REQUIRE_THROWS_WITH(none.sub_block_means(),
                      Catch::Contains("sub_block_means() needs SummaryOptions::sub_blocks > 0"));
  REQUIRE(SummaryOptions{.channel_bounds = true, .sub_blocks = 4}.covers({.sub_blocks = 4}));
  REQUIRE_FALSE(SummaryOptions{.sub_blocks = 2}.covers({.sub_blocks = 4}));
  REQUIRE_FALSE(SummaryOptions{}.covers({.value_norms = true}));
  REQUIRE(SummaryOptions{.sub_blocks = 2}.covers({}));
}

TEST_CASE("submean selects the top-k of max_j (c <q, sub-block mean j> + log n_j)", "[rules]") {
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t n = 250 + 29 * trial;  // partial last blocks and sub-blocks
    const test::TestCache<float> cache(n, 16, 16, 2.0f);
    SparseConfig config;
    config.rule = RuleName::sub_block_means;
    config.block_size = trial % 2 ? 16 : 32;
    config.rule_settings.set("sub_blocks", trial % 3 == 0 ? 2 : 4);
    config.top_k = 1 + trial % 6;
    config.sinks = trial % 3;
    config.window = 8 * (trial % 4);
    config.scale = 0.25f;
    const auto summaries =
        BlockSummaries::build(cache.view(), config.block_size, required_summaries(config));
    const auto q = test::random_floats(16);
    const auto s = true_scores(cache, q, 0.25);
    const std::int64_t sub =
        config.block_size / config.rule_settings.get<std::int64_t>("sub_blocks");
    std::vector<double> score(static_cast<std::size_t>(summaries.blocks()), -INFINITY);
    for (std::int64_t lo = 0; lo < n; lo += sub) {
      const std::int64_t hi = std::min(n, lo + sub);
      const double mean = std::accumulate(s.begin() + lo, s.begin() + hi, 0.0) / double(hi - lo);
      double& best = score[lo / config.block_size];
      best = std::max(best, mean + std::log(double(hi - lo)));
    }
    const auto c = candidate_blocks(n, config);
    CAPTURE(trial);
    require_same_up_to_ties(select_with(config, cache, summaries, q),
                            best_of(range(c.first, c.last), score, config.top_k), score, 1e-5);
  }
}

TEST_CASE("twostage keeps the k of largest true mass within the mean-pooled shortlist",
          "[rules]") {
  for (int trial = 0; trial < 60; ++trial) {
    const std::int64_t n = 400 + 23 * trial;
    const test::TestCache<float> cache(n, 16, 16, 3.0f);
    SparseConfig config;
    config.rule = RuleName::two_stage;
    config.block_size = 16;
    config.top_k = 1 + trial % 5;
    config.rule_settings.set("shortlist", 1 + trial % 4);
    config.sinks = 5;
    config.window = 40;
    config.scale = 0.25f;
    const auto summaries = BlockSummaries::build(cache.view(), 16);
    const auto q = test::random_floats(16);
    const auto s = true_scores(cache, q, 0.25);
    const auto c = candidate_blocks(n, config);
    // The first stage's scores: the f32 mean keys (MeanPooledRule at the default precision).
    const auto mean = test::mean_pooled_scores(cache, q, 0.25, 16);
    std::vector<double> log_mass(mean.size(), 0.0);
    for (std::int64_t b = 0; b < summaries.blocks(); ++b) {
      const std::int64_t lo = b * 16, hi = std::min(n, lo + 16);
      double mass = 0.0;
      for (std::int64_t p = std::max(lo, c.kept_prefix); p < std::min(hi, c.kept_suffix_begin); ++p)
        mass += std::exp(s[p]);
      log_mass[b] = std::log(mass);
    }
    const auto shortlist =
        best_of(range(c.first, c.last), mean,
                config.rule_settings.get<std::int64_t>("shortlist") * config.top_k);
    const auto got = select_with(config, cache, summaries, q);
    CAPTURE(trial);
    // A near-tie at the shortlist's edge may swap one block of it: then the mean scores of
    // every block the rule took must reach the shortlist's last one's.
    const auto got_shortlisted = std::all_of(got.begin(), got.end(), [&](std::int64_t b) {
      return std::find(shortlist.begin(), shortlist.end(), b) != shortlist.end();
    });
    if (!got_shortlisted) {
      double last = INFINITY;
      for (auto b : shortlist) last = std::min(last, mean[b]);
      for (auto b : got) REQUIRE(mean[b] >= last - 1e-5);
      continue;
    }
    require_same_up_to_ties(got, best_of(shortlist, log_mass, config.top_k), log_mass, 1e-5);
  }
}

TEST_CASE("twostage with a shortlist covering every candidate is the oracle", "[rules]") {
  const test::TestCache<float> cache(1000, 16, 16, 3.0f);
  const auto summaries = BlockSummaries::build(cache.view(), 16);
  for (int trial = 0; trial < 10; ++trial) {
    const auto q = test::random_floats(16);
    SparseConfig config;
    config.top_k = 1 + trial;
    config.rule_settings.set("shortlist", 100);  // 100 * k >= the 63 blocks
    config.rule = RuleName::two_stage;
    const auto two_stage = select_with(config, cache, summaries, q);
    config.rule = RuleName::oracle;
    REQUIRE(two_stage == select_with(config, cache, summaries, q));
  }
}

TEST_CASE("twostage finds the needle block that mean pooling ranks just outside the top k",
          "[rules]") {
  // Blocks of 32 keys; block 20 holds one key aligned with the query, which lifts its mean
  // score by only 1/32 of the key's score: mean pooling ranks it below blocks whose keys are
  // all mildly aligned, within a shortlist of 4 x k.
  constexpr std::int64_t n = 2048, d = 16, block = 32;
  std::vector<float> keys(n * d, 0.0f), values(n * d, 1.0f);
  std::vector<float> q(d, 0.0f);
  q[0] = 1.0f;
  for (std::int64_t b : {3, 9, 15, 27, 40}) {
    for (std::int64_t p = b * block; p < (b + 1) * block; ++p) keys[p * d] = 0.5f;  // mean 0.5
  }
  keys[(20 * block + 7) * d] = 12.0f;  // the needle: block mean 12 / 32 = 0.375
  const KvView<float> kv(keys.data(), values.data(), n, d);
  const auto summaries = BlockSummaries::build(kv, block);
  SparseConfig config;
  config.block_size = block;
  config.top_k = 2;
  config.sinks = 0;
  config.window = 0;
  config.scale = 1.0f;
  auto run = [&](RuleName rule) {
    config.rule = rule;
    BlockSparseDecode<> op(config);
    op.select(Eigen::Map<const RowMatrix>(q.data(), 1, d), KvHead<KvView<float>>{kv, &summaries});
    return std::vector<std::int64_t>(op.selected_blocks(0).begin(), op.selected_blocks(0).end());
  };
  const auto mean = run(RuleName::mean_pooled);
  REQUIRE(std::find(mean.begin(), mean.end(), 20) == mean.end());
  const auto two_stage = run(RuleName::two_stage);
  REQUIRE(std::find(two_stage.begin(), two_stage.end(), 20) != two_stage.end());
  config.rule_settings.set("sub_blocks",
                           4);  // sub-blocks of 8: the needle lifts its sub-block's mean to 1.5
  const auto sub_summaries = BlockSummaries::build(kv, block, {.sub_blocks = 4});
  config.rule = RuleName::sub_block_means;
  BlockSparseDecode<> op(config);
  op.select(Eigen::Map<const RowMatrix>(q.data(), 1, d), KvHead<KvView<float>>{kv, &sub_summaries});
  const std::vector<std::int64_t> sub(op.selected_blocks(0).begin(), op.selected_blocks(0).end());
  REQUIRE(std::find(sub.begin(), sub.end(), 20) != sub.end());
}

TEST_CASE("top-p keeps the fewest best blocks whose estimated mass share reaches p",
          "[rules]") {
  std::mt19937_64 rng(16);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 500; ++trial) {
    const std::int64_t blocks = 1 + trial % 40;
    std::vector<float> scores(static_cast<std::size_t>(blocks));
    for (auto& s : scores) s = normal(rng);
    if (trial % 7 == 0) scores[0] = -INFINITY;
    if (trial % 11 == 0) scores[blocks - 1] = std::nanf("");
    const double p = (trial % 20 + 1) / 20.0;
    const std::int64_t cap = trial % 9;
    const auto scale = trial % 2 ? MassScale::log : MassScale::linear;
    if (scale == MassScale::linear) {
      for (auto& s : scores) s = s == s ? std::exp(s) : s;  // masses, as combination writes
    }
    const CandidateBlocks c{0, blocks, 0, 0};
    std::vector<std::int64_t> got;
    select_top_p(scores, c, p, cap, scale, got);
    // Reference: masses in double, best first, the shortest prefix (at most cap) reaching p.
    std::vector<double> mass(scores.size());
    for (std::size_t b = 0; b < scores.size(); ++b) {
      const double s = scores[b];
      mass[b] = s != s ? 0.0 : scale == MassScale::log ? std::exp(s) : s;
    }
    const double total = std::accumulate(mass.begin(), mass.end(), 0.0);
    auto order = best_of(range(0, blocks), mass, blocks);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t b) { return mass[a] > mass[b]; });
    std::vector<std::int64_t> want;
    double kept = 0.0;
    for (std::int64_t b : order) {
      if (static_cast<std::int64_t>(want.size()) >= cap || kept >= p * total) break;
      want.push_back(b);
      kept += mass[b];
    }
    std::sort(want.begin(), want.end());
    if (!(total > 0.0)) {  // no estimated mass: the cap's best by score, NaN last
      std::vector<double> key(scores.size());
      for (std::size_t b = 0; b < scores.size(); ++b)
        key[b] = scores[b] == scores[b] ? scores[b] : -INFINITY;
      want = best_of(range(0, blocks), key, cap);
    }
    CAPTURE(trial, p, cap, total);
    REQUIRE(got == want);
  }
  // No estimated mass at all: the cap's best, as top-k (NaN ranks as -inf, ties to the lower
  // index).
  const std::vector<float> none = {-INFINITY, std::nanf(""), -INFINITY, -INFINITY};
  std::vector<std::int64_t> got;
  select_top_p(none, CandidateBlocks{0, 4, 0, 0}, 0.5, 2, MassScale::log, got);
  REQUIRE(got == std::vector<std::int64_t>{0, 1});
}

TEST_CASE("top-p budgets inside BlockSparseDecode: fewer blocks where the mass is concentrated",
          "[rules]") {
  const test::TestCache<float> cache(3000, 16, 16, 3.0f);
  const auto summaries = BlockSummaries::build(cache.view(), 16);
  SparseConfig config;
  config.top_k = 30;
  config.scale = 0.25f;
  const auto q = test::random_floats(16);
  const auto c = candidate_blocks(3000, config);
  // The mean scores in double: their softmax over the candidates is the estimated mass share.
  const auto s = true_scores(cache, q, 0.25);
  std::vector<double> mass(static_cast<std::size_t>(summaries.blocks()), 0.0);
  double total = 0.0;
  for (std::int64_t b = c.first; b < c.last; ++b) {
    mass[b] = std::exp(std::accumulate(s.begin() + b * 16, s.begin() + (b + 1) * 16, 0.0) / 16);
    total += mass[b];
  }
  std::int64_t previous = 0;
  for (const double p : {0.1, 0.5, 0.9, 0.99}) {
    config.top_p = p;
    const auto got = select_with(config, cache, summaries, q);
    double share = 0.0;
    for (auto b : got) share += mass[b] / total;
    CAPTURE(p, got.size(), share);
    REQUIRE(static_cast<std::int64_t>(got.size()) >= previous);  // more mass, more blocks
    REQUIRE(static_cast<std::int64_t>(got.size()) <= config.top_k);
    if (static_cast<std::int64_t>(got.size()) < config.top_k) REQUIRE(share >= p - 1e-5);
    if (!got.empty()) {  // and no block fewer would do: dropping the smallest falls short
      double smallest = INFINITY;
      for (auto b : got) smallest = std::min(smallest, mass[b] / total);
      REQUIRE(share - smallest < p + 1e-5);
    }
    previous = static_cast<std::int64_t>(got.size());
  }
  // Group scope: one selection for the group, from the combined per-head shares.
  config.top_p = 0.5;
  config.scope = SelectionScope::per_group;
  BlockSparseDecode<> op(config);
  const auto queries = test::random_floats(3 * 16);
  op.select(Eigen::Map<const RowMatrix>(queries.data(), 3, 16),
            KvHead<KvView<float>>{cache.view(), &summaries});
  REQUIRE(op.selected_blocks(0).size() <= 30);
  REQUIRE(std::equal(op.selected_blocks(0).begin(), op.selected_blocks(0).end(),
                     op.selected_blocks(2).begin(), op.selected_blocks(2).end()));
}

TEST_CASE("twostage per group: one shortlist from the combined scores, rescored for every head",
          "[rules]") {
  constexpr std::int64_t heads = 3, d = 16, block = 16;
  for (int trial = 0; trial < 30; ++trial) {
    const std::int64_t n = 600 + 37 * trial;
    const test::TestCache<float> cache(n, d, 16, 3.0f);
    SparseConfig config;
    config.rule = RuleName::two_stage;
    config.scope = SelectionScope::per_group;
    config.block_size = block;
    config.top_k = 1 + trial % 4;
    config.rule_settings.set("shortlist", 1 + trial % 3);
    config.scale = 0.25f;
    const auto summaries = BlockSummaries::build(cache.view(), block);
    const auto queries = test::random_floats(heads * d);
    const auto c = candidate_blocks(n, config);
    const auto blocks = static_cast<std::size_t>(summaries.blocks());
    // Per head: mean scores (of the f32 mean keys, as MeanPooledRule) and true log-masses in
    // double; the group's softmax-sum combination.
    auto combine = [&](const std::vector<std::vector<double>>& per_head) {
      std::vector<double> out(blocks, 0.0);
      for (const auto& row : per_head) {
        double max = -INFINITY, z = 0.0;
        for (std::int64_t b = c.first; b < c.last; ++b) max = std::max(max, row[b]);
        for (std::int64_t b = c.first; b < c.last; ++b) z += std::exp(row[b] - max);
        for (std::int64_t b = c.first; b < c.last; ++b) out[b] += std::exp(row[b] - max) / z;
      }
      return out;
    };
    std::vector<std::vector<double>> mean(heads, std::vector<double>(blocks)), mass = mean;
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::vector<float> q(queries.begin() + h * d, queries.begin() + (h + 1) * d);
      const auto s = true_scores(cache, q, 0.25);
      mean[h] = test::mean_pooled_scores(cache, q, 0.25, block);
      for (std::int64_t b = c.first; b < c.last; ++b) {
        const std::int64_t lo = b * block, hi = std::min(n, lo + block);
        double m = 0.0;
        for (std::int64_t p = std::max(lo, c.kept_prefix); p < std::min(hi, c.kept_suffix_begin);
             ++p)
          m += std::exp(s[p]);
        mass[h][b] = std::log(m);
      }
    }
    const auto combined_mean = combine(mean);
    const auto shortlist =
        best_of(range(c.first, c.last), combined_mean,
                config.rule_settings.get<std::int64_t>("shortlist") * config.top_k);
    for (auto& row : mass) {  // outside the shortlist: no mass
      for (std::int64_t b = c.first; b < c.last; ++b)
        if (std::find(shortlist.begin(), shortlist.end(), b) == shortlist.end()) row[b] = -INFINITY;
    }
    const auto combined_mass = combine(mass);
    BlockSparseDecode<> op(config);
    op.select(Eigen::Map<const RowMatrix>(queries.data(), heads, d),
              KvHead<KvView<float>>{cache.view(), &summaries});
    const std::vector<std::int64_t> got(op.selected_blocks(0).begin(), op.selected_blocks(0).end());
    CAPTURE(trial);
    require_same_up_to_ties(got, best_of(shortlist, combined_mass, config.top_k), combined_mass,
                            1e-5);
  }
}

TEST_CASE("the oracle's block log-masses: the group in one pass, head by head and over pages agree",
          "[rules]") {
  // score_group reads each block's keys once for every head (KernelTable::log_sum_exp_rows);
  // head by head (score) and over pages of 8 rows, where a block of 16 comes in two runs and
  // KeyRows::log_mass reduces the scores itself, the scores must be the same bits (on every
  // kernel table: ctest runs this binary with each); and within f32 rounding of the log-masses
  // in double.
  constexpr std::int64_t heads = 7, d = 64, block = 16, n = 333;
  const test::TestCache<float> cache(n, d, 8, 2.0f);
  SparseConfig config;
  config.block_size = block;
  config.sinks = 3;
  config.window = 20;
  const auto summaries = BlockSummaries::build(cache.view(), block);
  const auto queries = test::random_floats(heads * d, 0.3f);
  const auto c = candidate_blocks(n, config);
  const auto blocks = static_cast<std::size_t>(summaries.blocks());
  {
    const OracleRule oracle;
    std::vector<float> group(heads * blocks, 5.0f), paged = group, by_head = group;
    oracle.score_blocks_group(GroupScoringInput{queries.data(), heads, summaries, c}, cache.view(),
                              group);
    oracle.score_blocks_group(GroupScoringInput{queries.data(), heads, summaries, c}, cache.paged(),
                              paged);
    for (std::int64_t h = 0; h < heads; ++h) {
      const BlockScoringInput in{std::span(queries.data() + h * d, d), summaries, c};
      oracle.score_blocks(in, cache.view(), std::span(by_head).subspan(h * blocks, blocks));
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::vector<float> q(queries.begin() + h * d, queries.begin() + (h + 1) * d);
      const auto s = true_scores(cache, q, 1.0);
      for (std::int64_t b = 0; b < static_cast<std::int64_t>(blocks); ++b) {
        CAPTURE(h, b);
        const std::size_t i = h * blocks + b;
        REQUIRE(std::bit_cast<std::uint32_t>(group[i]) == std::bit_cast<std::uint32_t>(by_head[i]));
        REQUIRE(std::bit_cast<std::uint32_t>(group[i]) == std::bit_cast<std::uint32_t>(paged[i]));
        if (b < c.first || b >= c.last) {
          REQUIRE(group[i] == 5.0f);  // not a candidate: untouched
          continue;
        }
        double mass = 0.0;
        for (std::int64_t p = std::max(b * block, c.kept_prefix);
             p < std::min((b + 1) * block, c.kept_suffix_begin); ++p)
          mass += std::exp(s[p]);
        REQUIRE(std::abs(group[i] - std::log(mass)) < 2e-5 * (1.0 + std::abs(std::log(mass))));
      }
    }
  }
}

TEST_CASE("twostage shortlists by the rule shortlist_score names", "[rules]") {
  // With the channel bound as the first stage, every block kept is among the shortlist * k
  // best by the bound (the bound's own scores are tested against double precision elsewhere).
  for (int trial = 0; trial < 20; ++trial) {
    const std::int64_t n = 900 + 41 * trial;
    const test::TestCache<float> cache(n, 16, 16, 3.0f);
    SparseConfig config;
    config.rule = RuleName::two_stage;
    config.rule_settings.set("shortlist_rule", RuleName::channel_bound);
    config.rule_settings.set("shortlist", 2);
    config.top_k = 1 + trial % 4;
    config.scale = 0.25f;
    const auto summaries = BlockSummaries::build(cache.view(), 16, required_summaries(config));
    REQUIRE(summaries.options().channel_bounds);  // what the first stage reads
    const auto q = test::random_floats(16);
    std::vector<float> scaled(q);
    for (float& x : scaled) x *= 0.25f;
    const auto c = candidate_blocks(n, config);
    std::vector<float> bound(static_cast<std::size_t>(summaries.blocks()));
    ChannelBoundRule::score_heads(scaled.data(), 1, summaries, c, bound.data(), 0);
    const std::vector<double> bound_d(bound.begin(), bound.end());
    const auto shortlist = best_of(range(c.first, c.last), bound_d, 2 * config.top_k);
    const auto got = select_with(config, cache, summaries, q);
    CAPTURE(trial);
    REQUIRE(static_cast<std::int64_t>(got.size()) == config.top_k);
    for (const auto b : got)
      REQUIRE(std::find(shortlist.begin(), shortlist.end(), b) != shortlist.end());
  }
}

TEST_CASE("operators check the summaries the rule reads, and only RegisteredRule's rule",
          "[rules]") {
  const test::TestCache<float> cache(500, 16);
  const auto means = BlockSummaries::build(cache.view(), 16);
  const auto q = test::random_floats(16);
  const Eigen::Map<const RowMatrix> query(q.data(), 1, 16);
  SparseConfig config;
  config.rule = RuleName::sub_block_means;
  BlockSparseDecode<> rule(config);
  REQUIRE_THROWS_WITH(
      rule.select(query, KvHead<KvView<float>>{cache.view(), &means}),
      Catch::Contains("rule submean reads summaries with channel_bounds=0 "
                      "value_norms=0 sub_blocks=4") &&
          Catch::Contains("built with channel_bounds=0 value_norms=0 sub_blocks=0"));
  // A template rule brings its own needs: config.rule does not apply to it.
  BlockSparseDecode<MeanPooledRule> plain(config, MeanPooledRule{});
  REQUIRE_NOTHROW(plain.select(query, KvHead<KvView<float>>{cache.view(), &means}));
}

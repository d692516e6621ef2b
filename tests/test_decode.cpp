// Dense and block-sparse decode against a double-precision reference, over strided and paged
// views, f32/bf16/f16 storage and GQA groups of 1, 2, 7 and 8 query heads; causal decode of
// several positions against dense decode at each, bit for bit.
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "amc/amc.hpp"
#include "test_cache.hpp"

using namespace amc;

namespace {

// Checks out/results of every head against the reference over `positions`.
template <KvStorage T>
void check_against_reference(const test::TestCache<T>& cache, const RowMatrix& queries,
                             const RowMatrix& out, std::span<const HeadResult> results,
                             const std::vector<std::vector<std::int64_t>>& positions_per_head,
                             double tolerance) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(cache.head_dim));
  for (Eigen::Index h = 0; h < queries.rows(); ++h) {
    CAPTURE(h);
    const auto& positions = positions_per_head[static_cast<std::size_t>(h)];
    const auto ref = test::reference_attention(queries.row(h).data(), cache.head_dim, cache.keys_f,
                                               cache.values_f, cache.stride, positions, scale);
    REQUIRE(results[h].positions_read == static_cast<std::int64_t>(positions.size()));
    REQUIRE(results[h].finite);  // finite inputs: never flagged (tests/test_numerics.cpp)
    if (positions.empty()) {
      REQUIRE(std::isinf(results[h].lse));
      REQUIRE(results[h].lse < 0);
      for (Eigen::Index i = 0; i < out.cols(); ++i) REQUIRE(out(h, i) == 0.0f);
      continue;
    }
    REQUIRE(test::max_relative_error(out.row(h).data(), ref.out) < tolerance);
    // The lse's own tolerance, plus the rounding any order of the scores' f32 sums may do.
    REQUIRE(std::abs(results[h].lse - ref.lse) <
            tolerance * (1.0 + std::abs(ref.lse)) + ref.score_rounding);
  }
}

RowMatrix random_queries(std::int64_t heads, std::int64_t head_dim) {
  const auto q = test::random_floats(static_cast<std::size_t>(heads * head_dim));
  return Eigen::Map<const RowMatrix>(q.data(), heads, head_dim);
}

template <KvStorage T, class Op, class View>
void run(Op& op, const RowMatrix& queries, const View& kv, const BlockSummaries* summaries,
         RowMatrix& out, std::vector<HeadResult>& results) {
  out.setConstant(queries.rows(), queries.cols(), std::nanf(""));
  results.assign(static_cast<std::size_t>(queries.rows()), HeadResult{});
  op.decode(queries, KvHead<View>{kv, summaries}, out, results);
}

}  // namespace

TEMPLATE_TEST_CASE("dense decode matches the reference", "[decode]", float, amc::bf16, amc::f16) {
  using T = TestType;
  for (std::int64_t heads : {1, 2, 7, 8}) {
    for (std::int64_t head_dim : {64, 24}) {
      for (std::int64_t n : {0, 1, 17, 300, 1029}) {
        CAPTURE(test::storage_name<T>(), heads, head_dim, n);
        const test::TestCache<T> cache(n, head_dim);
        const RowMatrix queries = random_queries(heads, head_dim);
        const std::vector<std::vector<std::int64_t>> all(static_cast<std::size_t>(heads),
                                                         cache.all_positions());
        DenseDecode dense;
        RowMatrix out;
        std::vector<HeadResult> results;
        run<T>(dense, queries, cache.view(), nullptr, out, results);
        check_against_reference(cache, queries, out, results, all, 2e-5);
        run<T>(dense, queries, cache.paged(), nullptr, out, results);
        check_against_reference(cache, queries, out, results, all, 2e-5);
      }
    }
  }
}

TEST_CASE("dense decode honours an explicit scale and writes into strided outputs", "[decode]") {
  const test::TestCache<float> cache(200, 16);
  const RowMatrix queries = random_queries(3, 16);
  RowMatrix big = RowMatrix::Constant(3, 40, 7.0f);  // output is a block of a wider matrix
  std::vector<HeadResult> results(3);
  DenseDecode dense(0.5f);
  dense.decode(queries, KvHead<KvView<float>>{cache.view(), nullptr}, big.leftCols(16), results);
  for (Eigen::Index h = 0; h < 3; ++h) {
    const auto ref =
        test::reference_attention(queries.row(h).data(), 16, cache.keys_f, cache.values_f,
                                  cache.stride, cache.all_positions(), 0.5);
    REQUIRE(test::max_relative_error(big.row(h).data(), ref.out) < 2e-5);
    REQUIRE(big(h, 16) == 7.0f);  // columns beyond the view untouched
  }
}

TEMPLATE_TEST_CASE("block-sparse decode equals the reference restricted to its support", "[decode]",
                   float, amc::bf16, amc::f16) {
  using T = TestType;
  for (auto scope : {SelectionScope::per_head, SelectionScope::per_group}) {
    for (auto rule : {RuleName::mean_pooled, RuleName::channel_bound, RuleName::oracle}) {
      for (std::int64_t heads : {1, 2, 7, 8}) {
        for (std::int64_t n : {1, 40, 333, 1000}) {
          CAPTURE(test::storage_name<T>(), to_string(scope), to_string(rule), heads, n);
          const std::int64_t head_dim = 32;
          const test::TestCache<T> cache(n, head_dim, /*page=*/24);
          SparseConfig config;
          config.block_size = 16;
          config.top_k = 4;
          config.sinks = 2;
          config.window = 20;
          config.scope = scope;
          config.rule = rule;
          const auto summaries = BlockSummaries::build(
              cache.view(), config.block_size, {.channel_bounds = true, .value_norms = false});
          const RowMatrix queries = random_queries(heads, head_dim);
          BlockSparseDecode<> sparse(config);
          RowMatrix out, paged_out;
          std::vector<HeadResult> results, paged_results;
          run<T>(sparse, queries, cache.view(), &summaries, out, results);

          std::vector<std::vector<std::int64_t>> supports;
          for (std::int64_t h = 0; h < heads; ++h) {
            const Support& support = sparse.support(h);
            supports.push_back(support.positions());
            // The support: sorted, distinct, within the cache, holding sinks, window and blocks.
            const auto& positions = supports.back();
            for (std::size_t i = 1; i < positions.size(); ++i)
              REQUIRE(positions[i - 1] < positions[i]);
            if (!positions.empty()) REQUIRE(positions.back() < n);
            for (std::int64_t p = 0; p < std::min<std::int64_t>(config.sinks, n); ++p)
              REQUIRE(support.contains(p));
            for (std::int64_t p = std::max<std::int64_t>(0, n - config.window); p < n; ++p)
              REQUIRE(support.contains(p));
            const auto candidates = candidate_blocks(n, config);
            REQUIRE(static_cast<std::int64_t>(sparse.selected_blocks(h).size()) ==
                    std::min(config.top_k, candidates.count()));
            for (std::int64_t b : sparse.selected_blocks(h)) {
              REQUIRE(b >= candidates.first);
              REQUIRE(b < candidates.last);
              for (std::int64_t p = b * config.block_size;
                   p < std::min((b + 1) * config.block_size, n); ++p)
                REQUIRE(support.contains(p));
            }
            if (scope == SelectionScope::per_group) REQUIRE(supports.back() == supports.front());
          }
          check_against_reference(cache, queries, out, results, supports, 2e-5);

          // The paged view of the same cache gives the same selection and output.
          run<T>(sparse, queries, cache.paged(), &summaries, paged_out, paged_results);
          for (std::int64_t h = 0; h < heads; ++h)
            REQUIRE(sparse.support(h).positions() == supports[h]);
          check_against_reference(cache, queries, paged_out, paged_results, supports, 2e-5);
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("a support covering every position gives the dense result", "[decode]", float,
                   amc::bf16, amc::f16) {
  using T = TestType;
  for (std::int64_t n : {1, 50, 257}) {
    const test::TestCache<T> cache(n, 64);
    SparseConfig config;
    config.block_size = 32;
    config.top_k = 1000;  // more than there are blocks
    config.sinks = 1;
    config.window = 8;
    const auto summaries = BlockSummaries::build(cache.view(), 32);
    const RowMatrix queries = random_queries(7, 64);
    BlockSparseDecode<> sparse(config);
    DenseDecode dense;
    RowMatrix sparse_out, dense_out;
    std::vector<HeadResult> sparse_results, dense_results;
    run<T>(sparse, queries, cache.view(), &summaries, sparse_out, sparse_results);
    run<T>(dense, queries, cache.view(), nullptr, dense_out, dense_results);
    for (std::int64_t h = 0; h < 7; ++h) {
      REQUIRE(sparse_results[h].positions_read == n);
      REQUIRE(sparse_results[h].lse == Approx(dense_results[h].lse).epsilon(1e-6));
      for (Eigen::Index i = 0; i < 64; ++i)
        REQUIRE(std::abs(sparse_out(h, i) - dense_out(h, i)) <=
                1e-6f * (1.0f + std::abs(dense_out(h, i))));
    }
  }
}

TEST_CASE("nothing selected beyond sinks and window; partial last block", "[decode]") {
  const std::int64_t n = 1000;  // 62 full blocks of 16 and a partial block of 8
  const test::TestCache<bf16> cache(n, 64);
  const auto summaries = BlockSummaries::build(cache.view(), 16);
  REQUIRE(summaries.blocks() == 63);
  const RowMatrix queries = random_queries(2, 64);
  RowMatrix out;
  std::vector<HeadResult> results;

  SparseConfig none;
  none.block_size = 16;
  none.top_k = 0;
  none.sinks = 3;
  none.window = 5;
  BlockSparseDecode<> sparse(none);
  run<bf16>(sparse, queries, cache.view(), &summaries, out, results);
  std::vector<std::int64_t> expected = {0, 1, 2, 995, 996, 997, 998, 999};
  REQUIRE(sparse.support(0).positions() == expected);
  check_against_reference(cache, queries, out, results, {expected, expected}, 2e-5);

  // No sinks, no window, no blocks: an empty support normalises to zeros with lse = -inf.
  SparseConfig empty = none;
  empty.sinks = 0;
  empty.window = 0;
  BlockSparseDecode<> nothing(empty);
  run<bf16>(nothing, queries, cache.view(), &summaries, out, results);
  check_against_reference(cache, queries, out, results, {{}, {}}, 2e-5);

  // The oracle with k = 1 and no window must be able to pick the partial last block.
  SparseConfig last = empty;
  last.top_k = 63;
  last.rule = RuleName::oracle;
  BlockSparseDecode<> all_blocks(last);
  run<bf16>(all_blocks, queries, cache.view(), &summaries, out, results);
  REQUIRE(results[0].positions_read == n);
}

namespace {

// A user-defined rule: prefer later blocks (a recency rule). Models BlockRuleLike.
struct RecencyRule {
  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& input, const View&, std::span<float> scores) const {
    for (std::int64_t b = input.candidates.first; b < input.candidates.last; ++b)
      scores[static_cast<std::size_t>(b)] = static_cast<float>(b);
  }
};

}  // namespace

TEST_CASE("a user-defined rule plugs into the block-sparse operator", "[decode]") {
  static_assert(BlockRuleLike<RecencyRule, KvView<float>>);
  static_assert(DecodeOperator<BlockSparseDecode<RecencyRule>, PagedKvView<f16>>);
  const test::TestCache<float> cache(500, 16);
  const auto summaries = BlockSummaries::build(cache.view(), 10);
  SparseConfig config;
  config.block_size = 10;
  config.top_k = 3;
  config.sinks = 0;
  config.window = 15;  // covers positions 485..499: blocks 49 fully, 48 partly
  BlockSparseDecode<RecencyRule> sparse(config);
  const RowMatrix queries = random_queries(1, 16);
  RowMatrix out;
  std::vector<HeadResult> results;
  run<float>(sparse, queries, cache.view(), &summaries, out, results);
  REQUIRE(std::vector<std::int64_t>(sparse.selected_blocks(0).begin(),
                                    sparse.selected_blocks(0).end()) ==
          std::vector<std::int64_t>{46, 47, 48});
  std::vector<std::int64_t> expected;
  for (std::int64_t p = 460; p < 500; ++p) expected.push_back(p);
  check_against_reference(cache, queries, out, results, {expected}, 2e-5);
}

TEST_CASE("decode_support over explicit ranges", "[decode]") {
  const test::TestCache<f16> cache(300, 64, 32);
  Support support;
  support.add(250, 400, 300);  // clipped to the cache
  support.add(10, 20, 300);
  support.add(15, 30, 300);  // overlaps: merged
  support.normalize();
  REQUIRE(support.ranges().size() == 2);
  const RowMatrix queries = random_queries(7, 64);
  RowMatrix out(7, 64);
  std::vector<HeadResult> results(7);
  decode_support(queries, cache.paged(), support, 0.125f, out, results);
  const auto positions = support.positions();
  REQUIRE(positions.size() == 70);
  for (std::int64_t h = 0; h < 7; ++h) {
    const auto ref = test::reference_attention(queries.row(h).data(), 64, cache.keys_f,
                                               cache.values_f, cache.stride, positions, 0.125);
    REQUIRE(test::max_relative_error(out.row(h).data(), ref.out) < 2e-5);
  }
}

namespace {

/// The first `m` positions of `cache` as a contiguous view and as a paged one.
template <KvStorage T>
KvView<T> prefix_view(const test::TestCache<T>& cache, std::int64_t m) {
  return KvView<T>(cache.keys.data(), cache.values.data(), m, cache.head_dim, cache.stride,
                   cache.stride);
}
template <KvStorage T>
PagedKvView<T> prefix_paged(const test::TestCache<T>& cache, std::int64_t m) {
  const std::int64_t pages = (m + cache.page_size - 1) / cache.page_size;
  const std::int64_t last = m == 0 ? 0 : m - (pages - 1) * cache.page_size;
  return PagedKvView<T>(cache.key_pool.data(), cache.value_pool.data(), cache.pool_rows,
                        cache.head_dim,
                        std::span(cache.page_table).first(static_cast<std::size_t>(pages)),
                        cache.page_size, last, cache.stride, cache.stride);
}

bool same_bits(const float* a, const float* b, std::int64_t n) {
  return std::memcmp(a, b, static_cast<std::size_t>(n) * sizeof(float)) == 0;
}

/// CausalDenseDecode over the whole cache against DenseDecode over each position's prefix:
/// every output row and lse bit for bit.
template <KvStorage T, class MakeView>
void check_causal(const test::TestCache<T>& cache, std::int64_t heads, std::int64_t positions,
                  MakeView make_view) {
  const RowMatrix queries = random_queries(positions * heads, cache.head_dim);
  RowMatrix out;
  std::vector<HeadResult> results;
  CausalDenseDecode causal;
  out.setConstant(queries.rows(), queries.cols(), std::nanf(""));
  results.assign(static_cast<std::size_t>(queries.rows()), HeadResult{});
  const auto whole = make_view(cache.positions);
  causal.decode(queries, positions, KvHead<decltype(whole)>{whole, nullptr}, out, results);
  DenseDecode dense;
  for (std::int64_t t = 0; t < positions; ++t) {
    const std::int64_t prefix = cache.positions - (positions - 1 - t);
    CAPTURE(t, prefix);
    const RowMatrix q = queries.middleRows(t * heads, heads);
    RowMatrix want;
    std::vector<HeadResult> want_results;
    run<T>(dense, q, make_view(prefix), nullptr, want, want_results);
    for (std::int64_t h = 0; h < heads; ++h) {
      const auto& got = results[static_cast<std::size_t>(t * heads + h)];
      const auto& expected = want_results[static_cast<std::size_t>(h)];
      REQUIRE(same_bits(out.row(t * heads + h).data(), want.row(h).data(), cache.head_dim));
      REQUIRE(std::memcmp(&got.lse, &expected.lse, sizeof(float)) == 0);
      REQUIRE(got.positions_read == prefix);
      REQUIRE(got.finite);
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("causal dense decode of several positions is dense decode at each, bit for bit",
                   "[decode][speculative]", float, amc::bf16, amc::f16) {
  using T = TestType;
  for (std::int64_t heads : {1, 3, 7}) {
    for (std::int64_t head_dim : {64, 24}) {
      // Lengths around the kernels' chunk of 32 and a page of 40 (not a multiple of it).
      for (std::int64_t n : {1, 9, 31, 32, 33, 64, 70, 300, 1029}) {
        for (std::int64_t positions : {1, 2, 5, 9}) {
          if (positions > n) continue;
          CAPTURE(test::storage_name<T>(), heads, head_dim, n, positions);
          const test::TestCache<T> cache(n, head_dim, 40);
          check_causal(cache, heads, positions,
                       [&](std::int64_t m) { return prefix_view(cache, m); });
          check_causal(cache, heads, positions,
                       [&](std::int64_t m) { return prefix_paged(cache, m); });
        }
      }
    }
  }
}

TEST_CASE("causal dense decode refuses shapes it cannot attend", "[decode][speculative]") {
  const test::TestCache<float> cache(4, 16);
  const RowMatrix queries = random_queries(6, 16);
  RowMatrix out(6, 16);
  std::vector<HeadResult> results(6);
  CausalDenseDecode causal;
  const KvHead<KvView<float>> head{cache.view(), nullptr};
  CHECK_THROWS_WITH(causal.decode(queries, 4, head, out, results),
                    Catch::Matchers::Contains("amc::CausalDenseDecode::decode") &&
                        Catch::Matchers::Contains("divide the 6 query rows, got 4"));
  CHECK_THROWS_WITH(causal.decode(queries, 0, head, out, results),
                    Catch::Matchers::Contains("positions must be >= 1"));
  const test::TestCache<float> short_cache(2, 16);
  CHECK_THROWS_WITH(
      causal.decode(queries, 3, KvHead<KvView<float>>{short_cache.view(), nullptr}, out, results),
      Catch::Matchers::Contains("fewer than the 3 query positions"));
  CHECK_THROWS_WITH(CausalDenseDecode(-1.0f), Catch::Matchers::Contains("scale must be positive"));
}

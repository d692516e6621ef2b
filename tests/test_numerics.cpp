// The numerics policy of the decode operators (HeadResult::finite, docs/reliability.md): NaN and
// Inf in q, k or v are flagged, never returned as a valid number; finite scores of any size give
// finite, correct results (the running max); and the edge cases of the support: all-equal scores,
// n = 0, n smaller than sinks + window, k larger than the number of blocks. Run on every kernel
// set (ctest runs this executable again with AMC_KERNELS=scalar and sse2).
#include <cmath>
#include <limits>
#include <vector>

#include "amc/amc.hpp"
#include "amc/math/certified_bounds.hpp"
#include "test_helpers.hpp"

using namespace amc;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

/// One KV head [n, d], contiguous, with the inputs as floats and what the storage holds.
template <KvStorage T>
struct Head {
  std::int64_t n = 0, d = 0;
  std::vector<float> k, v;    // the inputs
  std::vector<T> ks, vs;      // stored
  std::vector<float> kf, vf;  // stored, as floats

  Head(std::int64_t positions, std::int64_t head_dim)
      : n(positions),
        d(head_dim),
        k(test::random_floats(
            static_cast<std::size_t>(std::max<std::int64_t>(positions, 1) * head_dim))),
        v(test::random_floats(
            static_cast<std::size_t>(std::max<std::int64_t>(positions, 1) * head_dim))) {
    store();
  }
  void store() {
    ks = test::to_storage<T>(k, &kf);
    vs = test::to_storage<T>(v, &vf);
  }
  float& key(std::int64_t p, std::int64_t i) { return k[static_cast<std::size_t>(p * d + i)]; }
  float& value(std::int64_t p, std::int64_t i) { return v[static_cast<std::size_t>(p * d + i)]; }
  KvView<T> view() const { return KvView<T>(ks.data(), vs.data(), n, d, d, d); }
};

RowMatrix random_queries(std::int64_t heads, std::int64_t head_dim) {
  const auto q = test::random_floats(static_cast<std::size_t>(heads * head_dim));
  return Eigen::Map<const RowMatrix>(q.data(), heads, head_dim);
}

bool row_finite(const RowMatrix& m, Eigen::Index row) {
  return m.row(row).array().isFinite().all();
}

/// The reference over `positions` for head h; checks out/lse against it and that it is finite.
template <KvStorage T>
void check_reference(const Head<T>& head, const RowMatrix& queries, Eigen::Index h,
                     const RowMatrix& out, const HeadResult& result,
                     const std::vector<std::int64_t>& positions, double scale, double tolerance) {
  const auto ref = test::reference_attention(queries.row(h).data(), head.d, head.kf, head.vf,
                                             head.d, positions, scale);
  REQUIRE(result.finite);
  REQUIRE(row_finite(out, h));
  REQUIRE(result.positions_read == static_cast<std::int64_t>(positions.size()));
  REQUIRE(test::max_relative_error(out.row(h).data(), ref.out) < tolerance);
  REQUIRE(std::abs(result.lse - ref.lse) <= tolerance * (1.0 + std::abs(ref.lse)));
}

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t p = 0; p < n; ++p) out.push_back(p);
  return out;
}

template <class Op, KvViewLike View>
void run(Op& op, const RowMatrix& queries, const View& kv, const BlockSummaries* summaries,
         RowMatrix& out, std::vector<HeadResult>& results) {
  out.setConstant(queries.rows(), queries.cols(), 12345.0f);
  results.assign(static_cast<std::size_t>(queries.rows()), HeadResult{-1.0f, -1, false});
  op.decode(queries, KvHead<View>{kv, summaries}, out, results);
}

SparseConfig sparse_config(SelectionScope scope, RuleName rule) {
  SparseConfig config;
  config.block_size = 16;
  config.top_k = 3;
  config.sinks = 2;
  config.window = 16;
  config.scope = scope;
  config.rule = rule;
  return config;
}

enum class Poison { q_nan, q_inf, k_nan, k_inf, v_nan, v_inf };

const char* name(Poison p) {
  switch (p) {
    case Poison::q_nan:
      return "NaN in q";
    case Poison::q_inf:
      return "+Inf in q";
    case Poison::k_nan:
      return "NaN in k";
    case Poison::k_inf:
      return "+Inf in k";
    case Poison::v_nan:
      return "NaN in v";
    case Poison::v_inf:
      return "+Inf in v";
  }
  return "?";
}

}  // namespace

// --- NaN and Inf -------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("dense decode flags NaN and Inf in q, k and v; other heads stay correct",
                   "[numerics]", float, amc::bf16, amc::f16) {
  using T = TestType;
  const std::int64_t heads = 4, d = 64, n = 300, p = 137;  // p: the poisoned position
  const double scale = 1.0 / 8.0;
  for (const Poison poison :
       {Poison::q_nan, Poison::q_inf, Poison::k_nan, Poison::k_inf, Poison::v_nan, Poison::v_inf}) {
    CAPTURE(test::storage_name<T>(), name(poison));
    Head<T> head(n, d);
    // Positive queries and keys, so +Inf in a key channel makes that score +Inf (not -Inf).
    RowMatrix queries = random_queries(heads, d).cwiseAbs();
    for (float& x : head.k) x = std::abs(x);
    switch (poison) {
      case Poison::q_nan:
        queries(1, 5) = kNaN;
        break;
      case Poison::q_inf:
        queries(1, 5) = kInf;
        break;
      case Poison::k_nan:
        head.key(p, 7) = kNaN;
        break;
      case Poison::k_inf:
        head.key(p, 7) = kInf;
        break;
      case Poison::v_nan:
        head.value(p, 7) = kNaN;
        break;
      case Poison::v_inf:
        head.value(p, 7) = kInf;
        break;
    }
    head.store();
    const bool only_head_1 = poison == Poison::q_nan || poison == Poison::q_inf;
    DenseDecode dense;
    RowMatrix out;
    std::vector<HeadResult> results;
    run(dense, queries, head.view(), nullptr, out, results);
    for (Eigen::Index h = 0; h < heads; ++h) {
      CAPTURE(h);
      const bool poisoned = !only_head_1 || h == 1;
      if (poisoned) {
        REQUIRE_FALSE(results[h].finite);
        // The flag is what a caller checks; it agrees with the numbers.
        REQUIRE((!row_finite(out, h) || !std::isfinite(results[h].lse)));
        REQUIRE(results[h].positions_read == n);
      } else {
        check_reference(head, queries, h, out, results[h], iota(n), scale, 2e-5);
      }
    }
  }
}

TEMPLATE_TEST_CASE(
    "a score of -Inf weighs exactly zero; a key overflowing the dot product is flagged",
    "[numerics]", float, amc::bf16, amc::f16) {
  using T = TestType;
  const std::int64_t d = 32, n = 200;
  Head<T> head(n, d);
  RowMatrix queries = random_queries(1, d).cwiseAbs();
  head.key(70, 3) = -kInf;  // score -Inf: the position is infinitely unlikely, not an error
  head.store();
  DenseDecode dense;
  RowMatrix out;
  std::vector<HeadResult> results;
  run(dense, queries, head.view(), nullptr, out, results);
  std::vector<std::int64_t> others = iota(n);
  others.erase(others.begin() + 70);
  const auto ref = test::reference_attention(queries.row(0).data(), d, head.kf, head.vf, d, others,
                                             1.0 / std::sqrt(32.0));
  REQUIRE(results[0].finite);
  REQUIRE(results[0].positions_read == n);
  REQUIRE(test::max_relative_error(out.row(0).data(), ref.out) < 2e-5);
  REQUIRE(std::abs(results[0].lse - ref.lse) < 2e-5 * (1.0 + std::abs(ref.lse)));

  if constexpr (!std::same_as<T, f16>) {  // f16 keys cannot hold 1e30
    // Finite q and k whose dot product overflows f32: the score is +Inf and the head is flagged.
    Head<T> big(n, d);
    big.key(12, 0) = 1e30f;
    big.store();
    RowMatrix q = random_queries(1, d);
    q(0, 0) = 1e30f;
    run(dense, q, big.view(), nullptr, out, results);
    REQUIRE_FALSE(results[0].finite);
  }
}

TEMPLATE_TEST_CASE("block-sparse decode is flagged exactly when it reads a poisoned position",
                   "[numerics]", float, amc::bf16, amc::f16) {
  using T = TestType;
  const std::int64_t heads = 3, d = 32, n = 400;
  for (const auto scope : {SelectionScope::per_head, SelectionScope::per_group}) {
    for (const auto rule : {RuleName::mean_pooled, RuleName::channel_bound, RuleName::oracle}) {
      for (const Poison poison : {Poison::k_nan, Poison::k_inf, Poison::v_nan, Poison::v_inf}) {
        // Poisoned positions in a sink, in the window and in several middle blocks.
        for (const std::int64_t p : {1, 395, 40, 133, 250, 301}) {
          CAPTURE(test::storage_name<T>(), to_string(scope), to_string(rule), name(poison), p);
          const SparseConfig config = sparse_config(scope, rule);
          Head<T> head(n, d);
          RowMatrix queries = random_queries(heads, d).cwiseAbs();
          for (float& x : head.k) x = std::abs(x);
          float& target = poison == Poison::k_nan || poison == Poison::k_inf ? head.key(p, 4)
                                                                             : head.value(p, 4);
          target = poison == Poison::k_nan || poison == Poison::v_nan ? kNaN : kInf;
          head.store();
          const auto summaries = BlockSummaries::build(
              head.view(), config.block_size, {.channel_bounds = true, .value_norms = false});
          BlockSparseDecode<> sparse(config);
          RowMatrix out;
          std::vector<HeadResult> results;
          run(sparse, queries, head.view(), &summaries, out, results);
          for (Eigen::Index h = 0; h < heads; ++h) {
            CAPTURE(h);
            const Support& support = sparse.support(h);
            if (support.contains(p)) {
              REQUIRE_FALSE(results[h].finite);
            } else {
              // A NaN key's block ranks last; what the head did read is unaffected.
              check_reference(head, queries, h, out, results[h], support.positions(),
                              1.0 / std::sqrt(32.0), 2e-5);
            }
          }
          if (poison == Poison::k_nan && p != 1 && p != 395) {
            // k = 3 of 22 candidate blocks: a block whose score is NaN is never among them.
            for (Eigen::Index h = 0; h < heads; ++h) REQUIRE_FALSE(sparse.support(h).contains(p));
          }
        }
      }
    }
  }
}

TEST_CASE("NaN in one query head of a sparse group: that head is flagged", "[numerics]") {
  const std::int64_t heads = 4, d = 32, n = 300;
  Head<bf16> head(n, d);
  RowMatrix queries = random_queries(heads, d);
  queries(2, 0) = kNaN;
  for (const auto scope : {SelectionScope::per_head, SelectionScope::per_group}) {
    const SparseConfig config = sparse_config(scope, RuleName::mean_pooled);
    const auto summaries = BlockSummaries::build(head.view(), config.block_size);
    BlockSparseDecode<> sparse(config);
    RowMatrix out;
    std::vector<HeadResult> results;
    run(sparse, queries, head.view(), &summaries, out, results);
    for (Eigen::Index h = 0; h < heads; ++h) {
      CAPTURE(to_string(scope), h);
      if (h == 2) {
        REQUIRE_FALSE(results[h].finite);
      } else {
        check_reference(head, queries, h, out, results[h], sparse.support(h).positions(),
                        1.0 / std::sqrt(32.0), 2e-5);
      }
    }
  }
}

// --- overflow of a naive exp ------------------------------------------------------------------

TEMPLATE_TEST_CASE("scores far beyond exp's range give the exact softmax (running max)",
                   "[numerics]", float, amc::bf16, amc::f16) {
  using T = TestType;
  // Query e_0 and scale 1: the score of position j is exactly the stored key channel 0.
  const std::int64_t d = 16;
  for (const std::int64_t n : {1, 5, 64, 65, 300}) {
    CAPTURE(test::storage_name<T>(), n);
    RowMatrix queries = RowMatrix::Zero(2, d);
    queries(0, 0) = 1.0f;
    queries(1, 0) = 1.0f;
    queries(1, 1) = 0.0f;

    // (a) Scores around 200 (exp(200) overflows f32 by far) with unit gaps: a non-trivial
    //     softmax, exact in every storage type (small integers plus 200).
    Head<T> moderate(n, d);
    for (std::int64_t j = 0; j < n; ++j)
      moderate.key(j, 0) = 200.0f - static_cast<float>((j * 7) % 9);
    moderate.store();
    DenseDecode dense(1.0f);
    RowMatrix out;
    std::vector<HeadResult> results;
    run(dense, queries, moderate.view(), nullptr, out, results);
    for (Eigen::Index h = 0; h < 2; ++h) {
      check_reference(moderate, queries, h, out, results[h], iota(n), 1.0, 2e-6);
      REQUIRE(results[h].lse >= 200.0f);
    }

    // (b) Huge scores: the largest near the top of the storage type's range, the others far
    //     below (gaps beyond f32's range too): the softmax is one-hot on the maximum, so the
    //     output is that value row exactly and lse is the maximum score exactly.
    const float top = std::same_as<T, f16> ? 60000.0f : 3.0e38f;
    Head<T> huge(n, d);
    const std::int64_t argmax = (n * 2) / 3;
    for (std::int64_t j = 0; j < n; ++j) {
      huge.key(j, 0) = j == argmax ? top
                                   : (j % 2 == 0 ? -top : top / 4.0f) *
                                         (1.0f - 0.001f * static_cast<float>(j % 50));
    }
    huge.store();
    run(dense, queries, huge.view(), nullptr, out, results);
    const float stored_top = huge.kf[static_cast<std::size_t>(argmax * d)];
    for (Eigen::Index h = 0; h < 2; ++h) {
      REQUIRE(results[h].finite);
      REQUIRE(results[h].lse == stored_top);
      for (std::int64_t i = 0; i < d; ++i)
        REQUIRE(out(h, i) == huge.vf[static_cast<std::size_t>(argmax * d + i)]);
    }

    // The same through the block-sparse operator with a covering support.
    SparseConfig config = sparse_config(SelectionScope::per_group, RuleName::mean_pooled);
    config.top_k = 1000;
    config.scale = 1.0f;
    const auto summaries = BlockSummaries::build(huge.view(), config.block_size);
    BlockSparseDecode<> sparse(config);
    run(sparse, queries, huge.view(), &summaries, out, results);
    for (Eigen::Index h = 0; h < 2; ++h) {
      REQUIRE(results[h].finite);
      REQUIRE(results[h].lse == stored_top);
      for (std::int64_t i = 0; i < d; ++i)
        REQUIRE(out(h, i) == huge.vf[static_cast<std::size_t>(argmax * d + i)]);
    }
  }
}

// --- edge cases of the support ------------------------------------------------------------------

TEMPLATE_TEST_CASE("all-equal scores give the mean of the values and lse = s + log n", "[numerics]",
                   float, amc::bf16, amc::f16) {
  using T = TestType;
  const std::int64_t d = 64;
  for (const std::int64_t n : {1, 2, 63, 64, 65, 1000}) {
    CAPTURE(test::storage_name<T>(), n);
    Head<T> head(n, d);
    // Every key the same row: every head's scores are equal (to its own <q, k>).
    for (std::int64_t j = 1; j < n; ++j)
      for (std::int64_t i = 0; i < d; ++i) head.key(j, i) = head.key(0, i);
    head.store();
    RowMatrix queries = random_queries(3, d);
    queries.row(2).setZero();  // all scores exactly 0
    DenseDecode dense;
    RowMatrix out;
    std::vector<HeadResult> results;
    run(dense, queries, head.view(), nullptr, out, results);
    for (Eigen::Index h = 0; h < 3; ++h)
      check_reference(head, queries, h, out, results[h], iota(n), 0.125, 2e-5);
    REQUIRE(results[2].lse == Approx(std::log(static_cast<double>(n))).epsilon(1e-6));

    // Selection among equal block scores: ties go to the lower block index.
    SparseConfig config = sparse_config(SelectionScope::per_head, RuleName::mean_pooled);
    config.sinks = 0;
    config.window = 0;
    const auto summaries = BlockSummaries::build(head.view(), config.block_size);
    BlockSparseDecode<> sparse(config);
    run(sparse, queries, head.view(), &summaries, out, results);
    const std::int64_t blocks = (n + 15) / 16;
    std::vector<std::int64_t> first;
    for (std::int64_t b = 0; b < std::min<std::int64_t>(3, blocks); ++b) first.push_back(b);
    const auto selected = sparse.selected_blocks(2);
    REQUIRE(std::vector<std::int64_t>(selected.begin(), selected.end()) == first);
    for (Eigen::Index h = 0; h < 3; ++h)
      check_reference(head, queries, h, out, results[h], sparse.support(h).positions(), 0.125,
                      2e-5);
  }
}

TEMPLATE_TEST_CASE("n = 0: every operator returns zeros, lse = -inf, nothing read, finite",
                   "[numerics]", float, amc::bf16, amc::f16) {
  using T = TestType;
  const std::int64_t d = 32;
  const Head<T> head(0, d);
  const RowMatrix queries = random_queries(3, d);
  RowMatrix out;
  std::vector<HeadResult> results;
  auto check_empty = [&] {
    for (Eigen::Index h = 0; h < 3; ++h) {
      REQUIRE(results[h].finite);
      REQUIRE(results[h].positions_read == 0);
      REQUIRE(results[h].lse == -kInf);
      REQUIRE((out.row(h).array() == 0.0f).all());
    }
  };
  DenseDecode dense;
  run(dense, queries, head.view(), nullptr, out, results);
  check_empty();
  for (const auto scope : {SelectionScope::per_head, SelectionScope::per_group}) {
    for (const auto rule : {RuleName::mean_pooled, RuleName::channel_bound, RuleName::oracle}) {
      CAPTURE(to_string(scope), to_string(rule));
      const SparseConfig config = sparse_config(scope, rule);
      const auto summaries = BlockSummaries::build(head.view(), config.block_size,
                                                   {.channel_bounds = true, .value_norms = false});
      BlockSparseDecode<> sparse(config);
      run(sparse, queries, head.view(), &summaries, out, results);
      check_empty();
      REQUIRE(sparse.selected_blocks(0).empty());
    }
  }
  out.setConstant(3, d, 1.0f);
  results.assign(3, HeadResult{});
  decode_support(queries, head.view(), Support{}, 0.5f, out, results);
  check_empty();
  const std::vector<KvHead<KvView<T>>> kv_heads{{head.view(), nullptr}};
  LayerDecode<DenseDecode> layer(DenseDecode{}, 2);
  out.setConstant(3, d, 1.0f);
  layer.decode(queries, std::span<const KvHead<KvView<T>>>(kv_heads), out, results);
  check_empty();
}

TEMPLATE_TEST_CASE("n < sinks + window and k > blocks: sparse reads everything, as dense",
                   "[numerics]", float, amc::bf16, amc::f16) {
  using T = TestType;
  const std::int64_t d = 64, heads = 7;
  for (const std::int64_t n : {1, 2, 15, 16, 17, 40, 65}) {
    for (const auto scope : {SelectionScope::per_head, SelectionScope::per_group}) {
      CAPTURE(test::storage_name<T>(), n, to_string(scope));
      const Head<T> head(n, d);
      const RowMatrix queries = random_queries(heads, d);
      DenseDecode dense;
      RowMatrix dense_out, out;
      std::vector<HeadResult> dense_results, results;
      run(dense, queries, head.view(), nullptr, dense_out, dense_results);

      SparseConfig small = sparse_config(scope, RuleName::mean_pooled);
      small.sinks = 32;
      small.window = 48;  // sinks + window = 80 > n
      small.top_k = 0;
      SparseConfig many = sparse_config(scope, RuleName::channel_bound);
      many.sinks = 0;
      many.window = 0;
      many.top_k = 1000;  // far more than the (n + 15) / 16 blocks
      for (const SparseConfig& config : {small, many}) {
        const auto summaries = BlockSummaries::build(
            head.view(), config.block_size, {.channel_bounds = true, .value_norms = false});
        BlockSparseDecode<> sparse(config);
        run(sparse, queries, head.view(), &summaries, out, results);
        for (Eigen::Index h = 0; h < heads; ++h) {
          REQUIRE(results[h].finite);
          REQUIRE(results[h].positions_read == n);
          REQUIRE(sparse.support(h).positions() == iota(n));
          if (scope == SelectionScope::per_group) {
            // One range [0, n) through the same kernel call as dense: bitwise equal.
            REQUIRE(results[h].lse == dense_results[h].lse);
            REQUIRE((out.row(h).array() == dense_out.row(h).array()).all());
          } else {
            REQUIRE(results[h].lse == Approx(dense_results[h].lse).epsilon(1e-6));
            for (Eigen::Index i = 0; i < d; ++i)
              REQUIRE(std::abs(out(h, i) - dense_out(h, i)) <=
                      1e-6f * (1.0f + std::abs(dense_out(h, i))));
          }
        }
      }
    }
  }
}

TEST_CASE("block summaries keep NaN: certified bounds over a NaN block are NaN, not finite",
          "[numerics]") {
  const std::int64_t d = 16, n = 160;  // 10 blocks of 16
  Head<float> key_head(n, d), value_head(n, d);
  key_head.key(5 * 16 + 3, 2) = kNaN;      // block 5: a NaN key channel
  value_head.value(8 * 16 + 9, 4) = kNaN;  // block 8: a NaN value
  key_head.store();
  value_head.store();
  const SummaryOptions all{.channel_bounds = true, .value_norms = true};
  const auto key_summaries = BlockSummaries::build(key_head.view(), 16, all);
  const auto value_summaries = BlockSummaries::build(value_head.view(), 16, all);
  for (std::int64_t b = 0; b < 10; ++b) {
    CAPTURE(b);
    REQUIRE(std::isnan(key_summaries.channel_min()(b, 2)) == (b == 5));
    REQUIRE(std::isnan(key_summaries.channel_max()(b, 2)) == (b == 5));
    REQUIRE(std::isnan(key_summaries.mean_keys()(b, 2)) == (b == 5));
    REQUIRE(std::isnan(value_summaries.value_norm_max()[static_cast<std::size_t>(b)]) == (b == 8));
  }
  const RowMatrix queries = random_queries(1, d);
  const std::span<const float> query(queries.row(0).data(), d);
  RowMatrix out(1, d);
  std::vector<HeadResult> results(1);
  // Every block but `skipped`: the step reads no NaN, and the bounds cover the skipped block.
  auto step = [&](const Head<float>& head, const BlockSummaries& summaries, std::int64_t skipped) {
    Support support;
    support.add(0, skipped * 16, n);
    support.add((skipped + 1) * 16, n, n);
    support.normalize();
    decode_support(queries, head.view(), support, 0.25f, out, results);
    REQUIRE(results[0].finite);
    return certified_bounds(query, 0.25, head.view(), summaries, support);
  };
  // The omitted block's NaN key: no omitted-mass bound can be certified.
  CHECK(std::isnan(step(key_head, key_summaries, 5).omitted_mass_bound));
  // The omitted block's NaN value: the mass bound stands, the error bound cannot.
  const CertifiedBounds value_bounds = step(value_head, value_summaries, 8);
  CHECK(std::isfinite(value_bounds.omitted_mass_bound));
  CHECK(std::isnan(value_bounds.error_bound));
  // Adaptive selection never claims a target met over a NaN key, omitted or read.
  SparseConfig config;
  config.block_size = 16;
  config.sinks = 0;
  config.window = 16;
  const std::vector<float> ranking(10, 1.0f);
  const AdaptiveSelection adaptive =
      adaptive_select(query, 0.25, key_head.view(), key_summaries, config, ranking, 0.5, 10);
  CHECK_FALSE(adaptive.target_met);
  CHECK(std::isnan(adaptive.omitted_mass_bound));
  // Reading the poisoned block instead: the step itself is flagged.
  for (const Head<float>* head : {&key_head, &value_head}) {
    Support everything;
    everything.add(0, n, n);
    decode_support(queries, head->view(), everything, 0.25f, out, results);
    CHECK_FALSE(results[0].finite);
  }
}

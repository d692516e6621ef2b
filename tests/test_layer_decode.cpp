// The layer-level entry point: every GQA group, in parallel, bitwise equal to one thread and to
// calling the operator group by group.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "amc/amc.hpp"
#include "test_cache.hpp"

using namespace amc;

namespace {

template <class Op>
void check_layer(Op prototype, bool sparse) {
  const std::int64_t kv_heads = 2, per_group = 7, head_dim = 64, n = 700;
  std::vector<test::TestCache<bf16>> caches;
  std::vector<BlockSummaries> summaries;
  for (std::int64_t g = 0; g < kv_heads; ++g) caches.emplace_back(n, head_dim);
  for (const auto& cache : caches) summaries.push_back(BlockSummaries::build(cache.view(), 16));
  std::vector<KvHead<KvView<bf16>>> heads;
  for (std::int64_t g = 0; g < kv_heads; ++g)
    heads.push_back({caches[g].view(), sparse ? &summaries[g] : nullptr});
  const RowMatrix queries = RowMatrix::Random(kv_heads * per_group, head_dim);

  RowMatrix one(queries.rows(), head_dim), two(queries.rows(), head_dim),
      direct(queries.rows(), head_dim);
  std::vector<HeadResult> r1(14), r2(14), rd(14);
  LayerDecode<Op> single(prototype, 1), parallel(prototype, 2);
  single.decode(queries, std::span<const KvHead<KvView<bf16>>>(heads), one, r1);
  parallel.decode(queries, std::span<const KvHead<KvView<bf16>>>(heads), two, r2);
  REQUIRE(parallel.threads() == 2);
  for (std::int64_t g = 0; g < kv_heads; ++g) {
    Op op = prototype;
    op.decode(queries.middleRows(g * per_group, per_group), heads[g],
              direct.middleRows(g * per_group, per_group),
              std::span(rd).subspan(g * per_group, per_group));
  }
  REQUIRE((one.array() == two.array()).all());  // bitwise, not approximately
  REQUIRE((one.array() == direct.array()).all());
  for (std::size_t h = 0; h < 14; ++h) {
    REQUIRE(r1[h].lse == r2[h].lse);
    REQUIRE(r1[h].positions_read == r2[h].positions_read);
    REQUIRE(r1[h].lse == rd[h].lse);
  }
}

}  // namespace

TEST_CASE("layer decode: 2 threads equal 1 thread bitwise (dense and sparse)", "[layer]") {
  check_layer(DenseDecode{}, false);
  SparseConfig config;
  config.block_size = 16;
  config.top_k = 8;
  config.scope = SelectionScope::per_group;
  check_layer(BlockSparseDecode<>(config), true);
  config.scope = SelectionScope::per_head;
  check_layer(BlockSparseDecode<>(config), true);
}

namespace {

/// Every registered rule with the settings it is scored under, per group and per head, and
/// mean pooling with adaptive budgets.
std::vector<SparseConfig> split_configs() {
  std::vector<SparseConfig> configs;
  for (const RuleInfo& rule : registered_rules()) {
    for (const SelectionScope scope : {SelectionScope::per_group, SelectionScope::per_head}) {
      SparseConfig c;
      c.block_size = 8;
      c.top_k = 12;
      c.sinks = 3;
      c.window = 20;
      c.scope = scope;
      c.rule = RuleName::named(rule.name);
      configs.push_back(c);
    }
  }
  SparseConfig adaptive;
  adaptive.block_size = 8;
  adaptive.target_eps = 0.05;
  adaptive.max_k = 40;
  configs.push_back(adaptive);
  return configs;
}

}  // namespace

TEST_CASE("a group's selection scored in parts equals one part bitwise, for every rule",
          "[layer]") {
  // 8200 positions in blocks of 8: 1025 blocks, the last one open, so that the parts' sizes
  // differ and the boundaries are not multiples of 16 blocks before rounding.
  const std::int64_t n = 8200, heads = 7, head_dim = 32;
  const test::TestCache<bf16> cache(n, head_dim);
  const RowMatrix queries = RowMatrix::Random(heads, head_dim);
  for (const SparseConfig& config : split_configs()) {
    CAPTURE(config.rule.name(), to_string(config.scope), config.adaptive());
    const BlockSummaries summaries =
        BlockSummaries::build(cache.view(), config.block_size, required_summaries(config));
    const KvHead<KvView<bf16>> head{cache.view(), &summaries};
    BlockSparseDecode<> whole(config);
    whole.select(queries, head);
    BlockSparseDecode<> split(config);
    if (!split.scores_in_parts()) {
      REQUIRE(config.rule == RuleName::two_stage);
      split.begin_selection(queries, head);
      REQUIRE_THROWS_WITH(split.score_part(head, 0, 2),
                          AMC_CONTAINS("rule twostage ranks all blocks together and cannot be "
                                       "scored in 2 parts"));
      continue;
    }
    for (const std::int64_t parts : {2, 3, 7, 64}) {
      CAPTURE(parts);
      REQUIRE(split.begin_selection(queries, head) == candidate_blocks(n, config).count());
      for (std::int64_t part = parts - 1; part >= 0; --part) split.score_part(head, part, parts);
      split.end_selection(queries, head);
      const auto a = whole.block_scores(), b = split.block_scores();
      REQUIRE(std::equal(a.begin(), a.end(), b.begin(), b.end(), [](float x, float y) {
        return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
      }));
      for (std::int64_t h = 0; h < heads; ++h) {
        REQUIRE(std::ranges::equal(whole.selected_blocks(h), split.selected_blocks(h)));
      }
    }
  }
}

TEST_CASE("layer decode with more threads than KV heads splits selection, bitwise equal",
          "[layer]") {
  // One KV head (threads / groups parts) and two (half as many), enough blocks for 4 parts.
  const std::int64_t per_group = 7, head_dim = 32, n = 8200;
  std::vector<test::TestCache<bf16>> caches;
  for (int g = 0; g < 2; ++g) caches.emplace_back(n, head_dim);
  for (const SparseConfig& config : split_configs()) {
    CAPTURE(config.rule.name(), to_string(config.scope), config.adaptive());
    std::vector<BlockSummaries> summaries;
    for (const auto& cache : caches) {
      summaries.push_back(
          BlockSummaries::build(cache.view(), config.block_size, required_summaries(config)));
    }
    for (const std::int64_t kv_heads : {1, 2}) {
      std::vector<KvHead<KvView<bf16>>> heads;
      for (std::int64_t g = 0; g < kv_heads; ++g) {
        heads.push_back(
            {caches[static_cast<std::size_t>(g)].view(), &summaries[static_cast<std::size_t>(g)]});
      }
      const RowMatrix queries = RowMatrix::Random(kv_heads * per_group, head_dim);
      RowMatrix direct(queries.rows(), head_dim);
      std::vector<HeadResult> rd(static_cast<std::size_t>(queries.rows()));
      BlockSparseDecode<> op(config);
      for (std::int64_t g = 0; g < kv_heads; ++g) {
        op.decode(queries.middleRows(g * per_group, per_group), heads[static_cast<std::size_t>(g)],
                  direct.middleRows(g * per_group, per_group),
                  std::span(rd).subspan(static_cast<std::size_t>(g * per_group),
                                        static_cast<std::size_t>(per_group)));
      }
      for (const int threads : {2, 3, 4}) {
        CAPTURE(kv_heads, threads);
        LayerDecode<BlockSparseDecode<>> layer(BlockSparseDecode<>(config), threads);
        RowMatrix out(queries.rows(), head_dim);
        std::vector<HeadResult> results(static_cast<std::size_t>(queries.rows()));
        for (int call = 0; call < 2; ++call) {  // the second reuses the operators' scratch
          layer.decode(queries, std::span<const KvHead<KvView<bf16>>>(heads), out, results);
          REQUIRE((out.array() == direct.array()).all());  // bitwise, not approximately
          for (std::size_t h = 0; h < results.size(); ++h) {
            REQUIRE(results[h].lse == rd[h].lse);
            REQUIRE(results[h].positions_read == rd[h].positions_read);
          }
        }
      }
    }
  }
}

TEST_CASE("layer decode on a lent pool runs a dense shadow beside the sparse pass, bitwise",
          "[layer]") {
  // Two KV heads; 2 threads run the groups whole, 4 split each group's selection into parts,
  // with the shadow's groups as tasks of the same section. The attention scale is set, so the
  // shadow must take the operator's scale to match the dense reference.
  const std::int64_t kv_heads = 2, per_group = 7, head_dim = 32, n = 8200;
  std::vector<test::TestCache<bf16>> caches;
  for (std::int64_t g = 0; g < kv_heads; ++g) caches.emplace_back(n, head_dim);
  SparseConfig config;
  config.block_size = 8;
  config.top_k = 12;
  config.scale = 0.3f;
  std::vector<BlockSummaries> summaries;
  for (const auto& cache : caches) {
    summaries.push_back(BlockSummaries::build(cache.view(), config.block_size));
  }
  std::vector<KvHead<KvView<bf16>>> heads;
  for (std::int64_t g = 0; g < kv_heads; ++g) {
    heads.push_back(
        {caches[static_cast<std::size_t>(g)].view(), &summaries[static_cast<std::size_t>(g)]});
  }
  const std::span<const KvHead<KvView<bf16>>> kv(heads);
  const RowMatrix queries = RowMatrix::Random(kv_heads * per_group, head_dim);
  const auto rows = static_cast<std::size_t>(queries.rows());

  // References: each group's operators called directly.
  RowMatrix sparse_reference(queries.rows(), head_dim), dense_reference(queries.rows(), head_dim);
  std::vector<HeadResult> sparse_results(rows), dense_results(rows);
  for (std::int64_t g = 0; g < kv_heads; ++g) {
    const auto h = static_cast<std::size_t>(g * per_group);
    const auto count = static_cast<std::size_t>(per_group);
    BlockSparseDecode<>(config).decode(queries.middleRows(g * per_group, per_group),
                                       heads[static_cast<std::size_t>(g)],
                                       sparse_reference.middleRows(g * per_group, per_group),
                                       std::span(sparse_results).subspan(h, count));
    DenseDecode(config.scale)
        .decode(queries.middleRows(g * per_group, per_group), heads[static_cast<std::size_t>(g)],
                dense_reference.middleRows(g * per_group, per_group),
                std::span(dense_results).subspan(h, count));
  }

  for (const int threads : {2, 4}) {
    CAPTURE(threads);
    ThreadPool pool(threads);
    LayerDecode<BlockSparseDecode<>> layer(BlockSparseDecode<>(config), pool);
    REQUIRE(&layer.pool() == &pool);
    RowMatrix out(queries.rows(), head_dim), shadow_out(queries.rows(), head_dim);
    std::vector<HeadResult> results(rows), shadow_results(rows);
    for (int call = 0; call < 2; ++call) {  // the second reuses the operators' scratch
      CAPTURE(call);
      out.setZero();
      shadow_out.setZero();
      const DenseShadow shadow{shadow_out, shadow_results};
      layer.decode(queries, kv, out, results, &shadow);
      REQUIRE((out.array() == sparse_reference.array()).all());  // bitwise
      REQUIRE((shadow_out.array() == dense_reference.array()).all());
      for (std::size_t h = 0; h < rows; ++h) {
        REQUIRE(results[h].lse == sparse_results[h].lse);
        REQUIRE(shadow_results[h].lse == dense_results[h].lse);
        REQUIRE(shadow_results[h].positions_read == n);
        REQUIRE(results[h].positions_read < n);
        REQUIRE(results[h].lse <= shadow_results[h].lse);  // retained mass <= 1
      }
      // The caller's own parallel work runs on the same pool between calls.
      std::atomic<int> tasks{0};
      pool.parallel_for(16, [&](std::int64_t) { tasks.fetch_add(1); });
      REQUIRE(tasks.load() == 16);
    }
    REQUIRE(layer.group_operators().size() == static_cast<std::size_t>(kv_heads));
    REQUIRE(&layer.group_operators()[1] == &layer.group_operator(1));
  }
}

TEST_CASE("layer decode rejects a shadow output of the wrong shape", "[layer]") {
  const test::TestCache<float> cache(10, 8);
  const std::vector<KvHead<KvView<float>>> heads(2, {cache.view(), nullptr});
  const std::span<const KvHead<KvView<float>>> kv(heads);
  RowMatrix queries = RowMatrix::Random(4, 8), out(4, 8), wide(4, 9);
  std::vector<HeadResult> results(4), three(3);
  LayerDecode<DenseDecode> layer(DenseDecode{}, 1);
  const DenseShadow bad_out{wide, results};
  REQUIRE_THROWS_WITH(layer.decode(queries, kv, out, results, &bad_out),
                      AMC_CONTAINS("shadow.out is [4, 9], expected [4, 8]"));
  const DenseShadow bad_results{out, three};
  REQUIRE_THROWS_WITH(layer.decode(queries, kv, out, results, &bad_results),
                      AMC_CONTAINS("shadow.results has 3 entries, expected 4"));
}

TEST_CASE("layer decode rejects head counts that do not divide", "[layer]") {
  const test::TestCache<float> cache(10, 8);
  const std::vector<KvHead<KvView<float>>> heads(3, {cache.view(), nullptr});
  RowMatrix queries = RowMatrix::Random(7, 8), out(7, 8);
  std::vector<HeadResult> results(7);
  LayerDecode<DenseDecode> layer(DenseDecode{}, 2);
  REQUIRE_THROWS_WITH(
      layer.decode(queries, std::span<const KvHead<KvView<float>>>(heads), out, results),
      AMC_CONTAINS("query heads (7) must be a multiple of KV heads (3)"));
}

TEST_CASE("thread pool runs every index once and rethrows the first error", "[layer]") {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(1000);
  for (int round = 0; round < 50; ++round) {
    pool.parallel_for(1000, [&](std::int64_t i) { hits[i].fetch_add(1); });
  }
  for (const auto& h : hits) REQUIRE(h.load() == 50);
  REQUIRE_THROWS_AS(pool.parallel_for(100,
                                      [](std::int64_t i) {
                                        if (i == 37) throw std::runtime_error("task 37");
                                      }),
                    std::runtime_error);
  std::atomic<int> after{0};
  pool.parallel_for(10, [&](std::int64_t) { after.fetch_add(1); });  // still usable
  REQUIRE(after.load() == 10);
  REQUIRE_THROWS_AS(ThreadPool(0), amc::error);
}

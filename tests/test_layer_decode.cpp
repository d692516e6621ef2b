// The layer-level entry point: every GQA group, in parallel, bitwise equal to one thread and to
// calling the operator group by group.
#include <atomic>
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

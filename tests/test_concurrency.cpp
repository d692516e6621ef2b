// Thread safety: operators (one object per thread) on shared read-only KV views and summaries,
// LayerDecode's pool used over and over, ThreadPool under stress (many short sections, sleeps
// between them, exceptions, several callers). Everything is checked bitwise against one thread.
// The same executable runs under ThreadSanitizer (preset tsan, scripts/ci-sanitizers).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "amc/amc.hpp"
#include "amc/math/certified_bounds.hpp"
#include "test_cache.hpp"

using namespace amc;

namespace {

constexpr std::int64_t kHeadDim = 64;
constexpr std::int64_t kGroup = 4;

RowMatrix random_queries(std::int64_t heads, std::int64_t head_dim) {
  const auto q = test::random_floats(static_cast<std::size_t>(heads * head_dim));
  return Eigen::Map<const RowMatrix>(q.data(), heads, head_dim);
}

/// Everything one decode call returns, for bitwise comparison.
struct Outcome {
  std::vector<float> out;
  std::vector<float> lse;
  std::vector<std::int64_t> read;
  bool operator==(const Outcome&) const = default;
};

Outcome outcome(const RowMatrix& out, const std::vector<HeadResult>& results) {
  Outcome o;
  o.out.assign(out.data(), out.data() + out.size());
  for (const HeadResult& r : results) {
    o.lse.push_back(r.lse);
    o.read.push_back(r.positions_read);
  }
  return o;
}

/// Shared, read-only inputs: a bf16 and an f16 cache with summaries, and queries.
struct Shared {
  test::TestCache<bf16> bf16_cache{900, kHeadDim};
  test::TestCache<f16> f16_cache{700, kHeadDim, 32};
  BlockSummaries bf16_summaries =
      BlockSummaries::build(bf16_cache.view(), 16, {.channel_bounds = true, .value_norms = true});
  BlockSummaries f16_summaries =
      BlockSummaries::build(f16_cache.view(), 16, {.channel_bounds = true, .value_norms = true});
  RowMatrix queries = random_queries(kGroup, kHeadDim);
};

/// One thread's work: its own operators, every rule and scope, contiguous and paged views,
/// decode_support (thread_local scratch) and the certified bounds. Returns every outcome.
std::vector<Outcome> work(const Shared& s, int rounds) {
  std::vector<Outcome> outcomes;
  RowMatrix out(kGroup, kHeadDim);
  std::vector<HeadResult> results(kGroup);
  DenseDecode dense;
  std::vector<BlockSparseDecode<>> sparse;
  for (const auto scope : {SelectionScope::per_head, SelectionScope::per_group}) {
    for (const auto rule : {RuleName::mean_pooled, RuleName::channel_bound, RuleName::oracle}) {
      SparseConfig config;
      config.block_size = 16;
      config.top_k = 4;
      config.window = 32;
      config.scope = scope;
      config.rule = rule;
      sparse.emplace_back(config);
    }
  }
  for (int round = 0; round < rounds; ++round) {
    dense.decode(s.queries, KvHead<KvView<bf16>>{s.bf16_cache.view(), nullptr}, out, results);
    outcomes.push_back(outcome(out, results));
    dense.decode(s.queries, KvHead<PagedKvView<f16>>{s.f16_cache.paged(), nullptr}, out, results);
    outcomes.push_back(outcome(out, results));
    for (BlockSparseDecode<>& op : sparse) {
      op.decode(s.queries, KvHead<KvView<bf16>>{s.bf16_cache.view(), &s.bf16_summaries}, out,
                results);
      outcomes.push_back(outcome(out, results));
      op.decode(s.queries, KvHead<PagedKvView<f16>>{s.f16_cache.paged(), &s.f16_summaries}, out,
                results);
      outcomes.push_back(outcome(out, results));
    }
    Support support;
    support.add(100, 300, s.bf16_cache.positions);
    support.add(850, 900, s.bf16_cache.positions);
    support.normalize();
    decode_support(s.queries, s.bf16_cache.view(), support, 0.125f, out, results);
    outcomes.push_back(outcome(out, results));
    const CertifiedBounds bounds =
        certified_bounds(std::span<const float>(s.queries.row(0).data(), kHeadDim), 0.125,
                         s.bf16_cache.view(), s.bf16_summaries, support);
    outcomes.push_back(Outcome{{static_cast<float>(bounds.omitted_mass_bound)}, {}, {}});
  }
  return outcomes;
}

}  // namespace

// First in this file, so that (run alone, as under TSan) the threads race to the first use of
// the kernel table as well.
TEST_CASE("operators in several threads on shared views and summaries equal one thread",
          "[threads]") {
  const Shared shared;
  constexpr int kThreads = 4, kRounds = 10;
  std::vector<std::vector<Outcome>> per_thread(kThreads);
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back(
          [&, t] { per_thread[static_cast<std::size_t>(t)] = work(shared, kRounds); });
    for (std::thread& thread : threads) thread.join();
  }
  const std::vector<Outcome> alone = work(shared, 1);
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    const auto& outcomes = per_thread[static_cast<std::size_t>(t)];
    REQUIRE(outcomes.size() == alone.size() * kRounds);
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
      CAPTURE(i);
      REQUIRE(outcomes[i] == alone[i % alone.size()]);
    }
  }
}

TEST_CASE("LayerDecode with 2 threads, called repeatedly, from two callers at once", "[threads]") {
  constexpr std::int64_t kv_heads = 2, per_group = 7, n = 500;
  std::vector<test::TestCache<bf16>> caches;
  std::vector<BlockSummaries> summaries;
  for (std::int64_t g = 0; g < kv_heads; ++g) caches.emplace_back(n, kHeadDim);
  for (const auto& cache : caches) summaries.push_back(BlockSummaries::build(cache.view(), 16));
  std::vector<KvHead<KvView<bf16>>> heads;
  for (std::int64_t g = 0; g < kv_heads; ++g) heads.push_back({caches[g].view(), &summaries[g]});
  const std::span<const KvHead<KvView<bf16>>> head_span(heads);
  std::vector<RowMatrix> queries;
  for (int i = 0; i < 5; ++i) queries.push_back(random_queries(kv_heads * per_group, kHeadDim));
  SparseConfig config;
  config.block_size = 16;
  config.top_k = 4;
  config.scope = SelectionScope::per_group;

  // Expected outcomes from single-threaded layers.
  std::vector<Outcome> dense_expected, sparse_expected;
  {
    LayerDecode<DenseDecode> dense(DenseDecode{}, 1);
    LayerDecode<BlockSparseDecode<>> sparse(BlockSparseDecode<>(config), 1);
    RowMatrix out(kv_heads * per_group, kHeadDim);
    std::vector<HeadResult> results(kv_heads * per_group);
    for (const RowMatrix& q : queries) {
      dense.decode(q, head_span, out, results);
      dense_expected.push_back(outcome(out, results));
      sparse.decode(q, head_span, out, results);
      sparse_expected.push_back(outcome(out, results));
    }
  }
  auto caller = [&](int rounds, std::atomic<int>& mismatches) {
    LayerDecode<DenseDecode> dense(DenseDecode{}, 2);
    LayerDecode<BlockSparseDecode<>> sparse(BlockSparseDecode<>(config), 2);
    RowMatrix out(kv_heads * per_group, kHeadDim);
    std::vector<HeadResult> results(kv_heads * per_group);
    for (int round = 0; round < rounds; ++round) {
      const std::size_t i = static_cast<std::size_t>(round) % queries.size();
      dense.decode(queries[i], head_span, out, results);
      if (!(outcome(out, results) == dense_expected[i])) ++mismatches;
      sparse.decode(queries[i], head_span, out, results);
      if (!(outcome(out, results) == sparse_expected[i])) ++mismatches;
      if (round % 20 == 19) {
        // Longer than the pool's spin: its workers go to sleep and must be woken.
        std::this_thread::sleep_for(ThreadPool::kSpin * 3);
      }
    }
  };
  std::atomic<int> mismatches{0};
  caller(60, mismatches);  // one caller
  REQUIRE(mismatches.load() == 0);
  std::thread other([&] { caller(40, mismatches); });
  caller(40, mismatches);  // two callers, each with its own layers and pools
  other.join();
  REQUIRE(mismatches.load() == 0);
}

TEST_CASE("ThreadPool stress: many short sections, sleeps, exceptions, shared callers",
          "[threads]") {
  // More threads than this machine has cores is legal and must stay correct, but each section
  // then waits for descheduled workers: fewer calls there keep the test short.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const int threads : {2, 3, 4}) {
    CAPTURE(threads);
    ThreadPool pool(threads);
    REQUIRE(pool.threads() == threads);
    const int calls = threads <= cores ? 2000 : 200;
    std::vector<std::int64_t> slots(64);
    // Many short sections: each index written by exactly one task, read after the call.
    for (int call = 0; call < calls; ++call) {
      const std::int64_t count = 1 + call % 64;
      pool.parallel_for(count,
                        [&](std::int64_t i) { slots[static_cast<std::size_t>(i)] = call + i; });
      for (std::int64_t i = 0; i < count; ++i)
        REQUIRE(slots[static_cast<std::size_t>(i)] == call + i);
      if (call % 100 == 99) std::this_thread::sleep_for(ThreadPool::kSpin * 3);
    }
    // Tasks long enough that the workers take some (a caller alone would finish tiny ones
    // before they wake): their plain writes must be visible to the caller after the call.
    std::atomic<int> on_workers{0};
    const auto caller_id = std::this_thread::get_id();
    // Under a loaded machine a worker may not get a CPU for a while: keep calling (bounded)
    // until one has taken a task, rather than asserting on a fixed number of calls.
    for (int call = 0; call < 40 || (on_workers.load() == 0 && call < 4000); ++call) {
      pool.parallel_for(32, [&](std::int64_t i) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
        while (std::chrono::steady_clock::now() < until) {
        }
        if (std::this_thread::get_id() != caller_id) on_workers.fetch_add(1);
        slots[static_cast<std::size_t>(i)] = -call - i;
      });
      for (std::int64_t i = 0; i < 32; ++i)
        REQUIRE(slots[static_cast<std::size_t>(i)] == -call - i);
    }
    // Not required: on a loaded machine with more threads than cores the caller may finish
    // every task before a worker is scheduled.
    if (on_workers.load() == 0) WARN("the workers took no task: the machine is busy");
    // Exceptions from any index, every few calls; the pool stays usable and complete.
    int thrown = 0;
    const int throwing_calls = threads <= cores ? 300 : 60;
    for (int call = 0; call < throwing_calls; ++call) {
      const std::int64_t bad = call % 7 == 0 ? call % 40 : -1;
      std::atomic<std::int64_t> done{0};
      try {
        pool.parallel_for(40, [&](std::int64_t i) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(5);
          while (std::chrono::steady_clock::now() < until) {  // so workers throw some too
          }
          if (i == bad) throw std::runtime_error("task " + std::to_string(i));
          done.fetch_add(1, std::memory_order_relaxed);
        });
        REQUIRE(bad < 0);
        REQUIRE(done.load() == 40);
      } catch (const std::runtime_error& e) {
        ++thrown;
        REQUIRE(std::string(e.what()) == "task " + std::to_string(bad));
      }
    }
    REQUIRE(thrown == (throwing_calls + 6) / 7);
    // Two callers sharing one pool: calls are serialised, every index runs once per call.
    std::atomic<std::int64_t> total{0};
    const int shared_calls = threads + 1 <= cores ? 200 : 30;
    auto caller = [&] {
      for (int call = 0; call < shared_calls; ++call)
        pool.parallel_for(16,
                          [&](std::int64_t i) { total.fetch_add(i, std::memory_order_relaxed); });
    };
    std::thread other(caller);
    caller();
    other.join();
    REQUIRE(total.load() == 2 * shared_calls * (15 * 16 / 2));
  }
  // Pools created and destroyed at once, with workers busy, spinning or asleep.
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(3);
    std::atomic<int> hits{0};
    if (i % 3 != 0) pool.parallel_for(10, [&](std::int64_t) { hits.fetch_add(1); });
    if (i % 5 == 0) std::this_thread::sleep_for(ThreadPool::kSpin * 2);
    REQUIRE(hits.load() == (i % 3 != 0 ? 10 : 0));
  }
}

// The selection alone, with the KV in cache, for profile.sh: select_hot N RULE CALLS [head]
// builds one KV head of N random bf16 positions (head_dim 64) and its summaries, 7 query heads,
// blocks of 32, k 16, 4 sinks, window 64, per-group scope (per-head with "head"), and prints
// the best of 5 rounds of CALLS selections.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
#include "amc/aligned.hpp"
#include "amc/amc.hpp"
using namespace amc;
constexpr std::int64_t kHeadDim = 64, kHeads = 7;
[[gnu::noinline]] void run(BlockSparseDecode<>& s, const RowMatrix& q,
                           const KvHead<KvView<bf16>>& h, int calls) {
  for (int i = 0; i < calls; ++i) s.select(q, h);
}
int main(int argc, char** argv) {
  const std::int64_t n = std::atoll(argv[1]);
  const std::string rule = argv[2];
  const int calls = std::atoi(argv[3]);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  AlignedVector<bf16> k(n * kHeadDim), v(n * kHeadDim);
  for (auto& x : k) x = from_float<bf16>(normal(rng));
  for (auto& x : v) x = from_float<bf16>(normal(rng));
  SparseConfig c;
  c.block_size = 32;
  c.top_k = 16;
  c.sinks = 4;
  c.window = 64;
  c.scope = argc > 4 && std::string(argv[4]) == "head" ? SelectionScope::per_head
                                                       : SelectionScope::per_group;
  const auto slash = rule.find('/');
  c.score = RuleName::named(rule.substr(0, slash));
  if (slash != std::string::npos) c.set("shortlist_score", rule.substr(slash + 1));
  KvView<bf16> view(k.data(), v.data(), n, kHeadDim);
  BlockSummaries sums = BlockSummaries::build(view, 32, required_summaries(c));
  RowMatrix q(kHeads, kHeadDim);
  for (Eigen::Index i = 0; i < q.size(); ++i) q.data()[i] = normal(rng);
  BlockSparseDecode<> s(c);
  KvHead<KvView<bf16>> head{view, &sums};
  run(s, q, head, 2);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    run(s, q, head, calls);
    double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        calls;
    best = std::min(best, us);
  }
  std::printf("%s n=%lld: %.1f us per select (hot, best of 5); blocks[0]=%lld\n", rule.c_str(),
              (long long)n, best, (long long)s.selected_blocks(0)[0]);
}

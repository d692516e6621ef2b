// The two-stage rule's second stage, hot: score_rows<bf16> of the active kernel table over 64
// blocks of 32 keys (head_dim 64) for 1, 2, 7 and 8 heads, the best of 2000 repetitions.
// hot.sh builds it against the library before and after the change and runs both.
#include <amc/amc.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  constexpr int kRows = 32, kBlocks = 64, kDim = 64;
  const auto score_rows =
      amc::kernels::active().score_rows[amc::kernels::index_of(amc::StorageType::bf16)];
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<amc::bf16> keys(kBlocks * kRows * kDim);
  for (auto& k : keys) k = amc::from_float<amc::bf16>(normal(rng));
  for (const int heads : {1, 2, 7, 8}) {
    std::vector<float> queries(heads * kDim), scores(heads * kRows);
    for (auto& q : queries) q = normal(rng);
    double best = 1e9;
    for (int rep = 0; rep < 2000; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      for (int b = 0; b < kBlocks; ++b)
        score_rows(queries.data(), heads, kDim, keys.data() + b * kRows * kDim, kDim, kRows,
                   scores.data(), kRows);
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::printf("heads %d: %.2f us for %d blocks of %d keys (table %.*s)\n", heads, best * 1e6,
                kBlocks, kRows, static_cast<int>(amc::kernels::active().name.size()),
                amc::kernels::active().name.data());
  }
}

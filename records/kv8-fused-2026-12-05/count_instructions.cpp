// Instructions per position of dense decode on cache-resident data, for callgrind: one GQA group
// (7 query heads, head_dim 64) over one KV head of 2048 positions in bf16, f32 or q8_0, decoded
// `calls` times inside run_decodes (the function callgrind.sh collects). Natively it prints the
// time per position of the same loop (steady_clock, best of 5 rounds).
//
//   count_instructions bf16|f32|q8_0 [calls]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "amc/aligned.hpp"
#include "amc/amc.hpp"

using namespace amc;

namespace {

constexpr std::int64_t kPositions = 2048, kHeadDim = 64, kHeads = 7;

template <class View>
[[gnu::noinline]] void run_decodes(DenseDecode& dense, const RowMatrix& queries,
                                   const KvHead<View>& head, RowMatrix& out,
                                   std::vector<HeadResult>& results, int calls) {
  for (int i = 0; i < calls; ++i) dense.decode(queries, head, out, results);
}

template <class View>
void measure(const View& view, int calls) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  RowMatrix queries(kHeads, kHeadDim), out(kHeads, kHeadDim);
  for (Eigen::Index i = 0; i < queries.size(); ++i) queries.data()[i] = normal(rng);
  std::vector<HeadResult> results(kHeads);
  DenseDecode dense;
  const KvHead<View> head{view, nullptr};
  run_decodes(dense, queries, head, out, results, 1);  // warm: caches, workspace, kernel table
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    run_decodes(dense, queries, head, out, results, calls);
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / (static_cast<double>(calls) * kPositions));
  }
  // run_decodes ran 1 + 5 * calls decode calls in all: what callgrind's count divides by.
  std::printf(
      "kernels %s: %.2f ns per position (best of 5 rounds of %d calls; %d calls in all), "
      "out[0] %g\n",
      std::string(kernels::active().name).c_str(), best, calls, 1 + 5 * calls,
      static_cast<double>(out(0, 0)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: count_instructions bf16|f32|q8_0 [calls]\n");
    return 2;
  }
  const std::string dtype = argv[1];
  if (dtype != "f32" && dtype != "bf16" && dtype != "q8_0") {
    std::fprintf(stderr, "count_instructions: unknown dtype '%s' (bf16, f32 or q8_0)\n",
                 dtype.c_str());
    return 2;
  }
  std::printf("%s: ", dtype.c_str());
  const int calls = argc > 2 ? std::atoi(argv[2]) : 50;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  // Rows on cache-line boundaries, as an engine's cache (and amc-bench's ring) keeps them.
  AlignedVector<float> keys(kPositions * kHeadDim), values(keys.size());
  for (float& x : keys) x = normal(rng);
  for (float& x : values) x = normal(rng);
  if (dtype == "f32") {
    measure(KvView<float>(keys.data(), values.data(), kPositions, kHeadDim), calls);
  } else if (dtype == "bf16") {
    AlignedVector<bf16> k(keys.size()), v(values.size());
    std::transform(keys.begin(), keys.end(), k.begin(), [](float x) { return to_bf16(x); });
    std::transform(values.begin(), values.end(), v.begin(), [](float x) { return to_bf16(x); });
    measure(KvView<bf16>(k.data(), v.data(), kPositions, kHeadDim), calls);
  } else {  // q8_0
    constexpr std::int64_t kScales = kHeadDim / kQ8Block;
    AlignedVector<std::int8_t> kq(keys.size()), vq(values.size());
    AlignedVector<f16> kd(kPositions * kScales), vd(kd.size());
    for (std::int64_t p = 0; p < kPositions; ++p) {
      quantize_q8_0_row(std::span(keys).subspan(p * kHeadDim, kHeadDim), kq.data() + p * kHeadDim,
                        kd.data() + p * kScales);
      quantize_q8_0_row(std::span(values).subspan(p * kHeadDim, kHeadDim), vq.data() + p * kHeadDim,
                        vd.data() + p * kScales);
    }
    measure(Q8KvView({kq.data(), kd.data(), kHeadDim, kScales},
                     {vq.data(), vd.data(), kHeadDim, kScales}, kPositions, kHeadDim),
            calls);
  }
  return 0;
}

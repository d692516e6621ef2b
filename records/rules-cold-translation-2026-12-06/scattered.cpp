// What a cold scattered block costs on this VM: 64 random 4 KiB blocks of a 32 MiB buffer in
// transparent huge pages (granted: the program prints AnonHugePages), each read once and then
// "worked on" for about as long as the two-stage rule's second stage scores one block hot
// (WORK dependent FMA rounds), after the caches and TLB are pushed out (every line of the buffer
// flushed, a 64 MiB buffer read). Median of 300 trials, us for the 64 blocks.
//
//   scattered MODE [WORK]
//   MODE hot:       the same block 64 times (the work and a cached read: the floor)
//        plain:     each block read in order, nothing asked ahead
//        warm-tlb:  plain, after one line of each block was read and flushed again outside
//                   the timing (its translation cached, its data not)
//        ahead:     plain, and the next block's 64 lines asked for (prefetcht0) at the start
//        paced:     plain, and the next block's lines asked for one per work round
//        paced-l2:  paced, towards L2 (prefetcht2, as the kernels' AheadLines ask)
//        warm-ahead: warm-tlb and ahead
// Build: g++ -O2 -mavx512f -mavx512dq scattered.cpp -o scattered
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {
constexpr std::size_t kBuffer = std::size_t{32} << 20, kFlush = std::size_t{64} << 20;
constexpr int kBlocks = 64, kBlockBytes = 4096, kLine = 64, kTrials = 300;

char* huge_buffer(std::size_t bytes) {
  auto* p = static_cast<char*>(std::aligned_alloc(std::size_t{2} << 20, bytes));
  madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 1, bytes);
  return p;
}

void ask_block(const char* block) {
  for (int l = 0; l < kBlockBytes; l += kLine) _mm_prefetch(block + l, _MM_HINT_T0);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: scattered hot|plain|warm-tlb|ahead|paced|paced-l2|warm-ahead [WORK]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int work = argc > 2 ? std::atoi(argv[2]) : 80;
  const bool warm = mode == "warm-tlb" || mode == "warm-ahead";
  const bool ahead = mode == "ahead" || mode == "warm-ahead";
  const bool paced = mode == "paced" || mode == "paced-l2", hot = mode == "hot";
  const int hint = mode == "paced-l2" ? _MM_HINT_T2 : _MM_HINT_T0;
  char* buffer = huge_buffer(kBuffer);
  char* flush = huge_buffer(kFlush);
  std::mt19937 rng(1);
  std::vector<double> times;
  float sink = 0;
  int touched = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<int> order(kBuffer / kBlockBytes);
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(kBlocks);
    if (hot) std::fill(order.begin(), order.end(), order[0]);
    const auto block = [&](int b) { return buffer + std::size_t(order[b]) * kBlockBytes; };
    for (std::size_t i = 0; i < kBuffer; i += kLine) _mm_clflush(buffer + i);
    __m512 flushed = _mm512_setzero_ps();
    for (std::size_t i = 0; i < kFlush; i += kLine)
      flushed = _mm512_add_ps(flushed, _mm512_load_ps(reinterpret_cast<const float*>(flush + i)));
    if (warm) {  // one line per block read (translation cached), then flushed again
      for (int b = 0; b < kBlocks; ++b) touched += block(b)[kBlockBytes - kLine];
      _mm_mfence();
      for (int b = 0; b < kBlocks; ++b) _mm_clflush(block(b) + kBlockBytes - kLine);
    }
    _mm_mfence();
    const auto start = std::chrono::steady_clock::now();
    __m512 acc = _mm512_setzero_ps();
    for (int b = 0; b < kBlocks; ++b) {
      const char* next = b + 1 < kBlocks ? block(b + 1) : nullptr;
      if (ahead && next != nullptr) ask_block(next);
      for (int l = 0; l < kBlockBytes; l += kLine)
        acc = _mm512_add_ps(acc, _mm512_load_ps(reinterpret_cast<const float*>(block(b) + l)));
      __m512 chains[8];
      for (int j = 0; j < 8; ++j) chains[j] = _mm512_set1_ps(0.5f + static_cast<float>(j));
      const __m512 m = _mm512_set1_ps(0.999f);
      for (int w = 0; w < work; ++w) {
        if (paced && next != nullptr && w < kBlockBytes / kLine)
          hint == _MM_HINT_T2 ? _mm_prefetch(next + w * kLine, _MM_HINT_T2)
                              : _mm_prefetch(next + w * kLine, _MM_HINT_T0);
        for (int j = 0; j < 8; ++j) chains[j] = _mm512_fmadd_ps(chains[j], m, acc);
      }
      for (int j = 0; j < 8; ++j) acc = _mm512_add_ps(acc, chains[j]);
    }
    const auto stop = std::chrono::steady_clock::now();
    sink += _mm512_reduce_add_ps(acc) + _mm512_reduce_add_ps(flushed);
    times.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  std::sort(times.begin(), times.end());
  std::ifstream smaps("/proc/self/smaps_rollup");
  std::string line, huge;
  while (std::getline(smaps, line))
    if (line.rfind("AnonHugePages", 0) == 0) huge = line;
  std::printf("%-10s work %3d: median %6.1f us for %d blocks (p10 %6.1f)  [%s; %g %d]\n",
              mode.c_str(), work, times[times.size() / 2], kBlocks, times[times.size() / 10],
              huge.c_str(), sink == 1.0f ? 1.0 : 0.0, touched & 1);
}

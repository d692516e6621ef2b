// The two-stage rule's second stage alone, as BM_RuleSparseDecode runs it at 16384 positions:
// 64 blocks of 32 bf16 keys (head_dim 64) scored for 7 heads, each with
// KernelTable::log_sum_exp_rows and the next block asked for ahead (RowsAhead), by the avx512
// table (the library's) or the AMX kernel of amx_kernel.cpp; "read" only reads the blocks
// (one 64-byte load per line, in order), the memory's floor.
//
//   blocks KERNEL PLACEMENT     KERNEL avx512 | amx | read
//   PLACEMENT hot:  the same 64 blocks every trial, left in cache
//             near: 64 random blocks of one random 2 MiB copy of the keys (512 blocks: the
//                   benchmark's ring at 16384), sorted, flushed (CLFLUSHOPT) and a 64 MiB
//                   buffer read before each trial
//             far:  the same, 64 blocks anywhere in 256 MiB
// Median (and p10) of 300 trials, us for the 64 blocks. Keys in transparent huge pages.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "amc/kernels/kernel_table.hpp"
#include "amx_kernel.hpp"

using namespace amc;

namespace {
__attribute__((target("clflushopt"))) void flush(const void* p, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 64) _mm_clflushopt(const_cast<char*>(static_cast<const char*>(p)) + i);
  _mm_sfence();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: blocks avx512|amx|read hot|near|far\n");
    return 2;
  }
  const std::string kernel = argv[1], placement = argv[2];
  if (kernel == "amx" && !kernels::detail::amx_record::amx_usable()) {
    std::fprintf(stderr, "blocks: AMX is not usable here\n");
    return 2;
  }
  const kernels::KernelTable* avx512 = kernels::find("avx512");
  constexpr std::size_t kBytes = std::size_t{256} << 20, kEvict = std::size_t{64} << 20;
  constexpr std::int64_t kDim = 64, kRows = 32, kHeads = 7, kBlocks = 64, kCopyBlocks = 512;
  constexpr std::int64_t kBlockBytes = kRows * kDim * 2;
  auto* keys = static_cast<bf16*>(std::aligned_alloc(std::size_t{2} << 20, kBytes));
  madvise(keys, kBytes, MADV_HUGEPAGE);
  for (std::size_t i = 0; i < kBytes / 2; ++i)
    keys[i].bits = static_cast<std::uint16_t>(0x3f80 + static_cast<int>(i * 7919 % 97) - 48);
  auto* evict = static_cast<char*>(std::aligned_alloc(std::size_t{2} << 20, kEvict));
  std::memset(evict, 1, kEvict);
  const std::int64_t total_blocks = static_cast<std::int64_t>(kBytes) / kBlockBytes;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> queries(kHeads * kDim), scratch(kHeads * kRows), out(kHeads * kBlocks);
  for (float& q : queries) q = normal(rng);
  std::vector<std::int64_t> chosen(kBlocks);
  const auto choose = [&] {
    if (placement == "far") {
      for (auto& b : chosen) b = static_cast<std::int64_t>(rng() % total_blocks);
    } else {
      const std::int64_t first = static_cast<std::int64_t>(rng() % (total_blocks / kCopyBlocks)) *
                                 kCopyBlocks;
      std::vector<std::int64_t> all(kCopyBlocks);
      for (std::int64_t j = 0; j < kCopyBlocks; ++j) all[j] = first + j;
      std::shuffle(all.begin(), all.end(), rng);
      std::copy_n(all.begin(), kBlocks, chosen.begin());
    }
    std::sort(chosen.begin(), chosen.end());
  };
  const auto block = [&](std::int64_t i) { return keys + chosen[i] * kRows * kDim; };
  const auto second_stage = [&] {
    if (kernel == "read") {
      __m512i sum = _mm512_setzero_si512();
      for (std::int64_t i = 0; i < kBlocks; ++i) {
        const char* p = reinterpret_cast<const char*>(block(i));
        for (std::int64_t b = 0; b < kBlockBytes; b += 64)
          sum = _mm512_add_epi32(sum, _mm512_loadu_si512(p + b));
      }
      return _mm512_reduce_add_epi32(sum);
    }
    kernels::detail::amx_record::hold_tiles = true;  // as the library's ScanScope around the rule's loop
    for (std::int64_t i = 0; i < kBlocks; ++i) {
      kernels::RowsAhead next;
      if (i + 1 < kBlocks) next = {block(i + 1), kDim * 2, kRows, kDim * 2};
      if (kernel == "amx") {
        kernels::detail::amx_record::amx_log_sum_exp_rows(queries.data(), kHeads, kDim, block(i), kDim, kRows,
                                              scratch.data(), out.data() + i, kBlocks, next);
      } else {
        avx512->log_sum_exp_rows[kernels::index_of(StorageType::bf16)](queries.data(), kHeads, kDim,
                                                               block(i), kDim, kRows,
                                                               scratch.data(), out.data() + i,
                                                               kBlocks, next);
      }
    }
    kernels::detail::amx_record::hold_tiles = false;
    kernels::detail::amx_record::release_amx_tiles();
    return static_cast<int>(out[0]);
  };
  choose();
  volatile int sink = second_stage();
  std::vector<double> times;
  for (int trial = 0; trial < 300; ++trial) {
    if (placement != "hot") {
      choose();
      for (std::int64_t i = 0; i < kBlocks; ++i) flush(block(i), kBlockBytes);
      long touched = 0;
      for (std::size_t i = 0; i < kEvict; i += 64) touched += evict[i];
      sink = static_cast<int>(touched);
    }
    const auto start = std::chrono::steady_clock::now();
    sink = second_stage();
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                              start)
                        .count());
  }
  (void)sink;
  std::sort(times.begin(), times.end());
  std::printf("%-6s %-4s median %6.1f us for 64 blocks (p10 %6.1f)\n", kernel.c_str(),
              placement.c_str(), times[times.size() / 2], times[times.size() / 10]);
}

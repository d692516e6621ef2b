// amc-bench: decode attention at the memory-bandwidth limit, for one Qwen2-0.5B GQA group
// (7 query heads sharing one KV head, head_dim 64).
//
// Every benchmark reads from a ring of independent copies of the KV head whose total size is
// several times the last-level cache, stepping to the next copy each iteration: each call sees
// cold memory, as a decode step does when it comes back to a layer's cache after the rest of
// the model has run. Sparse calls touch so little of each copy that the ring alone could leave
// their data in L3, so before each call they flush the copy's lines out of every cache level and
// read a buffer that pushes out the private caches (cold_iterations). Bytes processed count what
// each call actually touches, so bytes/s compares directly with BM_StreamRead, a plain SIMD read
// of the same bytes.
#include <benchmark/benchmark.h>

#include <sys/mman.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "amc/amc.hpp"
#include "amc/math/certified_bounds.hpp"
#include "fma_peak.hpp"

namespace {

using namespace amc;

constexpr std::int64_t kHeadDim = 64;
constexpr std::int64_t kGroupHeads = 7;
constexpr std::int64_t kRingBytes = std::int64_t{512} << 20;  // 16x a 32 MiB L3

SparseConfig sparse_config() {
  SparseConfig c;
  c.block_size = 32;
  c.top_k = 16;
  c.sinks = 4;
  c.window = 64;
  c.scope = SelectionScope::per_group;  // one support per group: each block read once
  c.rule = RuleName::mean_pooled;
  return c;
}

/// A buffer in 2 MiB pages where the kernel allows it (transparent huge pages on request), as
/// an engine's KV cache would be: a sparse step touches a new 4 KiB page with every block, and
/// with small pages the benchmark would measure page walks rather than attention.
template <class T>
class HugeBuffer {
 public:
  explicit HugeBuffer(std::size_t count) : count_(count) {
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    const std::size_t bytes = (count * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    data_ = static_cast<T*>(std::aligned_alloc(kHuge, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(data_, bytes, MADV_HUGEPAGE);  // a hint: failure only costs speed
#endif
  }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer() { std::free(data_); }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](std::size_t i) { return data_[i]; }
  std::size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("clflushopt"))) void flush_lines_clflushopt(const char* line,
                                                                  const char* end) {
  for (; line < end; line += 64) _mm_clflushopt(const_cast<char*>(line));  // takes void*
  _mm_sfence();
}
#endif

/// Whether flush_lines can drop lines from the caches on this machine (x86-64 with CLFLUSHOPT
/// or CLFLUSH, AArch64); elsewhere the cold benchmarks rely on the eviction read alone.
constexpr bool kFlushesLines =
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    true;
#else
    false;
#endif

/// Writes back and drops every cache line of [data, data + bytes) from every cache level, so
/// the next read of it goes to memory. Reading a buffer larger than the last-level cache does
/// this only where the cache is small: this project's VM reports a 480 MiB L3, from which a
/// 64 MiB buffer read again and again comes back at 20-30 GB/s against the memory's 15-16
/// (records/cold-flush-2026-12-05/repeat_read.txt), so nothing guaranteed that a
/// sparse copy's summaries and support had left L3 between visits.
void flush_lines(const void* data, std::size_t bytes) {
  if (bytes == 0) return;
  const auto first = reinterpret_cast<std::uintptr_t>(data) & ~std::uintptr_t{63};
  const char* line = reinterpret_cast<const char*>(first);
  const char* end = static_cast<const char*>(data) + bytes;
#if defined(__x86_64__) || defined(__i386__)
  static const bool clflushopt = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ebx & (1u << 23)) != 0;
  }();
  if (clflushopt) {
    flush_lines_clflushopt(line, end);
    return;
  }
  for (; line < end; line += 64) _mm_clflush(line);  // serialising, so many times slower
  _mm_mfence();
#elif defined(__aarch64__)
  for (; line < end; line += 64) asm volatile("dc civac, %0" : : "r"(line) : "memory");
  asm volatile("dsb ish" : : : "memory");
#else
  static_cast<void>(line);
  static_cast<void>(end);
#endif
}

template <class Rows>
void flush_rows(const Rows& rows) {
  flush_lines(rows.data(), static_cast<std::size_t>(rows.size()) * sizeof(*rows.data()));
}

/// flush_lines over everything `summaries` holds that a rule may read.
void flush_summaries(const BlockSummaries& summaries) {
  const SummaryOptions& options = summaries.options();
  flush_rows(summaries.mean_keys());
  if (options.bf16_copies) flush_rows(summaries.mean_keys_bf16());
  if (options.channel_bounds) {
    flush_rows(summaries.channel_bound_rows());
    if (options.bf16_copies) flush_rows(summaries.channel_bound_rows_bf16());
  }
  if (options.value_norms) flush_rows(summaries.value_norm_max());
  if (options.sub_blocks > 0) {
    flush_rows(summaries.sub_block_means());
    if (options.bf16_copies) flush_rows(summaries.sub_block_means_bf16());
  }
}

/// Independent copies of one KV head [positions, head_dim] with random contents and their
/// block summaries (mean keys only, block 32).
template <KvStorage T>
struct KvRing {
  std::int64_t positions = 0;
  std::int64_t copies = 0;
  std::unique_ptr<HugeBuffer<T>> keys_buffer, values_buffer;  // [copies, positions, head_dim]
  std::vector<BlockSummaries> summaries;
  std::vector<Support> supports;  // per copy, what selection picks (see selected_supports)
  std::vector<BlockSummaries> rich_summaries;  // per copy, what a rule needs beyond means (lazily)
  std::int64_t next = 0;

  explicit KvRing(std::int64_t n) : positions(n) {
    const std::int64_t bytes_per_copy = 2 * n * kHeadDim * static_cast<std::int64_t>(sizeof(T));
    copies = std::max<std::int64_t>(2, kRingBytes / bytes_per_copy);
    const auto total = static_cast<std::size_t>(copies * n * kHeadDim);
    keys_buffer = std::make_unique<HugeBuffer<T>>(total);
    values_buffer = std::make_unique<HugeBuffer<T>>(total);
    HugeBuffer<T>& keys = *keys_buffer;
    HugeBuffer<T>& values = *values_buffer;
    std::mt19937 rng(static_cast<unsigned>(n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // A block of random numbers reused with per-copy offsets: random enough, fast to fill.
    std::vector<float> pool(1 << 16);
    for (float& x : pool) x = normal(rng);
    for (std::size_t i = 0; i < total; ++i) {
      keys[i] = from_float<T>(pool[(i * 7 + i / 65521) & 0xFFFF]);
      values[i] = from_float<T>(pool[(i * 13 + 5 + i / 65519) & 0xFFFF]);
    }
    for (std::int64_t c = 0; c < copies; ++c)
      summaries.push_back(BlockSummaries::build(view(c), 32));
  }

  KvView<T> view(std::int64_t copy) const {
    const std::int64_t offset = copy * positions * kHeadDim;
    return KvView<T>(keys_buffer->data() + offset, values_buffer->data() + offset, positions,
                     kHeadDim);
  }
  std::int64_t advance() {
    next = (next + 1) % copies;
    return next;
  }
  /// Drops copy c's keys, values and summaries from the caches (flush_lines).
  void flush(std::int64_t copy) const {
    const std::int64_t offset = copy * positions * kHeadDim;
    const auto bytes = static_cast<std::size_t>(positions * kHeadDim) * sizeof(T);
    flush_lines(keys_buffer->data() + offset, bytes);
    flush_lines(values_buffer->data() + offset, bytes);
    flush_summaries(summaries[static_cast<std::size_t>(copy)]);
    if (!rich_summaries.empty()) flush_summaries(rich_summaries[static_cast<std::size_t>(copy)]);
  }

  /// The summaries `config`'s rule reads for copy c (the means only unless it needs more).
  const BlockSummaries& summaries_for(const SparseConfig& config, std::int64_t c) {
    const SummaryOptions needed = required_summaries(config);
    if (summaries[0].options().covers(needed)) return summaries[static_cast<std::size_t>(c)];
    if (rich_summaries.empty() || !rich_summaries[0].options().covers(needed)) {
      rich_summaries.clear();
      for (std::int64_t i = 0; i < copies; ++i)
        rich_summaries.push_back(BlockSummaries::build(view(i), 32, needed));
    }
    return rich_summaries[static_cast<std::size_t>(c)];
  }
};

/// One ring per storage type alive at a time (512 MiB each), rebuilt when n changes; the
/// benchmarks are registered context by context so each ring is built once.
template <KvStorage T>
KvRing<T>& ring(std::int64_t n) {
  static std::unique_ptr<KvRing<T>> current;
  if (!current || current->positions != n) {
    current.reset();
    current = std::make_unique<KvRing<T>>(n);
  }
  return *current;
}

/// KvRing's copies stored in q8_0 (amc/q8_kv.hpp): the same random values (from the same pool
/// and formula) quantized per 32 channels, read through Q8KvView, with mean-key summaries of the
/// stored values. [copies, positions, head_dim] quants and [copies, positions, head_dim / 32]
/// scales per side.
struct Q8Ring {
  std::int64_t positions = 0;
  std::int64_t copies = 0;
  std::unique_ptr<HugeBuffer<std::int8_t>> key_quants, value_quants;
  std::unique_ptr<HugeBuffer<f16>> key_scales, value_scales;
  std::vector<BlockSummaries> summaries;
  std::int64_t next = 0;

  static constexpr std::int64_t kScales = kHeadDim / kQ8Block;  // per row
  /// Bytes of one key row and one value row: quants and scales.
  static constexpr std::int64_t kRowBytes =
      2 * (kHeadDim + kScales * static_cast<std::int64_t>(sizeof(f16)));

  explicit Q8Ring(std::int64_t n) : positions(n) {
    copies = std::max<std::int64_t>(2, kRingBytes / (n * kRowBytes));
    const auto rows = static_cast<std::size_t>(copies * n);
    key_quants = std::make_unique<HugeBuffer<std::int8_t>>(rows * kHeadDim);
    value_quants = std::make_unique<HugeBuffer<std::int8_t>>(rows * kHeadDim);
    key_scales = std::make_unique<HugeBuffer<f16>>(rows * kScales);
    value_scales = std::make_unique<HugeBuffer<f16>>(rows * kScales);
    std::mt19937 rng(static_cast<unsigned>(n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> pool(1 << 16);
    for (float& x : pool) x = normal(rng);
    std::vector<float> key(kHeadDim), value(kHeadDim);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < kHeadDim; ++c) {
        const std::size_t i = r * kHeadDim + c;
        key[c] = pool[(i * 7 + i / 65521) & 0xFFFF];
        value[c] = pool[(i * 13 + 5 + i / 65519) & 0xFFFF];
      }
      quantize_q8_0_row(key, key_quants->data() + r * kHeadDim, key_scales->data() + r * kScales);
      quantize_q8_0_row(value, value_quants->data() + r * kHeadDim,
                        value_scales->data() + r * kScales);
    }
    for (std::int64_t c = 0; c < copies; ++c)
      summaries.push_back(BlockSummaries::build(view(c), 32));
  }

  Q8KvView view(std::int64_t copy) const {
    const std::int64_t row = copy * positions;
    return Q8KvView({key_quants->data() + row * kHeadDim, key_scales->data() + row * kScales,
                     kHeadDim, kScales},
                    {value_quants->data() + row * kHeadDim, value_scales->data() + row * kScales,
                     kHeadDim, kScales},
                    positions, kHeadDim);
  }
  std::int64_t advance() {
    next = (next + 1) % copies;
    return next;
  }
  /// Drops copy c's quants, scales and summaries from the caches (flush_lines).
  void flush(std::int64_t copy) const {
    const std::int64_t row = copy * positions;
    const auto quant_bytes = static_cast<std::size_t>(positions * kHeadDim);
    const auto scale_bytes = static_cast<std::size_t>(positions * kScales) * sizeof(f16);
    flush_lines(key_quants->data() + row * kHeadDim, quant_bytes);
    flush_lines(value_quants->data() + row * kHeadDim, quant_bytes);
    flush_lines(key_scales->data() + row * kScales, scale_bytes);
    flush_lines(value_scales->data() + row * kScales, scale_bytes);
    flush_summaries(summaries[static_cast<std::size_t>(copy)]);
  }
};

Q8Ring& q8_ring(std::int64_t n) {
  static std::unique_ptr<Q8Ring> current;
  if (!current || current->positions != n) {
    current.reset();
    current = std::make_unique<Q8Ring>(n);
  }
  return *current;
}

/// Reads a 64 MiB buffer, as a decode step's other layers and weights stream through between
/// two visits to one KV head: it pushes the private caches (L1, L2) and the TLB's entries out.
/// It was meant to push out a 32 MiB L3 as well, but a larger L3 can keep the buffer itself
/// (flush_lines), so the sparse benchmarks also flush their copy's lines (cold_iterations):
/// what sparse calls touch across the ring (every copy's mean keys and support, 18 MiB over the
/// 16 copies at 131072 in bf16) could otherwise stay in L3 between visits.
HugeBuffer<float>& flush_buffer() {
  static HugeBuffer<float>* flush = [] {
    auto* buffer = new HugeBuffer<float>((std::size_t{64} << 20) / sizeof(float));
    std::memset(buffer->data(), 0, buffer->size() * sizeof(float));
    return buffer;
  }();
  return *flush;
}

void evict_last_level_cache() {
  HugeBuffer<float>& flush = flush_buffer();
  benchmark::DoNotOptimize(
      kernels::active().stream_sum(flush.data(), static_cast<std::int64_t>(flush.size())));
}

/// Share `part` of `parts` of evict_last_level_cache's read, for one thread of a pool.
void evict_share(std::int64_t part, std::int64_t parts) {
  HugeBuffer<float>& flush = flush_buffer();
  const auto size = static_cast<std::int64_t>(flush.size());
  const std::int64_t begin = size * part / parts, end = size * (part + 1) / parts;
  benchmark::DoNotOptimize(kernels::active().stream_sum(flush.data() + begin, end - begin));
}

/// Iterations of the cold-cache benchmarks: each pays a few ms of flushing and eviction outside
/// its timing (at 131072 positions in bf16 about 1.4 ms to flush the copy's 32 MiB of keys and
/// values, 2.2-3.3 ms to read the 64 MiB buffer: records/cold-flush-2026-12-05/), so they
/// run a fixed count rather than until a minimum time.
constexpr benchmark::IterationCount kColdIterations = 200;

/// One call(copy) per iteration on the ring's next copy, cold: its lines flushed from every
/// cache level (the ring's flush) and the private caches evicted (evict_last_level_cache),
/// timing the call alone (register the benchmark with UseManualTime()). Counter
/// `lines_flushed`: 1 where the flush is available (kFlushesLines), else 0 and the copy may
/// be read from L3.
template <class Ring, class Call>
void cold_iterations(benchmark::State& state, Ring& ring, Call&& call) {
  for (auto _ : state) {
    const std::int64_t copy = ring.advance();
    ring.flush(copy);
    evict_last_level_cache();
    const auto start = std::chrono::steady_clock::now();
    call(copy);
    const auto stop = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
  }
  state.counters["lines_flushed"] = kFlushesLines ? 1.0 : 0.0;
}

RowMatrix group_queries() {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  RowMatrix q(kGroupHeads, kHeadDim);
  for (Eigen::Index i = 0; i < q.size(); ++i) q.data()[i] = normal(rng);
  return q;
}

template <KvStorage T>
std::int64_t row_bytes() {
  return 2 * kHeadDim * static_cast<std::int64_t>(sizeof(T));  // one key row and one value row
}

template <KvStorage T>
void BM_StreamRead(benchmark::State& state) {
  auto& kv = ring<T>(state.range(0));
  const auto& table = kernels::active();
  const std::int64_t floats = kv.positions * kHeadDim * static_cast<std::int64_t>(sizeof(T)) / 4;
  for (auto _ : state) {
    const auto view = kv.view(kv.advance());
    float sum = table.stream_sum(reinterpret_cast<const float*>(view.key(0)), floats);
    sum += table.stream_sum(reinterpret_cast<const float*>(view.value(0)), floats);
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * kv.positions * row_bytes<T>());
  state.counters["positions_read"] = static_cast<double>(kv.positions);
}

template <KvStorage T>
void BM_DenseDecode(benchmark::State& state) {
  auto& kv = ring<T>(state.range(0));
  const RowMatrix queries = group_queries();
  RowMatrix out(kGroupHeads, kHeadDim);
  std::vector<HeadResult> results(kGroupHeads);
  DenseDecode dense;
  for (auto _ : state) {
    dense.decode(queries, KvHead<KvView<T>>{kv.view(kv.advance()), nullptr}, out, results);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * kv.positions * row_bytes<T>());
  state.counters["positions_read"] = static_cast<double>(kv.positions);
}

/// BM_DenseDecode over a q8_0 cache (Q8KvView): half the bytes of bf16 (136 per position for
/// a key and a value row against 256), read in place by KernelTable::attend_q8_0. kHot: one
/// copy, read again and again (BM_DenseDecodeHotQ8, the kernel's own cost, as BM_DenseDecodeHot).
template <bool kHot>
void BM_DenseDecodeQ8(benchmark::State& state) {
  auto& kv = q8_ring(state.range(0));
  const RowMatrix queries = group_queries();
  RowMatrix out(kGroupHeads, kHeadDim);
  std::vector<HeadResult> results(kGroupHeads);
  DenseDecode dense;
  for (auto _ : state) {
    const std::int64_t copy = kHot ? 0 : kv.advance();
    dense.decode(queries, KvHead<Q8KvView>{kv.view(copy), nullptr}, out, results);
    benchmark::DoNotOptimize(out.data());
  }
  if constexpr (kHot) {
    state.SetItemsProcessed(state.iterations() * kv.positions);  // positions/s
  } else {
    state.SetBytesProcessed(state.iterations() * kv.positions * Q8Ring::kRowBytes);
  }
  state.counters["positions_read"] = static_cast<double>(kv.positions);
}

/// BM_SparseDecode over a q8_0 cache (cold, the same selection settings).
void BM_SparseDecodeQ8(benchmark::State& state) {
  auto& kv = q8_ring(state.range(0));
  const RowMatrix queries = group_queries();
  RowMatrix out(kGroupHeads, kHeadDim);
  std::vector<HeadResult> results(kGroupHeads);
  BlockSparseDecode<> sparse(sparse_config());
  std::int64_t positions = 0;
  cold_iterations(state, kv, [&](std::int64_t c) {
    sparse.decode(queries, KvHead<Q8KvView>{kv.view(c), &kv.summaries[static_cast<std::size_t>(c)]},
                  out, results);
    benchmark::DoNotOptimize(out.data());
    positions += results[0].positions_read;
  });
  state.counters["positions_read"] =
      static_cast<double>(positions) / static_cast<double>(state.iterations());
}

/// BM_DenseDecode<bf16> in AttentionArithmetic::bf16_products (AVX512_BF16; skipped where the
/// mode is not available). Counters: the largest lse and output differences from exact_f32 on
/// the first copy, over the 7 heads (output relative to the head's largest |output|).
void BM_DenseDecodeBf16Products(benchmark::State& state) {
  if (!bf16_products_available(StorageType::bf16, kHeadDim)) {
    state.SkipWithError("bf16_products is not available on this CPU (no AVX512_BF16)");
    return;
  }
  auto& kv = ring<bf16>(state.range(0));
  const RowMatrix queries = group_queries();
  RowMatrix out(kGroupHeads, kHeadDim), exact_out(kGroupHeads, kHeadDim);
  std::vector<HeadResult> results(kGroupHeads), exact_results(kGroupHeads);
  DenseDecode fast({}, AttentionArithmetic::bf16_products), exact;
  const KvHead<KvView<bf16>> first{kv.view(0), nullptr};
  fast.decode(queries, first, out, results);
  exact.decode(queries, first, exact_out, exact_results);
  double lse_error = 0.0, out_error = 0.0;
  for (std::int64_t h = 0; h < kGroupHeads; ++h) {
    const auto i = static_cast<std::size_t>(h);
    lse_error = std::max(lse_error, std::abs(double{results[i].lse} - exact_results[i].lse));
    const float difference = (out.row(h) - exact_out.row(h)).cwiseAbs().maxCoeff();
    out_error = std::max(out_error, double{difference} / exact_out.row(h).cwiseAbs().maxCoeff());
  }
  for (auto _ : state) {
    fast.decode(queries, KvHead<KvView<bf16>>{kv.view(kv.advance()), nullptr}, out, results);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * kv.positions * row_bytes<bf16>());
  state.counters["positions_read"] = static_cast<double>(kv.positions);
  state.counters["lse_error"] = lse_error;
  state.counters["out_error"] = out_error;
}

template <KvStorage T>
void BM_SparseDecode(benchmark::State& state) {
  auto& kv = ring<T>(state.range(0));
  const RowMatrix queries = group_queries();
  RowMatrix out(kGroupHeads, kHeadDim);
  std::vector<HeadResult> results(kGroupHeads);
  BlockSparseDecode<> sparse(sparse_config());
  std::int64_t positions = 0, summary_bytes = 0;
  cold_iterations(state, kv, [&](std::int64_t c) {
    sparse.decode(queries, KvHead<KvView<T>>{kv.view(c), &kv.summaries[c]}, out, results);
    benchmark::DoNotOptimize(out.data());
    positions += results[0].positions_read;
    summary_bytes += kv.summaries[c].blocks() * kHeadDim * 4;  // the f32 mean keys it scores
  });
  state.SetBytesProcessed(positions * row_bytes<T>() + summary_bytes);
  state.counters["positions_read"] =
      static_cast<double>(positions) / static_cast<double>(state.iterations());
  state.counters["summary_bytes"] = static_cast<double>(kv.summaries[0].memory_bytes());
  state.counters["summary_bytes_per_position"] =
      static_cast<double>(kv.summaries[0].memory_bytes()) / static_cast<double>(kv.positions);
}

template <KvStorage T>
void BM_Select(benchmark::State& state) {
  auto& kv = ring<T>(state.range(0));
  const RowMatrix queries = group_queries();
  BlockSparseDecode<> sparse(sparse_config());
  cold_iterations(state, kv, [&](std::int64_t c) {
    sparse.select(queries, KvHead<KvView<T>>{kv.view(c), &kv.summaries[c]});
    benchmark::DoNotOptimize(sparse.selected_blocks(0).data());
  });
  state.SetBytesProcessed(state.iterations() * kv.summaries[0].blocks() * kHeadDim * 4);
  state.counters["blocks_scored"] = static_cast<double>(kv.summaries[0].blocks());
}

/// The selection settings BM_RuleSparseDecode and BM_RuleSelect compare, by their argument, on
/// sparse_config(): "rule", "rule/first stage" (two-stage rules, shortlist 4 unless "@F" gives
/// the factor), ":S" for S sub-block means (submean, as a rule or a first stage; 4 unless
/// given), and "+bf16" for the bf16 summary precision (f32 unless given).
const char* const kComparedRules[] = {"mean",
                                      "bound",
                                      "twostage/mean",
                                      "twostage/bound",
                                      "submean",
                                      "oracle",
                                      "submean:8",
                                      "twostage/submean:8",
                                      "twostage/submean:16",
                                      "twostage/bound@2",
                                      "twostage/mean@2",
                                      "mean+bf16",
                                      "bound+bf16",
                                      "twostage/mean+bf16",
                                      "twostage/bound+bf16",
                                      "submean+bf16"};

SparseConfig rule_config(std::int64_t rule) {
  std::string_view name = kComparedRules[rule];
  SparseConfig c = sparse_config();
  if (const std::size_t plus = name.find('+'); plus != std::string_view::npos) {
    c.set("summary_precision", name.substr(plus + 1));
    name = name.substr(0, plus);
  }
  if (const std::size_t at = name.find('@'); at != std::string_view::npos) {
    c.set("shortlist", name.substr(at + 1));
    name = name.substr(0, at);
  }
  if (const std::size_t colon = name.find(':'); colon != std::string_view::npos) {
    c.set("sub_blocks", name.substr(colon + 1));
    name = name.substr(0, colon);
  }
  const std::size_t slash = name.find('/');
  c.rule = RuleName::named(name.substr(0, slash));
  if (slash != std::string_view::npos) c.set("shortlist_rule", name.substr(slash + 1));
  return c;
}

/// BM_SparseDecode with the rule kComparedRules[range(1)] (bf16, cold, the same settings); with
/// SelectionScope::per_head (BM_RuleSparseDecodePerHead), one selection and support per query
/// head, the study's scope.
template <SelectionScope Scope>
void BM_RuleSparseDecode(benchmark::State& state) {
  auto& kv = ring<bf16>(state.range(0));
  SparseConfig config = rule_config(state.range(1));
  config.scope = Scope;
  const RowMatrix queries = group_queries();
  RowMatrix out(kGroupHeads, kHeadDim);
  std::vector<HeadResult> results(kGroupHeads);
  BlockSparseDecode<> sparse(config);
  static_cast<void>(kv.summaries_for(config, 0));  // built before timing
  std::int64_t positions = 0;
  cold_iterations(state, kv, [&](std::int64_t c) {
    sparse.decode(queries, KvHead<KvView<bf16>>{kv.view(c), &kv.summaries_for(config, c)}, out,
                  results);
    benchmark::DoNotOptimize(out.data());
    positions += results[0].positions_read;
  });
  state.SetLabel(kComparedRules[state.range(1)]);
  state.counters["positions_read"] =
      static_cast<double>(positions) / static_cast<double>(state.iterations());
  state.counters["summary_bytes_per_position"] =
      static_cast<double>(kv.summaries_for(config, 0).memory_bytes()) /
      static_cast<double>(kv.positions);
}

/// BM_Select with the rule kComparedRules[range(1)] and the scope (BM_RuleSelectPerHead).
template <SelectionScope Scope>
void BM_RuleSelect(benchmark::State& state) {
  auto& kv = ring<bf16>(state.range(0));
  SparseConfig config = rule_config(state.range(1));
  config.scope = Scope;
  const RowMatrix queries = group_queries();
  BlockSparseDecode<> sparse(config);
  static_cast<void>(kv.summaries_for(config, 0));
  cold_iterations(state, kv, [&](std::int64_t c) {
    sparse.select(queries, KvHead<KvView<bf16>>{kv.view(c), &kv.summaries_for(config, c)});
    benchmark::DoNotOptimize(sparse.selected_blocks(0).data());
  });
  state.SetLabel(kComparedRules[state.range(1)]);
}

/// The support that BM_SparseDecode's selection picks on each copy of the ring, computed once.
template <KvStorage T>
void selected_supports(KvRing<T>& kv) {
  if (!kv.supports.empty()) return;
  const RowMatrix queries = group_queries();
  BlockSparseDecode<> sparse(sparse_config());
  for (std::int64_t c = 0; c < kv.copies; ++c) {
    sparse.select(queries, KvHead<KvView<T>>{kv.view(c), &kv.summaries[c]});
    kv.supports.push_back(sparse.support(0));
  }
}

/// Block-sparse attention without the selection: decode_support over the support selection
/// picks (BM_SparseDecode minus BM_Select, measured directly).
template <KvStorage T>
void BM_AttendSupport(benchmark::State& state) {
  auto& kv = ring<T>(state.range(0));
  selected_supports(kv);
  const RowMatrix queries = group_queries();
  RowMatrix out(kGroupHeads, kHeadDim);
  std::vector<HeadResult> results(kGroupHeads);
  const float scale = detail::resolve_scale(sparse_config().scale, kHeadDim);  // as sparse decode
  std::int64_t bytes = 0;
  cold_iterations(state, kv, [&](std::int64_t c) {
    const Support& support = kv.supports[static_cast<std::size_t>(c)];
    decode_support(queries, kv.view(c), support, scale, out, results);
    benchmark::DoNotOptimize(out.data());
    bytes += support.size() * row_bytes<T>();
  });
  state.SetBytesProcessed(bytes);
}

/// The memory floor of sparse decode: a plain SIMD read of exactly the bytes BM_SparseDecode
/// touches, in its order (every f32 mean key, then each support range's keys and values),
/// with the support that selection picks on each copy. No arithmetic: this is what the memory
/// system needs for the scattered pattern, which short ranges make slower than a stream (each range
/// starts with a miss the hardware prefetcher has not seen coming).
template <KvStorage T>
void BM_SupportRead(benchmark::State& state) {
  auto& kv = ring<T>(state.range(0));
  const auto& table = kernels::active();
  selected_supports(kv);
  constexpr std::int64_t kRowFloats = kHeadDim * static_cast<std::int64_t>(sizeof(T)) / 4;
  std::int64_t bytes = 0;
  cold_iterations(state, kv, [&](std::int64_t c) {
    const auto view = kv.view(c);
    const auto means = kv.summaries[c].mean_keys();
    float sum = table.stream_sum(means.data(), means.size());
    for (const PositionRange& r : kv.supports[static_cast<std::size_t>(c)].ranges()) {
      sum += table.stream_sum(reinterpret_cast<const float*>(view.key(r.begin)),
                              r.size() * kRowFloats);
      sum += table.stream_sum(reinterpret_cast<const float*>(view.value(r.begin)),
                              r.size() * kRowFloats);
      bytes += r.size() * row_bytes<T>();
    }
    bytes += static_cast<std::int64_t>(means.size() * sizeof(bf16));
    benchmark::DoNotOptimize(sum);
  });
  state.SetBytesProcessed(bytes);
}

/// The same operators on one cache copy, read again and again: once it sits in L2/L3 this is
/// the operators' compute cost alone, which together with the cold (ring) numbers separates
/// arithmetic from memory time.
template <KvStorage T, bool kSparse,
          AttentionArithmetic kArithmetic = AttentionArithmetic::exact_f32>
void BM_Hot(benchmark::State& state) {
  if (kArithmetic == AttentionArithmetic::bf16_products &&
      !bf16_products_available(storage_type_of<T>, kHeadDim)) {
    state.SkipWithError("bf16_products is not available on this CPU (no AVX512_BF16)");
    return;
  }
  auto& kv = ring<T>(state.range(0));
  const RowMatrix queries = group_queries();
  RowMatrix out(kGroupHeads, kHeadDim);
  std::vector<HeadResult> results(kGroupHeads);
  DenseDecode dense({}, kArithmetic);
  BlockSparseDecode<> sparse(sparse_config());
  const KvHead<KvView<T>> head{kv.view(0), &kv.summaries[0]};
  for (auto _ : state) {
    if constexpr (kSparse) {
      sparse.decode(queries, head, out, results);
    } else {
      dense.decode(queries, head, out, results);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * results[0].positions_read);  // positions/s
  state.counters["positions_read"] = static_cast<double>(results[0].positions_read);
}

/// What certifying a sparse step costs (include/amc/math/certified_bounds.hpp): the certified
/// omitted-mass and error bounds of all 7 heads of the group over the support BM_SparseDecodeHot
/// reads, on the same cache-resident copy (summaries with channel bounds and value norms, built
/// once). Compare with BM_SparseDecodeHot: the certification recomputes the support's scores
/// and output in double and reads the summaries of every block.
void BM_CertifiedBounds(benchmark::State& state) {
  auto& kv = ring<bf16>(state.range(0));
  const RowMatrix queries = group_queries();
  const auto view = kv.view(0);
  const auto summaries =
      BlockSummaries::build(view, 32, {.channel_bounds = true, .value_norms = true});
  BlockSparseDecode<> sparse(sparse_config());
  sparse.select(queries, KvHead<KvView<bf16>>{view, &kv.summaries[0]});
  const Support support = sparse.support(0);
  const double scale = detail::resolve_scale(sparse_config().scale, kHeadDim);
  for (auto _ : state) {
    for (std::int64_t h = 0; h < kGroupHeads; ++h) {
      const CertifiedBounds bounds = certified_bounds(
          std::span<const float>(queries.row(h).data(), kHeadDim), scale, view, summaries, support);
      benchmark::DoNotOptimize(bounds.error_bound);
    }
  }
  state.SetItemsProcessed(state.iterations() * support.size());  // support positions/s
  state.counters["positions_read"] = static_cast<double>(support.size());
}

/// The score kernel alone on cache-resident f32 rows (7 heads x 512 rows, the rule's
/// shape), with the rows starting range(0) bytes past a cache line: 0 is what amc's aligned
/// buffers give, 16 what a plain std::vector gives for large allocations (every 64-byte load
/// then straddles two lines). Items are rows.
void BM_ScoreRows(benchmark::State& state) {
  constexpr std::int64_t kRows = 512;
  const auto offset_floats = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  AlignedVector<float> storage(kRows * kHeadDim + kCacheLine / sizeof(float));
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : storage) x = normal(rng);
  const float* rows = storage.data() + offset_floats;
  const RowMatrix queries = group_queries();
  std::vector<float> out(kGroupHeads * kRows);
  const auto score_rows = kernels::active().score_rows[kernels::index_of(StorageType::f32)];
  for (auto _ : state) {
    score_rows(queries.data(), kGroupHeads, kHeadDim, rows, kHeadDim, kRows, out.data(), kRows);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kRows);
}

/// Memory latency: a dependent chain of loads visiting the lines of a 256 MiB buffer (2 MiB
/// pages) in random order. Time per iteration is one load's latency.
void BM_MemoryLatency(benchmark::State& state) {
  constexpr std::size_t kLines = (std::size_t{256} << 20) / 64;
  static HugeBuffer<std::uint64_t>* chain = [] {
    auto* buffer = new HugeBuffer<std::uint64_t>(kLines * 8);
    std::vector<std::uint32_t> order(kLines);
    for (std::size_t i = 0; i < kLines; ++i) order[i] = static_cast<std::uint32_t>(i);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(13));
    for (std::size_t i = 0; i < kLines; ++i)  // each line holds the index of the next one
      (*buffer)[std::size_t{order[i]} * 8] = std::size_t{order[(i + 1) % kLines]} * 8;
    return buffer;
  }();
  std::uint64_t at = 0;
  for (auto _ : state) {
    at = (*chain)[at];
    benchmark::DoNotOptimize(at);
  }
}

/// The arithmetic ceiling of one core (fma_peak.hpp): lane FMAs per second on registers alone;
/// bench/report divides dense decode's 2 x heads x head_dim FMAs per position by it.
void BM_FmaPeak(benchmark::State& state) {
  constexpr std::int64_t kRounds = 1 << 16;
  std::int64_t fmas = 0;
  float sink = 0.0f;
  for (auto _ : state) {
    fmas += amc::bench::fma_peak(kRounds, &sink);
    benchmark::DoNotOptimize(sink);
  }
  state.SetItemsProcessed(fmas);
  state.SetLabel(amc::bench::fma_peak_isa());
}

void BM_SummaryAppend(benchmark::State& state) {
  const std::int64_t capacity = 1 << 16;
  std::vector<bf16> keys(static_cast<std::size_t>(capacity * kHeadDim)), values(keys.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = to_bf16(normal(rng));
    values[i] = to_bf16(normal(rng));
  }
  // summaries 0: means only; 1: channel bounds and value norms; 2: 4 sub-block means; with
  // bf16_copies (range(1) == 1) their bf16 copies too
  const SummaryOptions options{.channel_bounds = state.range(0) == 1,
                               .value_norms = state.range(0) == 1,
                               .sub_blocks = state.range(0) == 2 ? 4 : 0,
                               .bf16_copies = state.range(1) == 1};
  BlockSummaries summaries(32, kHeadDim, options);
  summaries.reserve(capacity);
  std::int64_t p = 0;
  for (auto _ : state) {
    if (p == capacity) {
      state.PauseTiming();
      summaries.clear();
      p = 0;
      state.ResumeTiming();
    }
    summaries.append(std::span<const bf16>(keys.data() + p * kHeadDim, kHeadDim),
                     std::span<const bf16>(values.data() + p * kHeadDim, kHeadDim));
    ++p;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["summary_bytes_per_position"] = static_cast<double>(summaries.memory_bytes()) /
                                                 static_cast<double>(std::max<std::int64_t>(p, 1));
}

/// `kv_heads` GQA groups of 7 query heads (2: all 14 heads of a Qwen2-0.5B layer) on
/// range(1) threads.
template <class Op>
void layer_benchmark(benchmark::State& state, Op prototype, bool evict, int kv_heads = 2) {
  auto& kv = ring<bf16>(state.range(0));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  RowMatrix queries(kv_heads * kGroupHeads, kHeadDim);
  for (Eigen::Index i = 0; i < queries.size(); ++i) queries.data()[i] = normal(rng);
  RowMatrix out(queries.rows(), kHeadDim);
  std::vector<HeadResult> results(static_cast<std::size_t>(queries.rows()));
  LayerDecode<Op> layer(prototype, static_cast<int>(state.range(1)));
  std::int64_t positions = 0;
  std::vector<KvHead<KvView<bf16>>> heads(static_cast<std::size_t>(kv_heads));
  std::vector<std::int64_t> copies(static_cast<std::size_t>(kv_heads));
  auto next_copies = [&] {
    for (std::int64_t& c : copies) c = kv.advance();
  };
  auto call = [&] {
    for (std::size_t g = 0; g < heads.size(); ++g)
      heads[g] = {kv.view(copies[g]), &kv.summaries[static_cast<std::size_t>(copies[g])]};
    layer.decode(queries, std::span<const KvHead<KvView<bf16>>>(heads), out, results);
    benchmark::DoNotOptimize(out.data());
    for (int g = 0; g < kv_heads; ++g) positions += results[g * kGroupHeads].positions_read;
  };
  if (evict) {
    // The eviction runs on the layer's own pool, each thread reading a share of the buffer, as
    // a model step's other work would: the workers are then spinning when the call starts (and
    // every core's private caches are evicted too). Evicting on the main thread alone left the
    // worker asleep after the eviction's ~2 ms, so every 2-thread call paid its wake-up.
    ThreadPool& pool = layer.pool();
    for (auto _ : state) {
      next_copies();
      for (const std::int64_t c : copies) kv.flush(c);  // as cold_iterations
      pool.parallel_for(pool.threads(), [&](std::int64_t t) { evict_share(t, pool.threads()); });
      const auto start = std::chrono::steady_clock::now();
      call();
      const auto stop = std::chrono::steady_clock::now();
      state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
    }
    state.counters["lines_flushed"] = kFlushesLines ? 1.0 : 0.0;
  } else {
    for (auto _ : state) {
      next_copies();
      call();
    }
  }
  state.SetBytesProcessed(positions * row_bytes<bf16>());
  state.counters["threads"] = static_cast<double>(state.range(1));
}

void BM_LayerDenseDecode(benchmark::State& state) {
  layer_benchmark(state, DenseDecode{}, /*evict=*/false);
}
void BM_LayerSparseDecode(benchmark::State& state) {
  layer_benchmark(state, BlockSparseDecode<>(sparse_config()), /*evict=*/true);
}
/// One GQA group (BM_SparseDecode's call) through LayerDecode: on 2 threads its selection is
/// scored in two parts, one per thread (LayerDecode::decode_in_parts).
void BM_GroupSparseDecode(benchmark::State& state) {
  layer_benchmark(state, BlockSparseDecode<>(sparse_config()), /*evict=*/true, /*kv_heads=*/1);
}

const std::vector<std::int64_t> kContexts = {2048, 8192, 16384, 65536, 131072};

template <KvStorage T>
void register_contexts(const std::string& suffix) {
  for (const std::int64_t n : kContexts) {
    // Dense reads stream from the ring; the sparse family runs on an evicted cache.
    for (auto [name, fn] : {std::pair{"BM_StreamRead", &BM_StreamRead<T>},
                            std::pair{"BM_DenseDecode", &BM_DenseDecode<T>}}) {
      benchmark::RegisterBenchmark((name + suffix).c_str(), fn)
          ->Arg(n)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
    if constexpr (std::is_same_v<T, bf16>) {
      benchmark::RegisterBenchmark("BM_DenseDecodeQ8", BM_DenseDecodeQ8<false>)
          ->Arg(n)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark("BM_SparseDecodeQ8", BM_SparseDecodeQ8)
          ->Arg(n)
          ->Iterations(kColdIterations)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark("BM_DenseDecodeBf16Products", BM_DenseDecodeBf16Products)
          ->Arg(n)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
    for (auto [name, fn] :
         {std::pair{"BM_SparseDecode", &BM_SparseDecode<T>}, std::pair{"BM_Select", &BM_Select<T>},
          std::pair{"BM_SupportRead", &BM_SupportRead<T>},
          std::pair{"BM_AttendSupport", &BM_AttendSupport<T>}}) {
      benchmark::RegisterBenchmark((name + suffix).c_str(), fn)
          ->Arg(n)
          ->Iterations(kColdIterations)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
    if constexpr (std::is_same_v<T, bf16>) {
      if (n != 16384 && n != 131072) continue;
      // Per head, the main rules and the oracle (kComparedRules[0..5]).
      constexpr std::int64_t kPerHeadRules = 6;
      for (auto [name, fn, rules] :
           {std::tuple{"BM_RuleSparseDecode", &BM_RuleSparseDecode<SelectionScope::per_group>,
                       std::ssize(kComparedRules)},
            std::tuple{"BM_RuleSelect", &BM_RuleSelect<SelectionScope::per_group>,
                       std::ssize(kComparedRules)},
            std::tuple{"BM_RuleSparseDecodePerHead", &BM_RuleSparseDecode<SelectionScope::per_head>,
                       kPerHeadRules},
            std::tuple{"BM_RuleSelectPerHead", &BM_RuleSelect<SelectionScope::per_head>,
                       kPerHeadRules}}) {
        for (std::int64_t rule = 0; rule < rules; ++rule) {
          benchmark::RegisterBenchmark(name, fn)
              ->Args({n, rule})
              ->ArgNames({"", "rule"})
              ->Iterations(kColdIterations)
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_contexts<amc::bf16>("");
  register_contexts<float>("_f32");
  for (auto [name, fn, n] :
       {std::tuple{"BM_DenseDecodeHot", &BM_Hot<amc::bf16, false>, 2048},
        std::tuple{"BM_DenseDecodeHot_f32", &BM_Hot<float, false>, 2048},
        std::tuple{"BM_DenseDecodeHotQ8", &BM_DenseDecodeQ8<true>, 2048},
        std::tuple{"BM_DenseDecodeHotBf16Products",
                   &BM_Hot<amc::bf16, false, AttentionArithmetic::bf16_products>, 2048},
        std::tuple{"BM_SparseDecodeHot", &BM_Hot<amc::bf16, true>, 16384}}) {
    benchmark::RegisterBenchmark(name, fn)->Arg(n)->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  for (const std::int64_t n : {16384, 131072}) {
    benchmark::RegisterBenchmark("BM_CertifiedBounds", BM_CertifiedBounds)
        ->Arg(n)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("BM_ScoreRows", BM_ScoreRows)
      ->ArgName("offset_bytes")
      ->Arg(0)
      ->Arg(16)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_MemoryLatency", BM_MemoryLatency)->Unit(benchmark::kNanosecond);
  benchmark::RegisterBenchmark("BM_FmaPeak", BM_FmaPeak)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_SummaryAppend", BM_SummaryAppend)
      ->ArgNames({"summaries", "bf16_copies"})
      ->ArgsProduct({{0, 1, 2}, {0, 1}});
  for (const std::int64_t n : {16384, 65536}) {
    for (const std::int64_t threads : {1, 2}) {
      benchmark::RegisterBenchmark("BM_LayerDenseDecode", BM_LayerDenseDecode)
          ->Args({n, threads})
          ->ArgNames({"", "threads"})
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark("BM_LayerSparseDecode", BM_LayerSparseDecode)
          ->Args({n, threads})
          ->ArgNames({"", "threads"})
          ->Iterations(kColdIterations)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (const std::int64_t n : {16384, 65536, 131072}) {
    for (const std::int64_t threads : {1, 2}) {
      benchmark::RegisterBenchmark("BM_GroupSparseDecode", BM_GroupSparseDecode)
          ->Args({n, threads})
          ->ArgNames({"", "threads"})
          ->Iterations(kColdIterations)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

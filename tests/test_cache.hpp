// A synthetic KV head for operator tests: the same logical cache as a strided contiguous view
// and as a paged view whose pages are scattered through a larger pool.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "amc/kv_view.hpp"
#include "test_helpers.hpp"

namespace amc::test {

template <KvStorage T>
struct TestCache {
  std::int64_t positions = 0;
  std::int64_t head_dim = 0;
  std::int64_t stride = 0;              // row stride of the contiguous copy (> head_dim: strided)
  std::vector<T> keys, values;          // [positions, stride]
  std::vector<float> keys_f, values_f;  // what the storage holds, as floats

  std::int64_t page_size = 0;
  std::vector<std::int32_t> page_table;
  std::vector<T> key_pool, value_pool;  // [pool_rows, stride]
  std::int64_t pool_rows = 0;

  /// Random keys with a few strong rows (a sink at 0 and "needles"), so selection matters.
  TestCache(std::int64_t n, std::int64_t d, std::int64_t page = 16, float key_scale = 1.0f)
      : positions(n), head_dim(d), stride(d + 5), page_size(page) {
    auto k =
        random_floats(static_cast<std::size_t>(std::max<std::int64_t>(n, 1) * stride), key_scale);
    auto v = random_floats(static_cast<std::size_t>(std::max<std::int64_t>(n, 1) * stride));
    std::uniform_int_distribution<std::int64_t> pick(0, std::max<std::int64_t>(n - 1, 0));
    for (int needle = 0; needle < 4 && n > 0; ++needle) {
      const std::int64_t p = needle == 0 ? 0 : pick(rng());
      for (std::int64_t i = 0; i < d; ++i) k[static_cast<std::size_t>(p * stride + i)] *= 4.0f;
    }
    keys = to_storage<T>(k, &keys_f);
    values = to_storage<T>(v, &values_f);

    // Paged copy: pages in reverse order inside a pool with two spare pages.
    const std::int64_t pages = (n + page_size - 1) / page_size;
    pool_rows = (pages + 2) * page_size;
    key_pool.assign(static_cast<std::size_t>(pool_rows * stride), from_float<T>(99.0f));
    value_pool.assign(static_cast<std::size_t>(pool_rows * stride), from_float<T>(-99.0f));
    for (std::int64_t p = 0; p < pages; ++p)
      page_table.push_back(static_cast<std::int32_t>(pages - p));
    for (std::int64_t pos = 0; pos < n; ++pos) {
      const std::int64_t row = page_table[pos / page_size] * page_size + pos % page_size;
      std::copy_n(keys.begin() + pos * stride, stride, key_pool.begin() + row * stride);
      std::copy_n(values.begin() + pos * stride, stride, value_pool.begin() + row * stride);
    }
  }

  KvView<T> view() const {
    return KvView<T>(keys.data(), values.data(), positions, head_dim, stride, stride);
  }
  PagedKvView<T> paged() const {
    const std::int64_t last =
        positions == 0 ? 0
                       : positions - (static_cast<std::int64_t>(page_table.size()) - 1) * page_size;
    return PagedKvView<T>(key_pool.data(), value_pool.data(), pool_rows, head_dim, page_table,
                          page_size, last, stride, stride);
  }

  std::vector<std::int64_t> all_positions() const {
    std::vector<std::int64_t> out(static_cast<std::size_t>(positions));
    std::iota(out.begin(), out.end(), std::int64_t{0});
    return out;
  }
};

/// c <q, k_j> in double over the stored keys: the independent reference rule tests compare
/// with.
inline std::vector<double> true_scores(const TestCache<float>& cache, const std::vector<float>& q,
                                       double scale) {
  std::vector<double> s(static_cast<std::size_t>(cache.positions));
  for (std::int64_t p = 0; p < cache.positions; ++p) {
    double dot = 0.0;
    for (std::int64_t i = 0; i < cache.head_dim; ++i)
      dot += static_cast<double>(q[static_cast<std::size_t>(i)]) *
             cache.keys_f[static_cast<std::size_t>(p * cache.stride + i)];
    s[static_cast<std::size_t>(p)] = scale * dot;
  }
  return s;
}

/// The bf16 nearest x (finite), ties to the even one, found by comparing the distances in double
/// to the two bf16 values around x: its bits cut to the upper 16 (towards zero) and the next
/// one away from zero.
inline double nearest_bf16(float x) {
  const std::uint32_t cut = std::bit_cast<std::uint32_t>(x) & 0xFFFF0000u;
  const double toward_zero = std::bit_cast<float>(cut);
  const double away = std::bit_cast<float>(cut + 0x10000u);
  const double below = std::abs(static_cast<double>(x) - toward_zero);
  const double above = std::abs(away - static_cast<double>(x));
  if (below != above) return below < above ? toward_zero : away;
  return (cut & 0x10000u) == 0 ? toward_zero : away;  // a tie: the even last bit
}

/// What the mean-pooled rule scores, per block of `block_size` positions, in double from the
/// stored keys: c <q, the block's mean key rounded to f32>, and with `bf16_means` that mean
/// rounded on to the nearest bf16.
inline std::vector<double> mean_pooled_scores(const TestCache<float>& cache,
                                              const std::vector<float>& q, double scale,
                                              std::int64_t block_size, bool bf16_means = false) {
  const std::int64_t blocks = (cache.positions + block_size - 1) / block_size;
  std::vector<double> out(static_cast<std::size_t>(blocks));
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t lo = b * block_size, hi = std::min(cache.positions, lo + block_size);
    double score = 0.0;
    for (std::int64_t i = 0; i < cache.head_dim; ++i) {
      double sum = 0.0;
      for (std::int64_t p = lo; p < hi; ++p)
        sum += cache.keys_f[static_cast<std::size_t>(p * cache.stride + i)];
      const auto mean = static_cast<float>(sum / static_cast<double>(hi - lo));
      score += static_cast<double>(q[static_cast<std::size_t>(i)]) *
               (bf16_means ? nearest_bf16(mean) : static_cast<double>(mean));
    }
    out[static_cast<std::size_t>(b)] = scale * score;
  }
  return out;
}

}  // namespace amc::test

// KV cache storage, conversion on write, summaries, random fill.
#include "kv_cache.hpp"

#include <amc/error.hpp>

#include <algorithm>
#include <cmath>
#include <span>

namespace amc::transformer {

KvCache::KvCache(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim,
                 KvCacheOptions options)
    : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim), options_(options) {
  constexpr const char* where = "amc::transformer::KvCache";
  AMC_CHECK(layers > 0 && kv_heads > 0 && head_dim > 0, where,
            "layers, kv_heads and head_dim must be positive, got ", layers, ", ", kv_heads, ", ",
            head_dim);
  AMC_CHECK(options.dtype == StorageType::bf16 || options.dtype == StorageType::f32, where,
            "dtype must be bf16 or f32, got ", to_string(options.dtype));
  AMC_CHECK(options.block_size >= 0, where, "block_size must be >= 0, got ", options.block_size);
  const auto heads = static_cast<std::size_t>(layers * kv_heads);
  visit_storage<float, bf16>(options.dtype, [&](auto type) {
    auto& b = buffers<typename decltype(type)::type>();
    b.keys.resize(heads);
    b.values.resize(heads);
  });
  if (options.block_size > 0) {
    summaries_.assign(heads, BlockSummaries(options.block_size, head_dim, options.summaries));
  }
}

std::size_t KvCache::bytes_per_position() const {
  return static_cast<std::size_t>(2 * layers_ * kv_heads_ * head_dim_) *
         storage_size(options_.dtype);
}

void KvCache::grow(std::int64_t rows) {
  if (rows <= capacity_) return;
  const auto elements = static_cast<std::size_t>(rows * head_dim_);
  for (auto* side : {&bf16_.keys, &bf16_.values}) {
    for (auto& b : *side) b.resize(elements);
  }
  for (auto* side : {&f32_.keys, &f32_.values}) {
    for (auto& b : *side) b.resize(elements);
  }
  for (BlockSummaries& s : summaries_) s.reserve(rows);
  capacity_ = rows;
}

void KvCache::reserve(std::int64_t positions) { grow(positions); }

void KvCache::write(std::int64_t layer, const float* keys, const float* values, std::int64_t n,
                    std::int64_t row_stride) {
  AMC_DASSERT(layer >= 0 && layer < layers_);
  // Appends double the capacity, so a token-by-token decode reallocates O(log n) times.
  if (positions_ + n > capacity_) grow(std::max(positions_ + n, 2 * capacity_));
  const auto d = static_cast<std::size_t>(head_dim_);
  for (std::int64_t h = 0; h < kv_heads_; ++h) {
    const std::size_t i = index(layer, h);
    visit_storage<float, bf16>(options_.dtype, [&](auto type) {
      using T = typename decltype(type)::type;
      T* k = buffers<T>().keys[i].data() + static_cast<std::size_t>(positions_) * d;
      T* v = buffers<T>().values[i].data() + static_cast<std::size_t>(positions_) * d;
      for (std::int64_t t = 0; t < n; ++t) {
        const float* key_row = keys + t * row_stride + h * head_dim_;
        const float* value_row = values + t * row_stride + h * head_dim_;
        T* k_out = k + static_cast<std::size_t>(t) * d;
        T* v_out = v + static_cast<std::size_t>(t) * d;
        for (std::size_t c = 0; c < d; ++c) {
          k_out[c] = from_float<T>(key_row[c]);
          v_out[c] = from_float<T>(value_row[c]);
        }
        // Summaries describe the keys as stored, so selection sees what attention reads.
        if (!summaries_.empty()) {
          summaries_[i].append(std::span<const T>(k_out, d), std::span<const T>(v_out, d));
        }
      }
    });
  }
}

void KvCache::commit(std::int64_t n) { positions_ += n; }

template <KvStorage T>
KvView<T> KvCache::view(std::int64_t layer, std::int64_t head, std::int64_t positions) const {
  AMC_DASSERT(positions <= capacity_);
  const std::size_t i = index(layer, head);
  AMC_CHECK(options_.dtype == storage_type_of<T>, "amc::transformer::KvCache::view",
            "the cache stores ", to_string(options_.dtype), ", not ",
            to_string(storage_type_of<T>));
  const Buffers<T>& b = buffers<T>();
  return KvView<T>(b.keys[i].data(), b.values[i].data(), positions, head_dim_);
}

template KvView<bf16> KvCache::view<bf16>(std::int64_t, std::int64_t, std::int64_t) const;
template KvView<float> KvCache::view<float>(std::int64_t, std::int64_t, std::int64_t) const;

void KvCache::clear() {
  positions_ = 0;
  for (BlockSummaries& s : summaries_) s.clear();
}

void KvCache::truncate(std::int64_t positions) {
  AMC_CHECK(positions >= 0 && positions <= positions_, "amc::transformer::KvCache::truncate",
            "positions must lie in [0, ", positions_, "] (the positions held), got ", positions);
  if (positions == positions_) return;
  positions_ = positions;
  // BlockSummaries has no truncation; a rebuild replays the same appends, so the result is
  // bitwise what appending only the kept positions gives (O(positions * head_dim) per head).
  if (!summaries_.empty()) rebuild_summaries();
}

void KvCache::set_summaries(std::int64_t block_size, SummaryOptions summaries) {
  AMC_CHECK(block_size >= 0, "amc::transformer::KvCache::set_summaries",
            "block_size must be >= 0, got ", block_size);
  options_.block_size = block_size;
  options_.summaries = summaries;
  summaries_.clear();
  if (block_size == 0) return;
  summaries_.assign(static_cast<std::size_t>(layers_ * kv_heads_),
                    BlockSummaries(block_size, head_dim_, summaries));
  for (BlockSummaries& s : summaries_) s.reserve(capacity_);
  rebuild_summaries();
}

void KvCache::rebuild_summaries() {
  for (std::int64_t l = 0; l < layers_; ++l) {
    for (std::int64_t h = 0; h < kv_heads_; ++h) {
      visit_storage<float, bf16>(options_.dtype, [&](auto type) {
        summaries_[index(l, h)].rebuild(view<typename decltype(type)::type>(l, h, positions_));
      });
    }
  }
}

void KvCache::fill_random(std::int64_t positions, std::uint64_t seed) {
  AMC_CHECK(positions >= 0, "amc::transformer::KvCache::fill_random",
            "positions must be >= 0, got ", positions);
  grow(positions);
  // Timing does not need exact normals: each 64-bit splitmix64 output gives four 16-bit
  // uniforms whose sum, standardised, is close to a standard normal; 10^9 values take seconds.
  std::uint64_t state = seed;
  auto sample = [&] {
    state += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const auto sum =
        static_cast<double>((z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48));
    return static_cast<float>((sum - 131070.0) * (1.0 / 37837.2));
  };
  const auto count = static_cast<std::size_t>(positions * head_dim_);
  auto fill = [&](auto& buffers) {
    for (auto& b : buffers) {
      using T = typename std::remove_reference_t<decltype(b)>::value_type;
      for (std::size_t j = 0; j < count; ++j) b[j] = from_float<T>(sample());
    }
  };
  fill(bf16_.keys);
  fill(bf16_.values);
  fill(f32_.keys);
  fill(f32_.values);
  positions_ = positions;
  if (!summaries_.empty()) rebuild_summaries();
}

}  // namespace amc::transformer

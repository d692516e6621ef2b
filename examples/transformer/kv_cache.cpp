// KV cache storage, conversion on write, summaries, random fill.
#include "kv_cache.hpp"

#include <amc/error.hpp>
#include <amc/kernels/kernel_table.hpp>

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>
#include <vector>

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
  const bool q8 = options.quantization == KvQuantization::q8_0;
  AMC_CHECK(!q8 || (options.dtype == StorageType::f32 && head_dim % kQ8Block == 0), where,
            "a q8_0 cache is read as f32 and needs head_dim a multiple of 32, got dtype ",
            to_string(options.dtype), " and head_dim ", head_dim);
  const auto heads = static_cast<std::size_t>(layers * kv_heads);
  if (q8) {
    q8_.key_quants.resize(heads);
    q8_.value_quants.resize(heads);
    q8_.key_scales.resize(heads);
    q8_.value_scales.resize(heads);
  } else {
    visit_storage<float, bf16>(options.dtype, [&](auto type) {
      auto& b = buffers<typename decltype(type)::type>();
      b.keys.resize(heads);
      b.values.resize(heads);
    });
  }
  if (options.block_size > 0) {
    summaries_.assign(heads, BlockSummaries(options.block_size, head_dim, options.summaries));
  }
}

std::size_t KvCache::bytes_per_position() const {
  const auto values = static_cast<std::size_t>(2 * layers_ * kv_heads_ * head_dim_);
  if (quantized()) return values + values / kQ8Block * sizeof(f16);  // quants and scales
  return values * storage_size(options_.dtype);
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
  for (auto* side : {&q8_.key_quants, &q8_.value_quants}) {
    for (auto& b : *side) b.resize(elements);
  }
  for (auto* side : {&q8_.key_scales, &q8_.value_scales}) {
    for (auto& b : *side) b.resize(elements / kQ8Block);
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
    if (quantized()) {
      for (std::int64_t t = 0; t < n; ++t) {
        write_q8(i, keys + t * row_stride + h * head_dim_, values + t * row_stride + h * head_dim_,
                 positions_ + t);
      }
      continue;
    }
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

void KvCache::write_q8(std::size_t head, const float* key_row, const float* value_row,
                       std::int64_t row) {
  const auto d = static_cast<std::size_t>(head_dim_);
  const auto at = static_cast<std::size_t>(row) * d;
  std::int8_t* k = q8_.key_quants[head].data() + at;
  std::int8_t* v = q8_.value_quants[head].data() + at;
  f16* k_scales = q8_.key_scales[head].data() + at / kQ8Block;
  f16* v_scales = q8_.value_scales[head].data() + at / kQ8Block;
  quantize_q8_0_row(std::span(key_row, d), k, k_scales);
  quantize_q8_0_row(std::span(value_row, d), v, v_scales);
  if (summaries_.empty()) return;
  // Summaries describe the keys as stored (the widened q8_0 values), as for the other dtypes.
  thread_local std::vector<float> stored_key, stored_value;
  stored_key.resize(d);
  stored_value.resize(d);
  const auto widen = kernels::active().load_q8_0_rows;
  widen(k, head_dim_, k_scales, head_dim_ / kQ8Block, 1, head_dim_, stored_key.data());
  widen(v, head_dim_, v_scales, head_dim_ / kQ8Block, 1, head_dim_, stored_value.data());
  summaries_[head].append(std::span<const float>(stored_key), std::span<const float>(stored_value));
}

void KvCache::commit(std::int64_t n) { positions_ += n; }

template <KvStorage T>
KvView<T> KvCache::view(std::int64_t layer, std::int64_t head, std::int64_t positions) const {
  AMC_DASSERT(positions <= capacity_);
  const std::size_t i = index(layer, head);
  AMC_CHECK(!quantized() && options_.dtype == storage_type_of<T>, "amc::transformer::KvCache::view",
            "the cache stores ", quantized() ? "q8_0" : to_string(options_.dtype), ", not ",
            to_string(storage_type_of<T>));
  const Buffers<T>& b = buffers<T>();
  return KvView<T>(b.keys[i].data(), b.values[i].data(), positions, head_dim_);
}

template KvView<bf16> KvCache::view<bf16>(std::int64_t, std::int64_t, std::int64_t) const;
template KvView<float> KvCache::view<float>(std::int64_t, std::int64_t, std::int64_t) const;

Q8KvView KvCache::q8_view(std::int64_t layer, std::int64_t head, std::int64_t positions) const {
  AMC_DASSERT(positions <= capacity_);
  AMC_CHECK(quantized(), "amc::transformer::KvCache::q8_view", "the cache stores ",
            to_string(options_.dtype), ", not q8_0");
  const std::size_t i = index(layer, head);
  const std::ptrdiff_t scales = head_dim_ / kQ8Block;
  return Q8KvView({q8_.key_quants[i].data(), q8_.key_scales[i].data(), head_dim_, scales},
                  {q8_.value_quants[i].data(), q8_.value_scales[i].data(), head_dim_, scales},
                  positions, head_dim_);
}

void KvCache::clear() {
  positions_ = 0;
  for (BlockSummaries& s : summaries_) s.clear();
}

void KvCache::truncate(std::int64_t positions) {
  AMC_CHECK(positions >= 0 && positions <= positions_, "amc::transformer::KvCache::truncate",
            "positions must lie in [0, ", positions_, "] (the positions held), got ", positions);
  if (positions == positions_) return;
  // Whole blocks past the cut are dropped and a block cut in two is read again from the stored
  // keys (BlockSummaries::truncate): bitwise what appending only the kept positions gives, at a
  // cost that does not grow with the cache (speculative decoding truncates after every verify).
  for (std::int64_t l = 0; l < layers_ && !summaries_.empty(); ++l) {
    for (std::int64_t h = 0; h < kv_heads_; ++h) {
      visit_view(l, h, positions_,
                 [&](const auto& kv) { summaries_[index(l, h)].truncate(kv, positions); });
    }
  }
  positions_ = positions;
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
      if (quantized()) {
        summaries_[index(l, h)].rebuild(q8_view(l, h, positions_));
        continue;
      }
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
  std::vector<float> row(static_cast<std::size_t>(head_dim_));
  for (std::size_t i = 0; i < q8_.key_quants.size(); ++i) {
    for (std::int64_t p = 0; p < positions; ++p) {
      for (auto [quants, scales] : {std::pair{&q8_.key_quants, &q8_.key_scales},
                                    std::pair{&q8_.value_quants, &q8_.value_scales}}) {
        for (float& x : row) x = sample();
        const auto at = static_cast<std::size_t>(p * head_dim_);
        quantize_q8_0_row(row, (*quants)[i].data() + at, (*scales)[i].data() + at / kQ8Block);
      }
    }
  }
  positions_ = positions;
  if (!summaries_.empty()) rebuild_summaries();
}

}  // namespace amc::transformer

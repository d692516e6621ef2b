// The KV cache of a Qwen2 session: per layer and KV head, keys and values [positions, head_dim]
// in bf16, f32 or q8_0 blocks, exposed to amc's operators as amc::KvView (amc::Q8KvView for
// q8_0), with amc::BlockSummaries of the keys kept up to date as positions are appended (for
// block-sparse decode).
#pragma once

#include <amc/aligned.hpp>
#include <amc/attention/block_summaries.hpp>
#include <amc/kv_view.hpp>
#include <amc/q8_kv.hpp>
#include <amc/storage.hpp>

#include <concepts>
#include <cstdint>
#include <utility>
#include <vector>

namespace amc::transformer {

/// How a cache holds its rows: as elements of KvCacheOptions::dtype, or in q8_0 blocks
/// (amc/q8_kv.hpp: per 32 channels an f16 scale and 32 int8 quants), which the operators read
/// widened to f32 through amc::Q8KvView (dtype is then f32).
enum class KvQuantization : std::uint8_t { none, q8_0 };

struct KvCacheOptions {
  StorageType dtype = StorageType::bf16;  ///< bf16 or f32 (f32 with q8_0: what the operators read)
  KvQuantization quantization = KvQuantization::none;
  /// Block size of the summaries; 0 keeps none (dense decoding needs none).
  std::int64_t block_size = 0;
  SummaryOptions summaries;  ///< what the configured rule needs (required_summaries)
};

class KvCache {
 public:
  KvCache() = default;
  /// \param layers, kv_heads, head_dim  the model's shape (all > 0)
  KvCache(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim,
          KvCacheOptions options);

  std::int64_t layers() const { return layers_; }
  std::int64_t kv_heads() const { return kv_heads_; }
  std::int64_t head_dim() const { return head_dim_; }
  const KvCacheOptions& options() const { return options_; }

  /// Positions committed to every layer.
  std::int64_t positions() const { return positions_; }
  /// Bytes of keys and values per position over all layers and heads.
  std::size_t bytes_per_position() const;
  /// Allocates room for `positions` so appends up to there never reallocate.
  void reserve(std::int64_t positions);

  /// Writes positions [positions(), positions() + n) of one layer, converting to the storage
  /// type, and appends the stored keys to that layer's summaries. Every layer is written once
  /// per forward pass; commit(n) then makes the positions count.
  /// \param keys, values [n, row_stride] f32: row t holds the kv_heads heads' head_dim
  ///                     channels, head-major (as the k and v projections produce them)
  void write(std::int64_t layer, const float* keys, const float* values, std::int64_t n,
             std::int64_t row_stride);
  void commit(std::int64_t n);

  /// Positions [0, positions) of one KV head; `positions` may include rows written but not yet
  /// committed (the current forward pass's).
  template <KvStorage T>
  KvView<T> view(std::int64_t layer, std::int64_t head, std::int64_t positions) const;
  /// The same for a q8_0 cache (quantization == q8_0): the stored rows, read widened to f32.
  Q8KvView q8_view(std::int64_t layer, std::int64_t head, std::int64_t positions) const;
  bool quantized() const { return options_.quantization != KvQuantization::none; }
  /// Calls f(view) with one KV head over positions [0, positions) as the operators read it,
  /// whatever the cache holds: KvView<float>, KvView<bf16> or Q8KvView.
  template <class F>
  void visit_view(std::int64_t layer, std::int64_t head, std::int64_t positions, F&& f) const {
    if (quantized()) {
      f(q8_view(layer, head, positions));
      return;
    }
    visit_storage<float, bf16>(options_.dtype, [&](auto type) {
      f(view<typename decltype(type)::type>(layer, head, positions));
    });
  }

  /// Summaries of one KV head, or nullptr when the cache keeps none.
  const BlockSummaries* summaries(std::int64_t layer, std::int64_t head) const {
    return summaries_.empty() ? nullptr : &summaries_[index(layer, head)];
  }

  /// Forgets every position (keeps the allocation).
  void clear();
  /// Keeps positions [0, positions) and forgets the rest (keeps the allocation), rebuilding the
  /// summaries from the stored keys: they come out bitwise as if only those positions had
  /// been appended. Throws amc::error unless 0 <= positions <= positions().
  void truncate(std::int64_t positions);
  /// Switches the summaries to `block_size` (0: keep none) and `summaries`, rebuilt from the
  /// stored keys of every committed position. Throws amc::error for a negative block size.
  void set_summaries(std::int64_t block_size, SummaryOptions summaries);

  /// Replaces the contents with `positions` random keys and values (standard normal, rounded
  /// to the storage type) and rebuilds the summaries: a long context for benchmarks, without
  /// paying for its prefill.
  void fill_random(std::int64_t positions, std::uint64_t seed);

 private:
  std::size_t index(std::int64_t layer, std::int64_t head) const {
    return static_cast<std::size_t>(layer * kv_heads_ + head);
  }
  void grow(std::int64_t rows);
  void rebuild_summaries();

  /// Per KV head [capacity, head_dim] keys and values of one storage type. Cache-line aligned,
  /// so the attention kernel's row loads never straddle two lines.
  template <class T>
  struct Buffers {
    std::vector<AlignedVector<T>> keys, values;  // [layers * kv_heads]
  };
  /// The buffers of storage type T (bf16 or float).
  template <class T>
  const Buffers<T>& buffers() const {
    static_assert(std::same_as<T, bf16> || std::same_as<T, float>, "bf16 or f32 caches only");
    if constexpr (std::same_as<T, bf16>) {
      return bf16_;
    } else {
      return f32_;
    }
  }
  template <class T>
  Buffers<T>& buffers() {
    return const_cast<Buffers<T>&>(std::as_const(*this).buffers<T>());
  }

  std::int64_t layers_ = 0;
  std::int64_t kv_heads_ = 0;
  std::int64_t head_dim_ = 0;
  KvCacheOptions options_;
  std::int64_t positions_ = 0;
  std::int64_t capacity_ = 0;
  /// Per KV head, a q8_0 side: quants [capacity, head_dim] and scales [capacity, head_dim / 32].
  struct Q8Buffers {
    std::vector<AlignedVector<std::int8_t>> key_quants, value_quants;  // [layers * kv_heads]
    std::vector<AlignedVector<f16>> key_scales, value_scales;
  };
  void write_q8(std::size_t head, const float* key_row, const float* value_row, std::int64_t row);

  Buffers<bf16> bf16_;  // only the dtype's (or the quantization's) buffers are used
  Buffers<float> f32_;
  Q8Buffers q8_;
  std::vector<BlockSummaries> summaries_;  // [layers * kv_heads] or empty
};

}  // namespace amc::transformer

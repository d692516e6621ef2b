// Causal attention of a block of prefill queries over a KV head of the cache, flash-style:
// blocks of keys at a time with an online softmax, the scores and the value mixing as GEMMs,
// so no [n, n] score matrix is ever formed and the arithmetic runs at matrix-product speed.
#pragma once

#include <amc/kv_view.hpp>
#include <amc/q8_kv.hpp>

#include <cstdint>

namespace amc::transformer {

/// Query rows for one GQA group: `positions` consecutive positions starting at absolute
/// position `first_position`, `group` query heads each.
struct QueryBlock {
  const float* queries =
      nullptr;  ///< [positions, q_stride]: head h of position t at t * q_stride + h * head_dim
  std::int64_t q_stride = 0;
  float* out = nullptr;  ///< [positions, out_stride], same layout as the queries
  std::int64_t out_stride = 0;
  std::int64_t positions = 0;
  std::int64_t group = 0;
  std::int64_t first_position = 0;
};

/// out = softmax(scale * q k^T) v over keys [0, p] for each query position p of the block
/// (keys of positions up to first_position + positions - 1 must be in `kv`). The result depends
/// only on the block's extent, not on the thread that computes it.
/// Instantiated for KvView<float>, KvView<bf16> and Q8KvView.
template <KvViewLike View>
void prefill_attention(const View& kv, const QueryBlock& block, float scale);

}  // namespace amc::transformer

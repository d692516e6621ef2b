// Flash-style causal attention for prefill: S = Q K^T and O += P V per block of keys (GEMMs),
// online softmax per query row in between (amc::SoftmaxState on amc's max and exp-sum kernels).
#include "prefill_attention.hpp"

#include <amc/attention/softmax_state.hpp>
#include <amc/kernels/kernel_table.hpp>

#include <algorithm>
#include <span>
#include <vector>

#include "linear.hpp"

namespace amc::transformer {
namespace {

/// Keys per block: the scores of a block ([positions * group, kKeyBlock] f32, 448 KiB for 64
/// positions of a Qwen2-0.5B group) stay in L2 between the two GEMMs.
constexpr std::int64_t kKeyBlock = 256;

/// Rows [first, first + count) of a KV view side (keys or values) as f32 [count, head_dim].
template <KvStorage T, class Row>
void load_rows(Row row, std::int64_t first, std::int64_t count, std::int64_t head_dim,
               std::ptrdiff_t stride, float* out) {
  const auto load = kernels::active().load[kernels::index_of(storage_type_of<T>)];
  if (stride == head_dim) {
    load(row(first), out, count * head_dim);  // contiguous rows: one call
  } else {
    for (std::int64_t i = 0; i < count; ++i) load(row(first + i), out + i * head_dim, head_dim);
  }
}

}  // namespace

template <KvStorage T>
void prefill_attention(const KvView<T>& kv, const QueryBlock& block, float scale) {
  const kernels::KernelTable& k = kernels::active();
  const std::int64_t d = kv.head_dim();
  const std::int64_t rows = block.positions * block.group;  // query rows: (position, head)
  const std::int64_t limit = block.first_position + block.positions;  // keys needed
  thread_local std::vector<float> queries, scores, keys, values;
  thread_local SoftmaxState state;  // one head per query row; its accumulator is O
  queries.resize(static_cast<std::size_t>(rows * d));
  scores.resize(static_cast<std::size_t>(rows * kKeyBlock));
  keys.resize(static_cast<std::size_t>(kKeyBlock * d));
  values.resize(static_cast<std::size_t>(kKeyBlock * d));
  state.resize(rows, d);
  float* const output = state.accumulator_data();

  // Scaled queries, [rows, d] with row (t, h) = t * group + h.
  for (std::int64_t t = 0; t < block.positions; ++t) {
    for (std::int64_t h = 0; h < block.group; ++h) {
      const float* q = block.queries + t * block.q_stride + h * d;
      float* out = queries.data() + (t * block.group + h) * d;
      for (std::int64_t i = 0; i < d; ++i) out[i] = q[i] * scale;
    }
  }

  for (std::int64_t j0 = 0; j0 < limit; j0 += kKeyBlock) {
    const std::int64_t count = std::min(kKeyBlock, limit - j0);
    load_rows<T>([&](std::int64_t p) { return kv.key(p); }, j0, count, d, kv.key_stride(),
                 keys.data());
    load_rows<T>([&](std::int64_t p) { return kv.value(p); }, j0, count, d, kv.value_stride(),
                 values.data());
    // S [rows, count] = Q K^T.
    gemm_f32(queries.data(), d, keys.data(), d, scores.data(), count, rows, count, d);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* s = scores.data() + r * count;
      // Causal: position first_position + t sees keys [0, first_position + t].
      const std::int64_t t = r / block.group;
      const std::int64_t visible =
          std::clamp<std::int64_t>(block.first_position + t + 1 - j0, 0, count);
      std::fill(s + visible, s + count, 0.0f);  // masked: weight 0 in the P V product
      // s := exp(s - running max), the row's max, sum and accumulator brought up to date.
      if (visible > 0) state.fold_scores(r, s, visible, k);
    }
    // O [rows, d] += P [rows, count] V [count, d].
    gemm_f32(scores.data(), count, values.data(), d, output, d, rows, d, count,
             /*transposed=*/false, /*accumulate=*/true);
  }

  for (std::int64_t t = 0; t < block.positions; ++t) {
    for (std::int64_t h = 0; h < block.group; ++h) {
      state.normalize(t * block.group + h, std::span(block.out + t * block.out_stride + h * d,
                                                     static_cast<std::size_t>(d)));
    }
  }
}

template void prefill_attention<bf16>(const KvView<bf16>&, const QueryBlock&, float);
template void prefill_attention<float>(const KvView<float>&, const QueryBlock&, float);

}  // namespace amc::transformer

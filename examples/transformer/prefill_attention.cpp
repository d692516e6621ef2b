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

/// Rows [first, first + count) of a KV view as f32 keys and values [count, head_dim] each, run
/// by run (a Q8KvView's runs are already widened to f32).
template <KvViewLike View>
void load_rows(const View& kv, std::int64_t first, std::int64_t count, float* keys, float* values) {
  using T = typename View::value_type;
  const auto load = kernels::active().load[kernels::index_of(storage_type_of<T>)];
  const std::int64_t d = kv.head_dim();
  const auto side = [&](const T* rows, std::ptrdiff_t stride, std::int64_t n, float* out) {
    if (stride == d) {
      load(rows, out, n * d);  // contiguous rows: one call
    } else {
      for (std::int64_t i = 0; i < n; ++i) load(rows + i * stride, out + i * d, d);
    }
  };
  kv.for_each_run(first, first + count,
                  [&](const T* k, const T* v, std::int64_t p, std::int64_t rows) {
                    side(k, kv.key_stride(), rows, keys + (p - first) * d);
                    side(v, kv.value_stride(), rows, values + (p - first) * d);
                  });
}

}  // namespace

template <KvViewLike View>
void prefill_attention(const View& kv, const QueryBlock& block, float scale) {
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
    load_rows(kv, j0, count, keys.data(), values.data());
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

template void prefill_attention(const KvView<bf16>&, const QueryBlock&, float);
template void prefill_attention(const KvView<float>&, const QueryBlock&, float);
template void prefill_attention(const Q8KvView&, const QueryBlock&, float);

}  // namespace amc::transformer

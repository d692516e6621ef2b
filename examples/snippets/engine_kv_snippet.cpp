// Sparse and dense decode on an engine's own KV memory (built and run as amc-snippet-engine_kv;
// the test snippet_engine_kv_in_docs keeps the copy in README.md identical to this file).
#include <amc/amc.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  // The engine's cache: [positions, kv_heads, head_dim], f32 here (bf16 and f16 alike).
  constexpr std::int64_t positions = 4096, kv_heads = 2, head_dim = 64, group = 7;
  std::vector<float> keys(positions * kv_heads * head_dim), values(keys.size());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : keys) x = normal(rng);
  for (float& x : values) x = normal(rng);
  amc::RowMatrix queries(group, head_dim);  // the 7 query heads that share KV head 1
  for (float& x : queries.reshaped()) x = normal(rng);

  // KV head 1 in place: its first row at element head_dim, rows kv_heads * head_dim apart.
  const amc::KvView<float> kv(keys.data() + head_dim, values.data() + head_dim, positions,
                              head_dim, kv_heads * head_dim);
  const amc::BlockSummaries summaries = amc::BlockSummaries::build(kv, /*block_size=*/16);
  amc::SparseConfig config;  // the rule stays the default: mean pooling, the study's method
  config.block_size = 16;    // as the summaries
  config.top_k = 8;
  config.sinks = 1;
  config.window = 64;

  using Head = amc::KvHead<amc::KvView<float>>;
  amc::DenseDecode dense_op;  // scale 1/sqrt(head_dim)
  amc::BlockSparseDecode<> sparse_op(config);
  amc::RowMatrix dense_out(group, head_dim), sparse_out(group, head_dim);
  std::vector<amc::HeadResult> dense(group), sparse(group);
  dense_op.decode(queries, Head{kv, nullptr}, dense_out, dense);
  sparse_op.decode(queries, Head{kv, &summaries}, sparse_out, sparse);
  for (std::size_t h = 0; h < sparse.size(); ++h) {
    const double omitted = -std::expm1(double{sparse[h].lse} - double{dense[h].lse});
    std::printf("head %zu: %lld positions read, omitted mass %.3f\n", h,
                static_cast<long long>(sparse[h].positions_read), omitted);
    // At most 1 sink + 8 blocks of 16 + a window of 64 = 193 positions read.
    if (!(omitted > -1e-6 && omitted <= 1.0) || sparse[h].positions_read > 193) return 1;
  }
  return 0;
}

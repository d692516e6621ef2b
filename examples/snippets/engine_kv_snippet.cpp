// Block-sparse and dense decode of one GQA group on an engine's own KV memory, read in place.
// Built and run as amc-snippet-engine_kv; snippet_engine_kv_in_docs keeps README.md's copy.
#include <amc/amc.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  // The engine's cache, [positions, kv_heads, head_dim] floats (bf16 and f16 work alike), and
  // the 7 queries of the heads that share KV head 1.
  const std::int64_t positions = 4096, kv_heads = 2, head_dim = 64, group = 7;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> keys(positions * kv_heads * head_dim), values(keys.size());
  for (float& x : keys) x = normal(rng);
  for (float& x : values) x = normal(rng);
  amc::RowMatrix queries =
      amc::RowMatrix::NullaryExpr(group, head_dim, [&] { return normal(rng); });

  // KV head 1 without a copy (rows kv_heads * head_dim floats apart), and its block summaries
  // (an engine appends to them as it appends keys).
  const amc::KvView<float> kv(keys.data() + head_dim, values.data() + head_dim, positions, head_dim,
                              kv_heads * head_dim);
  const auto summaries = amc::BlockSummaries::build(kv, /*block_size=*/16);

  amc::SparseConfig config;  // mean pooling: 1 sink, a window of 64, the 8 best blocks of 16
  amc::BlockSparseDecode<> sparse(config);
  amc::DenseDecode dense;
  amc::RowMatrix sparse_out(group, head_dim), dense_out(group, head_dim);
  std::vector<amc::HeadResult> s(group), d(group);
  sparse.decode(queries, amc::KvHead<amc::KvView<float>>{kv, &summaries}, sparse_out, s);
  dense.decode(queries, amc::KvHead<amc::KvView<float>>{kv, nullptr}, dense_out, d);
  for (std::size_t h = 0; h < s.size(); ++h) {
    const double omitted = -std::expm1(double{s[h].lse} - double{d[h].lse});  // 1 - P_S
    std::printf("head %zu: %lld of %lld positions read, omitted mass %.3f\n", h,
                static_cast<long long>(s[h].positions_read), static_cast<long long>(positions),
                omitted);
    if (!(omitted >= -1e-6 && omitted <= 1.0) || s[h].positions_read > 193) return 1;
  }
}

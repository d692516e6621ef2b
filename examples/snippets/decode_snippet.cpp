// Dense and block-sparse decode of one GQA group over an engine's KV cache, contiguous and paged.
// Compiled and run by the build (target amc-snippet-decode, test snippet_decode) and shown
// verbatim in docs/operators.md (test snippet_decode_in_docs keeps the two identical).
#include <amc/amc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <span>
#include <vector>

// Engine code written against the concept: dense and block-sparse operators are interchangeable.
template <class Op, class View>
requires amc::DecodeOperator<Op, View>
void attend_group(Op& op, const amc::RowMatrix& queries, const amc::KvHead<View>& head,
                  amc::RowMatrix& out, std::vector<amc::HeadResult>& results) {
  op.decode(queries, head, out, results);
}

int main() {
  // The engine's cache: [positions, kv_heads, head_dim], f32 here (bf16 and f16 work alike).
  constexpr std::int64_t positions = 1000, kv_heads = 2, head_dim = 64, group = 7;
  std::vector<float> keys(positions * kv_heads * head_dim), values(keys.size());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : keys) x = normal(rng);
  for (float& x : values) x = normal(rng);

  // KV head 1 of that cache, without a copy: first row at element head_dim, rows
  // kv_heads * head_dim elements apart.
  const amc::KvView<float> kv(keys.data() + head_dim, values.data() + head_dim, positions, head_dim,
                              kv_heads * head_dim);
  // Block summaries of the same positions (an engine appends to them as it appends keys).
  const amc::BlockSummaries summaries = amc::BlockSummaries::build(kv, /*block_size=*/16);

  // The query heads that share KV head 1: [group, head_dim].
  amc::RowMatrix queries(group, head_dim);
  for (std::int64_t h = 0; h < group; ++h)
    for (std::int64_t i = 0; i < head_dim; ++i) queries(h, i) = normal(rng);

  amc::DenseDecode dense;  // scale defaults to 1/sqrt(head_dim)
  amc::RowMatrix dense_out(group, head_dim);
  std::vector<amc::HeadResult> dense_results(group);
  attend_group(dense, queries, amc::KvHead<amc::KvView<float>>{kv, nullptr}, dense_out,
               dense_results);

  amc::SparseConfig config;  // validated when the operator is constructed
  config.block_size = 16;    // must match the summaries
  config.top_k = 8;
  config.sinks = 4;
  config.window = 64;
  config.scope = amc::SelectionScope::per_group;  // one support for the 7 heads
  amc::BlockSparseDecode<> sparse(config);        // the rule config.rule names: mean pooling
  amc::RowMatrix sparse_out(group, head_dim);
  std::vector<amc::HeadResult> sparse_results(group);
  attend_group(sparse, queries, amc::KvHead<amc::KvView<float>>{kv, &summaries}, sparse_out,
               sparse_results);

  for (std::size_t h = 0; h < sparse_results.size(); ++h) {
    // Omitted mass from the two log-sum-exps, with no second pass over the cache.
    const double eps = -std::expm1(double{sparse_results[h].lse} - double{dense_results[h].lse});
    const double error =
        (dense_out.row(static_cast<Eigen::Index>(h)) - sparse_out.row(static_cast<Eigen::Index>(h)))
            .norm();
    std::printf("head %zu: read %lld of %lld positions, omitted mass %.3f, ||o - o_S|| %.3f\n", h,
                static_cast<long long>(sparse_results[h].positions_read),
                static_cast<long long>(dense_results[h].positions_read), eps, error);
    if (!(eps > -1e-6 && eps <= 1.0 && std::isfinite(error))) return 1;
  }

  // The same KV head in a paged cache: a pool of 16-row pages, the sequence's pages in any order.
  constexpr std::int64_t page_size = 16;
  const std::int64_t pages = (positions + page_size - 1) / page_size;
  std::vector<std::int32_t> page_table(static_cast<std::size_t>(pages));
  std::iota(page_table.rbegin(), page_table.rend(), 0);  // sequence page i is pool page pages-1-i
  std::vector<float> key_pool(pages * page_size * head_dim), value_pool(key_pool.size());
  for (std::int64_t p = 0; p < positions; ++p) {
    const std::int64_t row =
        page_table[static_cast<std::size_t>(p / page_size)] * page_size + p % page_size;
    std::copy_n(kv.key(p), head_dim, key_pool.begin() + row * head_dim);
    std::copy_n(kv.value(p), head_dim, value_pool.begin() + row * head_dim);
  }
  const std::int64_t last_page_length = positions - (pages - 1) * page_size;
  const amc::PagedKvView<float> paged(key_pool.data(), value_pool.data(), pages * page_size,
                                      head_dim, page_table, page_size, last_page_length);
  const amc::BlockSummaries paged_summaries = amc::BlockSummaries::build(paged, 16);

  amc::RowMatrix paged_out(group, head_dim);
  std::vector<amc::HeadResult> paged_results(group);
  attend_group(sparse, queries, amc::KvHead<amc::PagedKvView<float>>{paged, &paged_summaries},
               paged_out, paged_results);
  const double paged_difference = (paged_out - sparse_out).cwiseAbs().maxCoeff();
  std::printf("paged view: same support (%lld positions), max |difference| %.2g\n",
              static_cast<long long>(paged_results[0].positions_read), paged_difference);
  return paged_results[0].positions_read == sparse_results[0].positions_read &&
                 paged_difference < 1e-4
             ? 0
             : 1;
}

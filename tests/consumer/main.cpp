// Uses the installed amc through its public header: dense decode of a small GQA group over a
// bf16 KV view, then block-sparse decode whose support covers every position, which must give
// the dense result. Exit status 0 on success, 1 on any failed check.
#include <amc/amc.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  constexpr std::int64_t positions = 100, head_dim = 16, heads = 2;
  std::vector<amc::bf16> keys(positions * head_dim), values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = amc::to_bf16(std::sin(0.37f * static_cast<float>(i)));
    values[i] = amc::to_bf16(std::cos(0.11f * static_cast<float>(i)));
  }
  const amc::KvView<amc::bf16> kv(keys.data(), values.data(), positions, head_dim);
  amc::RowMatrix queries(heads, head_dim);
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t i = 0; i < head_dim; ++i)
      queries(h, i) = static_cast<float>(h + 1) * std::sin(static_cast<float>(i));

  amc::DenseDecode dense;
  amc::RowMatrix dense_out(heads, head_dim);
  std::vector<amc::HeadResult> dense_results(heads);
  dense.decode(queries, amc::KvHead<amc::KvView<amc::bf16>>{kv, nullptr}, dense_out, dense_results);

  amc::SparseConfig config;
  config.block_size = 8;
  config.top_k = 100;  // more blocks than there are: the support is every position
  const amc::BlockSummaries summaries = amc::BlockSummaries::build(kv, config.block_size);
  amc::BlockSparseDecode<> sparse(config);
  amc::RowMatrix sparse_out(heads, head_dim);
  std::vector<amc::HeadResult> sparse_results(heads);
  sparse.decode(queries, amc::KvHead<amc::KvView<amc::bf16>>{kv, &summaries}, sparse_out,
                sparse_results);

  const bool finite = dense_out.allFinite() && std::isfinite(dense_results[0].lse) &&
                      std::isfinite(dense_results[1].lse);
  const bool read_all =
      dense_results[0].positions_read == positions && sparse_results[0].positions_read == positions;
  const float difference = (dense_out - sparse_out).cwiseAbs().maxCoeff();
  std::printf("amc %.*s (kernels %.*s): dense output finite %d, read all %d, |dense - sparse| %g\n",
              static_cast<int>(amc::version().size()), amc::version().data(),
              static_cast<int>(amc::kernels::active().name.size()),
              amc::kernels::active().name.data(), finite, read_all,
              static_cast<double>(difference));
  return finite && read_all && difference < 1e-5f ? 0 : 1;
}

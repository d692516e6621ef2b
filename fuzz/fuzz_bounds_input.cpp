// libFuzzer target: amc-bounds input handling on arbitrary safetensors images.
//
// The image goes through SafetensorsFile::from_bytes and then bounds::load_inputs, the exact
// checks amc-bounds applies to its INPUT file (tools/bounds/bounds_input.hpp): q [Hq, d],
// k [Hkv, n, d], v [Hkv, n, d], dtypes, shapes, finiteness. Inputs it accepts then go through
// the library steps the tool runs next on every KV head (block summaries, dense and block-sparse
// decode in both scopes, the omission analysis and the certified bounds) with a small block
// size, so odd shapes (n = 1, d = 1, n not a multiple of the block) are exercised too. Every
// refusal must be an amc::error.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "amc/amc.hpp"
#include "amc/io/safetensors.hpp"
#include "amc/math/certified_bounds.hpp"
#include "amc/math/omitted_mass.hpp"
#include "bounds/bounds_input.hpp"

namespace {

void analyse(const amc::bounds::Inputs& in, amc::SelectionScope scope, amc::RuleName rule) {
  using namespace amc;
  const std::int64_t d = in.head_dim, n = in.positions, group = in.query_heads / in.kv_heads;
  SparseConfig config;
  config.block_size = 2;
  config.top_k = 1;
  config.sinks = 1;
  config.window = 2;
  config.scope = scope;
  config.rule = rule;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  DenseDecode dense(scale);
  BlockSparseDecode<> sparse(config);
  for (std::int64_t g = 0; g < in.kv_heads; ++g) {
    const KvView<float> kv(in.k.data() + g * n * d, in.v.data() + g * n * d, n, d);
    const auto summaries =
        BlockSummaries::build(kv, config.block_size, {.channel_bounds = true, .value_norms = true});
    const KvHead<KvView<float>> head{kv, &summaries};
    const Eigen::Map<const RowMatrix> queries(in.q.data() + g * group * d, group, d);
    RowMatrix dense_out(group, d), sparse_out(group, d);
    std::vector<HeadResult> dense_results(static_cast<std::size_t>(group));
    std::vector<HeadResult> sparse_results(static_cast<std::size_t>(group));
    dense.decode(queries, head, dense_out, dense_results);
    sparse.decode(queries, head, sparse_out, sparse_results);
    const Eigen::Map<const RowMatrix> values(in.v.data() + g * n * d, n, d);
    for (std::int64_t h = 0; h < group; ++h) {
      const Support& support = sparse.support(h);
      if (support.size() > n) std::abort();
      const std::span<const float> query(queries.row(h).data(), static_cast<std::size_t>(d));
      try {
        const VectorD scores = exact_scores(query, scale, kv);
        const ExactOutputs exact = exact_outputs(scores, values, support);
        static_cast<void>(analyse_omission(scores, values, support, exact.dense, exact.sparse));
        static_cast<void>(certified_bounds(query, scale, kv, summaries, support));
      } catch (const amc::error&) {
        // a refusal (the tool's exit status 2) is a valid outcome; the analysis in double
        // accepts every finite input load_inputs lets through
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const amc::SafetensorsFile file =
        amc::SafetensorsFile::from_bytes(std::vector<std::uint8_t>(data, data + size), "fuzz");
    const amc::bounds::Inputs in = amc::bounds::load_inputs(file, "fuzz");
    if (in.head_dim < 1 || in.positions < 1 || in.kv_heads < 1 || in.query_heads < 1 ||
        in.query_heads % in.kv_heads != 0 ||
        in.q.size() != static_cast<std::size_t>(in.query_heads * in.head_dim) ||
        in.k.size() != static_cast<std::size_t>(in.kv_heads * in.positions * in.head_dim) ||
        in.v.size() != in.k.size()) {
      std::abort();
    }
    analyse(in, amc::SelectionScope::per_head, amc::RuleName::mean_pooled);
    analyse(in, amc::SelectionScope::per_group, amc::RuleName::channel_bound);
  } catch (const amc::error&) {
    // refused, as amc-bounds would with exit status 2
  }
  return 0;
}

// A user-defined block rule run through the block-sparse operator.
// Compiled and run by the build (target amc-snippet-rule, test snippet_rule) and shown
// verbatim in docs/operators.md (test snippet_rule_in_docs keeps the two identical).
#include <amc/amc.hpp>

#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

// Mean-pooled scores plus a bonus for recent blocks. Scores are in logit units: the operator
// ranks them, and per-group scope softmax-normalises them across the group's heads.
struct RecencyBiasedRule {
  float bonus_per_block = 0.01f;

  template <amc::KvViewLike View>
  void score_blocks(const amc::BlockScoringInput& input, const View& kv,
                    std::span<float> scores) const {
    amc::MeanPooledRule{}.score_blocks(input, kv, scores);  // c <q, mean key>
    for (std::int64_t b = input.candidates.first; b < input.candidates.last; ++b)
      scores[static_cast<std::size_t>(b)] += bonus_per_block * static_cast<float>(b);
  }
};
static_assert(amc::BlockRuleLike<RecencyBiasedRule, amc::KvView<amc::f16>>);

int main() {
  constexpr std::int64_t positions = 1024, head_dim = 32;
  std::vector<amc::f16> keys(positions * head_dim), values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = amc::to_f16(static_cast<float>(i % 7) * 0.25f - 0.75f);
    values[i] = amc::to_f16(static_cast<float>(i % 5) * 0.5f - 1.0f);
  }
  const amc::KvView<amc::f16> kv(keys.data(), values.data(), positions, head_dim);

  amc::SparseConfig config;
  config.block_size = 32;
  config.top_k = 4;
  config.sinks = 0;
  config.window = 0;
  const amc::BlockSummaries summaries = amc::BlockSummaries::build(kv, config.block_size);

  // A bonus this large outweighs any mean score here: the 4 most recent blocks must win.
  amc::BlockSparseDecode<RecencyBiasedRule> sparse(config, RecencyBiasedRule{100.0f});
  const amc::RowMatrix query = amc::RowMatrix::Ones(1, head_dim);
  amc::RowMatrix out(1, head_dim);
  std::vector<amc::HeadResult> results(1);
  sparse.decode(query, amc::KvHead<amc::KvView<amc::f16>>{kv, &summaries}, out, results);

  std::printf("selected blocks:");
  for (const std::int64_t b : sparse.selected_blocks(0))
    std::printf(" %lld", static_cast<long long>(b));
  std::printf(" (%lld positions read)\n", static_cast<long long>(results[0].positions_read));
  const std::vector<std::int64_t> expected{28, 29, 30, 31};
  const std::span<const std::int64_t> got = sparse.selected_blocks(0);
  return std::vector<std::int64_t>(got.begin(), got.end()) == expected ? 0 : 1;
}

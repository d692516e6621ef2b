// Configuration of block-sparse decoding, validated once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "amc/error.hpp"

namespace amc {

/// Whether each query head selects its own blocks, or the heads sharing a KV head select once.
enum class SelectionScope : std::uint8_t {
  per_head,   ///< each query head ranks blocks by its own scores: its own support
  per_group,  ///< one support for the GQA group: each selected block is read once for all heads
};

/// The built-in block scoring rules (see attention/selectors.hpp).
enum class ScoreRule : std::uint8_t {
  mean_pooled,    ///< c <q, mean key>: the method under study
  channel_bound,  ///< c sum_i max(q_i min_i, q_i max_i): Quest-style upper bound (comparison)
  oracle,         ///< log of the true softmax mass of the block: evaluation only, reads all keys
};

/// How per-group scope combines the heads' block scores: each head's scores are first turned
/// into a softmax distribution over the candidate blocks, then combined per block.
enum class GroupCombine : std::uint8_t {
  sum,  ///< sum over heads (a block many heads want a little can win)
  max,  ///< max over heads (any single head that wants a block strongly can win it)
};

constexpr std::string_view to_string(SelectionScope scope) {
  return scope == SelectionScope::per_head ? "head" : "group";
}
constexpr std::string_view to_string(ScoreRule rule) {
  switch (rule) {
    case ScoreRule::mean_pooled:
      return "mean";
    case ScoreRule::channel_bound:
      return "bound";
    case ScoreRule::oracle:
      return "oracle";
  }
  return "?";
}
constexpr std::string_view to_string(GroupCombine combine) {
  return combine == GroupCombine::sum ? "sum" : "max";
}

/// Parses the names used by tools and reports ("head"/"group", "mean"/"bound"/"oracle",
/// "sum"/"max"); throws amc::error naming the field and the value otherwise.
inline SelectionScope parse_scope(std::string_view name) {
  if (name == "head") return SelectionScope::per_head;
  if (name == "group") return SelectionScope::per_group;
  detail::throw_error("amc::parse_scope", "scope must be 'head' or 'group', got '", name, "'");
}
inline ScoreRule parse_score_rule(std::string_view name) {
  if (name == "mean") return ScoreRule::mean_pooled;
  if (name == "bound") return ScoreRule::channel_bound;
  if (name == "oracle") return ScoreRule::oracle;
  detail::throw_error("amc::parse_score_rule", "score must be 'mean', 'bound' or 'oracle', got '",
                      name, "'");
}

/// Everything a block-sparse decode step is configured by. Support = first `sinks` positions
/// U last `window` positions U the `top_k` best-scoring blocks of `block_size` positions that
/// are not already entirely kept.
struct SparseConfig {
  std::int64_t block_size = 16;
  std::int64_t top_k = 8;
  std::int64_t sinks = 1;
  std::int64_t window = 64;
  SelectionScope scope = SelectionScope::per_head;
  ScoreRule score = ScoreRule::mean_pooled;
  GroupCombine combine = GroupCombine::sum;
  /// Attention scale c; unset means 1/sqrt(head_dim).
  std::optional<float> scale;

  /// Throws amc::error naming the first bad field and its value.
  void validate() const {
    constexpr const char* where = "amc::SparseConfig::validate";
    AMC_CHECK(block_size > 0, where, "block_size must be positive, got ", block_size);
    AMC_CHECK(top_k >= 0, where, "top_k must be >= 0, got ", top_k);
    AMC_CHECK(sinks >= 0, where, "sinks must be >= 0, got ", sinks);
    AMC_CHECK(window >= 0, where, "window must be >= 0, got ", window);
    AMC_CHECK(!scale || (*scale > 0.0f && *scale < 1e30f), where,
              "scale must be positive and finite, got ", scale ? *scale : 0.0f);
    AMC_CHECK(scope == SelectionScope::per_head || scope == SelectionScope::per_group, where,
              "scope has an invalid value ", static_cast<int>(scope));
    AMC_CHECK(score == ScoreRule::mean_pooled || score == ScoreRule::channel_bound ||
                  score == ScoreRule::oracle,
              where, "score has an invalid value ", static_cast<int>(score));
    AMC_CHECK(combine == GroupCombine::sum || combine == GroupCombine::max, where,
              "combine has an invalid value ", static_cast<int>(combine));
  }

  /// Nominal support size sinks + window + top_k * block_size (the actual one can be smaller:
  /// short caches, blocks overlapping sinks or window).
  std::int64_t nominal_support() const { return sinks + window + top_k * block_size; }
};

}  // namespace amc

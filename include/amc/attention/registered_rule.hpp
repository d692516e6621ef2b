// The registered rules chosen at run time: RegisteredRule ranks the blocks of one KV head for
// one query head (or a GQA group) by the rule a SparseConfig names.
//
// A rule writes one score per block, higher meaning "read this block first". Scores are in
// logit units (they estimate or bound the log of the block's softmax mass up to a shared
// constant), which is what lets per-group scope softmax-normalise and combine them across heads.
// Users plug in their own rule by writing a type that models BlockRuleLike.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "amc/attention/block_summaries.hpp"
#include "amc/attention/rules/channel_bound.hpp"
#include "amc/attention/rules/mean_pooled.hpp"
#include "amc/attention/rules/oracle.hpp"
#include "amc/attention/rules/sub_block_means.hpp"
#include "amc/attention/rules/two_stage.hpp"
#include "amc/attention/selection_input.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/attention/support.hpp"
#include "amc/attention/top_k.hpp"
#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/kv_view.hpp"

namespace amc {

/// Runtime choice among the registered rules (attention/rule_info.hpp), by SparseConfig::rule:
/// what tools and configurations use. Copies share the rule, which is stateless and const.
class RegisteredRule {
 public:
  /// Mean pooling.
  RegisteredRule() : RegisteredRule(SparseConfig{}) {}
  /// The rule `config.rule` names, made for `config`.
  explicit RegisteredRule(const SparseConfig& config)
      : rule_(config.rule), scorer_(config.rule.info().make(config)) {}

  RuleName rule() const { return rule_; }

  template <KvViewLike View>
  void score_blocks(const BlockScoringInput& in, const View& kv, std::span<float> scores) const {
    scorer_->score(in, KeyRows(kv), scores);
  }

  /// Whether the candidate blocks may be scored in parts (BlockRule::scores_each_block_alone).
  bool scores_each_block_alone() const { return scorer_->scores_each_block_alone(); }

  /// The whole group at once (one pass over the summaries for rules that can).
  template <KvViewLike View>
  void score_blocks_group(const GroupScoringInput& in, const View& kv,
                          std::span<float> scores) const {
    scorer_->score_group(in, KeyRows(kv), scores);
  }

 private:
  RuleName rule_;
  std::shared_ptr<const BlockRule> scorer_;
};

/// RegisteredRule's former name.
using RuleSelector [[deprecated("renamed amc::RegisteredRule")]] = RegisteredRule;

}  // namespace amc

// The registry of block scoring rules: what each is called, what it needs and how to make it.
//
// A rule is one unit: its scoring (a BlockRule, attention/rules/*.hpp), the block summaries it
// needs, its name and its description, registered in one place (src/rule_registry.cpp, one
// line per rule). Configurations name rules (SparseConfig::score), caches build the summaries
// the configured rule asks for (required_summaries), and RuleSelector makes the rule.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "amc/attention/block_summaries.hpp"

namespace amc {

class BlockRule;
struct SparseConfig;

struct RuleInfo {
  std::string_view name;         ///< what configurations and tools call it ("mean")
  std::string_view description;  ///< one line for help texts and reports
  /// What it reads besides the mean keys, for `config` (nullptr: nothing else).
  SummaryOptions (*summaries)(const SparseConfig& config) = nullptr;
  bool reads_keys = false;  ///< scores from the keys themselves, not only the summaries
  /// A scorer for `config` (which may carry the rule's own settings).
  std::unique_ptr<BlockRule> (*make)(const SparseConfig& config) = nullptr;
};

/// Every registered rule, in registration order.
std::span<const RuleInfo> registered_rules();

/// The rule called `name`, or nullptr.
const RuleInfo* find_rule_or_null(std::string_view name);

/// The rule called `name`; throws amc::error "amc::find_rule: no score rule '<name>' (rules:
/// mean, bound, ...)".
const RuleInfo& find_rule(std::string_view name);

}  // namespace amc

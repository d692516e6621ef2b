// The registry of block scoring rules (attention/rule_info.hpp). Adding a rule: its header in
// include/amc/attention/rules/ and one line in registered_rules() below.
#include <string>

#include "amc/attention/rule_info.hpp"
#include "amc/attention/rules/channel_bound.hpp"
#include "amc/attention/rules/mean_pooled.hpp"
#include "amc/attention/rules/oracle.hpp"
#include "amc/attention/rules/sub_block_means.hpp"
#include "amc/attention/rules/two_stage.hpp"
#include "amc/error.hpp"

namespace amc {

std::span<const RuleInfo> registered_rules() {
  // A function-local static: safe to use from other translation units' static initialisers.
  static const RuleInfo kRules[] = {
      mean_pooled_rule_info(), channel_bound_rule_info(),   oracle_rule_info(),
      two_stage_rule_info(),   sub_block_means_rule_info(),
  };
  return kRules;
}

const RuleInfo* find_rule_or_null(std::string_view name) {
  for (const RuleInfo& rule : registered_rules()) {
    if (rule.name == name) return &rule;
  }
  return nullptr;
}

const RuleInfo& find_rule(std::string_view name) {
  if (const RuleInfo* rule = find_rule_or_null(name)) return *rule;
  std::string names;
  for (const RuleInfo& rule : registered_rules()) {
    if (!names.empty()) names += ", ";
    names += rule.name;
  }
  detail::throw_error("amc::find_rule", "no score rule '", name, "' (rules: ", names, ")");
}

}  // namespace amc

// The registry of block scoring rules: what each is called, what it needs, which settings of its
// own it takes and how to make it.
//
// A rule is one unit: its scoring (a BlockRule, attention/rules/*.hpp), the block summaries it
// needs, its own settings (rows like the configuration's: name, help, range, default) and its
// cross-checks, its name and its description, registered in one place (src/rule_registry.cpp,
// one line per rule). Configurations name rules (SparseConfig::rule) and carry the rules'
// settings (SparseConfig::rule_settings), whose rows join the configuration's own in
// sparse_settings() (so every tool, JSON and Python take them); caches build the summaries the
// configured rule asks for (required_summaries), and RegisteredRule makes the rule.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "amc/attention/block_summaries.hpp"
#include "amc/error.hpp"

namespace amc {

class BlockRule;
struct SparseConfig;
struct RuleInfo;

/// Every registered rule, in registration order.
std::span<const RuleInfo> registered_rules();

/// The rule called `name`, or nullptr.
const RuleInfo* find_rule_or_null(std::string_view name);

/// The rule called `name`; throws amc::error "amc::find_rule: no rule '<name>' (rules:
/// mean, bound, ...)".
const RuleInfo& find_rule(std::string_view name);

/// A block scoring rule, by its registered name (src/rule_registry.cpp lists them; a rule is
/// one file in amc/attention/rules/ plus one line of that registry). A small value type:
/// copying it copies a name.
class RuleName {
 public:
  /// The mean-pooled rule, the method under study.
  constexpr RuleName() = default;

  /// The registered rule called `name`; throws amc::error listing the registered names.
  static inline RuleName named(std::string_view name);

  constexpr std::string_view name() const { return name_; }
  /// Its registry entry (what it needs, how to make it).
  inline const RuleInfo& info() const;

  friend constexpr bool operator==(const RuleName& a, const RuleName& b) {
    return a.name_ == b.name_;
  }
  friend constexpr auto operator<=>(const RuleName& a, const RuleName& b) {
    return a.name_ <=> b.name_;
  }

  // The built-in rules, for code that names them (tools select rules by name).
  static const RuleName mean_pooled;      ///< "mean": c <q, mean key>
  static const RuleName channel_bound;    ///< "bound": c sum_i max(q_i min_i, q_i max_i)
  static const RuleName oracle;           ///< "oracle": the true block mass; reads every key
  static const RuleName two_stage;        ///< "twostage": a shortlist rescored from its keys
  static const RuleName sub_block_means;  ///< "submean": the best sub-block mean score

 private:
  constexpr explicit RuleName(std::string_view name) : name_(name) {}
  std::string_view name_ = "mean";  // points at static storage (a literal or the registry)
};

/// RuleName's former name.
using ScoreRule [[deprecated("renamed amc::RuleName")]] = RuleName;

inline constexpr RuleName RuleName::mean_pooled{"mean"};
inline constexpr RuleName RuleName::channel_bound{"bound"};
inline constexpr RuleName RuleName::oracle{"oracle"};
inline constexpr RuleName RuleName::two_stage{"twostage"};
inline constexpr RuleName RuleName::sub_block_means{"submean"};

constexpr std::string_view to_string(RuleName rule) { return rule.name(); }

/// How a setting's value is written in JSON.
enum class SettingKind : std::uint8_t { integer, real, name };

/// The value of a rule's own setting: an integer, a real or a rule (SettingKind integer, real,
/// name).
using RuleSettingValue = std::variant<std::int64_t, double, RuleName>;

/// One setting of a rule's own (RuleInfo::settings), a row of the settings table
/// (sparse_settings()) like the configuration's own: it is a text key, a JSON key, a
/// command-line flag ('_' as '-') and a Python attribute without any code of its own. Unset
/// (the state of a default configuration), it reads as "" and JSON null, and the rule uses
/// `default_value`. Made with the makers in sparse_config.hpp (integer_rule_setting,
/// rule_name_setting), which generate parse and allows from a range.
struct RuleSetting {
  std::string_view name;  ///< unique among all settings ("shortlist")
  std::string_view help;
  SettingKind kind;
  /// What a value must be, for messages ("an integer >= 1"), followed by choices() if set.
  std::string_view requirement;
  std::string (*choices)() = nullptr;  ///< a list built from the registry ("mean|bound")
  RuleSettingValue default_value;      ///< of the type `kind` names
  /// The value `text` stands for; nullopt when refused.
  std::optional<RuleSettingValue> (*parse)(std::string_view text) = nullptr;
  /// Whether a value (of the type `kind` names) is allowed: what validate() checks.
  bool (*allows)(const RuleSettingValue& value) = nullptr;
  /// The name it had before, still read (SparseSetting::former_name); empty if none.
  std::string_view former_name = {};

  /// requirement followed by choices().
  std::string requirement_text() const {
    std::string out(requirement);
    if (choices != nullptr) out += choices();
    return out;
  }
};

struct RuleInfo {
  std::string_view name;         ///< what configurations and tools call it ("mean")
  std::string_view description;  ///< one line for help texts and reports
  /// What it reads besides the mean keys, for `config` (nullptr: nothing else).
  SummaryOptions (*summaries)(const SparseConfig& config) = nullptr;
  bool reads_keys = false;  ///< scores from the keys themselves, not only the summaries
  /// A scorer for `config` (which carries the rule's own settings).
  std::unique_ptr<BlockRule> (*make)(const SparseConfig& config) = nullptr;
  /// The rule's own settings (static storage), in the order tools print them.
  std::span<const RuleSetting> settings = {};
  /// Checks across settings when `config.rule` names this rule (e.g. a count that must divide
  /// block_size); throws amc::error "amc::SparseConfig::validate: ...". nullptr: none.
  void (*check)(const SparseConfig& config) = nullptr;
};

inline RuleName RuleName::named(std::string_view name) { return RuleName(find_rule(name).name); }
inline const RuleInfo& RuleName::info() const { return find_rule(name_); }

/// The setting of a registered rule called `name` (or formerly called `name`), or nullptr.
inline const RuleSetting* find_rule_setting_or_null(std::string_view name) {
  for (const RuleInfo& rule : registered_rules()) {
    for (const RuleSetting& setting : rule.settings) {
      if (setting.name == name || (!setting.former_name.empty() && setting.former_name == name)) {
        return &setting;
      }
    }
  }
  return nullptr;
}

/// The setting of a registered rule called `name`; throws amc::error listing them.
inline const RuleSetting& find_rule_setting(std::string_view name, const char* where) {
  if (const RuleSetting* setting = find_rule_setting_or_null(name)) return *setting;
  std::string names;
  for (const RuleInfo& rule : registered_rules()) {
    for (const RuleSetting& setting : rule.settings) {
      if (!names.empty()) names += ", ";
      names += setting.name;
    }
  }
  detail::throw_error(where, "no rule setting '", name, "' (rule settings: ", names, ")");
}

/// The registered rules' own settings in a configuration (SparseConfig::rule_settings): those
/// set, type-erased and sorted by name, so that a rule with a parameter needs no field of the
/// configuration. An unset setting reads as its row's default. Compares by value.
class RuleSettings {
 public:
  /// The value set for `name`, or nullptr when unset (or no rule has that setting).
  const RuleSettingValue* find(std::string_view name) const {
    name = current_name(name);
    const auto it = lower_bound(name);
    return it != values_.end() && it->first == name ? &it->second : nullptr;
  }

  /// The value of `name` as T (std::int64_t, double or RuleName, as its kind): the one set,
  /// else its row's default. Throws amc::error for a name no registered rule has, or a T that
  /// is not its kind.
  template <class T>
  T get(std::string_view name) const {
    const RuleSetting& setting = find_rule_setting(name, "amc::RuleSettings::get");
    const RuleSettingValue* value = find(name);
    const RuleSettingValue& chosen = value != nullptr ? *value : setting.default_value;
    const T* typed = std::get_if<T>(&chosen);
    AMC_CHECK(typed != nullptr, "amc::RuleSettings::get", name, " is ", kind_name(setting.kind),
              ", not the type asked for");
    return *typed;
  }

  /// Sets `name` to `value` (an integer, a real or a RuleName). As for the configuration's
  /// fields, the value is checked against its row by SparseConfig::validate(). Throws
  /// amc::error for a name no registered rule has, or a value of another kind.
  template <class T>
  void set(std::string_view name, T value) {
    const RuleSetting& setting = find_rule_setting(name, "amc::RuleSettings::set");
    RuleSettingValue stored;
    if constexpr (std::same_as<T, RuleName>) {
      stored = value;
    } else if constexpr (std::is_integral_v<T>) {
      stored = static_cast<std::int64_t>(value);
    } else if constexpr (std::is_floating_point_v<T>) {
      stored = static_cast<double>(value);
    } else {
      static_assert(std::same_as<T, RuleSettingValue>, "an integer, a real or a RuleName");
      stored = value;
    }
    AMC_CHECK(stored.index() == static_cast<std::size_t>(setting.kind), "amc::RuleSettings::set",
              name, " is ", kind_name(setting.kind), ", got ", kind_name(stored.index()));
    const auto it = lower_bound(setting.name);
    if (it != values_.end() && it->first == setting.name) {
      it->second = stored;
    } else {
      values_.emplace(it, setting.name, stored);  // the registry's name: static storage
    }
  }

  /// Unsets `name`: its rule's default applies again.
  void reset(std::string_view name) {
    name = current_name(name);
    const auto it = lower_bound(name);
    if (it != values_.end() && it->first == name) values_.erase(it);
  }

  /// The settings that are set, sorted by name.
  std::span<const std::pair<std::string_view, RuleSettingValue>> items() const { return values_; }

  friend bool operator==(const RuleSettings&, const RuleSettings&) = default;

 private:
  /// A former name as the setting's name now (values are kept under it); others unchanged.
  static std::string_view current_name(std::string_view name) {
    const RuleSetting* setting = find_rule_setting_or_null(name);
    return setting != nullptr ? setting->name : name;
  }
  static const char* kind_name(std::size_t kind) {
    return kind == 0 ? "an integer" : kind == 1 ? "a real number" : "a rule name";
  }
  static const char* kind_name(SettingKind kind) {
    return kind_name(static_cast<std::size_t>(kind));
  }
  std::vector<std::pair<std::string_view, RuleSettingValue>>::iterator lower_bound(
      std::string_view name) {
    return std::lower_bound(values_.begin(), values_.end(), name,
                            [](const auto& item, std::string_view n) { return item.first < n; });
  }
  std::vector<std::pair<std::string_view, RuleSettingValue>>::const_iterator lower_bound(
      std::string_view name) const {
    return std::lower_bound(values_.begin(), values_.end(), name,
                            [](const auto& item, std::string_view n) { return item.first < n; });
  }

  std::vector<std::pair<std::string_view, RuleSettingValue>> values_;
};

}  // namespace amc

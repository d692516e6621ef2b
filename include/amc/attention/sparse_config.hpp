// Configuration of block-sparse decoding: every selection setting, validated once, and a table
// of the settings (name, help, text form) that parsing, describing and serialising use, so that
// every tool, report and binding names, validates and prints them the same way.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "amc/attention/rule_info.hpp"
#include "amc/error.hpp"

namespace amc {

/// Whether each query head selects its own blocks, or the heads sharing a KV head select once.
enum class SelectionScope : std::uint8_t {
  per_head,   ///< each query head ranks blocks by its own scores: its own support
  per_group,  ///< one support for the GQA group: each selected block is read once for all heads
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
constexpr std::string_view to_string(GroupCombine combine) {
  return combine == GroupCombine::sum ? "sum" : "max";
}

namespace detail {
// The names of the enumerated settings, each written once: the settings table reads them
// (nullopt: not a name), and so do the parse_* functions below (which throw instead).
inline std::optional<SelectionScope> scope_named(std::string_view text) {
  if (text == "head") return SelectionScope::per_head;
  if (text == "group") return SelectionScope::per_group;
  return std::nullopt;
}
inline std::optional<GroupCombine> combine_named(std::string_view text) {
  if (text == "sum") return GroupCombine::sum;
  if (text == "max") return GroupCombine::max;
  return std::nullopt;
}
inline std::optional<SummaryPrecision> precision_named(std::string_view text) {
  if (text == "f32") return SummaryPrecision::f32;
  if (text == "bf16") return SummaryPrecision::bf16;
  return std::nullopt;
}
}  // namespace detail

/// Parses the names used by tools and reports ("head"/"group", a registered rule name,
/// "sum"/"max"); throws amc::error naming the field and the value otherwise.
inline SelectionScope parse_scope(std::string_view name) {
  if (const auto scope = detail::scope_named(name)) return *scope;
  detail::throw_error("amc::parse_scope", "scope must be 'head' or 'group', got '", name, "'");
}
inline RuleName parse_rule(std::string_view name) { return RuleName::named(name); }
[[deprecated("renamed amc::parse_rule")]] inline RuleName parse_score_rule(std::string_view name) {
  return parse_rule(name);
}
inline GroupCombine parse_combine(std::string_view name) {
  if (const auto combine = detail::combine_named(name)) return *combine;
  detail::throw_error("amc::parse_combine", "combine must be 'sum' or 'max', got '", name, "'");
}

/// Everything a block-sparse decode step is configured by. Support = first `sinks` positions
/// U last `window` positions U the `top_k` best-scoring blocks of `block_size` positions that
/// are not already entirely kept; or, with `target_eps` set, as many of the best blocks as it
/// takes for the certified omitted-mass bound to reach `target_eps` (at most `max_k`).
struct SparseConfig {
  std::int64_t block_size = 16;
  std::int64_t top_k = 8;
  std::int64_t sinks = 1;
  std::int64_t window = 64;
  SelectionScope scope = SelectionScope::per_head;
  RuleName rule;  ///< the block scoring rule: mean pooling unless set
  /// The summaries the rule scores: the f32 ones (exact), or their bf16 copies (half the bytes
  /// to scan; a ranking that can differ from the f32 one on near-ties).
  SummaryPrecision summary_precision = SummaryPrecision::f32;
  GroupCombine combine = GroupCombine::sum;
  /// Attention scale c; unset means 1/sqrt(head_dim).
  std::optional<float> scale;
  /// Adaptive selection: add blocks best first until the certified omitted-mass bound is
  /// <= target_eps (top_k is then unused). Unset: top-k selection.
  std::optional<double> target_eps;
  /// Adaptive selection adds at most this many blocks; unset: every candidate.
  std::optional<std::int64_t> max_k;
  /// Top-p budgets: per selection (a head, or the group with group scope), the fewest of the
  /// best-scoring blocks whose estimated mass, the softmax of the scores over the candidate
  /// blocks, reaches top_p; at most top_k of them. Unset: always top_k.
  std::optional<double> top_p;
  /// The registered rules' own settings (RuleInfo::settings: two-stage's shortlist and
  /// shortlist_rule, sub-block means' sub_blocks, ...), those set; unset ones read as their
  /// rule's default. Rows of sparse_settings() like the fields above, so set by name:
  /// `config.set("shortlist", "2")`, or typed: `config.rule_settings.set("shortlist", 2)`.
  RuleSettings rule_settings;

  /// The most blocks one selection keeps: top_k, or max_k (unset: every candidate) when
  /// adaptive. What a two-stage rule sizes its shortlist by.
  std::int64_t most_blocks() const {
    if (!adaptive()) return top_k;
    return max_k.value_or(std::numeric_limits<std::int64_t>::max());
  }

  /// Throws amc::error naming the first bad field and its value: each setting against its
  /// row's range (sparse_settings()), then the checks that involve two settings.
  void validate() const;

  bool adaptive() const { return target_eps.has_value(); }

  /// Sets the setting (a row of sparse_settings(): a field or a rule's setting) called `name`
  /// from its text form ("" unsets an optional one); throws amc::error naming it and the text.
  inline void set(std::string_view name, std::string_view text);
  /// The text form of the setting called `name` ("" when an optional one is unset).
  inline std::string get(std::string_view name) const;

  /// Nominal support size sinks + window + top_k * block_size (the actual one can be smaller:
  /// short caches, blocks overlapping sinks or window).
  std::int64_t nominal_support() const { return sinks + window + top_k * block_size; }

  friend bool operator==(const SparseConfig&, const SparseConfig&) = default;
};

/// The block summaries a configuration needs: those of its rule (with their bf16 copies at
/// bf16 summary precision), plus channel bounds and value norms for adaptive selection (it
/// certifies its bound from them). Caches build these.
inline SummaryOptions required_summaries(const SparseConfig& config) {
  const RuleInfo& rule = config.rule.info();
  SummaryOptions options = rule.summaries ? rule.summaries(config) : SummaryOptions{};
  if (config.adaptive()) options.channel_bounds = options.value_norms = true;
  options.bf16_copies = config.summary_precision == SummaryPrecision::bf16;
  return options;
}

// --- the settings, one row each -------------------------------------------------------------

/// One selection setting: its name (JSON key, text key, and with '_' as '-' the command-line
/// flag), what it means, what a value must be, and its value as text. Unset optional settings
/// read as "" and are left out of JSON. Rows are made from the field's member pointer
/// (sparse_settings()), or from a registered rule's own setting (RuleInfo::settings), so
/// reading, writing and checking a setting are written once.
struct SparseSetting {
  std::string_view name;
  std::string_view help;
  SettingKind kind;
  bool optional;                 ///< may be unset ("" clears it)
  std::string_view requirement;  ///< "an integer > 0", "'head' or 'group'", ...
  /// The rule whose own setting this is ("twostage" for shortlist); empty for a field of
  /// SparseConfig.
  std::string_view rule = {};
  const RuleSetting* rule_setting = nullptr;  ///< its row in the registry, for a rule's setting
  /// The name the setting had before ("score" for rule): still read by text, JSON, flags and
  /// Python, so that earlier commands and results keep working; never written.
  std::string_view former_name = {};

  /// Whether `key` names this setting (its name or its former name).
  bool named(std::string_view key) const {
    return key == name || (!former_name.empty() && key == former_name);
  }

  /// The setting's value as text ("" when an optional setting is unset).
  std::string get(const SparseConfig& config) const { return to_text_(*this, config); }
  /// Parses `text` into the setting, which is left unchanged when `text` is refused; throws
  /// amc::error "amc::SparseConfig: <name> must be <requirement>, got '<text>'".
  void set(SparseConfig& config, std::string_view text) const { from_text_(*this, config, text); }
  /// Throws amc::error "amc::SparseConfig::validate: <name> must be <requirement>, got <value>"
  /// when the setting holds a value its row refuses (a C++ caller can set any value).
  void check(const SparseConfig& config) const {
    if (!allows_(*this, config)) {
      detail::throw_error("amc::SparseConfig::validate", name, " must be ", requirement, ", got ",
                          get(config));
    }
  }

  // The row's operations on its setting, generated by the row makers below.
  std::string (*to_text_)(const SparseSetting&, const SparseConfig&);
  void (*from_text_)(const SparseSetting&, SparseConfig&, std::string_view);
  bool (*allows_)(const SparseSetting&, const SparseConfig&);
};

namespace detail {

[[noreturn]] inline void bad_setting(std::string_view name, std::string_view what,
                                     std::string_view text) {
  throw_error("amc::SparseConfig", name, " must be ", what, ", got '", text, "'");
}

/// Shortest text that reads back as the same number.
template <class T>
std::string setting_number_text(T value) {
  char buffer[64];
  const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, ptr);
}

/// The number `text` holds if all of it is one in `allowed` (reals finite), else nullopt.
template <class T>
std::optional<T> parse_number_text(std::string_view text, const auto& allowed) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !allowed.contains(value)) {
    return std::nullopt;
  }
  return value;
}

inline std::string rule_choices() {
  std::string out;
  for (const RuleInfo& rule : registered_rules()) {
    if (!out.empty()) out += '|';
    out += rule.name;
  }
  return out;
}

inline std::string summary_rule_choices() {
  std::string out;
  for (const RuleInfo& rule : registered_rules()) {
    if (rule.reads_keys) continue;
    if (!out.empty()) out += '|';
    out += rule.name;
  }
  return out;
}

/// The values a numeric setting allows: low < x (low_open) or low <= x, and likewise high.
/// Reals must also be finite. A structural type, so a row's range is a template argument.
struct Interval {
  double low = -std::numeric_limits<double>::infinity();
  bool low_open = false;
  double high = std::numeric_limits<double>::infinity();
  bool high_open = false;

  template <class T>
  constexpr bool contains(T value) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(value)) return false;
    }
    const auto x = static_cast<double>(value);
    return (low_open ? x > low : x >= low) && (high_open ? x < high : x <= high);
  }
};

/// A field's value type: T for a T or a std::optional<T> member.
template <class Field>
struct setting_value {
  using type = Field;
  static constexpr bool optional = false;
};
template <class T>
struct setting_value<std::optional<T>> {
  using type = T;
  static constexpr bool optional = true;
};
template <auto member>
using field_of = std::remove_cvref_t<decltype(std::declval<SparseConfig&>().*member)>;

/// The field's value, or nullptr when an optional setting is unset.
template <auto member>
const auto* field_value(const SparseConfig& config) {
  const auto& field = config.*member;
  if constexpr (setting_value<field_of<member>>::optional) {
    return field ? &*field : nullptr;
  } else {
    return &field;
  }
}

/// The row of a numeric field (std::int64_t, float or double, optional or not) whose values
/// must lie in `allowed`, described to users as `requirement`.
template <auto member, Interval allowed>
constexpr SparseSetting number_row(std::string_view name, std::string_view help,
                                   std::string_view requirement) {
  using Value = typename setting_value<field_of<member>>::type;
  constexpr bool optional = setting_value<field_of<member>>::optional;
  return {
      name,
      help,
      std::is_integral_v<Value> ? SettingKind::integer : SettingKind::real,
      optional,
      requirement,
      {},
      nullptr,
      {},
      [](const SparseSetting&, const SparseConfig& c) {
        const auto* value = field_value<member>(c);
        return value ? setting_number_text(*value) : std::string();
      },
      [](const SparseSetting& row, SparseConfig& c, std::string_view text) {
        if constexpr (optional) {
          if (text.empty()) return (c.*member).reset();
        }
        const auto value = parse_number_text<Value>(text, allowed);
        if (!value) bad_setting(row.name, row.requirement, text);
        c.*member = *value;
      },
      [](const SparseSetting&, const SparseConfig& c) {
        const auto* value = field_value<member>(c);
        return value == nullptr || allowed.contains(*value);
      },
  };
}

/// The row of a field named by text (an enum or a rule), optional or not: `parse` turns
/// accepted text into the value (nullopt: refused), `allows` says whether a value is valid.
template <auto member, auto parse, auto allows>
constexpr SparseSetting name_row(std::string_view name, std::string_view help,
                                 std::string_view requirement, std::string_view former_name = {}) {
  constexpr bool optional = setting_value<field_of<member>>::optional;
  return {
      name,
      help,
      SettingKind::name,
      optional,
      requirement,
      {},
      nullptr,
      former_name,
      [](const SparseSetting&, const SparseConfig& c) {
        const auto* value = field_value<member>(c);
        if (value == nullptr) return std::string();
        using Value = std::remove_cvref_t<decltype(*value)>;
        if constexpr (std::is_enum_v<Value>) {
          // An enum set out of range in C++ prints as its number, which validate() reports.
          if (!allows(*value)) {
            return "(invalid value " + std::to_string(static_cast<int>(*value)) + ")";
          }
        }
        return std::string(to_string(*value));
      },
      [](const SparseSetting& row, SparseConfig& c, std::string_view text) {
        if constexpr (optional) {
          if (text.empty()) return (c.*member).reset();
        }
        const auto value = parse(text);
        if (!value) bad_setting(row.name, row.requirement, text);
        c.*member = *value;
      },
      [](const SparseSetting&, const SparseConfig& c) {
        const auto* value = field_value<member>(c);
        return value == nullptr || allows(*value);
      },
  };
}

/// The row of a registered rule's own setting: always optional (unset: the rule's default),
/// its value kept in SparseConfig::rule_settings. `requirement` is the row's requirement text,
/// kept by sparse_settings().
inline SparseSetting rule_setting_row(const RuleInfo& rule, const RuleSetting& setting,
                                      std::string_view requirement) {
  return {
      setting.name,
      setting.help,
      setting.kind,
      true,
      requirement,
      rule.name,
      &setting,
      setting.former_name,
      [](const SparseSetting& row, const SparseConfig& c) {
        const RuleSettingValue* value = c.rule_settings.find(row.name);
        if (value == nullptr) return std::string();
        return std::visit(
            [](const auto& v) -> std::string {
              if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, RuleName>) {
                return std::string(v.name());
              } else {
                return setting_number_text(v);
              }
            },
            *value);
      },
      [](const SparseSetting& row, SparseConfig& c, std::string_view text) {
        if (text.empty()) return c.rule_settings.reset(row.name);
        const auto value = row.rule_setting->parse(text);
        if (!value) bad_setting(row.name, row.requirement, text);
        c.rule_settings.set(row.name, *value);
      },
      [](const SparseSetting& row, const SparseConfig& c) {
        const RuleSettingValue* value = c.rule_settings.find(row.name);
        return value == nullptr || (value->index() == static_cast<std::size_t>(row.kind) &&
                                    row.rule_setting->allows(*value));
      },
  };
}

inline constexpr Interval kPositive{.low = 0.0, .low_open = true};
inline constexpr Interval kNonNegative{.low = 0.0};
inline constexpr Interval kAtLeastOne{.low = 1.0};
inline constexpr Interval kUnitClosed{.low = 0.0, .high = 1.0};
inline constexpr Interval kUnitOpenBelow{.low = 0.0, .low_open = true, .high = 1.0};
// A scale at or above 1e30 overflows a score to infinity for ordinary inputs.
inline constexpr Interval kScale{.low = 0.0, .low_open = true, .high = 1e30, .high_open = true};

inline std::optional<RuleName> rule_named(std::string_view text) {
  if (find_rule_or_null(text) == nullptr) return std::nullopt;
  return RuleName::named(text);
}
/// A first stage: a registered rule that reads only summaries.
inline std::optional<RuleName> summary_rule_named(std::string_view text) {
  const RuleInfo* rule = find_rule_or_null(text);
  if (rule == nullptr || rule->reads_keys) return std::nullopt;
  return RuleName::named(text);
}
constexpr bool valid_scope(SelectionScope s) {
  return s == SelectionScope::per_head || s == SelectionScope::per_group;
}
constexpr bool valid_precision(SummaryPrecision p) {
  return p == SummaryPrecision::f32 || p == SummaryPrecision::bf16;
}
constexpr bool valid_combine(GroupCombine g) {
  return g == GroupCombine::sum || g == GroupCombine::max;
}
inline bool registered(RuleName rule) { return find_rule_or_null(rule.name()) != nullptr; }
inline bool reads_only_summaries(RuleName rule) {
  const RuleInfo* info = find_rule_or_null(rule.name());
  return info != nullptr && !info->reads_keys;
}

}  // namespace detail

// --- makers of a rule's own settings (RuleInfo::settings), for the headers in rules/ ----------

/// An integer setting of a rule whose values must lie in `allowed` (detail::kAtLeastOne, ...),
/// described to users as `requirement` ("an integer >= 1").
template <detail::Interval allowed>
constexpr RuleSetting integer_rule_setting(std::string_view name, std::string_view help,
                                           std::string_view requirement,
                                           std::int64_t default_value) {
  return {name,
          help,
          SettingKind::integer,
          requirement,
          nullptr,
          default_value,
          [](std::string_view text) -> std::optional<RuleSettingValue> {
            const auto value = detail::parse_number_text<std::int64_t>(text, allowed);
            if (!value) return std::nullopt;
            return *value;
          },
          [](const RuleSettingValue& value) {
            const auto* number = std::get_if<std::int64_t>(&value);
            return number != nullptr && allowed.contains(*number);
          }};
}

/// A setting of a rule that names a registered rule: any (reads_keys_too) or one that reads
/// only summaries. Its requirement lists the choices the registry offers.
template <bool reads_keys_too>
constexpr RuleSetting rule_name_setting(std::string_view name, std::string_view help,
                                        std::string_view requirement, RuleName default_value,
                                        std::string_view former_name = {}) {
  return {name,
          help,
          SettingKind::name,
          requirement,
          reads_keys_too ? &detail::rule_choices : &detail::summary_rule_choices,
          default_value,
          [](std::string_view text) -> std::optional<RuleSettingValue> {
            const auto rule =
                reads_keys_too ? detail::rule_named(text) : detail::summary_rule_named(text);
            if (!rule) return std::nullopt;
            return *rule;
          },
          [](const RuleSettingValue& value) {
            const auto* rule = std::get_if<RuleName>(&value);
            return rule != nullptr && (reads_keys_too ? detail::registered(*rule)
                                                      : detail::reads_only_summaries(*rule));
          },
          former_name};
}

/// Every selection setting, in the order tools print them: SparseConfig's fields, then every
/// registered rule's own settings, in registration order.
inline std::span<const SparseSetting> sparse_settings() {
  using namespace detail;
  using C = SparseConfig;
  // Built once: requirements listing the registered rules, and the rules' rows.
  static const std::string rules = "one of " + rule_choices();
  static const std::vector<SparseSetting> settings = [] {
    std::vector<SparseSetting> out = {
        number_row<&C::block_size, kPositive>("block_size", "positions per block",
                                              "an integer > 0"),
        number_row<&C::top_k, kNonNegative>("top_k", "blocks selected beyond sinks and window",
                                            "an integer >= 0"),
        number_row<&C::sinks, kNonNegative>("sinks", "first positions always kept",
                                            "an integer >= 0"),
        number_row<&C::window, kNonNegative>("window", "last positions always kept",
                                             "an integer >= 0"),
        name_row<&C::scope, scope_named, valid_scope>(
            "scope", "selection per query head or per GQA group: head|group", "'head' or 'group'"),
        name_row<&C::rule, rule_named, registered>("rule", "the block scoring rule (docs/rules.md)",
                                                   rules, "score"),
        name_row<&C::summary_precision, precision_named, valid_precision>(
            "summary_precision",
            "the summaries the rule scores: f32 (exact) or bf16 (copies rounded to bf16, half "
            "the bytes to scan): f32|bf16",
            "'f32' or 'bf16'"),
        name_row<&C::combine, combine_named, valid_combine>(
            "combine",
            "per-group scope: combine the heads' softmax-normalised block scores: sum|max",
            "'sum' or 'max'"),
        number_row<&C::scale, kScale>("scale", "attention scale c (unset: 1/sqrt(head_dim))",
                                      "a positive finite number"),
        number_row<&C::target_eps, kUnitClosed>(
            "target_eps",
            "adaptive: add blocks until the certified omitted-mass bound is <= this, in [0, 1]",
            "a number in [0, 1]"),
        number_row<&C::max_k, kNonNegative>(
            "max_k", "adaptive: add at most this many blocks (unset: all)", "an integer >= 0"),
        number_row<&C::top_p, kUnitOpenBelow>(
            "top_p",
            "top-p budget: the fewest best blocks whose estimated mass share reaches this, in "
            "(0, 1], at most top_k",
            "a number in (0, 1]"),
    };
    // Requirement texts of the rules' rows (a list of rules is built here, after the registry).
    static std::vector<std::string> requirements;
    for (const RuleInfo& rule : registered_rules()) {
      for (const RuleSetting& setting : rule.settings)
        requirements.push_back(setting.requirement_text());
    }
    std::size_t at = 0;
    for (const RuleInfo& rule : registered_rules()) {
      for (const RuleSetting& setting : rule.settings) {
        for (const SparseSetting& earlier : out) {
          if (earlier.named(setting.name) ||
              (!setting.former_name.empty() && earlier.named(setting.former_name))) {
            detail::throw_error("amc::sparse_settings", "rule ", rule.name, "'s setting ",
                                setting.name, " has the name of another setting");
          }
        }
        out.push_back(rule_setting_row(rule, setting, requirements[at++]));
      }
    }
    return out;
  }();
  return settings;
}

/// The setting called `name` (or, formerly, `name`); throws amc::error listing the settings.
inline const SparseSetting& sparse_setting(std::string_view name) {
  std::string names;
  for (const SparseSetting& s : sparse_settings()) {
    if (s.named(name)) return s;
    if (!names.empty()) names += ", ";
    names += s.name;
  }
  detail::throw_error("amc::SparseConfig", "no setting '", name, "' (settings: ", names, ")");
}

inline void SparseConfig::set(std::string_view name, std::string_view text) {
  sparse_setting(name).set(*this, text);
}
inline std::string SparseConfig::get(std::string_view name) const {
  return sparse_setting(name).get(*this);
}

inline void SparseConfig::validate() const {
  for (const SparseSetting& setting : sparse_settings()) setting.check(*this);
  constexpr const char* where = "amc::SparseConfig::validate";
  AMC_CHECK(!max_k || target_eps, where, "max_k needs target_eps (it caps adaptive selection)");
  AMC_CHECK(!top_p || !target_eps, where, "top_p and target_eps are two adaptive budgets (top_p ",
            top_p ? *top_p : 0.0, ", target_eps ", target_eps ? *target_eps : 0.0, "); set one");
  // The configured rule's own cross-checks (a rule's settings against the fields).
  if (const RuleInfo& info = rule.info(); info.check != nullptr) info.check(*this);
}

/// "block_size=16 top_k=8 sinks=1 window=64 scope=head rule=mean summary_precision=f32
/// combine=sum": every set
/// setting as name=value, space-separated, in the table's order.
inline std::string to_text(const SparseConfig& config) {
  std::string out;
  for (const SparseSetting& s : sparse_settings()) {
    const std::string value = s.get(config);
    if (s.optional && value.empty()) continue;
    if (!out.empty()) out += ' ';
    out.append(s.name).append("=").append(value);
  }
  return out;
}

/// Applies "name=value" settings separated by spaces or commas to `config` (unnamed settings
/// keep their values; a setting's former name is read as its name; a setting given twice is
/// refused), then validates. parse_sparse_config(to_text(c)) == c.
inline SparseConfig parse_sparse_config(std::string_view text, SparseConfig config = {}) {
  std::vector<const SparseSetting*> seen;  // a setting given twice is refused
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find_first_of(" ,", at);
    const std::string_view item = text.substr(at, end == std::string_view::npos ? end : end - at);
    at = end == std::string_view::npos ? text.size() : end + 1;
    if (item.empty()) continue;
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      detail::throw_error("amc::parse_sparse_config", "expected name=value, got '", item, "'");
    }
    const SparseSetting& setting = sparse_setting(item.substr(0, equals));
    if (std::find(seen.begin(), seen.end(), &setting) != seen.end()) {
      detail::throw_error("amc::parse_sparse_config", setting.name, " is given twice, in '", item,
                          "'");
    }
    seen.push_back(&setting);
    setting.set(config, item.substr(equals + 1));
  }
  config.validate();
  return config;
}

}  // namespace amc

// Configuration of block-sparse decoding: every selection setting, validated once, and a table
// of the settings (name, help, text form) that parsing, describing and serialising use, so that
// every tool, report and binding names, validates and prints them the same way.
#pragma once

#include <charconv>
#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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

/// A block scoring rule, by its registered name (src/rule_registry.cpp lists them; a rule is
/// one file in amc/attention/rules/ plus one line of that registry). A small value type:
/// copying it copies a name.
class ScoreRule {
 public:
  /// The mean-pooled rule, the method under study.
  constexpr ScoreRule() = default;

  /// The registered rule called `name`; throws amc::error listing the registered names.
  static ScoreRule named(std::string_view name) { return ScoreRule(find_rule(name).name); }

  constexpr std::string_view name() const { return name_; }
  /// Its registry entry (what it needs, how to make it).
  const RuleInfo& info() const { return find_rule(name_); }

  friend constexpr bool operator==(const ScoreRule& a, const ScoreRule& b) {
    return a.name_ == b.name_;
  }
  friend constexpr auto operator<=>(const ScoreRule& a, const ScoreRule& b) {
    return a.name_ <=> b.name_;
  }

  // The built-in rules, for code that names them (tools select rules by name).
  static const ScoreRule mean_pooled;      ///< "mean": c <q, mean key>
  static const ScoreRule channel_bound;    ///< "bound": c sum_i max(q_i min_i, q_i max_i)
  static const ScoreRule oracle;           ///< "oracle": the true block mass; reads every key
  static const ScoreRule two_stage;        ///< "twostage": a shortlist rescored from its keys
  static const ScoreRule sub_block_means;  ///< "submean": the best sub-block mean score

 private:
  constexpr explicit ScoreRule(std::string_view name) : name_(name) {}
  std::string_view name_ = "mean";  // points at static storage (a literal or the registry)
};

inline constexpr ScoreRule ScoreRule::mean_pooled{"mean"};
inline constexpr ScoreRule ScoreRule::channel_bound{"bound"};
inline constexpr ScoreRule ScoreRule::oracle{"oracle"};
inline constexpr ScoreRule ScoreRule::two_stage{"twostage"};
inline constexpr ScoreRule ScoreRule::sub_block_means{"submean"};

constexpr std::string_view to_string(SelectionScope scope) {
  return scope == SelectionScope::per_head ? "head" : "group";
}
constexpr std::string_view to_string(ScoreRule rule) { return rule.name(); }
constexpr std::string_view to_string(GroupCombine combine) {
  return combine == GroupCombine::sum ? "sum" : "max";
}

/// Parses the names used by tools and reports ("head"/"group", a registered rule name,
/// "sum"/"max"); throws amc::error naming the field and the value otherwise.
inline SelectionScope parse_scope(std::string_view name) {
  if (name == "head") return SelectionScope::per_head;
  if (name == "group") return SelectionScope::per_group;
  detail::throw_error("amc::parse_scope", "scope must be 'head' or 'group', got '", name, "'");
}
inline ScoreRule parse_score_rule(std::string_view name) { return ScoreRule::named(name); }
inline GroupCombine parse_combine(std::string_view name) {
  if (name == "sum") return GroupCombine::sum;
  if (name == "max") return GroupCombine::max;
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
  ScoreRule score;  ///< mean pooling unless set
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
  /// The two-stage rule ("twostage") shortlists shortlist * k blocks by the rule
  /// shortlist_score and rescores them from their keys; unset: kDefaultShortlist.
  std::optional<std::int64_t> shortlist;
  /// The two-stage rule's first stage: a rule that reads only summaries; unset: mean pooling.
  std::optional<ScoreRule> shortlist_score;
  /// The sub-block-means rule ("submean") keeps this many means per block (dividing
  /// block_size); unset: kDefaultSubBlocks.
  std::optional<std::int64_t> sub_blocks;

  static constexpr std::int64_t kDefaultShortlist = 4;
  static constexpr std::int64_t kDefaultSubBlocks = 4;
  std::int64_t shortlist_or_default() const { return shortlist.value_or(kDefaultShortlist); }
  std::int64_t sub_blocks_or_default() const { return sub_blocks.value_or(kDefaultSubBlocks); }
  ScoreRule shortlist_score_or_default() const {
    return shortlist_score.value_or(ScoreRule::mean_pooled);
  }
  /// The most blocks one selection keeps: top_k, or max_k (unset: every candidate) when
  /// adaptive. What a two-stage rule sizes its shortlist by.
  std::int64_t most_blocks() const {
    if (!adaptive()) return top_k;
    return max_k.value_or(std::numeric_limits<std::int64_t>::max());
  }

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
    AMC_CHECK(combine == GroupCombine::sum || combine == GroupCombine::max, where,
              "combine has an invalid value ", static_cast<int>(combine));
    AMC_CHECK(!target_eps || (*target_eps >= 0.0 && *target_eps <= 1.0), where,
              "target_eps must be in [0, 1], got ", target_eps ? *target_eps : 0.0);
    AMC_CHECK(!max_k || *max_k >= 0, where, "max_k must be >= 0, got ", max_k ? *max_k : 0);
    AMC_CHECK(!max_k || target_eps, where, "max_k needs target_eps (it caps adaptive selection)");
    AMC_CHECK(!top_p || (*top_p > 0.0 && *top_p <= 1.0), where, "top_p must be in (0, 1], got ",
              top_p ? *top_p : 0.0);
    AMC_CHECK(!top_p || !target_eps, where, "top_p and target_eps are two adaptive budgets (top_p ",
              top_p ? *top_p : 0.0, ", target_eps ", target_eps ? *target_eps : 0.0, "); set one");
    AMC_CHECK(!shortlist || *shortlist >= 1, where, "shortlist must be >= 1, got ",
              shortlist ? *shortlist : 0);
    AMC_CHECK(!sub_blocks || *sub_blocks >= 1, where, "sub_blocks must be >= 1, got ",
              sub_blocks ? *sub_blocks : 0);
    if (shortlist_score) {
      const RuleInfo& first = shortlist_score->info();  // throws for an unregistered name
      AMC_CHECK(!first.reads_keys, where,
                "shortlist_score must be a rule that reads only "
                "summaries (a cheap first stage), got ",
                first.name);
    }
    const RuleInfo& rule = score.info();
    const std::int64_t rule_sub_blocks = rule.summaries ? rule.summaries(*this).sub_blocks : 0;
    AMC_CHECK(rule_sub_blocks == 0 || block_size % rule_sub_blocks == 0, where, "score ",
              score.name(), " keeps ", rule_sub_blocks, " sub-blocks per block (sub_blocks), ",
              "which must divide block_size ", block_size);
  }

  bool adaptive() const { return target_eps.has_value(); }

  /// Nominal support size sinks + window + top_k * block_size (the actual one can be smaller:
  /// short caches, blocks overlapping sinks or window).
  std::int64_t nominal_support() const { return sinks + window + top_k * block_size; }

  friend bool operator==(const SparseConfig&, const SparseConfig&) = default;
};

/// The block summaries a configuration needs: those of its rule, plus channel bounds and value
/// norms for adaptive selection (it certifies its bound from them). Caches build these.
inline SummaryOptions required_summaries(const SparseConfig& config) {
  const RuleInfo& rule = config.score.info();
  SummaryOptions options = rule.summaries ? rule.summaries(config) : SummaryOptions{};
  if (config.adaptive()) options.channel_bounds = options.value_norms = true;
  return options;
}

// --- the settings, one row each -------------------------------------------------------------

/// How a setting's value is written in JSON.
enum class SettingKind : std::uint8_t { integer, real, name };

/// One selection setting: its name (JSON key, text key, and with '_' as '-' the command-line
/// flag), what it means, and its value as text. Unset optional settings read as "" and are
/// left out of JSON.
struct SparseSetting {
  std::string_view name;
  std::string_view help;
  SettingKind kind;
  bool optional;  ///< may be unset ("" clears it)
  std::string (*get)(const SparseConfig&);
  /// Parses `text` into the field; throws amc::error "amc::SparseConfig: <name> ..., got '<text>'".
  void (*set)(SparseConfig&, std::string_view text);
};

namespace detail {

[[noreturn]] inline void bad_setting(std::string_view name, std::string_view what,
                                     std::string_view text) {
  throw_error("amc::SparseConfig", name, " must be ", what, ", got '", text, "'");
}

template <class T>
T parse_setting_number(std::string_view name, std::string_view text, std::string_view what) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) bad_setting(name, what, text);
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) bad_setting(name, what, text);
  }
  return value;
}

/// Shortest text that reads back as the same number.
template <class T>
std::string setting_number_text(T value) {
  char buffer[64];
  const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, ptr);
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

}  // namespace detail

/// Every selection setting, in the order tools print them.
inline std::span<const SparseSetting> sparse_settings() {
  using detail::bad_setting;
  using detail::parse_setting_number;
  using detail::setting_number_text;
  static const SparseSetting settings[] = {
      {"block_size", "positions per block", SettingKind::integer, false,
       [](const SparseConfig& c) { return setting_number_text(c.block_size); },
       [](SparseConfig& c, std::string_view t) {
         c.block_size = parse_setting_number<std::int64_t>("block_size", t, "an integer > 0");
         if (c.block_size <= 0) bad_setting("block_size", "an integer > 0", t);
       }},
      {"top_k", "blocks selected beyond sinks and window", SettingKind::integer, false,
       [](const SparseConfig& c) { return setting_number_text(c.top_k); },
       [](SparseConfig& c, std::string_view t) {
         c.top_k = parse_setting_number<std::int64_t>("top_k", t, "an integer >= 0");
         if (c.top_k < 0) bad_setting("top_k", "an integer >= 0", t);
       }},
      {"sinks", "first positions always kept", SettingKind::integer, false,
       [](const SparseConfig& c) { return setting_number_text(c.sinks); },
       [](SparseConfig& c, std::string_view t) {
         c.sinks = parse_setting_number<std::int64_t>("sinks", t, "an integer >= 0");
         if (c.sinks < 0) bad_setting("sinks", "an integer >= 0", t);
       }},
      {"window", "last positions always kept", SettingKind::integer, false,
       [](const SparseConfig& c) { return setting_number_text(c.window); },
       [](SparseConfig& c, std::string_view t) {
         c.window = parse_setting_number<std::int64_t>("window", t, "an integer >= 0");
         if (c.window < 0) bad_setting("window", "an integer >= 0", t);
       }},
      {"scope", "selection per query head or per GQA group: head|group", SettingKind::name, false,
       [](const SparseConfig& c) { return std::string(to_string(c.scope)); },
       [](SparseConfig& c, std::string_view t) {
         if (t != "head" && t != "group") bad_setting("scope", "'head' or 'group'", t);
         c.scope = parse_scope(t);
       }},
      {"score", "block scoring rule (see docs/selectors.md)", SettingKind::name, false,
       [](const SparseConfig& c) { return std::string(c.score.name()); },
       [](SparseConfig& c, std::string_view t) {
         if (find_rule_or_null(t) == nullptr) {
           bad_setting("score", "one of " + detail::rule_choices(), t);
         }
         c.score = ScoreRule::named(t);
       }},
      {"combine", "per-group scope: combine the heads' softmax-normalised block scores: sum|max",
       SettingKind::name, false,
       [](const SparseConfig& c) { return std::string(to_string(c.combine)); },
       [](SparseConfig& c, std::string_view t) {
         if (t != "sum" && t != "max") bad_setting("combine", "'sum' or 'max'", t);
         c.combine = parse_combine(t);
       }},
      {"scale", "attention scale c (unset: 1/sqrt(head_dim))", SettingKind::real, true,
       [](const SparseConfig& c) { return c.scale ? setting_number_text(*c.scale) : ""; },
       [](SparseConfig& c, std::string_view t) {
         if (t.empty()) return c.scale.reset();
         const auto x = parse_setting_number<float>("scale", t, "a positive finite number");
         if (!(x > 0.0f) || !(x < 1e30f)) bad_setting("scale", "a positive finite number", t);
         c.scale = x;
       }},
      {"target_eps",
       "adaptive: add blocks until the certified omitted-mass bound is <= this, in [0, 1]",
       SettingKind::real, true,
       [](const SparseConfig& c) { return c.target_eps ? setting_number_text(*c.target_eps) : ""; },
       [](SparseConfig& c, std::string_view t) {
         if (t.empty()) return c.target_eps.reset();
         const auto x = parse_setting_number<double>("target_eps", t, "a number in [0, 1]");
         if (!(x >= 0.0 && x <= 1.0)) bad_setting("target_eps", "a number in [0, 1]", t);
         c.target_eps = x;
       }},
      {"max_k", "adaptive: add at most this many blocks (unset: all)", SettingKind::integer, true,
       [](const SparseConfig& c) { return c.max_k ? setting_number_text(*c.max_k) : ""; },
       [](SparseConfig& c, std::string_view t) {
         if (t.empty()) return c.max_k.reset();
         const auto k = parse_setting_number<std::int64_t>("max_k", t, "an integer >= 0");
         if (k < 0) bad_setting("max_k", "an integer >= 0", t);
         c.max_k = k;
       }},
      {"top_p",
       "top-p budget: the fewest best blocks whose estimated mass share reaches this, in (0, 1], "
       "at most top_k",
       SettingKind::real, true,
       [](const SparseConfig& c) { return c.top_p ? setting_number_text(*c.top_p) : ""; },
       [](SparseConfig& c, std::string_view t) {
         if (t.empty()) return c.top_p.reset();
         const auto x = parse_setting_number<double>("top_p", t, "a number in (0, 1]");
         if (!(x > 0.0 && x <= 1.0)) bad_setting("top_p", "a number in (0, 1]", t);
         c.top_p = x;
       }},
      {"shortlist",
       "score twostage: blocks shortlisted by shortlist_score per block kept (unset: 4)",
       SettingKind::integer, true,
       [](const SparseConfig& c) { return c.shortlist ? setting_number_text(*c.shortlist) : ""; },
       [](SparseConfig& c, std::string_view t) {
         if (t.empty()) return c.shortlist.reset();
         const auto n = parse_setting_number<std::int64_t>("shortlist", t, "an integer >= 1");
         if (n < 1) bad_setting("shortlist", "an integer >= 1", t);
         c.shortlist = n;
       }},
      {"shortlist_score",
       "score twostage: the first stage's rule, one that reads only summaries (unset: mean)",
       SettingKind::name, true,
       [](const SparseConfig& c) {
         return c.shortlist_score ? std::string(c.shortlist_score->name()) : std::string();
       },
       [](SparseConfig& c, std::string_view t) {
         if (t.empty()) return c.shortlist_score.reset();
         const RuleInfo* rule = find_rule_or_null(t);
         if (rule == nullptr || rule->reads_keys) {
           bad_setting("shortlist_score",
                       "a rule that reads only summaries: " + detail::summary_rule_choices(), t);
         }
         c.shortlist_score = ScoreRule::named(t);
       }},
      {"sub_blocks", "score submean: sub-block means per block, dividing block_size (unset: 4)",
       SettingKind::integer, true,
       [](const SparseConfig& c) { return c.sub_blocks ? setting_number_text(*c.sub_blocks) : ""; },
       [](SparseConfig& c, std::string_view t) {
         if (t.empty()) return c.sub_blocks.reset();
         const auto n = parse_setting_number<std::int64_t>("sub_blocks", t, "an integer >= 1");
         if (n < 1) bad_setting("sub_blocks", "an integer >= 1", t);
         c.sub_blocks = n;
       }},
  };
  return settings;
}

/// The setting called `name`; throws amc::error listing the settings.
inline const SparseSetting& sparse_setting(std::string_view name) {
  std::string names;
  for (const SparseSetting& s : sparse_settings()) {
    if (s.name == name) return s;
    if (!names.empty()) names += ", ";
    names += s.name;
  }
  detail::throw_error("amc::SparseConfig", "no setting '", name, "' (settings: ", names, ")");
}

/// "block_size=16 top_k=8 sinks=1 window=64 scope=head score=mean combine=sum": every set
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
/// keep their values), then validates. parse_sparse_config(to_text(c)) == c.
inline SparseConfig parse_sparse_config(std::string_view text, SparseConfig config = {}) {
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
    sparse_setting(item.substr(0, equals)).set(config, item.substr(equals + 1));
  }
  config.validate();
  return config;
}

}  // namespace amc

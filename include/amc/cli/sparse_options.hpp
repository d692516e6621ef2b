// The selection settings (sparse_settings()) as command-line options on a CLI11 app: one
// declaration for every tool, so each gets the same flags, defaults, help and errors.
// Header-only; needs CLI11 (Debian's libcli11-dev), which the library itself does not.
//
//   CLI::App app;
//   amc::cli::SparseOptions sparse(app, amc::SparseConfig{}, {"scale"});  // all but --scale
//   app.parse(argc, argv);
//   const amc::SparseConfig config = sparse.config();  // throws amc::error on a bad value
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <deque>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "amc/attention/sparse_config.hpp"

namespace amc::cli {

/// "--block-size" for the setting "block_size".
inline std::string flag_of(std::string_view setting) {
  std::string flag = "--";
  flag += setting;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

class SparseOptions {
 public:
  /// Registers an option for every setting not named in `omit`, in the table's order, with the
  /// value of `defaults` as its default. Values are parsed by the settings themselves when
  /// config() is called, so a bad value gets the library's message naming the setting.
  SparseOptions(CLI::App& app, SparseConfig defaults,
                std::initializer_list<std::string_view> omit = {})
      : SparseOptions(app, std::move(defaults), std::span(omit.begin(), omit.size()), false) {}
  /// The same with the omitted names in an array a tool also reads elsewhere.
  SparseOptions(CLI::App& app, SparseConfig defaults, std::span<const std::string_view> omit)
      : SparseOptions(app, std::move(defaults), omit, false) {}

  /// Only the settings named in `names` (e.g. {"sinks", "window"} for a tool whose block
  /// sizes and rules are lists of its own), and with `rule_settings` every registered rule's
  /// own settings (RuleInfo::settings: --shortlist, --sub-blocks, ...), so that a tool whose
  /// rules are a list of its own takes a new rule's settings without naming them.
  struct Only {
    std::initializer_list<std::string_view> names;
    bool rule_settings = false;
  };
  SparseOptions(CLI::App& app, SparseConfig defaults, Only only)
      : SparseOptions(app, std::move(defaults), std::span(only.names.begin(), only.names.size()),
                      true, only.rule_settings) {}

 private:
  SparseOptions(CLI::App& app, SparseConfig defaults, std::span<const std::string_view> names,
                bool keep_named, bool keep_rule_settings = false)
      : defaults_(std::move(defaults)) {
    for (const SparseSetting& setting : sparse_settings()) {
      const bool named = std::find(names.begin(), names.end(), setting.name) != names.end() ||
                         (keep_rule_settings && !setting.rule.empty());
      if (named != keep_named) continue;
      Entry& entry = entries_.emplace_back();
      entry.setting = &setting;
      std::string help(setting.help);
      if (setting.name == "rule")
        help = std::string("the block scoring rule: ").append(detail::rule_choices());
      std::string flags = flag_of(setting.name);
      if (!setting.former_name.empty()) {
        flags += ',' + flag_of(setting.former_name);  // the former flag still works
        help.append(" (").append(flag_of(setting.former_name)).append(": its former name)");
      }
      const std::string default_text = setting.get(defaults_);
      entry.option = app.add_option(flags, entry.text, help);
      entry.option->type_name(setting.kind == SettingKind::name      ? "NAME"
                              : setting.kind == SettingKind::integer ? "INT"
                                                                     : "NUM");
      if (!default_text.empty()) entry.option->default_str(default_text);
    }
  }

 public:
  SparseOptions(const SparseOptions&) = delete;  // the app holds pointers into entries_
  SparseOptions& operator=(const SparseOptions&) = delete;

  /// Whether the option of `setting` was given on the command line.
  bool given(std::string_view setting) const {
    for (const Entry& e : entries_) {
      if (e.setting->name == setting) return e.option->count() > 0;
    }
    return false;
  }

  /// The defaults with every given option applied, validated. Throws amc::error naming the
  /// setting and the value ("amc::SparseConfig: scope must be 'head' or 'group', got 'layer'").
  SparseConfig config() const {
    SparseConfig config = defaults_;
    for (const Entry& e : entries_) {
      if (e.option->count() > 0) e.setting->set(config, e.text);
    }
    config.validate();
    return config;
  }

 private:
  struct Entry {
    const SparseSetting* setting = nullptr;
    CLI::Option* option = nullptr;
    std::string text;
  };
  SparseConfig defaults_;
  std::deque<Entry> entries_;  // stable addresses: CLI11 writes into Entry::text
};

}  // namespace amc::cli

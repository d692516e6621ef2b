// Flag values taken as text and parsed by a command's options_from_flags, so that every refusal
// is an amc::error "COMMAND: --flag: ..." naming the flag and the value as typed, rather than a
// CLI11 conversion message. Shared by the commands whose flags are lists (retrieval, passkey).
#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include "amc/attention/sparse_config.hpp"
#include "amc/error.hpp"

namespace amc::eval {

/// `text` without leading and trailing blanks and tabs.
inline std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

/// The whole of `text` (blanks aside) as a number of type T, or an amc::error
/// "WHERE: FLAG: expected an integer, got 'TEXT'".
template <class T>
T parse_flag_number(std::string_view text, const char* where, const char* flag) {
  const std::string_view item = trim_blanks(text);
  T value{};
  const auto [end, status] = std::from_chars(item.data(), item.data() + item.size(), value);
  if (item.empty() || status != std::errc{} || end != item.data() + item.size()) {
    const char* kind = std::is_floating_point_v<T> ? "a number" : "an integer";
    if (status == std::errc::result_out_of_range) kind = "a number in range";
    detail::throw_error(where, flag, ": expected ", kind, ", got '", std::string(text), "'");
  }
  return value;
}

/// Comma-separated items, each parsed by `parse` (an empty item is passed on as "", for
/// `parse` to refuse).
template <class Parse>
auto parse_flag_list(const std::string& text, Parse parse) {
  std::vector<decltype(parse(std::string_view{}))> values;
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    values.push_back(parse(rest.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return values;
}

/// A registered selection rule by name, or "WHERE: --rules: expected any of ...".
inline RuleName parse_flag_rule(std::string_view text, const char* where) {
  const std::string_view name = trim_blanks(text);
  if (find_rule_or_null(name) == nullptr) {
    detail::throw_error(where, "--rules: expected any of ", detail::rule_choices(),
                        " (comma-separated), got '", std::string(text), "'");
  }
  return RuleName::named(name);
}

}  // namespace amc::eval

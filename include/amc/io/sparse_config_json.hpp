// The selection settings (sparse_settings()) to and from JSON, for reports, run records and
// bindings. Header-only; needs nlohmann-json (Debian's nlohmann-json3-dev), which the library
// itself does not. Works with nlohmann::json and nlohmann::ordered_json.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "amc/attention/sparse_config.hpp"

namespace amc {

/// {"block_size": 16, "top_k": 8, ..., "rule": "mean", ...}: every setting (or those named in
/// `only`, in the table's order), integers and reals as numbers, names as strings; an unset
/// optional setting is null.
template <class Json = nlohmann::ordered_json>
Json to_json(const SparseConfig& config, std::initializer_list<std::string_view> only = {}) {
  Json out = Json::object();
  for (const SparseSetting& s : sparse_settings()) {
    if (only.size() > 0 && std::find(only.begin(), only.end(), s.name) == only.end()) continue;
    const std::string text = s.get(config);
    const std::string key(s.name);
    if (text.empty() && s.optional) {
      out[key] = nullptr;
    } else if (s.kind == SettingKind::integer) {
      out[key] = std::stoll(text);
    } else if (s.kind == SettingKind::real) {
      out[key] = std::stod(text);
    } else {
      out[key] = text;
    }
  }
  return out;
}

/// `base` with the settings of a JSON object applied (null clears an optional setting), then
/// validated. A setting's former name ("score" for "rule") is read as its name, so earlier
/// records load. Throws amc::error naming the key and the value for an unknown key, a setting
/// given twice (by both names), a value of the wrong JSON type, or a value the setting refuses.
template <class Json>
SparseConfig sparse_config_from_json(const Json& json, SparseConfig base = {}) {
  constexpr const char* where = "amc::sparse_config_from_json";
  AMC_CHECK(json.is_object(), where, "expected a JSON object, got ", json.dump());
  std::vector<const SparseSetting*> seen;
  for (const auto& [key, value] : json.items()) {
    const SparseSetting& s = sparse_setting(key);
    AMC_CHECK(std::find(seen.begin(), seen.end(), &s) == seen.end(), where, key,
              " gives the setting ", s.name, " a second time (", s.former_name,
              " is its former name)");
    seen.push_back(&s);
    if (value.is_null()) {
      AMC_CHECK(s.optional, where, key, " cannot be null (it is not optional)");
      s.set(base, "");
    } else if (s.kind == SettingKind::name) {
      AMC_CHECK(value.is_string(), where, key, " must be a string, got ", value.dump());
      s.set(base, value.template get<std::string>());
    } else {
      AMC_CHECK(value.is_number(), where, key, " must be a number, got ", value.dump());
      AMC_CHECK(s.kind == SettingKind::real || value.is_number_integer(), where, key,
                " must be an integer, got ", value.dump());
      s.set(base, value.dump());
    }
  }
  base.validate();
  return base;
}

}  // namespace amc

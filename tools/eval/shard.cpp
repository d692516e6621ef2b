// Shards of a sweep: parsing --shard, the canonical run list and its ranges, sweep.json.
#include "shard.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "amc/error.hpp"
#include "flag_values.hpp"
#include "refuse.hpp"

namespace amc::eval {
namespace {

/// Decimal digits only: from_chars would take a sign, and "-0/2" or "+1/2" are not what a
/// job script means to write.
bool parse_count(std::string_view text, std::int64_t& value) {
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
  return status == std::errc{} && end == text.data() + text.size();
}

Json run_json(const RunId& run) { return Json::array({run.context, run.prefix, run.support}); }

std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

Shard parse_shard(std::string_view text) {
  const std::string_view value = trim_blanks(text);
  const std::size_t slash = value.find('/');
  Shard shard;
  if (slash == std::string_view::npos || !parse_count(value.substr(0, slash), shard.index) ||
      !parse_count(value.substr(slash + 1), shard.count)) {
    detail::throw_error("sweep", "--shard: expected I/N, two integers with 0 <= I < N (shard I ",
                        "of N, e.g. 0/8), got '", std::string(text), "'");
  }
  if (shard.count < 1) {
    detail::throw_error("sweep", "--shard: the shard count N must be at least 1, got '",
                        std::string(text), "'");
  }
  if (shard.index >= shard.count) {
    detail::throw_error("sweep", "--shard: the shard index ", shard.index,
                        " is not below the shard count ", shard.count,
                        " (shards are numbered 0 to ", shard.count - 1, "), got '",
                        std::string(text), "'");
  }
  return shard;
}

std::string to_string(const Shard& shard) {
  return std::to_string(shard.index) + "/" + std::to_string(shard.count);
}

std::pair<std::int64_t, std::int64_t> shard_range(std::int64_t runs, const Shard& shard) {
  // Products of a run count and a shard count: far from overflowing 64 bits.
  return {shard.index * runs / shard.count, (shard.index + 1) * runs / shard.count};
}

std::string to_string(const RunId& run) {
  return "context " + std::to_string(run.context) + ", prefix " + std::to_string(run.prefix) +
         ", support " + std::to_string(run.support);
}

std::vector<RunId> sweep_runs(const std::vector<ContextPlan>& plans,
                              const std::vector<SupportSize>& supports) {
  std::vector<RunId> runs;
  for (const ContextPlan& plan : plans) {
    for (std::size_t p = 0; p < plan.documents.size(); ++p) {
      for (const SupportSize& s : supports) {
        runs.push_back({plan.context, static_cast<std::int64_t>(p), s.support});
      }
    }
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

RunId run_id(const Json& record) {
  return {record.at("context").get<std::int64_t>(), record.at("prefix").get<std::int64_t>(),
          record.at("support").get<std::int64_t>()};
}

void sort_runs(std::vector<Json>& records) {
  // Stable: records of one run (which a valid log never holds twice) keep their order.
  std::stable_sort(records.begin(), records.end(),
                   [](const Json& a, const Json& b) { return run_id(a) < run_id(b); });
}

std::vector<RunId> SweepManifest::shard_runs() const {
  const auto [begin, end] = shard_range(static_cast<std::int64_t>(runs.size()), shard);
  return {runs.begin() + begin, runs.begin() + end};
}

Json manifest_json(const SweepManifest& m) {
  Json j;
  j["format"] = "amc-eval-sweep/1";
  j["shard"] = Json{{"index", m.shard.index}, {"count", m.shard.count}};
  j["settings"] = m.settings;
  j["contexts"] = m.contexts;
  j["supports"] = m.supports;
  j["prefixes"] = m.prefixes;
  j["prefix_notes"] = m.prefix_notes;
  Json runs = Json::array();
  for (const RunId& run : m.runs) runs.push_back(run_json(run));
  j["runs"] = std::move(runs);
  if (!m.merged_from.empty()) j["merged_from"] = m.merged_from;
  return j;
}

SweepManifest read_manifest(const std::filesystem::path& dir, const char* where) {
  const std::filesystem::path path = dir / kManifestName;
  if (!std::filesystem::is_directory(dir)) {
    detail::throw_error(where, dir.string(), ": not a sweep output (not a directory)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    detail::throw_error(where, dir.string(), ": not a sweep output (no ", kManifestName,
                        ": amc-eval sweep writes one into every --out; an older version's output "
                        "gets one from the same sweep command run again with --resume)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  SweepManifest m;
  try {
    const Json j = Json::parse(text.str());
    if (!j.is_object() || j.value("format", std::string()) != "amc-eval-sweep/1") {
      detail::throw_error(where, dir.string(), ": not a sweep output (", path.string(),
                          " is not an amc-eval-sweep/1 manifest)");
    }
    m.shard = {j.at("shard").at("index").get<std::int64_t>(),
               j.at("shard").at("count").get<std::int64_t>()};
    m.settings = with_current_setting_names(j.at("settings"));
    m.contexts = j.at("contexts").get<std::vector<std::int64_t>>();
    m.supports = j.at("supports").get<std::vector<std::int64_t>>();
    m.prefixes = j.at("prefixes").get<std::int64_t>();
    m.prefix_notes = j.at("prefix_notes").get<std::vector<std::string>>();
    for (const Json& run : j.at("runs")) {
      m.runs.push_back({run.at(0).get<std::int64_t>(), run.at(1).get<std::int64_t>(),
                        run.at(2).get<std::int64_t>()});
    }
    if (j.contains("merged_from")) {
      m.merged_from = j.at("merged_from").get<std::vector<std::string>>();
    }
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error(where, dir.string(), ": not a sweep output (", path.string(),
                        " is damaged: ", e.what(), ")");
  }
  if (!m.settings.is_object() || m.shard.count < 1 || m.shard.index < 0 ||
      m.shard.index >= m.shard.count || !std::is_sorted(m.runs.begin(), m.runs.end())) {
    detail::throw_error(where, dir.string(), ": not a sweep output (", path.string(),
                        " is damaged: its shard, settings or run list is invalid)");
  }
  return m;
}

ManifestDifference sweep_difference(const SweepManifest& a, const SweepManifest& b) {
  for (const auto& [field, value] : a.settings.items()) {
    if (!b.settings.contains(field)) return {field, dump(value), "(missing)"};
    if (b.settings[field] != value) return {field, dump(value), dump(b.settings[field])};
  }
  for (const auto& [field, value] : b.settings.items()) {
    if (!a.settings.contains(field)) return {field, "(missing)", dump(value)};
  }
  if (a.contexts != b.contexts) return {"contexts", dump(a.contexts), dump(b.contexts)};
  if (a.supports != b.supports) return {"supports", dump(a.supports), dump(b.supports)};
  if (a.prefixes != b.prefixes) {
    return {"prefixes", std::to_string(a.prefixes), std::to_string(b.prefixes)};
  }
  if (a.runs != b.runs) {
    // Same settings and lists but other runs: the documents' lengths differ.
    const auto [ia, ib] = std::mismatch(a.runs.begin(), a.runs.end(), b.runs.begin(), b.runs.end());
    auto describe = [](const std::vector<RunId>& runs, std::vector<RunId>::const_iterator at) {
      return std::to_string(runs.size()) + " runs" +
             (at == runs.end() ? std::string() : ", among them " + to_string(*at));
    };
    return {"runs", describe(a.runs, ia), describe(b.runs, ib)};
  }
  if (a.shard.count != b.shard.count) {
    return {"shard count", std::to_string(a.shard.count), std::to_string(b.shard.count)};
  }
  return {};
}

std::string list_runs(const std::vector<RunId>& runs, std::size_t shown) {
  std::string text;
  for (std::size_t i = 0; i < runs.size() && i < shown; ++i) {
    text += (i ? "; " : "") + to_string(runs[i]);
  }
  if (runs.size() > shown) text += "; and " + std::to_string(runs.size() - shown) + " more";
  return text;
}

}  // namespace amc::eval

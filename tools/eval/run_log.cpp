// Reading, checking and appending runs.jsonl.
#include "run_log.hpp"

#include <fstream>
#include <sstream>
#include <string>

#include "amc/attention/sparse_config.hpp"
#include "refuse.hpp"

namespace amc::eval {

RunFile read_run_file(const std::filesystem::path& path) {
  RunFile file;
  if (!std::filesystem::exists(path)) return file;
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse(path.string(), ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  std::size_t begin = 0, line = 0;
  while (begin < text.size()) {
    const std::size_t end = text.find('\n', begin);
    ++line;
    if (end == std::string::npos) {  // the append in flight when the run was interrupted
      file.partial_bytes = text.size() - begin;
      break;
    }
    Json record;
    try {
      record = Json::parse(text.substr(begin, end - begin));
    } catch (const nlohmann::json::exception&) {
    }
    if (!record.is_object() || !record.contains("context") || !record.contains("prefix") ||
        !record.contains("support") || !record.contains("settings")) {
      refuse(path.string(), ":", line,
             ": not a run record (the file is damaged); remove the line or use another --out");
    }
    record["settings"] = with_current_setting_names(record["settings"]);
    file.records.push_back(std::move(record));
    begin = end + 1;
    file.complete_bytes = begin;
  }
  return file;
}

Json with_current_setting_names(const Json& settings) {
  if (!settings.is_object()) return settings;
  Json out = Json::object();
  for (const auto& [key, value] : settings.items()) {
    std::string name = key;
    for (const SparseSetting& s : sparse_settings()) {
      if (!s.former_name.empty() && key == s.former_name && !settings.contains(s.name)) {
        name = s.name;
      }
    }
    out[name] = value;
  }
  return out;
}

RunLog::RunLog(const std::filesystem::path& dir, const Json& settings, bool resume)
    : path_(dir / "runs.jsonl") {
  RunFile existing = read_run_file(path_);
  if (!resume && (!existing.records.empty() || existing.partial_bytes > 0)) {
    refuse(path_.string(),
           " already holds runs: pass --resume to continue them, or choose "
           "another --out");
  }
  std::size_t line = 0;
  for (const Json& record : existing.records) {
    ++line;
    const Json& recorded = record["settings"];
    for (const auto& [field, value] : settings.items()) {
      if (!recorded.contains(field) || recorded[field] != value) {
        refuse("--resume: ", path_.string(), ":", line, " was recorded with ", field, " = ",
               recorded.contains(field) ? recorded[field].dump() : std::string("(missing)"),
               " but this run has ", field, " = ", value.dump(),
               "; use the same settings or another --out");
      }
    }
    for (const auto& [field, value] : recorded.items()) {
      if (!settings.contains(field)) {
        refuse("--resume: ", path_.string(), ":", line, " was recorded with a setting ", field,
               " = ", value.dump(), " this version of amc-eval does not have; use another --out");
      }
    }
    done_.emplace(record["context"].get<std::int64_t>(), record["prefix"].get<std::int64_t>(),
                  record["support"].get<std::int64_t>());
  }
  if (existing.partial_bytes > 0) {
    // Cut the partial line off so the next append starts a line of its own.
    std::filesystem::resize_file(path_, existing.complete_bytes);
    dropped_ = existing.partial_bytes;
  }
  file_.emplace(path_);
}

bool RunLog::has(std::int64_t context, std::int64_t prefix, std::int64_t support) const {
  return done_.count({context, prefix, support}) > 0;
}

void RunLog::append(const Json& record) {
  file_->append(record.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
  done_.emplace(record["context"].get<std::int64_t>(), record["prefix"].get<std::int64_t>(),
                record["support"].get<std::int64_t>());
}

}  // namespace amc::eval

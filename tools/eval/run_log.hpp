// runs.jsonl: one JSON record per completed run, appended and flushed to the disk as each run
// finishes, so an interruption loses at most the run in flight; --resume reads it back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "durable_file.hpp"

namespace amc::eval {

using Json = nlohmann::ordered_json;  // keys stay in the order written

/// The records of a runs.jsonl. A last line without its newline is an interrupted append and
/// is left out (`partial_bytes` says how long it was); any other line that is not a JSON object
/// is refused (amc::error naming the line). A missing file has no records.
struct RunFile {
  std::vector<Json> records;
  std::uintmax_t complete_bytes = 0;  ///< length of the complete lines
  std::uintmax_t partial_bytes = 0;   ///< length of the dropped partial last line
};
RunFile read_run_file(const std::filesystem::path& path);

/// `settings` with every selection setting recorded under a former name ("score",
/// "shortlist_score": SparseSetting::former_name) under its name now, in place of the old key,
/// so that records written before a setting was renamed still resume and merge.
Json with_current_setting_names(const Json& settings);

class RunLog {
 public:
  /// Opens DIR/runs.jsonl for a sweep whose records carry `settings`.
  /// Without `resume` an existing file holding runs is refused (never overwritten). With it,
  /// the recorded runs are kept, a partial last line is cut off, and a record whose settings
  /// differ from `settings` is refused naming the first differing field.
  RunLog(const std::filesystem::path& dir, const Json& settings, bool resume);

  const std::filesystem::path& path() const { return path_; }
  /// Whether the run (context, prefix, support) is recorded.
  bool has(std::int64_t context, std::int64_t prefix, std::int64_t support) const;
  std::size_t recorded() const { return done_.size(); }
  /// The recorded runs as (context, prefix, support).
  const std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>>& runs() const {
    return done_;
  }
  /// Bytes of a partial last line cut off at opening (0 when none).
  std::uintmax_t dropped_partial_bytes() const { return dropped_; }

  /// Appends one record as a line; on the disk when this returns.
  void append(const Json& record);

 private:
  std::filesystem::path path_;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> done_;
  std::uintmax_t dropped_ = 0;
  std::optional<AppendFile> file_;
};

}  // namespace amc::eval

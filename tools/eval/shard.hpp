// Sharded sweeps: `amc-eval sweep --shard I/N` runs one of N fixed parts of a sweep's runs, so
// that the parts can run on any machines in any order, and `amc-eval merge` (merge.hpp) puts
// their outputs back together.
//
// A sweep's runs, in the canonical order (context, prefix, support), each ascending, are cut
// into N contiguous ranges of equal size (to within one run). A run's shard is therefore a
// function of its index in that list, the list's length and N alone: never of which runs some
// machine has already done. Contiguous ranges keep a prefix's supports together, so a prefix's
// dense reference (its prefill and dense continuation, shared by its supports) is computed by
// one shard; at most N - 1 prefixes straddle two shards and have it computed twice. Shards hold
// equal numbers of runs, not equal work: runs at long contexts cost more.
//
// Every sweep writes OUT/sweep.json (SweepManifest): the settings, the whole run list and which
// shard OUT holds. --resume checks it, and merge reads it to know what each directory should
// hold.
#pragma once

#include <compare>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "documents.hpp"
#include "run_log.hpp"
#include "support_sizes.hpp"

namespace amc::eval {

struct Shard {
  std::int64_t index = 0;  ///< I, in [0, count)
  std::int64_t count = 1;  ///< N >= 1; 1: the whole sweep
  bool operator==(const Shard&) const = default;
};

/// "I/N" as given to --shard. Throws amc::error "sweep: --shard: ..." naming the value for text
/// that is not two decimal integers separated by '/', a count below 1 or an index outside
/// [0, N).
Shard parse_shard(std::string_view text);

/// "I/N".
std::string to_string(const Shard& shard);

/// The indices [begin, end) that `shard` owns among the `runs` runs of a sweep:
/// begin = floor(I x runs / N), end = floor((I + 1) x runs / N). Empty when N > runs and the
/// shard gets none.
std::pair<std::int64_t, std::int64_t> shard_range(std::int64_t runs, const Shard& shard);

/// A run's identity in a sweep.
struct RunId {
  std::int64_t context = 0;
  std::int64_t prefix = 0;
  std::int64_t support = 0;
  auto operator<=>(const RunId&) const = default;
};

/// "context C, prefix P, support S".
std::string to_string(const RunId& run);

/// Every run of a sweep in the canonical order: contexts ascending, then prefixes, then
/// supports ascending (the order --contexts and --supports were given in does not matter).
std::vector<RunId> sweep_runs(const std::vector<ContextPlan>& plans,
                              const std::vector<SupportSize>& supports);

/// The identity a run record carries.
RunId run_id(const Json& record);

/// Sorts records into the canonical order, so that everything computed from them (sums in
/// summary.csv and the plots' data) is the same whichever order the runs were done or merged in.
void sort_runs(std::vector<Json>& records);

/// OUT/sweep.json: what a sweep's output directory holds.
struct SweepManifest {
  Shard shard;
  Json settings;                          ///< as every run record carries them (settings_json)
  std::vector<std::int64_t> contexts;     ///< ascending
  std::vector<std::int64_t> supports;     ///< ascending
  std::int64_t prefixes = 0;              ///< requested per context
  std::vector<std::string> prefix_notes;  ///< summary.md's "Prefixes" lines
  std::vector<RunId> runs;                ///< the whole sweep's runs, canonical order
  /// For merge's output: the directories merged (absolute); empty for a sweep.
  std::vector<std::string> merged_from;

  /// The runs this directory's shard owns (shard_range over `runs`).
  std::vector<RunId> shard_runs() const;
};

constexpr const char* kManifestName = "sweep.json";

Json manifest_json(const SweepManifest& manifest);

/// Reads DIR/sweep.json. Throws amc::error "WHERE: DIR: not a sweep output (...)" when the file
/// is missing, not JSON, or not a manifest of this format.
SweepManifest read_manifest(const std::filesystem::path& dir, const char* where);

/// The first field in which two manifests describe different sweeps (settings field by field,
/// then contexts, supports, prefixes, the run list and the shard count), as
/// {field, a's value, b's value}; all three empty when they are shards of one sweep.
struct ManifestDifference {
  std::string field, a, b;
  bool empty() const { return field.empty(); }
};
ManifestDifference sweep_difference(const SweepManifest& a, const SweepManifest& b);

/// "context C, prefix P, support S; ...; and N more" for messages: the first `shown` runs.
std::string list_runs(const std::vector<RunId>& runs, std::size_t shown = 4);

}  // namespace amc::eval

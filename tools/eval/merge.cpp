// The `merge` subcommand of amc-eval. See merge.hpp.
#include "merge.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "amc/error.hpp"
#include "durable_file.hpp"
#include "refuse.hpp"
#include "run_log.hpp"
#include "shard.hpp"
#include "sweep.hpp"

namespace amc::eval {
namespace {

struct Part {
  std::filesystem::path dir;
  SweepManifest manifest;
  std::vector<Json> records;
  bool partial = false;  ///< runs.jsonl ends in the partial line of an interrupted append
};

/// Absolute and normalised, so that two spellings of one directory compare equal.
std::filesystem::path normal(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::path p = std::filesystem::weakly_canonical(path, error);
  if (error) p = std::filesystem::absolute(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p;
}

Part read_part(const std::filesystem::path& dir) {
  Part part;
  part.dir = dir;
  part.manifest = read_manifest(dir, "merge");
  const std::filesystem::path runs = dir / "runs.jsonl";
  if (!std::filesystem::is_regular_file(runs)) {
    refuse("merge: ", dir.string(), ": not a sweep output (", kManifestName, " but no runs.jsonl)");
  }
  try {
    RunFile file = read_run_file(runs);
    part.records = std::move(file.records);
    part.partial = file.partial_bytes > 0;
  } catch (const amc::error& e) {
    refuse("merge: ", e.what());
  }
  return part;
}

/// Every record of `part` carries its manifest's settings and is a run of its shard, once.
void check_records(const Part& part) {
  const std::vector<RunId> owned = part.manifest.shard_runs();
  const std::string file = (part.dir / "runs.jsonl").string();
  std::set<RunId> seen;
  std::size_t line = 0;
  for (const Json& record : part.records) {
    ++line;
    const RunId run = run_id(record);
    if (record.at("settings") != part.manifest.settings) {
      refuse("merge: ", file, ":", line, " (", to_string(run),
             ") was recorded with other settings than ", (part.dir / kManifestName).string(),
             " names; the directory is damaged");
    }
    if (!std::binary_search(owned.begin(), owned.end(), run)) {
      refuse("merge: ", file, ":", line, " holds ", to_string(run), ", which its shard ",
             to_string(part.manifest.shard), " does not own");
    }
    if (!seen.insert(run).second) refuse("merge: ", file, " holds ", to_string(run), " twice");
  }
}

}  // namespace

int run_merge(const MergeArguments& a) {
  if (a.dirs.empty()) refuse("merge: give the shards' output directories after OUT");
  if (a.out.empty()) refuse("merge: OUT: the output directory must not be empty");
  std::vector<Part> parts;
  for (const std::string& dir : a.dirs) parts.push_back(read_part(dir));

  // One sweep: the first differing field, with both values.
  const Part& first = parts.front();
  for (const Part& part : parts) {
    const ManifestDifference d = sweep_difference(first.manifest, part.manifest);
    if (!d.empty()) {
      refuse("merge: ", part.dir.string(), " and ", first.dir.string(),
             " are not shards of one sweep: ", d.field, " = ", d.b, " in ", part.dir.string(),
             " but ", d.field, " = ", d.a, " in ", first.dir.string());
    }
  }
  // Each shard once: two copies of a shard hold the same runs.
  std::map<std::int64_t, const Part*> by_shard;
  for (const Part& part : parts) {
    const auto [it, inserted] = by_shard.emplace(part.manifest.shard.index, &part);
    if (!inserted) {
      const bool same = normal(it->second->dir) == normal(part.dir);
      refuse("merge: ", it->second->dir.string(), " and ", part.dir.string(), " are both shard ",
             to_string(part.manifest.shard),
             same ? " (the same directory, given twice)" : std::string(),
             ", so their runs overlap (", list_runs(part.manifest.shard_runs()),
             "); give each shard once");
    }
  }
  for (const Part& part : parts) check_records(part);

  // Every run of the sweep: a shard not given, or given but not finished, lacks some.
  const SweepManifest& sweep = first.manifest;
  std::vector<RunId> missing;
  std::string where;
  for (std::int64_t index = 0; index < sweep.shard.count; ++index) {
    SweepManifest shard = sweep;
    shard.shard.index = index;
    std::vector<RunId> lacking;
    const auto found = by_shard.find(index);
    if (found == by_shard.end()) {
      lacking = shard.shard_runs();
      if (!lacking.empty()) {
        where += (where.empty() ? "" : "; ") + std::string("shard ") + to_string(shard.shard) +
                 " is not among the directories (" + list_runs(lacking, 2) + ")";
      }
    } else {
      std::set<RunId> have;
      for (const Json& record : found->second->records) have.insert(run_id(record));
      for (const RunId& run : shard.shard_runs()) {
        if (!have.count(run)) lacking.push_back(run);
      }
      if (!lacking.empty()) {
        where += (where.empty() ? "" : "; ") + found->second->dir.string() + " (shard " +
                 to_string(shard.shard) + ") lacks " + list_runs(lacking, 2) +
                 (found->second->partial ? " (its runs.jsonl ends in a record cut short)" : "") +
                 ": it has not finished; complete it with the same sweep command and --shard " +
                 to_string(shard.shard) + " --resume";
      }
    }
    missing.insert(missing.end(), lacking.begin(), lacking.end());
  }
  if (!missing.empty()) {
    refuse("merge: ", missing.size(), " of the sweep's ", sweep.runs.size(),
           " runs are missing: ", where);
  }

  const std::filesystem::path out(a.out);
  for (const Part& part : parts) {
    if (normal(part.dir) == normal(out)) {
      refuse("merge: OUT ", a.out,
             " is also one of the shards' directories; merge into a directory of its own");
    }
  }
  if (std::filesystem::exists(out / "runs.jsonl")) {
    refuse("merge: OUT ", a.out,
           " already holds a runs.jsonl; merge into a new directory (merge never overwrites "
           "runs)");
  }
  std::error_code error;
  std::filesystem::create_directories(out, error);
  if (error || !std::filesystem::is_directory(out)) {
    refuse("merge: OUT ", a.out, ": cannot create the directory",
           error ? ": " + error.message() : std::string());
  }

  std::vector<Json> records;
  for (const Part& part : parts) {
    records.insert(records.end(), part.records.begin(), part.records.end());
  }
  sort_runs(records);
  std::string lines;
  for (const Json& record : records) {
    lines += record.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";  // as RunLog
  }
  SweepManifest whole = sweep;
  whole.shard = Shard{};
  for (const auto& [index, part] : by_shard)
    whole.merged_from.push_back(normal(part->dir).string());
  // sweep.json last: a directory holding one holds the whole merge.
  write_file_atomically(out / "runs.jsonl", lines);
  write_sweep_reports(out, whole, records);
  write_file_atomically(out / kManifestName, manifest_json(whole).dump(2) + "\n");
  std::fprintf(stderr, "amc-eval: merged %zu runs of %zu shards into %s; summary in %s and %s\n",
               records.size(), parts.size(), (out / "runs.jsonl").c_str(),
               (out / "summary.csv").c_str(), (out / "summary.md").c_str());
  return 0;
}

void add_merge_command(CLI::App& app, std::function<int()>& run) {
  CLI::App* command = app.add_subcommand(
      "merge",
      "the whole sweep from its shards (sweep --shard I/N): runs.jsonl, summary.csv, "
      "summary.md and plots in OUT, equal to an unsharded sweep's");
  // Owned jointly by the App (through the callback) and by `run`, which outlives parsing.
  auto arguments = std::make_shared<MergeArguments>();
  command->add_option("OUT", arguments->out, "output directory (created if missing)")->required();
  command->add_option("DIR", arguments->dirs, "the shards' sweep output directories")
      ->expected(1, -1)
      ->required();
  command->callback([arguments, &run] { run = [arguments] { return run_merge(*arguments); }; });
}

}  // namespace amc::eval

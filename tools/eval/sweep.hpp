// amc-eval sweep: the paired fresh-selection sweep of docs/reproduce.md section 4 over contexts,
// prefixes and support sizes, written to runs.jsonl, summary.csv, summary.md and plots.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "eval_setup.hpp"
#include "shard.hpp"

namespace amc::eval {

struct SweepArguments {
  CommonArguments common;
  bool resume = false;
  /// Decode every "support" with dense attention: a control whose runs must all match the
  /// reference exactly (the harness's own consistency check).
  bool dense_control = false;
  /// --shard I/N as typed (parse_shard); none: the whole sweep.
  std::optional<std::string> shard;
};

/// Runs the sweep, or with --shard its part of it (shard.hpp); returns the exit status. Throws
/// amc::error (one line) on bad input. Writes OUT/sweep.json before the first run.
int run_sweep(const SweepArguments& a);

/// Writes summary.csv, summary.md and the plots into `dir` from `records` (any order: they are
/// sorted canonically first, so a merged sweep's tables equal an unsharded one's byte for
/// byte), with the settings and prefix notes of `manifest`; prints summary.csv on stdout.
void write_sweep_reports(const std::filesystem::path& dir, const SweepManifest& manifest,
                         std::vector<Json> records);

}  // namespace amc::eval

// amc-eval merge OUT DIR...: the whole sweep's runs.jsonl, summary.csv, summary.md and plots
// from the output directories of its shards (`amc-eval sweep --shard I/N`, shard.hpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace amc::eval {

struct MergeArguments {
  std::string out;
  std::vector<std::string> dirs;
};

/// Checks that the DIRs are sweep outputs (sweep.json and runs.jsonl) of one sweep (the same
/// settings, contexts, supports, prefixes, run list and shard count), that no shard is given
/// twice, that each holds only runs of its shard, and that together they hold every run of the
/// sweep; then writes into OUT (created; one that already holds a runs.jsonl is refused) the
/// runs in the canonical order as runs.jsonl, a sweep.json of the whole sweep (so OUT is itself
/// a sweep output: merged again, or resumed as the whole sweep), and summary.csv, summary.md and
/// the plots, which then equal an unsharded sweep's byte for byte. Prints summary.csv on
/// stdout. Throws amc::error "merge: ..." naming the directory, the field and both values, or
/// the runs missing or given twice, before anything is written.
int run_merge(const MergeArguments& a);

/// Registers the subcommand `merge` on `app`; its callback sets `run` (as the other commands).
void add_merge_command(CLI::App& app, std::function<int()>& run);

}  // namespace amc::eval

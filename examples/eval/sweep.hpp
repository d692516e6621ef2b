// amc-eval sweep: the paired fresh-selection sweep of THEORY.md section 7 over contexts,
// prefixes and support sizes, written to runs.jsonl, summary.csv, summary.md and plots.
#pragma once

#include "eval_setup.hpp"

namespace amc::eval {

struct SweepArguments {
  CommonArguments common;
  bool resume = false;
  /// Decode every "support" with dense attention: a control whose runs must all match the
  /// reference exactly (the harness's own consistency check).
  bool dense_control = false;
};

/// Runs the sweep; returns the exit status. Throws amc::error (one line) on bad input.
int run_sweep(const SweepArguments& a);

}  // namespace amc::eval

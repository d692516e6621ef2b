// The `retrieval` subcommand of amc-eval: flags -> RetrievalProbeOptions, run, write outputs.
#pragma once

#include <functional>
#include <string>

#include "amc/attention/sparse_config.hpp"

#include "retrieval_probe.hpp"

namespace CLI {
class App;
}

namespace amc::eval {

/// The flags as typed, parsed by retrieval_options_from_flags (so every refusal is an
/// amc::error naming the flag, rather than a CLI11 conversion message).
struct RetrievalFlags {
  std::string contexts = "2048,8192";
  std::string block_sizes = "8,16,32,64";
  std::string ks = "2,8,20";
  std::string depths = "0.1,0.3,0.5,0.7,0.9";
  std::string rules = "mean,bound,oracle";
  std::string trials = "64";
  std::string strength = "6";
  std::string seed = "1";
  std::string head_dim = "64";
  /// Sinks and window: the library's selection options (amc::cli::SparseOptions), applied
  /// after parsing; the block sizes, ks and rules are lists of this command's own.
  SparseConfig sparse;
  std::string out;
};

/// Parses and validates; throws amc::error "retrieval: --flag: ..." naming the flag and value.
RetrievalProbeOptions retrieval_options_from_flags(const RetrievalFlags& flags);

/// Registers the subcommand `retrieval` on `app`. When it is chosen, its callback sets `run`
/// (as amc-eval's other commands do) and main calls run() after app.parse(): run() parses the
/// flags, runs the probe, writes the outputs into --out, prints the files it wrote on stdout and
/// notes (such as a missing gnuplot) on stderr, and returns 0. Bad flag values throw amc::error
/// from run(), "retrieval: --flag: ..." with the value; main prints it on one line, exits 2.
void add_retrieval_command(CLI::App& app, std::function<int()>& run);

}  // namespace amc::eval

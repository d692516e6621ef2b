// The `passkey` subcommand of amc-eval: flags -> PasskeyOptions, prepare, run, write outputs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "amc/attention/sparse_config.hpp"

#include "passkey_probe.hpp"

namespace CLI {
class App;
}

namespace amc::eval {

/// The flags as typed, parsed by passkey_options_from_flags (so every refusal is an amc::error
/// naming the flag, rather than a CLI11 conversion message).
struct PasskeyFlags {
  std::string model;
  std::vector<std::string> text_files;
  std::string contexts = "1024,2048";
  std::string depths = "0.1,0.3,0.5,0.7,0.85";
  std::string trials = "10";
  std::string supports = "97,193,385";
  std::string rules = "mean,bound,oracle";
  std::string digits = "5";
  std::string seed = "1";
  transformer::SessionFlags session;  ///< --threads (empty: every hardware thread) and the rest
  /// Block size, sinks, window, scope, combine, top_p and the two-stage and sub-block settings:
  /// the library's selection options (amc::cli::SparseOptions), applied after parsing. The rule
  /// and k are lists of this command's own (--rules, --supports).
  SparseConfig sparse;
  std::string out;
};

/// Parses and validates what needs no model; throws amc::error "passkey: --flag: ..." naming
/// the flag and the value.
PasskeyOptions passkey_options_from_flags(const PasskeyFlags& flags);

/// Registers the subcommand `passkey` on `app`. When it is chosen, its callback sets `run` (as
/// amc-eval's other commands do) and main calls run() after app.parse(): run() parses the flags,
/// loads the model and documents and builds every prompt (refusing bad settings before anything
/// runs or is written), runs the probe with a progress bar on stderr, writes the outputs into
/// --out, prints the files it wrote on stdout and notes (such as a missing gnuplot) on stderr,
/// and returns 0. Bad values throw amc::error from run(), "passkey: --flag: ..." with the value;
/// main prints it on one line and exits 2.
void add_passkey_command(CLI::App& app, std::function<int()>& run);

}  // namespace amc::eval

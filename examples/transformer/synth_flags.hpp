// amc-synth's command line (synth_main.cpp): its flags, declared here rather than in the tool so
// that tests can parse them. The --family and --shape choices come from the family table
// (family.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "synth.hpp"

namespace CLI {
class App;
}

namespace amc::transformer {

/// The flags as given.
struct SynthFlags {
  std::string out;
  std::string shape = "tiny";
  std::string family;  ///< "": the shape's (tiny: the table's first)
  std::int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0,
               vocab = 0;  ///< overrides of the shape, where given
  std::int64_t tokenizer_vocab = 0;
  bool untied = false;
  std::string dtype = "bf16";
  std::uint64_t seed = 0;
  int shards = 1;

  /// The checkpoint they describe, with the overrides `app` (on which add_synth_flags declared
  /// them) says were given (a given 0 is passed on, and refused by the config check). Throws
  /// amc::error for a bad value.
  SynthSpec spec(const CLI::App& app) const;
};

/// Declares --out (required), --shape, --family, the shape's overrides, --tokenizer-vocab,
/// --untied, --dtype, --seed and --shards on `app`, writing into `flags`, which must outlive
/// parsing.
void add_synth_flags(CLI::App& app, SynthFlags& flags);

}  // namespace amc::transformer

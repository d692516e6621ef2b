// What a probe command (passkey, retrieval) writes into its --out and tells the user: its
// tables, each written atomically, one plot drawn with gnuplot, then "wrote FILE" per file on
// stdout and the notes (no gnuplot, a failed plot) on stderr. One epilogue for every probe.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "gnuplot.hpp"

namespace amc::eval {

/// Files a report wrote (tables, then the plot's data, script and images) and notes for the
/// user.
struct ReportOutputs {
  std::vector<std::filesystem::path> files;
  std::vector<std::string> notes;
};

/// Creates `out_dir` when missing, refusing with amc::error "<where>: --out: ..." what cannot
/// be made a directory; writes each (file name, text) of `tables` atomically; then draws `plot`
/// (a missing or failing gnuplot is a note, not an error: the tables are the result).
ReportOutputs write_report(const char* where, const std::filesystem::path& out_dir,
                           const std::vector<std::pair<std::string, std::string>>& tables,
                           const PlotJob& plot);

/// "wrote FILE" per file on stdout (flushed), then each note on stderr as "amc-eval: NOTE", as
/// the other commands print theirs.
void print_report(const ReportOutputs& outputs);

}  // namespace amc::eval

// The files of `amc-eval passkey`: the cells as a CSV table, every answer as another (to
// inspect failures), a Markdown report, and a plot of accuracy vs depth.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "passkey_probe.hpp"
#include "report_files.hpp"

namespace amc::eval {

/// Writes into out_dir (created if missing), each file atomically (temp file, then rename):
/// passkey.csv (one row per cell), trials.csv (one row per case and run), passkey.md (tables of
/// accuracy, planted value in the support and retained mass, rows context x depth), and the
/// plot passkey_plot.dat + passkey.gp, drawn by gnuplot when it is on the PATH into passkey.png
/// and passkey.svg (accuracy vs depth, a panel per context, a line per run). A missing or
/// failing gnuplot skips the images with a note (its messages go to passkey_gnuplot.log).
ReportOutputs write_passkey_outputs(const PasskeyResults& results, const PasskeyOptions& options,
                                    const PasskeySetup& setup,
                                    const std::filesystem::path& out_dir);

}  // namespace amc::eval

// The files of `amc-eval retrieval`: the retrieval probe's cells as a CSV table, a Markdown
// report whose reading is computed from the cells, and a plot of hit rate vs block size.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "report_files.hpp"
#include "retrieval_probe.hpp"

namespace amc::eval {

/// Writes into out_dir (created if missing), each file atomically (temp file, then rename):
/// retrieval.csv (one row per cell), retrieval.md (tables and a reading), retrieval_plot.dat
/// and retrieval.gp (the plot's data and gnuplot script), and, drawn by gnuplot when it is on
/// the PATH, retrieval.png and retrieval.svg: hit rate vs block size per rule, one panel
/// per (context, k). A missing or failing gnuplot skips the plots with a note (its messages go
/// to retrieval_gnuplot.log): the tables are the result, the plots a view of them.
ReportOutputs write_retrieval_outputs(const std::vector<RetrievalProbeResult>& rows,
                                      const std::filesystem::path& out_dir);

}  // namespace amc::eval

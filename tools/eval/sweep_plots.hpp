// The sweep's plots: perplexity change vs support per context, first divergence vs support, and
// retained mass per layer (one panel per context, one line per support).
#pragma once

#include <vector>

#include "gnuplot.hpp"
#include "run_log.hpp"
#include "summary.hpp"

namespace amc::eval {

/// The data files and script (plots.gp) drawing ppl_change, first_divergence and
/// retained_mass_by_layer as PNG and SVG; the per-layer plot is left out when no record has
/// per-layer statistics (the dense control).
PlotJob sweep_plot_job(const std::vector<SummaryRow>& rows, const std::vector<Json>& records);

}  // namespace amc::eval

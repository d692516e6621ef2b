// Drawing plots with gnuplot (Debian's gnuplot or gnuplot-nox): the data and a .gp script are
// written into the output directory, gnuplot draws each image to a temporary name, and only a
// successful run renames them into place, so a failed or interrupted plot never leaves a
// half-written image.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace amc::eval {

/// gnuplot's path on PATH, or nullopt when it is not installed.
std::optional<std::filesystem::path> find_gnuplot();

/// Lines starting a plot script: picks the pngcairo terminal when gnuplot has it, libgd's png
/// otherwise.
std::string gnuplot_preamble();

/// gnuplot commands that draw `plot_commands` (everything after "set output") once as PNG and
/// once as SVG, to NAME.png.tmp and NAME.svg.tmp.
std::string gnuplot_both_formats(const std::string& name, const std::string& plot_commands,
                                 int width = 900, int height = 560);

struct PlotJob {
  std::string script_name;                                ///< e.g. "plots.gp"
  std::string script;                                     ///< gnuplot commands
  std::vector<std::pair<std::string, std::string>> data;  ///< file name, content
  std::vector<std::string> images;  ///< names the script draws (each written as NAME.tmp)
};

struct PlotResult {
  bool drawn = false;
  std::string note;  ///< for the reports: the images drawn, or why there are none
};

/// Writes the data files and the script into `dir` (atomically) and runs gnuplot there, its
/// output going to DIR/gnuplot.log. Never throws for a plotting failure (gnuplot missing or
/// failing): the tables are the result, plots are a view of them.
PlotResult draw_plots(const std::filesystem::path& dir, const PlotJob& job);

/// Quotes a string for a gnuplot script ("...").
std::string gnuplot_string(const std::string& text);

}  // namespace amc::eval

// Drawing plots with gnuplot (Debian's gnuplot or gnuplot-nox): the data and a .gp script are
// written into the output directory, gnuplot draws each image to a temporary name, and only a
// successful run renames them into place, so a failed or interrupted plot never leaves a
// half-written image. The same script run by hand (`gnuplot NAME.gp` in that directory) draws
// straight to the final names.
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
/// otherwise, and defaults `output_suffix` (appended to every image name; draw_plots sets it
/// to ".tmp") to nothing.
std::string gnuplot_preamble();

/// gnuplot commands that draw `plot_commands` (everything after "set output") once as PNG and
/// once as SVG, of width x height pixels, to NAME.png and NAME.svg (plus output_suffix).
/// `terminal_options` is appended to both terminals' settings, e.g. `font ",10"`.
std::string gnuplot_both_formats(const std::string& name, const std::string& plot_commands,
                                 int width = 900, int height = 560,
                                 const std::string& terminal_options = "");

struct PlotJob {
  std::string script_name;                                ///< e.g. "plots.gp"
  std::string script;                                     ///< gnuplot commands
  std::vector<std::pair<std::string, std::string>> data;  ///< file name, content
  std::vector<std::string> images;       ///< names the script draws (each written as NAME.tmp)
  std::string log_name = "gnuplot.log";  ///< gnuplot's messages; removed when it printed none
};

struct PlotResult {
  bool drawn = false;
  std::string note;  ///< for the reports: the images drawn, or why there are none
};

/// Writes the data files and the script into `dir` (atomically) and runs gnuplot there, its
/// output going to DIR/LOG_NAME. Never throws for a plotting failure (gnuplot missing or
/// failing): the tables are the result, plots are a view of them. Throws amc::error when a
/// data file, the script or an image cannot be written into place.
PlotResult draw_plots(const std::filesystem::path& dir, const PlotJob& job);

/// What a draw_plots(dir, job) call leaves in `dir`, for a command's list of the files it
/// wrote: the data files and the script, then (when `result` drew) the images that exist.
std::vector<std::filesystem::path> plot_files(const std::filesystem::path& dir, const PlotJob& job,
                                              const PlotResult& result);

/// Quotes a string for a gnuplot script ("...").
std::string gnuplot_string(const std::string& text);

}  // namespace amc::eval

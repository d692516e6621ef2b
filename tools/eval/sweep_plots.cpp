// Data files and gnuplot commands of the sweep's plots.
#include "sweep_plots.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "text.hpp"

namespace amc::eval {
namespace {

std::string number(double x) { return format("%.9g", x); }

/// `plot for` over the data blocks (gnuplot "index"), one line per block titled from `titles`.
std::string plot_blocks(const std::string& file, const std::vector<std::string>& titles,
                        const std::string& using_style) {
  std::ostringstream s;
  s << "plot ";
  for (std::size_t i = 0; i < titles.size(); ++i) {
    s << (i ? ", \\\n     " : "") << gnuplot_string(file) << " index " << i << " using "
      << using_style << " title " << gnuplot_string(titles[i]);
  }
  return s.str();
}

}  // namespace

PlotJob sweep_plot_job(const std::vector<SummaryRow>& rows, const std::vector<Json>& records) {
  PlotJob job;
  job.script_name = "plots.gp";
  std::ostringstream script;
  script << gnuplot_preamble();

  // Per context: support, median, min, max PPL change, median first divergence.
  std::map<std::int64_t, std::vector<const SummaryRow*>> by_context;
  for (const SummaryRow& r : rows) by_context[r.context].push_back(&r);
  std::ostringstream ppl, divergence;
  std::vector<std::string> context_titles;
  for (const auto& [context, list] : by_context) {
    ppl << "# context " << context << "\n# support median_ppl_change_pct min max\n";
    divergence << "# context " << context << "\n# support median_first_divergence\n";
    for (const SummaryRow* r : list) {
      ppl << r->support << ' ' << number(r->median_ppl_change_pct) << ' '
          << number(r->min_ppl_change_pct) << ' ' << number(r->max_ppl_change_pct) << '\n';
      divergence << r->support << ' ' << number(r->median_first_divergence) << '\n';
    }
    ppl << "\n\n";  // two blank lines end a gnuplot data block
    divergence << "\n\n";
    context_titles.push_back("context " + std::to_string(context));
  }
  job.data.emplace_back("ppl_change.dat", ppl.str());
  job.data.emplace_back("first_divergence.dat", divergence.str());
  std::set<std::int64_t> supports;
  for (const SummaryRow& r : rows) supports.insert(r.support);
  std::string x_axis = "set logscale x 2\nset xlabel 'support size (positions)'\nset xtics (";
  for (const std::int64_t support : supports) {
    x_axis += (support == *supports.begin() ? "" : ", ") + std::to_string(support);
  }
  x_axis += ")\n";
  script << "\n# Median teacher-forced perplexity change (bars: min to max over prefixes)\n"
         << gnuplot_both_formats(
                "ppl_change",
                x_axis +
                    "set ylabel 'PPL change (%), teacher-forced on the dense continuation'\n"
                    "set title 'Perplexity change vs support'\n" +
                    plot_blocks("ppl_change.dat", context_titles, "1:2:3:4 with yerrorlines"));
  script << "\n# Median first divergence step\n"
         << gnuplot_both_formats(
                "first_divergence",
                x_axis +
                    "set ylabel 'first divergence (step)'\n"
                    "set title 'First divergence vs support'\n" +
                    plot_blocks("first_divergence.dat", context_titles, "1:2 with linespoints"));
  job.images = {"ppl_change.png", "ppl_change.svg", "first_divergence.png", "first_divergence.svg"};

  // Retained mass per layer: mean over runs and heads of each head's mean over steps.
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::pair<double, std::int64_t>>>
      layers;  // (context, support) -> [layer] (sum, count)
  for (const Json& r : records) {
    const Json& per_head = r.at("per_head");
    if (per_head.is_null()) continue;
    auto& sums = layers[{r.at("context").get<std::int64_t>(), r.at("support").get<std::int64_t>()}];
    const Json& table = per_head.at("retained_mass_mean");
    sums.resize(std::max(sums.size(), table.size()));
    for (std::size_t l = 0; l < table.size(); ++l) {
      for (const Json& v : table[l]) {
        if (v.is_null()) continue;
        sums[l].first += v.get<double>();
        ++sums[l].second;
      }
    }
  }
  if (layers.empty()) {  // the dense control: nothing selected, nothing to plot per layer
    job.script = script.str();
    return job;
  }
  std::ostringstream mass;
  std::map<std::int64_t, std::vector<std::pair<std::size_t, std::string>>> panels;
  std::size_t block = 0;
  for (const auto& [key, sums] : layers) {
    mass << "# context " << key.first << ", support " << key.second
         << "\n# layer mean_retained_mass\n";
    for (std::size_t l = 0; l < sums.size(); ++l) {
      if (sums[l].second > 0) {
        mass << l << ' ' << number(sums[l].first / static_cast<double>(sums[l].second)) << '\n';
      }
    }
    mass << "\n\n";
    panels[key.first].emplace_back(block++, "support " + std::to_string(key.second));
  }
  job.data.emplace_back("retained_mass_by_layer.dat", mass.str());
  std::size_t layer_count = 0;
  for (const auto& [key, sums] : layers) layer_count = std::max(layer_count, sums.size());
  const std::size_t layer_tics = std::max<std::size_t>(1, (layer_count + 5) / 6);  // integers
  std::ostringstream commands;
  commands << "set multiplot layout 1," << panels.size()
           << " title 'Retained mass per layer (mean over runs, heads and steps)'\n"
              "unset logscale x\nset xtics "
           << layer_tics
           << "\nset xlabel 'layer'\n"
              "set ylabel 'retained mass'\nset key inside bottom right\n";
  for (const auto& [context, lines] : panels) {
    commands << "set title 'context " << context << "'\nplot ";
    for (std::size_t i = 0; i < lines.size(); ++i) {
      commands << (i ? ", \\\n     " : "") << "'retained_mass_by_layer.dat' index "
               << lines[i].first << " using 1:2 with linespoints title "
               << gnuplot_string(lines[i].second);
    }
    commands << "\n";
  }
  script << "\n# Retained mass per layer\nset key outside right top\n"
         << gnuplot_both_formats("retained_mass_by_layer", commands.str(),
                                 std::max<int>(900, 420 * static_cast<int>(panels.size())), 560);
  job.images.insert(job.images.end(), {"retained_mass_by_layer.png", "retained_mass_by_layer.svg"});
  job.script = script.str();
  return job;
}

}  // namespace amc::eval

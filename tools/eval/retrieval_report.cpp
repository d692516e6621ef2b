// The retrieval probe's files: retrieval.csv, retrieval.md (tables and a reading computed from
// them), and the plot (retrieval_plot.dat, retrieval.gp, drawn by gnuplot). See
// retrieval_report.hpp.
#include "retrieval_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>

#include "amc/error.hpp"
#include "gnuplot.hpp"
#include "text.hpp"

namespace amc::eval {
namespace {

constexpr const char* kWhere = "retrieval";

/// "0.1, 0.3, 0.5": the values as given (round_trip), comma-separated.
std::string join(const std::vector<double>& values) {
  std::string out;
  for (const double value : values) out += (out.empty() ? "" : ", ") + round_trip(value);
  return out;
}

/// The grid the rows span, recovered from the rows themselves (so the writers need no options).
struct Grid {
  std::vector<RuleName> rules;  // in row order
  std::vector<std::int64_t> contexts, block_sizes, ks;
  std::vector<double> depths;
};

Grid grid_of(const std::vector<RetrievalProbeResult>& rows) {
  Grid grid;
  std::set<std::int64_t> contexts, block_sizes, ks;
  std::set<double> depths;
  for (const auto& row : rows) {
    if (std::find(grid.rules.begin(), grid.rules.end(), row.rule) == grid.rules.end()) {
      grid.rules.push_back(row.rule);
    }
    contexts.insert(row.context);
    block_sizes.insert(row.block_size);
    ks.insert(row.k);
    depths.insert(row.depth);
  }
  grid.contexts.assign(contexts.begin(), contexts.end());
  grid.block_sizes.assign(block_sizes.begin(), block_sizes.end());
  grid.ks.assign(ks.begin(), ks.end());
  grid.depths.assign(depths.begin(), depths.end());
  return grid;
}

/// Mean over depths (and optionally over contexts and ks) of a per-cell quantity; rows that
/// match every given filter count. A negative filter matches everything.
template <class Field>
double average(const std::vector<RetrievalProbeResult>& rows, RuleName rule, std::int64_t context,
               std::int64_t block_size, std::int64_t k, Field field) {
  double sum = 0.0;
  std::int64_t count = 0;
  for (const auto& row : rows) {
    if (row.rule != rule) continue;
    if (context >= 0 && row.context != context) continue;
    if (block_size >= 0 && row.block_size != block_size) continue;
    if (k >= 0 && row.k != k) continue;
    sum += field(row);
    ++count;
  }
  return count > 0 ? sum / static_cast<double>(count) : std::nan("");
}

/// "`mean`: c <q, mean key of the block> ...": the rule's name and its registered description.
std::string rule_description(RuleName rule) {
  return "`" + std::string(rule.name()) + "`: " + std::string(rule.info().description);
}

std::string csv_text(const std::vector<RetrievalProbeResult>& rows) {
  std::string out =
      "rule,block_size,k,context,depth,trials,hit_rate,hits,mean_rank,candidate_blocks,chance,"
      "needle_position,needle_lift,mean_support,mean_retained_mass,strength,head_dim,sinks,"
      "window,seed\n";
  for (const auto& r : rows) {
    out += format(
        "%s,%lld,%lld,%lld,%s,%lld,%.4f,%lld,%.3f,%lld,%.4f,%lld,%.4f,%.1f,%.6f,%s,%lld,%lld,"
        "%lld,%llu\n",
        std::string(to_string(r.rule)).c_str(), static_cast<long long>(r.block_size),
        static_cast<long long>(r.k), static_cast<long long>(r.context), round_trip(r.depth).c_str(),
        static_cast<long long>(r.trials), r.hit_rate, static_cast<long long>(r.hits), r.mean_rank,
        static_cast<long long>(r.candidate_blocks), r.chance,
        static_cast<long long>(r.needle_position), r.needle_lift, r.mean_support,
        r.mean_retained_mass, round_trip(r.strength).c_str(), static_cast<long long>(r.head_dim),
        static_cast<long long>(r.sinks), static_cast<long long>(r.window),
        static_cast<unsigned long long>(r.seed));
  }
  return out;
}

std::string describe_change(double from, double to) {
  if (to < from - 0.05) return "falls";
  if (to > from + 0.05) return "rises";
  return "stays about the same";
}

std::string markdown_text(const std::vector<RetrievalProbeResult>& rows) {
  const Grid grid = grid_of(rows);
  const RetrievalProbeResult& first = rows.front();
  const std::int64_t b_min = grid.block_sizes.front(), b_max = grid.block_sizes.back();
  std::string md = "# Retrieval probe\n\n";
  md += format(
      "Is the needle inside the support a rule chooses? One needle key among Gaussian "
      "distractor keys (N(0, 1) per channel), head_dim %lld, a fresh query and fresh keys in "
      "each of %lld trials per cell, seed %llu. The query has norm sqrt(head_dim), so a "
      "distractor's score s = q.k / sqrt(d) is N(0, 1); the needle's score exceeds the largest "
      "distractor score by the strength, %s. The needle sits at position floor(depth * context) "
      "and never in the always-kept parts (the first %lld position(s) and the last %lld); "
      "support = those U the k selected blocks of the block size, chosen by amc's "
      "BlockSparseDecode. A hit: the support contains the needle.\n\n",
      static_cast<long long>(first.head_dim), static_cast<long long>(first.trials),
      static_cast<unsigned long long>(first.seed), round_trip(first.strength).c_str(),
      static_cast<long long>(first.sinks), static_cast<long long>(first.window));
  md += "Rules:\n\n";
  for (const RuleName s : grid.rules) md += "- " + rule_description(s) + "\n";
  md +=
      "\n`chance` is k / candidate blocks, the hit rate of k blocks picked at random; "
      "`lift` is (s_needle - s_rest) / B, what the needle adds to its block's mean score "
      "(docs/theory.md section 6). All depths, block sizes, ks and rules of a trial share its "
      "keys and query.\n\n";

  // Hit rate by (context, k, block size), averaged over depths.
  md += "## Hit rate by block size (mean over depths " + join(grid.depths) + ")\n\n";
  md += "| context | k | B |";
  for (const RuleName s : grid.rules) md += format(" %s |", std::string(to_string(s)).c_str());
  md += " chance | lift |\n|--:|--:|--:|";
  for (std::size_t i = 0; i < grid.rules.size(); ++i) md += "--:|";
  md += "--:|--:|\n";
  const RuleName any = grid.rules.front();
  for (const std::int64_t context : grid.contexts) {
    for (const std::int64_t k : grid.ks) {
      for (const std::int64_t b : grid.block_sizes) {
        md += format("| %lld | %lld | %lld |", static_cast<long long>(context),
                     static_cast<long long>(k), static_cast<long long>(b));
        for (const RuleName s : grid.rules) {
          md += format(" %.3f |",
                       average(rows, s, context, b, k, [](const auto& r) { return r.hit_rate; }));
        }
        md +=
            format(" %.3f | %.3f |\n",
                   average(rows, any, context, b, k, [](const auto& r) { return r.chance; }),
                   average(rows, any, context, b, k, [](const auto& r) { return r.needle_lift; }));
      }
    }
  }

  // The needle block's rank does not depend on k: one table per (context, block size).
  md += "\n## Mean rank of the needle's block (1 = first; retrieved iff rank <= k)\n\n";
  md += "| context | B | candidate blocks |";
  for (const RuleName s : grid.rules) md += format(" %s |", std::string(to_string(s)).c_str());
  md += "\n|--:|--:|--:|";
  for (std::size_t i = 0; i < grid.rules.size(); ++i) md += "--:|";
  md += "\n";
  const std::int64_t k0 = grid.ks.front();
  for (const std::int64_t context : grid.contexts) {
    for (const std::int64_t b : grid.block_sizes) {
      const double candidates = average(rows, any, context, b, k0, [](const auto& r) {
        return static_cast<double>(r.candidate_blocks);
      });
      md += format("| %lld | %lld | %.0f |", static_cast<long long>(context),
                   static_cast<long long>(b), candidates);
      for (const RuleName s : grid.rules) {
        md += format(" %.1f |",
                     average(rows, s, context, b, k0, [](const auto& r) { return r.mean_rank; }));
      }
      md += "\n";
    }
  }

  // Depth: the keys have no positional structure, so this is a check that nothing does.
  const std::int64_t context_last = grid.contexts.back();
  const std::int64_t k_mid = grid.ks[grid.ks.size() / 2];
  md += format("\n## Hit rate by depth (context %lld, k %lld)\n\n| rule | depth |",
               static_cast<long long>(context_last), static_cast<long long>(k_mid));
  for (const std::int64_t b : grid.block_sizes)
    md += format(" B=%lld |", static_cast<long long>(b));
  md += "\n|---|--:|";
  for (std::size_t i = 0; i < grid.block_sizes.size(); ++i) md += "--:|";
  md += "\n";
  for (const RuleName s : grid.rules) {
    for (const double depth : grid.depths) {
      md += format("| %s | %s |", std::string(to_string(s)).c_str(), round_trip(depth).c_str());
      for (const std::int64_t b : grid.block_sizes) {
        for (const auto& r : rows) {
          if (r.rule == s && r.context == context_last && r.k == k_mid && r.block_size == b &&
              r.depth == depth) {
            md += format(" %.3f |", r.hit_rate);
          }
        }
      }
      md += "\n";
    }
  }

  // The reading: every statement is computed from the rows above.
  md += "\n## Reading\n\n";
  for (const RuleName s : grid.rules) {
    auto hit = [](const auto& r) { return r.hit_rate; };
    const double at_min = average(rows, s, -1, b_min, -1, hit);
    const double at_max = average(rows, s, -1, b_max, -1, hit);
    int monotone = 0, settings = 0;
    double lowest = 1.0;
    for (const std::int64_t context : grid.contexts) {
      for (const std::int64_t k : grid.ks) {
        ++settings;
        bool non_increasing = true;
        double previous = 2.0;
        for (const std::int64_t b : grid.block_sizes) {
          const double rate = average(rows, s, context, b, k, hit);
          lowest = std::min(lowest, rate);
          non_increasing = non_increasing && rate <= previous;
          previous = rate;
        }
        monotone += non_increasing ? 1 : 0;
      }
    }
    md += format(
        "- `%s`: the hit rate (mean over contexts, ks and depths) %s from %.3f at B = %lld "
        "to %.3f at B = %lld; it is non-increasing in the block size in %d of %d "
        "(context, k) settings; its lowest (context, k, B) hit rate is %.3f.\n",
        std::string(to_string(s)).c_str(), describe_change(at_min, at_max).c_str(), at_min,
        static_cast<long long>(b_min), at_max, static_cast<long long>(b_max), monotone, settings,
        lowest);
  }
  auto lift = [](const auto& r) { return r.needle_lift; };
  md += format(
      "- Dilution (docs/theory.md section 6): the needle lifts its block's mean score by "
      "(s_needle - s_rest) / B = %.3f at B = %lld but only %.3f at B = %lld (mean over cells), "
      "while the distractor blocks' mean scores spread as 1/sqrt(B) (standard deviation %.3f "
      "and %.3f): the lift shrinks faster than the noise it must beat, so mean pooling, which "
      "ranks blocks by log|b| + shat_b, a lower bound on their log-mass, loses the needle as "
      "blocks grow. The oracle ranks by the mass itself, log M_b >= s_needle.\n",
      average(rows, any, -1, b_min, -1, lift), static_cast<long long>(b_min),
      average(rows, any, -1, b_max, -1, lift), static_cast<long long>(b_max),
      1.0 / std::sqrt(static_cast<double>(b_min)), 1.0 / std::sqrt(static_cast<double>(b_max)));
  if (first.strength > std::log(static_cast<double>(b_max))) {
    md += format(
        "- With strength %s > ln %lld, the needle's block has more mass than any "
        "other block can (at most B exp(largest distractor score)), so an oracle that "
        "selects at least one block always retrieves it.\n",
        round_trip(first.strength).c_str(), static_cast<long long>(b_max));
  } else {
    md += format(
        "- With strength %s <= ln %lld, a block of B distractors can outweigh the "
        "needle's block, so even the oracle may miss it at the larger block sizes.\n",
        round_trip(first.strength).c_str(), static_cast<long long>(b_max));
  }
  int easy = 0, settings = 0;
  for (const auto& r : rows) {
    if (r.rule != any || r.depth != grid.depths.front()) continue;
    ++settings;
    easy += r.chance >= 0.5 ? 1 : 0;
  }
  md += format(
      "- Where k blocks are at least half the candidates (chance >= 0.5) the hit rate "
      "says little about ranking: %d of %d (context, k, B) settings.\n",
      easy, settings);
  md += format(
      "- Sampling: a cell's hit rate over %lld trials has a standard error of at most "
      "%.3f (sqrt(0.25 / trials)); the block-size table averages %zu depths, whose needles "
      "share each trial's distractors and query.\n",
      static_cast<long long>(first.trials), std::sqrt(0.25 / static_cast<double>(first.trials)),
      grid.depths.size());
  md +=
      "- These are independent Gaussian keys with no positional structure, so depth should "
      "not matter: differences between the rows of the depth table are sampling noise. Real "
      "keys are correlated across positions and channels; the probe isolates the ranking "
      "rule and does not predict retrieval in a trained model.\n";
  return md;
}

/// Gnuplot data: one data set (separated by two blank lines, selected with `index`) per
/// (context, k, series), series = the rules in order, then chance.
std::string plot_data_text(const std::vector<RetrievalProbeResult>& rows, const Grid& grid) {
  std::string out =
      "# Hit rate (mean over depths) vs block size, written by amc-eval retrieval.\n"
      "# One data set per (context, k, series), in the order below; gnuplot selects them with "
      "`index`.\n";
  int index = 0;
  for (const std::int64_t context : grid.contexts) {
    for (const std::int64_t k : grid.ks) {
      for (std::size_t series = 0; series <= grid.rules.size(); ++series) {
        const bool is_chance = series == grid.rules.size();
        const RuleName s = is_chance ? grid.rules.front() : grid.rules[series];
        out += format("# index %d: context %lld, k %lld, %s\nblock_size hit_rate\n", index++,
                      static_cast<long long>(context), static_cast<long long>(k),
                      is_chance ? "chance" : std::string(to_string(s)).c_str());
        for (const std::int64_t b : grid.block_sizes) {
          const double value =
              average(rows, s, context, b, k, [is_chance](const RetrievalProbeResult& r) {
                return is_chance ? r.chance : r.hit_rate;
              });
          out += format("%lld %.4f\n", static_cast<long long>(b), value);
        }
        out += "\n\n";
      }
    }
  }
  return out;
}

/// The script drawing retrieval_plot.dat: one panel per (context, k), a row of panels per
/// context, a line per rule and a dashed one for chance.
std::string plot_script_text(const Grid& grid) {
  const auto panel_rows = static_cast<int>(grid.contexts.size());
  const auto panel_columns = static_cast<int>(grid.ks.size());
  std::string xtics;
  for (const std::int64_t b : grid.block_sizes) {
    xtics += (xtics.empty() ? "" : ", ") + std::to_string(b);
  }
  std::string panels = format(
      "set multiplot layout %d,%d title 'Retrieval probe: needle in the support "
      "(mean over depths)'\n",
      panel_rows, panel_columns);
  static constexpr const char* kStyles[] = {"lw 2 pt 7", "lw 2 pt 5", "lw 2 pt 9", "lw 2 pt 11"};
  int index = 0;
  for (const std::int64_t context : grid.contexts) {
    for (const std::int64_t k : grid.ks) {
      panels += format("set title 'context %lld, k = %lld'\nplot ", static_cast<long long>(context),
                       static_cast<long long>(k));
      for (std::size_t series = 0; series <= grid.rules.size(); ++series) {
        const bool is_chance = series == grid.rules.size();
        const std::string name = is_chance ? "chance" : std::string(to_string(grid.rules[series]));
        const char* style = is_chance ? "dt 2 lw 1 lc rgb 'gray40' pt 0" : kStyles[series % 4];
        panels += format("%s'retrieval_plot.dat' index %d using 1:2 with linespoints %s title '%s'",
                         series == 0 ? "" : ", \\\n     ", index++, style, name.c_str());
      }
      panels += "\n";
    }
  }
  return "# Hit rate vs block size per rule, one panel per (context, k), from\n"
         "# retrieval_plot.dat.\n" +
         gnuplot_preamble() +
         format(
             "set logscale x 2\n"
             "set xrange [%g:%g]\n"
             "set xtics (%s)\n"
             "set yrange [0:1.05]\n"
             "set xlabel 'block size B'\n"
             "set ylabel 'hit rate'\n"
             "set key inside bottom left font ',8'\n",
             static_cast<double>(grid.block_sizes.front()) / 1.25,
             static_cast<double>(grid.block_sizes.back()) * 1.25, xtics.c_str()) +
         // Small panels: a 10-point font keeps titles and tics legible at 380 x 300 each.
         gnuplot_both_formats("retrieval", panels, 380 * panel_columns + 40, 300 * panel_rows + 60,
                              "font \",10\"");
}

}  // namespace

// --- outputs ----------------------------------------------------------------------------------

ReportOutputs write_retrieval_outputs(const std::vector<RetrievalProbeResult>& rows,
                                      const std::filesystem::path& out_dir) {
  AMC_CHECK(!rows.empty(), "amc::eval::write_retrieval_outputs", "no rows to write");
  const Grid grid = grid_of(rows);
  PlotJob plot;
  plot.script_name = "retrieval.gp";
  plot.script = plot_script_text(grid);
  plot.data = {{"retrieval_plot.dat", plot_data_text(rows, grid)}};
  plot.images = {"retrieval.png", "retrieval.svg"};
  // Its own log: the gnuplot.log of a sweep or mass probe in the same --out stays.
  plot.log_name = "retrieval_gnuplot.log";
  return write_report(kWhere, out_dir,
                      {{"retrieval.csv", csv_text(rows)}, {"retrieval.md", markdown_text(rows)}},
                      plot);
}

}  // namespace amc::eval

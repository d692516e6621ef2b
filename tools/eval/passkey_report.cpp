// The passkey probe's files: passkey.csv, trials.csv, passkey.md and the plot (passkey_plot.dat,
// passkey.gp, drawn by gnuplot). See passkey_report.hpp.
#include "passkey_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "amc/error.hpp"
#include "gnuplot.hpp"
#include "text.hpp"

namespace amc::eval {
namespace {

constexpr const char* kWhere = "passkey";

/// The grid the cells span, in their order.
struct Grid {
  std::vector<std::int64_t> contexts;
  std::vector<double> depths;
  std::vector<PasskeyRunKind> runs;  // dense first
};

bool same_run(const PasskeyRunKind& a, const PasskeyRunKind& b) {
  return a.rule == b.rule && a.support.support == b.support.support;
}

Grid grid_of(const std::vector<PasskeyCell>& cells) {
  Grid grid;
  for (const PasskeyCell& c : cells) {
    if (std::find(grid.contexts.begin(), grid.contexts.end(), c.context) == grid.contexts.end())
      grid.contexts.push_back(c.context);
    if (std::find(grid.depths.begin(), grid.depths.end(), c.depth) == grid.depths.end())
      grid.depths.push_back(c.depth);
    if (std::none_of(grid.runs.begin(), grid.runs.end(),
                     [&](const PasskeyRunKind& r) { return same_run(r, c.run); }))
      grid.runs.push_back(c.run);
  }
  std::sort(grid.depths.begin(), grid.depths.end());
  return grid;
}

const PasskeyCell* find_cell(const std::vector<PasskeyCell>& cells, std::int64_t context,
                             double depth, const PasskeyRunKind& run) {
  for (const PasskeyCell& c : cells) {
    if (c.context == context && c.depth == depth && same_run(c.run, run)) return &c;
  }
  return nullptr;
}

/// A CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

/// Bytes as readable text: \n, \t, \r, \\ and \xHH for other bytes outside printable ASCII, so
/// a wrong answer's whitespace and control bytes show (and a row stays on one line).
std::string escaped(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (u < 0x20 || u >= 0x7F) {
      out += format("\\x%02X", u);
    } else {
      out += c;
    }
  }
  return out;
}

std::string absolute(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p.string();
}

std::string rule_name(const PasskeyRunKind& run) {
  return run.rule ? std::string(run.rule->name()) : "dense";
}

std::string settings_columns(const PasskeyOptions& o) {
  return format("%lld,%lld,%lld,%s,%lld,%llu,", static_cast<long long>(o.sparse.block_size),
                static_cast<long long>(o.sparse.sinks), static_cast<long long>(o.sparse.window),
                std::string(to_string(o.sparse.scope)).c_str(), static_cast<long long>(o.digits),
                static_cast<unsigned long long>(o.seed)) +
         csv_field(absolute(o.model));
}

std::string cells_csv(const PasskeyResults& results, const PasskeyOptions& options) {
  std::string out =
      "rule,support,k,context,depth,trials,correct,accuracy,mean_retained_mass,"
      "planted_in_support,planted_in_support_by_layer,block_size,sinks,window,scope,digits,seed,"
      "model\n";
  const std::string settings = settings_columns(options);
  for (const PasskeyCell& c : results.cells) {
    std::string by_layer;
    for (const double x : c.planted_by_layer) {
      if (!by_layer.empty()) by_layer += ' ';
      by_layer += format("%.4f", x);
    }
    const std::string support = c.run.rule ? std::to_string(c.run.support.support) : std::string();
    const std::string k = c.run.rule ? std::to_string(c.run.support.k) : std::string();
    out += format("%s,%s,%s,%lld,%s,%lld,%lld,%.4f,%.6f,%.4f,%s,", rule_name(c.run).c_str(),
                  support.c_str(), k.c_str(), static_cast<long long>(c.context),
                  round_trip(c.depth).c_str(), static_cast<long long>(c.trials),
                  static_cast<long long>(c.correct), c.accuracy, c.mean_retained_mass,
                  c.planted_in_support, by_layer.c_str()) +
           settings + "\n";
  }
  return out;
}

std::string trials_csv(const PasskeyResults& results, const PasskeySetup& setup) {
  std::string out =
      "context,depth,trial,rule,support,document,start_byte,record_byte,digits,answer,"
      "correct,record_begin,value_begin,value_end,retained_mass,planted_in_support\n";
  for (const PasskeyTrialRow& row : results.rows) {
    const PasskeyCase& k = *row.passkey_case;
    const std::string support =
        row.run.rule ? std::to_string(row.run.support.support) : std::string();
    // Digits and answers quoted always: a spreadsheet keeps "01234" as text then.
    std::string answer = "\"";
    for (const char c : escaped(row.answer.text))
      answer += c == '"' ? std::string("\"\"") : std::string(1, c);
    answer += "\"";
    out +=
        format("%lld,%s,%lld,%s,%s,", static_cast<long long>(k.context),
               round_trip(k.depth).c_str(), static_cast<long long>(k.trial),
               rule_name(row.run).c_str(), support.c_str()) +
        csv_field(setup.documents[k.draw.document].path) +
        format(",%lld,%lld,\"%s\",%s,%d,%lld,%lld,%lld,%.6f,%.4f\n",
               static_cast<long long>(k.draw.start_byte),
               static_cast<long long>(k.prompt.split_byte), k.draw.digits.c_str(), answer.c_str(),
               row.answer.correct ? 1 : 0, static_cast<long long>(k.prompt.record_begin),
               static_cast<long long>(k.prompt.value_begin),
               static_cast<long long>(k.prompt.value_end), row.answer.retained_mass,
               row.answer.planted_in_support);
  }
  return out;
}

/// A table with rows context x depth and a column per run of `runs`: each cell's `value`, with
/// `decimals` decimals.
template <class Value>
std::string table(const PasskeyResults& results, const Grid& grid,
                  const std::vector<PasskeyRunKind>& runs, int decimals, Value value) {
  std::string md = "| context | depth |";
  for (const PasskeyRunKind& r : runs) md.append(" ").append(run_label(r)).append(" |");
  md += "\n|--:|--:|";
  for (std::size_t i = 0; i < runs.size(); ++i) md += "--:|";
  md += "\n";
  for (const std::int64_t context : grid.contexts) {
    for (const double depth : grid.depths) {
      md += format("| %lld | %s |", static_cast<long long>(context), round_trip(depth).c_str());
      for (const PasskeyRunKind& r : runs) {
        const PasskeyCell* c = find_cell(results.cells, context, depth, r);
        md += c ? format(" %.*f |", decimals, value(*c)) : std::string(" |");
      }
      md += "\n";
    }
  }
  return md;
}

/// Mean of `value` over the cells of one run.
template <class Value>
double mean_over_cells(const std::vector<PasskeyCell>& cells, const PasskeyRunKind& run,
                       Value value) {
  double sum = 0.0;
  int n = 0;
  for (const PasskeyCell& c : cells) {
    if (!same_run(c.run, run)) continue;
    sum += value(c);
    ++n;
  }
  return n > 0 ? sum / n : std::nan("");
}

std::string markdown_text(const PasskeyResults& results, const PasskeyOptions& o,
                          const PasskeySetup& setup) {
  const Grid grid = grid_of(results.cells);
  const std::vector<PasskeyRunKind> sparse_runs(grid.runs.begin() + 1, grid.runs.end());
  const std::int64_t trials = results.cells.front().trials;
  std::string md = "# Passkey retrieval\n\n";
  md += format(
      "Can the model still copy a value planted far back in its context when decode attention "
      "reads only a support? A record `PASSKEY = \"DIGITS\"` (%lld random digits) is planted at "
      "the start of the line nearest each depth of a window of code (depth x the code's length; "
      "the first line start at or after it), the prompt ends with `\\nPASSKEY = \"`, and the "
      "model answers greedily with dense attention and with each rule at each support size "
      "(sinks + window + k blocks). An answer is correct when it starts with the digits. Each "
      "cell has %lld trials; all depths, rules and supports of a (context, trial) share its "
      "code window and digits. The first context - 1 tokens are prefilled densely; the prompt's "
      "last token and the answer's tokens run with the run's attention.\n\n",
      static_cast<long long>(o.digits), static_cast<long long>(trials));
  md += format(
      "Settings: model `%s`, %zu document(s), block size %lld, %lld sink(s), window %lld, "
      "selection per %s, KV cache %s, seed %llu.\n\n",
      absolute(o.model).c_str(), setup.documents.size(),
      static_cast<long long>(o.sparse.block_size), static_cast<long long>(o.sparse.sinks),
      static_cast<long long>(o.sparse.window),
      o.sparse.scope == SelectionScope::per_group ? "GQA group" : "query head",
      setup.kv_quantization == transformer::KvQuantization::q8_0
          ? "q8_0"
          : std::string(to_string(setup.kv_dtype)).c_str(),
      static_cast<unsigned long long>(o.seed));

  md += "## Accuracy (share of trials answered with the digits)\n\n";
  md += table(results, grid, grid.runs, 2, [](const PasskeyCell& c) { return c.accuracy; });
  md += format(
      "\n## Planted value in the support\n\nShare of the answering steps, layers and %s whose "
      "support held every token of the digits.\n\n",
      o.sparse.scope == SelectionScope::per_group ? "KV heads (one support per GQA group)"
                                                  : "query heads");
  md += table(results, grid, sparse_runs, 3,
              [](const PasskeyCell& c) { return c.planted_in_support; });
  md +=
      "\n## Retained mass at the answering steps\n\nexp(L_S - L_all), the softmax mass of the "
      "support, mean over the answering steps, layers and query heads.\n\n";
  md += table(results, grid, sparse_runs, 3,
              [](const PasskeyCell& c) { return c.mean_retained_mass; });

  md += "\n## Reading\n\n";
  const double dense = mean_over_cells(results.cells, grid.runs.front(),
                                       [](const PasskeyCell& c) { return c.accuracy; });
  md += format("- Dense attention answers %.1f%% of the trials (mean over contexts and depths).",
               100.0 * dense);
  if (dense < 0.5) {
    md +=
        " A model that cannot copy the value with every position in view cannot show what a "
        "support loses: read the sparse columns against dense, and the planted and mass tables "
        "for what the supports kept.";
  }
  md += "\n";
  for (const PasskeyRunKind& r : sparse_runs) {
    md += format(
        "- `%s`: accuracy %.1f%%, planted value in the support %.3f, retained mass %.3f (means "
        "over contexts and depths).\n",
        run_label(r).c_str(),
        100.0 * mean_over_cells(results.cells, r, [](const PasskeyCell& c) { return c.accuracy; }),
        mean_over_cells(results.cells, r,
                        [](const PasskeyCell& c) { return c.planted_in_support; }),
        mean_over_cells(results.cells, r,
                        [](const PasskeyCell& c) { return c.mean_retained_mass; }));
  }
  md += format(
      "- Sampling: a cell's accuracy over %lld trials has a standard error of at most %.3f "
      "(sqrt(0.25 / trials)); cells of the same (context, trial) share code and digits, so "
      "differences between columns are not differences between prompts.\n",
      static_cast<long long>(trials), std::sqrt(0.25 / static_cast<double>(trials)));
  md +=
      "\nEvery answer, with its digits, the decoded text and where the record lay, is in "
      "`trials.csv`.\n";
  return md;
}

/// Gnuplot data: one data set (two blank lines apart, selected with `index`) per (context, run).
std::string plot_data_text(const PasskeyResults& results, const Grid& grid) {
  std::string out =
      "# Passkey accuracy vs depth, written by amc-eval passkey.\n"
      "# One data set per (context, run), in the order below; gnuplot selects them with "
      "`index`.\n";
  int index = 0;
  for (const std::int64_t context : grid.contexts) {
    for (const PasskeyRunKind& r : grid.runs) {
      out += format("# index %d: context %lld, %s\ndepth accuracy\n", index++,
                    static_cast<long long>(context), run_label(r).c_str());
      for (const double depth : grid.depths) {
        const PasskeyCell* c = find_cell(results.cells, context, depth, r);
        if (c) out += format("%s %.4f\n", round_trip(depth).c_str(), c->accuracy);
      }
      out += "\n\n";
    }
  }
  return out;
}

std::string plot_script_text(const Grid& grid) {
  const auto panels = static_cast<int>(grid.contexts.size());
  // A colour per rule and a point type per support size, so that the lines of one rule
  // read as a family; dense dashed black.
  std::vector<std::string> rules;
  std::vector<std::int64_t> supports;
  for (const PasskeyRunKind& r : grid.runs) {
    if (!r.rule) continue;
    const std::string name(r.rule->name());
    if (std::find(rules.begin(), rules.end(), name) == rules.end()) rules.push_back(name);
    if (std::find(supports.begin(), supports.end(), r.support.support) == supports.end())
      supports.push_back(r.support.support);
  }
  static constexpr int kColours[] = {1, 2, 7, 6, 4};      // gnuplot's palette, black left out
  static constexpr int kPoints[] = {7, 5, 9, 11, 13, 3};  // filled circle, square, triangles...
  std::string commands =
      format("set multiplot layout 1,%d title 'Passkey retrieval: accuracy vs depth'\n", panels);
  int index = 0;
  for (const std::int64_t context : grid.contexts) {
    commands += format("set title 'context %lld'\nplot ", static_cast<long long>(context));
    for (std::size_t r = 0; r < grid.runs.size(); ++r) {
      const PasskeyRunKind& run = grid.runs[r];
      std::string style = "dt 2 lw 3 lc rgb 'black' pt 6";
      if (run.rule) {
        const auto s = std::find(rules.begin(), rules.end(), run.rule->name()) - rules.begin();
        const auto k =
            std::find(supports.begin(), supports.end(), run.support.support) - supports.begin();
        style = format("lw 2 lc %d pt %d", kColours[s % 5], kPoints[k % 6]);
      }
      commands += format("%s'passkey_plot.dat' index %d using 1:2 with linespoints %s title %s",
                         r == 0 ? "" : ", \\\n     ", index++, style.c_str(),
                         gnuplot_string(run_label(run)).c_str());
    }
    commands += "\n";
  }
  return "# Passkey accuracy vs depth, a panel per context and a line per run, from\n"
         "# passkey_plot.dat.\n" +
         gnuplot_preamble() +
         "set xrange [0:1]\n"
         "set yrange [-0.05:1.05]\n"
         "set xlabel 'depth of the record'\n"
         "set ylabel 'accuracy'\n"
         // Beside each panel: accuracies fill a panel from 0 to 1, a key inside would hide them.
         "set key outside right top font ',8'\n" +
         gnuplot_both_formats("passkey", commands, 560 * panels + 40, 400, "font \",10\"");
}

}  // namespace

ReportOutputs write_passkey_outputs(const PasskeyResults& results, const PasskeyOptions& options,
                                    const PasskeySetup& setup,
                                    const std::filesystem::path& out_dir) {
  AMC_CHECK(!results.cells.empty(), "amc::eval::write_passkey_outputs", "no cells to write");
  const Grid grid = grid_of(results.cells);
  PlotJob plot;
  plot.script_name = "passkey.gp";
  plot.script = plot_script_text(grid);
  plot.data = {{"passkey_plot.dat", plot_data_text(results, grid)}};
  plot.images = {"passkey.png", "passkey.svg"};
  // Its own log: another command's gnuplot.log in the same --out stays.
  plot.log_name = "passkey_gnuplot.log";
  return write_report(kWhere, out_dir,
                      {{"passkey.csv", cells_csv(results, options)},
                       {"trials.csv", trials_csv(results, setup)},
                       {"passkey.md", markdown_text(results, options, setup)}},
                      plot);
}

}  // namespace amc::eval

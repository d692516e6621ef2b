// Retained mass of every support size on the dense model's decode steps.
#include "mass_probe.hpp"

#include <amc/attention/decode.hpp>
#include <amc/math/omitted_mass.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "durable_file.hpp"
#include "gnuplot.hpp"
#include "greedy.hpp"
#include "progress.hpp"
#include "refuse.hpp"
#include "text.hpp"
#include "transformer/model.hpp"

namespace amc::eval {
namespace {

/// Per support size: [layers, heads] sums and minima of retained mass over steps.
struct MassTable {
  std::vector<double> sum, min;
  std::vector<std::int64_t> count;
};

class MassProbe {
 public:
  MassProbe(const transformer::Config& model, const SparseConfig& base,
            const std::vector<SupportSize>& supports)
      : layers_(model.num_hidden_layers),
        heads_(model.num_attention_heads),
        kv_heads_(model.num_key_value_heads),
        head_dim_(model.head_dim) {
    for (const SupportSize& s : supports) {
      SparseConfig c = base;
      c.top_k = s.k;
      operators_.emplace_back(c);
    }
    out_.resize(static_cast<std::size_t>(model.num_attention_heads / kv_heads_ * head_dim_));
    results_.resize(static_cast<std::size_t>(model.num_attention_heads / kv_heads_));
  }

  /// Starts the tables of one context.
  void reset() {
    const auto n = static_cast<std::size_t>(layers_ * heads_);
    tables_.assign(operators_.size(),
                   MassTable{std::vector<double>(n, 0.0), std::vector<double>(n, INFINITY),
                             std::vector<std::int64_t>(n, 0)});
  }
  const std::vector<MassTable>& tables() const { return tables_; }

  void observe(const transformer::LayerAttention& a, const transformer::KvCache& cache) {
    for (std::int64_t g = 0; g < kv_heads_; ++g) {
      cache.visit_view(a.layer, g, a.positions, [&]<KvViewLike View>(const View& kv) {
        observe_group(a, g, KvHead<View>{kv, cache.summaries(a.layer, g)});
      });
    }
  }

 private:
  /// Every operator over KV head g of the step, its retained mass into the tables.
  template <KvViewLike View>
  void observe_group(const transformer::LayerAttention& a, std::int64_t g,
                     const KvHead<View>& head) {
    const auto queries =
        map_rows(a.queries + g * a.group * head_dim_, a.group, head_dim_, head_dim_);
    for (std::size_t s = 0; s < operators_.size(); ++s) {
      operators_[s].decode(queries, head, map_rows(out_.data(), a.group, head_dim_, head_dim_),
                           results_);
      MassTable& t = tables_[s];
      for (std::int64_t j = 0; j < a.group; ++j) {
        const HeadResult& dense = a.results[static_cast<std::size_t>(g * a.group + j)];
        const HeadResult& sparse = results_[static_cast<std::size_t>(j)];
        if (!dense.finite || !sparse.finite) continue;  // the step's logits report it
        const auto i = static_cast<std::size_t>(a.layer * heads_ + g * a.group + j);
        const double m = retained_mass(sparse.lse, dense.lse);
        t.sum[i] += m;
        t.min[i] = std::min(t.min[i], m);
        ++t.count[i];
      }
    }
  }

  std::int64_t layers_, heads_, kv_heads_, head_dim_;
  std::vector<BlockSparseDecode<>> operators_;  // [supports]
  std::vector<float> out_;                      // [group, head_dim]
  std::vector<HeadResult> results_;             // [group]
  std::vector<MassTable> tables_;               // [supports]
};

std::string number(double x) { return format("%.9g", x); }

/// What the command writes: mass.csv, the overview printed on stdout, the plot data.
struct MassOutputs {
  std::ostringstream csv, overview, data;
  std::vector<std::pair<std::int64_t, std::size_t>> panels;  // (context, first data block)
  std::size_t blocks = 0;

  MassOutputs() {
    csv << "context,support,k,layer,head,steps,mean_retained_mass,min_retained_mass\n";
    overview << "context,support,k,mean_retained_mass,min_retained_mass\n";
  }

  /// One context's tables: rows per support, layer and head; the overview over layers and
  /// heads; plot data blocks per layer (support vs the mean over heads).
  void add(std::int64_t context, const std::vector<SupportSize>& supports,
           const std::vector<MassTable>& tables, std::int64_t layers, std::int64_t heads) {
    for (std::size_t s = 0; s < supports.size(); ++s) {
      const MassTable& t = tables[s];
      double sum = 0.0, least = INFINITY;
      std::int64_t n = 0;
      for (std::int64_t l = 0; l < layers; ++l) {
        for (std::int64_t h = 0; h < heads; ++h) {
          const auto i = static_cast<std::size_t>(l * heads + h);
          if (t.count[i] == 0) continue;
          csv << context << ',' << supports[s].support << ',' << supports[s].k << ',' << l << ','
              << h << ',' << t.count[i] << ',' << number(t.sum[i] / static_cast<double>(t.count[i]))
              << ',' << number(t.min[i]) << '\n';
          sum += t.sum[i];
          n += t.count[i];
          least = std::min(least, t.min[i]);
        }
      }
      if (n > 0) {
        overview << context << ',' << supports[s].support << ',' << supports[s].k << ','
                 << number(sum / static_cast<double>(n)) << ',' << number(least) << '\n';
      }
    }
    panels.emplace_back(context, blocks);
    for (std::int64_t l = 0; l < layers; ++l) {
      data << "# context " << context << ", layer " << l
           << "\n# support mean_retained_mass (mean over heads)\n";
      for (std::size_t s = 0; s < supports.size(); ++s) {
        double sum = 0.0;
        std::int64_t n = 0;
        for (std::int64_t h = 0; h < heads; ++h) {
          const auto i = static_cast<std::size_t>(l * heads + h);
          sum += tables[s].sum[i];
          n += tables[s].count[i];
        }
        if (n > 0)
          data << supports[s].support << ' ' << number(sum / static_cast<double>(n)) << '\n';
      }
      data << "\n\n";  // two blank lines end a gnuplot data block
      ++blocks;
    }
  }

  /// One panel per context: retained mass vs support, a line per layer.
  PlotJob plot_job(const std::vector<SupportSize>& supports, std::int64_t layers) const {
    PlotJob job;
    job.script_name = "mass.gp";
    job.data.emplace_back("mass_vs_support.dat", data.str());
    std::ostringstream commands;
    commands << "set multiplot layout 1," << panels.size()
             << " title 'Retained mass vs support, per layer (mean over heads and decode steps)'\n"
                "set logscale x 2\nset xlabel 'support size (positions)'\n"
                "set ylabel 'retained mass'\nset key inside bottom right\nset xtics (";
    for (std::size_t s = 0; s < supports.size(); ++s) {
      commands << (s ? ", " : "") << supports[s].support;
    }
    commands << ")\n";
    for (const auto& [context, first] : panels) {
      commands << "set title 'context " << context << "'\nplot for [l=0:" << layers - 1
               << "] 'mass_vs_support.dat' index (" << first
               << " + l) using 1:2 with linespoints title sprintf('layer %d', l)\n";
    }
    job.script =
        gnuplot_preamble() +
        gnuplot_both_formats("mass_vs_support", commands.str(),
                             std::max<int>(900, 480 * static_cast<int>(panels.size())), 600);
    job.images = {"mass_vs_support.png", "mass_vs_support.svg"};
    return job;
  }
};

}  // namespace

int run_mass(const MassArguments& a) {
  const Setup setup = prepare(a.common);
  for (const std::string& note : setup.prefix_notes) {
    std::fprintf(stderr, "amc-eval: %s\n", note.c_str());
  }
  const transformer::Config& config = setup.checkpoint->config();
  MassProbe probe(config, setup.sparse, setup.supports);
  transformer::SessionOptions o = setup.session;  // threads, KV dtype, RoPE angles
  o.summaries_for = setup.sparse;  // the cache keeps block summaries from the prefill on
  bool observing = false;          // decode steps only: the prefill's logits are the dense model's
  transformer::Session* session_ptr = nullptr;
  o.on_layer = [&](const transformer::LayerAttention& la) {
    if (observing) probe.observe(la, session_ptr->cache());
  };
  transformer::Session session(*setup.checkpoint, o);
  session_ptr = &session;

  std::int64_t total = 0;
  for (const ContextPlan& plan : setup.plans) {
    total += static_cast<std::int64_t>(plan.documents.size());
  }
  Progress progress(total, Progress::stderr_is_terminal());
  std::vector<float> logits(static_cast<std::size_t>(config.vocab_size));
  MassOutputs outputs;
  for (const ContextPlan& plan : setup.plans) {
    probe.reset();
    for (std::size_t p = 0; p < plan.documents.size(); ++p) {
      const Document& document = setup.documents[plan.documents[p]];
      const std::string label =
          "context " + std::to_string(plan.context) + ", prefix " + std::to_string(p);
      progress.begin(label);
      try {
        session.reset();
        session.reserve(plan.context + a.common.tokens);
        observing = false;
        session.prefill(std::span(document.ids).first(static_cast<std::size_t>(plan.context)),
                        logits);
        observing = true;
        for (std::int64_t t = 1; t < a.common.tokens; ++t) {
          const auto next = static_cast<std::int32_t>(greedy_token(logits, "dense", t - 1).top);
          session.decode(next, logits);
          progress.stage("dense decode", t, a.common.tokens - 1);
        }
      } catch (const amc::error& e) {
        progress.finish();
        refuse(label, " (", document.path, "): ", e.what());
      }
      progress.end(std::to_string(a.common.tokens - 1) + " decode steps measured");
    }
    outputs.add(plan.context, setup.supports, probe.tables(), config.num_hidden_layers,
                config.num_attention_heads);
  }
  progress.finish();
  write_file_atomically(setup.out / "mass.csv", outputs.csv.str());
  const PlotResult plots =
      draw_plots(setup.out, outputs.plot_job(setup.supports, config.num_hidden_layers));
  std::fprintf(stderr, "amc-eval: mass.csv written to %s; plots: %s\n", setup.out.c_str(),
               plots.note.c_str());
  // On stdout: mean and least retained mass over layers, heads and steps.
  std::cout << outputs.overview.str() << std::flush;
  return 0;
}

}  // namespace amc::eval

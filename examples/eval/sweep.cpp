// The sweep loop: per context and prefix one dense reference, then every pending support.
#include "sweep.hpp"

#include <cstdio>
#include <iostream>

#include "paired_run.hpp"
#include "progress.hpp"
#include "refuse.hpp"
#include "run_record.hpp"
#include "summary.hpp"
#include "sweep_plots.hpp"
#include "text.hpp"

namespace amc::eval {
namespace {

std::string percent(double x, bool sign) { return format(sign ? "%+.1f%%" : "%.1f%%", x); }

/// The summary files, from everything runs.jsonl holds (not from memory: a resumed sweep and
/// an uninterrupted one then write the same tables).
void write_reports(const Setup& setup, const Json& settings, const std::filesystem::path& runs) {
  const std::vector<Json> records = read_run_file(runs).records;
  const std::vector<SummaryRow> rows = summarize(records);
  SummaryNotes notes;
  notes.settings = settings;
  notes.prefixes = setup.prefix_notes;
  const PlotResult plots = draw_plots(setup.out, sweep_plot_job(rows, records));
  notes.plots = plots.note;
  if (!plots.drawn) std::fprintf(stderr, "amc-eval: plots: %s\n", plots.note.c_str());
  write_file_atomically(setup.out / "summary.csv", summary_csv(rows));
  const std::string markdown = summary_markdown(rows, records, notes);
  write_file_atomically(setup.out / "summary.md", markdown);
  std::cout << summary_csv(rows) << std::flush;
}

}  // namespace

int run_sweep(const SweepArguments& a) {
  const Setup setup = prepare(a.common);
  Json settings = settings_json(a.common, setup);
  settings["decode"] = a.dense_control ? "dense (control)" : "sparse";
  RunLog log(setup.out, settings, a.resume);
  if (log.dropped_partial_bytes() > 0) {
    std::fprintf(stderr, "amc-eval: --resume: dropped an incomplete last line of %s (%ju bytes)\n",
                 log.path().c_str(), log.dropped_partial_bytes());
  }
  for (const std::string& note : setup.prefix_notes) {
    std::fprintf(stderr, "amc-eval: %s\n", note.c_str());
  }

  std::int64_t pending = 0;
  for (const ContextPlan& plan : setup.plans) {
    for (std::size_t p = 0; p < plan.documents.size(); ++p) {
      for (const SupportSize& s : setup.supports) {
        pending += log.has(plan.context, static_cast<std::int64_t>(p), s.support) ? 0 : 1;
      }
    }
  }
  if (log.recorded() > 0) {
    std::fprintf(stderr, "amc-eval: --resume: %zu runs already recorded, %lld to do\n",
                 log.recorded(), static_cast<long long>(pending));
  }

  if (pending > 0) {
    PairedRunOptions options;
    options.sparse = setup.sparse;
    options.kv_dtype = setup.kv_dtype;
    options.rope_angles = setup.rope_angles;
    options.threads = a.common.threads;
    options.dense_control = a.dense_control;
    PairedRunner runner(*setup.checkpoint, options);
    Progress progress(pending, Progress::stderr_is_terminal());
    const StepCallback on_step = [&](const char* stage, std::int64_t step, std::int64_t steps) {
      progress.stage(stage, step, steps);
    };
    for (const ContextPlan& plan : setup.plans) {
      for (std::size_t p = 0; p < plan.documents.size(); ++p) {
        const auto prefix = static_cast<std::int64_t>(p);
        const Document& document = setup.documents[plan.documents[p]];
        std::optional<DenseReference> reference;
        for (const SupportSize& s : setup.supports) {
          if (log.has(plan.context, prefix, s.support)) continue;
          const std::string label = "context " + std::to_string(plan.context) + ", prefix " +
                                    std::to_string(p) + ", support " + std::to_string(s.support);
          progress.begin(label);
          try {
            if (!reference) {  // once per prefix, for every support (recomputed on resume)
              reference = runner.reference(
                  std::span(document.ids).first(static_cast<std::size_t>(plan.context)),
                  a.common.tokens, on_step);
            }
            const SupportRun run = runner.run(s.k, *reference, on_step);
            const RunKey key{plan.context, prefix, document.path, s};
            const Json record = make_run_record(settings, key, *reference, run, a.common.threads);
            log.append(record);
            progress.end("first divergence " + std::to_string(run.first_divergence) +
                         ", PPL change " + percent(record["ppl_change_pct"].get<double>(), true) +
                         ", TF match " + percent(record["tf_match_pct"].get<double>(), false));
          } catch (const amc::error& e) {
            progress.finish();
            refuse(label, " (", document.path, "): ", e.what());
          }
        }
      }
    }
    progress.finish();
  }
  write_reports(setup, settings, log.path());
  std::fprintf(stderr, "amc-eval: %zu runs in %s; summary in %s and %s\n", log.recorded(),
               log.path().c_str(), (setup.out / "summary.csv").c_str(),
               (setup.out / "summary.md").c_str());
  return 0;
}

}  // namespace amc::eval

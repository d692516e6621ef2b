// The sweep loop: per context and prefix one dense reference, then every pending support (of
// the shard's runs, with --shard).
#include "sweep.hpp"

#include <algorithm>
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

/// "runs B to E", "run B" or "no runs" for the 0-based range [begin, end), numbered from 1.
std::string run_numbers(std::int64_t begin, std::int64_t end) {
  if (end <= begin) return "no runs";
  if (end == begin + 1) return "run " + std::to_string(end);
  return "runs " + std::to_string(begin + 1) + " to " + std::to_string(end);
}

/// Refuses to resume OUT as another shard than the one it holds, a shard of another sweep
/// (merge needs every shard's run list alike: a resumed shard keeps its contexts, supports and
/// prefixes, which a whole sweep may extend), and recorded runs that the shard does not own.
void check_resumed_shard(const std::filesystem::path& out, const SweepManifest& manifest,
                         const RunLog& log) {
  const std::filesystem::path path = out / kManifestName;
  const bool sharded = manifest.shard.count > 1;
  if (std::filesystem::exists(path)) {
    const SweepManifest previous = read_manifest(out, "sweep: --resume");
    if (previous.shard != manifest.shard) {
      const auto holds = [](const Shard& s) {
        return s.count == 1 ? std::string("the whole sweep") : "shard " + to_string(s);
      };
      refuse("sweep: --shard: ", out.string(), " holds ", holds(previous.shard), " (",
             path.string(), "), not ", holds(manifest.shard), "; resume it ",
             previous.shard.count == 1 ? std::string("without --shard")
                                       : "with --shard " + to_string(previous.shard),
             ", or use another --out");
    }
    const ManifestDifference d = sweep_difference(previous, manifest);
    if (sharded && !d.empty()) {
      refuse("sweep: --resume: ", path.string(), " was written with ", d.field, " = ", d.a,
             " but this run has ", d.field, " = ", d.b,
             "; a shard keeps its sweep's settings (merge needs them alike), or use another "
             "--out");
    }
  }
  if (!sharded) return;
  const std::vector<RunId> owned = manifest.shard_runs();
  for (const auto& [context, prefix, support] : log.runs()) {
    const RunId run{context, prefix, support};
    if (!std::binary_search(owned.begin(), owned.end(), run)) {
      refuse("sweep: --resume: ", log.path().string(), " holds ", to_string(run), ", which shard ",
             to_string(manifest.shard), " does not own; resume each shard in its own --out");
    }
  }
}

}  // namespace

void write_sweep_reports(const std::filesystem::path& dir, const SweepManifest& manifest,
                         std::vector<Json> records) {
  sort_runs(records);
  const std::vector<SummaryRow> rows = summarize(records);
  SummaryNotes notes;
  notes.settings = manifest.settings;
  notes.prefixes = manifest.prefix_notes;
  if (manifest.shard.count > 1) {
    const auto [begin, end] =
        shard_range(static_cast<std::int64_t>(manifest.runs.size()), manifest.shard);
    notes.shard = "**Shard " + to_string(manifest.shard) + " of a sharded sweep**: it owns " +
                  run_numbers(begin, end) + " of the sweep's " +
                  std::to_string(manifest.runs.size()) +
                  " in the order context, prefix, support; this table holds the " +
                  std::to_string(records.size()) + " recorded here. `amc-eval merge` builds the " +
                  "whole sweep's table from every shard's output.";
  }
  if (records.empty()) {  // a shard that owns no runs, or has done none yet
    notes.plots = "Not drawn: no runs recorded.";
  } else {
    const PlotResult plots = draw_plots(dir, sweep_plot_job(rows, records));
    notes.plots = plots.note;
    if (!plots.drawn) std::fprintf(stderr, "amc-eval: plots: %s\n", plots.note.c_str());
  }
  const std::string csv = summary_csv(rows);
  write_file_atomically(dir / "summary.csv", csv);
  write_file_atomically(dir / "summary.md", summary_markdown(rows, records, notes));
  std::cout << csv << std::flush;
}

int run_sweep(const SweepArguments& a) {
  // Before the model is read, as the other cheap checks.
  const Shard shard = a.shard ? parse_shard(*a.shard) : Shard{};
  const Setup setup = prepare(a.common);
  Json settings = settings_json(a.common, setup);
  settings["decode"] = a.dense_control ? "dense (control)" : "sparse";
  SweepManifest manifest;
  manifest.shard = shard;
  manifest.settings = settings;
  manifest.contexts = a.common.contexts;
  std::sort(manifest.contexts.begin(), manifest.contexts.end());
  for (const SupportSize& s : setup.supports) manifest.supports.push_back(s.support);
  manifest.prefixes = a.common.prefixes;
  manifest.prefix_notes = setup.prefix_notes;
  manifest.runs = sweep_runs(setup.plans, setup.supports);
  const std::vector<RunId> owned = manifest.shard_runs();
  const auto mine = [&owned](const RunId& run) {
    return std::binary_search(owned.begin(), owned.end(), run);
  };

  RunLog log(setup.out, settings, a.resume);
  if (a.resume) check_resumed_shard(setup.out, manifest, log);
  // Before the first run, so that an interrupted shard's directory already says what it holds.
  write_file_atomically(setup.out / kManifestName, manifest_json(manifest).dump(2) + "\n");
  if (log.dropped_partial_bytes() > 0) {
    std::fprintf(stderr, "amc-eval: --resume: dropped an incomplete last line of %s (%ju bytes)\n",
                 log.path().c_str(), log.dropped_partial_bytes());
  }
  for (const std::string& note : setup.prefix_notes) {
    std::fprintf(stderr, "amc-eval: %s\n", note.c_str());
  }
  if (shard.count > 1) {
    const auto [begin, end] = shard_range(static_cast<std::int64_t>(manifest.runs.size()), shard);
    // The first and last run name the range, so that a job's log says what the shard did.
    std::string named;
    if (!owned.empty()) {
      named = " (" + to_string(owned.front()) +
              (owned.size() > 1 ? " to " + to_string(owned.back()) : std::string()) + ")";
    }
    std::fprintf(stderr, "amc-eval: shard %s owns %s of the sweep's %zu%s\n",
                 to_string(shard).c_str(), run_numbers(begin, end).c_str(), manifest.runs.size(),
                 named.c_str());
  }

  std::int64_t pending = 0;
  for (const ContextPlan& plan : setup.plans) {
    for (std::size_t p = 0; p < plan.documents.size(); ++p) {
      for (const SupportSize& s : setup.supports) {
        const RunId run{plan.context, static_cast<std::int64_t>(p), s.support};
        pending += mine(run) && !log.has(run.context, run.prefix, run.support) ? 1 : 0;
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
    options.kv_dtype = setup.session.kv_dtype;
    options.kv_quantization = setup.session.kv_quantization;
    options.rope_angles = setup.session.rope_angles;
    options.threads = setup.session.threads;
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
          if (!mine({plan.context, prefix, s.support}) ||
              log.has(plan.context, prefix, s.support)) {
            continue;
          }
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
            const Json record =
                make_run_record(settings, key, *reference, run, setup.session.threads);
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
  // From everything runs.jsonl holds, not from memory: a resumed sweep and an uninterrupted one
  // then write the same tables.
  write_sweep_reports(setup.out, manifest, read_run_file(log.path()).records);
  std::fprintf(stderr, "amc-eval: %zu runs in %s; summary in %s and %s\n", log.recorded(),
               log.path().c_str(), (setup.out / "summary.csv").c_str(),
               (setup.out / "summary.md").c_str());
  return 0;
}

}  // namespace amc::eval

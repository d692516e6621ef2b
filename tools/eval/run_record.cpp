// Metrics and the JSON record of one run.
#include "run_record.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace amc::eval {
namespace {

double mean(const std::vector<double>& x) {
  return std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
}

/// [layers][heads] of per-entry values.
Json table(const HeadStatistics& s, const std::vector<double>& values, bool divide) {
  Json rows = Json::array();
  for (std::int64_t l = 0; l < s.layers; ++l) {
    Json row = Json::array();
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const auto i = static_cast<std::size_t>(l * s.heads + h);
      if (s.count[i] == 0) {
        row.push_back(nullptr);
      } else {
        row.push_back(divide ? values[i] / static_cast<double>(s.count[i]) : values[i]);
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

double minimum(const HeadStatistics& s, const std::vector<double>& values) {
  double m = INFINITY;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (s.count[i] > 0) m = std::min(m, values[i]);
  }
  return m;
}

}  // namespace

Json make_run_record(const Json& settings, const RunKey& key, const DenseReference& dense,
                     const SupportRun& run, int threads) {
  const auto T = static_cast<std::int64_t>(dense.tokens.size());
  Json r;
  r["context"] = key.context;
  r["prefix"] = key.prefix;
  r["support"] = key.support.support;
  r["k"] = key.support.k;
  r["document"] = key.document;
  r["settings"] = settings;
  r["steps"] = T;

  r["exact_match"] = run.first_divergence == T;
  r["first_divergence"] = run.first_divergence;
  r["dense_margin_at_divergence"] =
      run.first_divergence < T
          ? Json(static_cast<double>(dense.margins[static_cast<std::size_t>(run.first_divergence)]))
          : Json(nullptr);
  const double dense_nll = mean(dense.nll);
  const double sparse_nll = mean(run.tf_nll);
  r["ppl_dense"] = std::exp(dense_nll);
  r["ppl_sparse"] = std::exp(sparse_nll);
  // expm1: exactly 0 when the two mean NLLs are equal, accurate when they nearly are.
  r["ppl_change_pct"] = 100.0 * std::expm1(sparse_nll - dense_nll);
  std::int64_t matches = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    matches +=
        run.tf_argmax[static_cast<std::size_t>(t)] == dense.tokens[static_cast<std::size_t>(t)];
  }
  r["tf_matches"] = matches;
  r["tf_match_pct"] = 100.0 * static_cast<double>(matches) / static_cast<double>(T);

  if (run.heads) {
    const HeadStatistics& s = *run.heads;
    r["retained_mass_mean"] = s.mean_of(s.mass_sum);
    r["retained_mass_min"] = minimum(s, s.mass_min);
    r["error_norm_mean"] = s.mean_of(s.error_sum);
    r["relative_error_mean"] = s.mean_of(s.relative_error_sum);
    r["recall_mean"] = s.mean_of(s.recall_sum);
    r["recall_min"] = minimum(s, s.recall_min);
    r["support_read_mean"] = s.mean_of(s.support_sum);
    r["per_head"] = Json{
        {"over", "decode steps 1..T-1 of the teacher-forced pass; [layers][heads]"},
        {"steps", s.steps},
        {"layers", s.layers},
        {"heads", s.heads},
        {"retained_mass_mean", table(s, s.mass_sum, true)},
        {"retained_mass_min", table(s, s.mass_min, false)},
        {"error_norm_mean", table(s, s.error_sum, true)},
        {"error_norm_max", table(s, s.error_max, false)},
        {"relative_error_mean", table(s, s.relative_error_sum, true)},
        {"recall_mean", table(s, s.recall_sum, true)},
        {"recall_min", table(s, s.recall_min, false)},
        {"support_read_mean", table(s, s.support_sum, true)},
    };
  } else {
    // The dense control reads every position: nothing omitted, nothing selected.
    r["retained_mass_mean"] = 1.0;
    r["retained_mass_min"] = 1.0;
    r["error_norm_mean"] = 0.0;
    r["relative_error_mean"] = 0.0;
    r["recall_mean"] = nullptr;
    r["recall_min"] = nullptr;
    r["support_read_mean"] = nullptr;
    r["per_head"] = nullptr;
  }

  r["dense_tokens"] = dense.tokens;
  r["dense_nll"] = dense.nll;
  r["dense_margins"] = dense.margins;
  r["sparse_tokens"] = run.tokens;
  r["sparse_tf_argmax"] = run.tf_argmax;
  r["sparse_tf_nll"] = run.tf_nll;
  r["threads"] = threads;
  r["seconds"] = Json{{"dense_prefill", dense.prefill_seconds},
                      {"dense_decode", dense.decode_seconds},
                      {"teacher_forced", run.teacher_forced_seconds},
                      {"free_run", run.free_run_seconds}};
  return r;
}

}  // namespace amc::eval

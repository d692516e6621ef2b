// One run's record in runs.jsonl: every setting, the dense reference, the sparse run and the
// metrics of docs/reproduce.md section 4 computed from them.
#pragma once

#include <cstdint>
#include <string>

#include "paired_run.hpp"
#include "run_log.hpp"
#include "support_sizes.hpp"

namespace amc::eval {

/// Where a run sits in the sweep.
struct RunKey {
  std::int64_t context = 0;
  std::int64_t prefix = 0;  ///< index among the documents long enough for the context
  std::string document;     ///< the document the prefix was cut from
  SupportSize support;
};

/// The record. Metrics (keys as written):
/// - exact_match: the sparse greedy continuation equals the dense one through all T tokens;
///   first_divergence: the first step whose tokens differ, T when none (step 0 is the
///   prefill's token, shared, so it is at least 1); dense_margin_at_divergence: the dense top
///   logit's lead there (null when none).
/// - ppl_dense, ppl_sparse: exp of the mean NLL of the dense continuation's T tokens under the
///   dense model and, teacher-forced, under the sparse one; ppl_change_pct = 100 (ppl_sparse /
///   ppl_dense - 1); tf_match_pct: share of the T steps whose sparse argmax is the dense token.
/// - retained_mass_mean / _min, error_norm_mean, relative_error_mean, recall_mean / _min: over
///   the T - 1 teacher-forced decode steps, every layer and query head; per_head holds them per
///   layer and head (mean and min or max over steps).
Json make_run_record(const Json& settings, const RunKey& key, const DenseReference& dense,
                     const SupportRun& run, int threads);

}  // namespace amc::eval

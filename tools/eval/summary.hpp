// The study's table from runs.jsonl: summary.csv (machine-readable, fixed columns) and
// summary.md (the same numbers as a paper's result table, with what they mean).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "run_log.hpp"

namespace amc::eval {

/// One (context, support) row, over every recorded run of that pair.
struct SummaryRow {
  std::int64_t context = 0;
  std::int64_t support = 0;
  std::int64_t k = 0;
  std::int64_t runs = 0;
  std::int64_t exact_match_runs = 0;
  double median_first_divergence = 0.0;
  double median_ppl_change_pct = 0.0;
  double min_ppl_change_pct = 0.0;
  double max_ppl_change_pct = 0.0;
  double median_tf_match_pct = 0.0;
  double median_retained_mass = 0.0;  ///< median over runs of retained_mass_mean
  /// Mean over runs of support_read_mean; nullopt for the dense control.
  std::optional<double> mean_support_read;
};

/// The median; of an even count, the mean of the two middle values. Requires a non-empty input.
double median(std::vector<double> values);

/// Rows sorted by context, then support.
std::vector<SummaryRow> summarize(const std::vector<Json>& records);

/// The header line is exactly
/// context,support,k,runs,exact_match_runs,median_first_divergence,median_ppl_change_pct,
/// min_ppl_change_pct,max_ppl_change_pct,median_tf_match_pct,median_retained_mass
std::string summary_csv(const std::vector<SummaryRow>& rows);

/// What summary.md says besides the table.
struct SummaryNotes {
  Json settings;
  std::vector<std::string> prefixes;  ///< one line per context: prefixes used and skipped
  std::string plots;                  ///< which plots were drawn, or why none
  /// For one shard of a sharded sweep (shard.hpp): what part of the sweep the table covers.
  /// Empty for a whole sweep, whose summary.md says nothing of shards.
  std::string shard;
};

std::string summary_markdown(const std::vector<SummaryRow>& rows, const std::vector<Json>& records,
                             const SummaryNotes& notes);

}  // namespace amc::eval

// The retrieval probe of amc-eval: one needle key at a controlled depth among Gaussian
// distractor keys, and the question whether a rule's support (sinks U window U top-k
// blocks) contains it. On these keys it shows the mean-pooling dilution of docs/theory.md section
// 6: a needle lifts its block's mean score by only (s_needle - s_rest) / B, so the mean-pooled
// rule loses it as blocks grow, while the oracle (top-k blocks by true mass) keeps it.
//
// Selection is amc's own: BlockSummaries, BlockSparseDecode with the built-in rules (mean,
// bound, oracle), Support::contains. The probe only makes the keys and counts.
//
// Shapes, outermost first: keys [context, head_dim], query [head_dim]. The files it writes:
// retrieval_report.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "amc/attention/sparse_config.hpp"

namespace amc::eval {

/// What to measure. Every cell (rule, context, block size, k, depth) runs `trials` needles.
/// validate() refuses bad values with amc::error naming the command-line flag and the value.
struct RetrievalProbeOptions {
  std::int64_t head_dim = 64;                            ///< --head-dim
  std::vector<std::int64_t> contexts{2048, 8192};        ///< --contexts: positions per head
  std::vector<std::int64_t> block_sizes{8, 16, 32, 64};  ///< --block-sizes
  std::vector<std::int64_t> ks{2, 8, 20};                ///< --ks: blocks selected
  /// --depths: the needle sits at position floor(depth * context), 0 = oldest position.
  std::vector<double> depths{0.1, 0.3, 0.5, 0.7, 0.9};
  std::int64_t trials = 64;  ///< --trials: needles (fresh keys and query) per cell
  /// --strength: the needle's score exceeds the largest distractor score by this much, in
  /// units of the scaled score s = q.k / sqrt(d) (distractor scores are N(0, 1)).
  double strength = 6.0;
  std::uint64_t seed = 1;    ///< --seed
  std::int64_t sinks = 1;    ///< --sinks: first positions always kept
  std::int64_t window = 64;  ///< --window: last positions always kept
  /// The rules' own settings (--shortlist, --shortlist-rule, --sub-blocks, ...: every
  /// registered rule's, RuleInfo::settings; unset: the rules' defaults).
  RuleSettings rule_settings;
  /// --rules: mean (the method), bound (channel bound, Quest-style), oracle (true mass).
  std::vector<RuleName> rules{RuleName::mean_pooled, RuleName::channel_bound, RuleName::oracle};

  /// Throws amc::error "retrieval: --flag: ..." for the first bad option. Refuses depths that
  /// put the needle in the sinks or the window, where every rule would "find" it.
  void validate() const;
};

/// One cell: a rule's record on `trials` needles at one (context, block size, k, depth).
struct RetrievalProbeResult {
  RuleName rule = RuleName::mean_pooled;
  std::int64_t block_size = 0;
  std::int64_t k = 0;
  std::int64_t context = 0;
  double depth = 0.0;
  std::int64_t needle_position = 0;
  std::int64_t trials = 0;
  std::int64_t hits = 0;  ///< needles inside the support
  double hit_rate = 0.0;  ///< hits / trials
  /// Mean rank of the needle's block among the candidate blocks by the rule's score
  /// (1 = first; the needle is retrieved iff rank <= k).
  double mean_rank = 0.0;
  /// Blocks that may be selected: those with a position outside the sinks and the window.
  std::int64_t candidate_blocks = 0;
  /// k / candidate blocks (capped at 1): the hit rate of k blocks picked at random.
  double chance = 0.0;
  /// Mean of (s_needle - s_rest) / |b| over trials: what the needle adds to its block's mean
  /// score over the block's other positions (docs/theory.md section 6).
  double needle_lift = 0.0;
  double mean_support = 0.0;        ///< mean positions read
  double mean_retained_mass = 0.0;  ///< mean softmax mass of the support, exp(L_S - L_all)
  // Settings echoed into every row, so a CSV row stands on its own.
  double strength = 0.0;
  std::int64_t head_dim = 0;
  std::int64_t sinks = 0;
  std::int64_t window = 0;
  std::uint64_t seed = 0;
  /// [trials]: 1 where trial t's needle was in the support (for checks; not written out).
  std::vector<std::uint8_t> trial_hits;
};

/// Runs every cell. Cells are ordered by rule (as in options.rules), context, block
/// size, k, depth, each list sorted ascending. Within a (context, trial) all depths, block
/// sizes, ks and rules see the same distractors and query (paired comparison), so
/// differences between cells are not sampling noise between key sets.
std::vector<RetrievalProbeResult> run_retrieval_probe(const RetrievalProbeOptions& options);

// --- the synthetic keys (exposed so tests can check the probe against plain loops) ---------

/// One trial's KV head before the needle: distractor keys N(0, 1) per channel, and a query
/// of norm sqrt(head_dim), so that a distractor's score q.k / sqrt(d) = <q/|q|, k> is N(0, 1).
struct RetrievalHaystack {
  std::int64_t context = 0;
  std::int64_t head_dim = 0;
  std::vector<float> keys;   ///< [context, head_dim]
  std::vector<float> query;  ///< [head_dim]
};

/// The haystack of (context, trial): seeded by (options.seed, context, trial) only, so a cell's
/// keys do not depend on the other cells requested.
RetrievalHaystack make_haystack(const RetrievalProbeOptions& options, std::int64_t context,
                                std::int64_t trial);

/// floor(depth * context), at most context - 1.
std::int64_t needle_position(std::int64_t context, double depth);

/// Makes key `position` the needle: its component along the query becomes
/// max_{j != position} s_j + strength (its other components are the distractor's), so its
/// score exceeds every other position's by `strength`. Returns the needle's score (double).
double place_needle(RetrievalHaystack& haystack, std::int64_t position, double strength);

}  // namespace amc::eval

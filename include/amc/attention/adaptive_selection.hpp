// Adaptive selection (docs/theory.md section 4): blocks are added best
// first until the certified omitted-mass bound of the support meets a target. BlockSparseDecode
// runs it when SparseConfig::target_eps is set; adaptive_select() is the per-head step.
//
// The bound is certified (docs/theory.md, "Certification under rounding"): the support's
// log-sum-exp is computed in double from the stored keys with its rounding bounded, and each
// omitted block contributes |omitted positions| exp(ub_b) with ub_b = c sum_i max(q_i kmin_i,
// q_i kmax_i) rounded up. Reads the summaries and the keys of the support it builds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "amc/attention/block_summaries.hpp"
#include "amc/attention/selection_input.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/attention/support.hpp"
#include "amc/certified_arithmetic.hpp"
#include "amc/error.hpp"
#include "amc/kv_view.hpp"

namespace amc {

/// ub_b = c sum_i max(q_i kmin_{b,i}, q_i kmax_{b,i}) in double, rounded up: >= the exact score
/// c <q, k_j> of every position j of block b.
/// \param query [head_dim], unscaled
inline double block_score_upper_bound(std::span<const float> query, double scale,
                                      const BlockSummaries& summaries, std::int64_t block) {
  const auto d = static_cast<std::size_t>(summaries.head_dim());
  const auto lo = summaries.channel_min();
  const auto hi = summaries.channel_max();
  const certified::Bounded ub =
      certified::score_upper_bound(query, scale, std::span<const float>(lo.row(block).data(), d),
                                   std::span<const float>(hi.row(block).data(), d));
  return ub.value + ub.error;
}

namespace detail {

inline void check_certified_inputs(const char* where, std::span<const float> query, double scale,
                                   const BlockSummaries& summaries) {
  AMC_CHECK(summaries.options().channel_bounds && summaries.options().value_norms, where,
            "summaries must be built with channel_bounds and value_norms (have channel_bounds=",
            summaries.options().channel_bounds, ", value_norms=", summaries.options().value_norms,
            ")");
  AMC_CHECK(query.size() == static_cast<std::size_t>(summaries.head_dim()), where, "query has ",
            query.size(), " elements, summaries have head_dim ", summaries.head_dim());
  AMC_CHECK(scale > 0.0 && std::isfinite(scale), where, "scale must be positive and finite, got ",
            scale);
}

template <KvViewLike View>
void check_view_matches(const char* where, const View& kv, const BlockSummaries& summaries) {
  AMC_CHECK(summaries.positions() == kv.positions() && summaries.head_dim() == kv.head_dim(), where,
            "summaries [", summaries.positions(), " positions, head_dim ", summaries.head_dim(),
            "] do not match the KV view [", kv.positions(), ", ", kv.head_dim(), "]");
}

}  // namespace detail

/// Result of adaptive selection for one query head.
struct AdaptiveSelection {
  std::vector<std::int64_t> blocks;  ///< selected blocks, increasing
  Support support;                   ///< sinks U window U blocks
  std::int64_t needed_k = 0;         ///< blocks added (== blocks.size())
  double omitted_mass_bound = 1.0;   ///< certified bound at the final support (as certified_bounds)
  /// <= L_S over the final support (recomputed in double, rounding subtracted).
  double lse_support_lower = -std::numeric_limits<double>::infinity();
  bool target_met = false;  ///< bound <= target (false: stopped at max_k or out of blocks)
};

/// Grows the support best-first (by `block_ranking`, higher first, ties to the lower index)
/// from sinks U window until the certified omitted-mass bound is <= `target` or `max_k` blocks
/// were added. Reads only the keys of the support it builds, plus the summaries; the bound at
/// every size is certified_bounds()'s (same recomputation in double, same outward rounding),
/// so target_met guarantees the exact omitted mass is <= target.
/// \param query         [head_dim], unscaled
/// \param kv            the KV head; summaries must cover all its positions
/// \param config        block_size, sinks and window (top_k is ignored: max_k caps instead)
/// \param block_ranking [blocks] score per block, e.g. a rule's scores
template <KvViewLike View>
AdaptiveSelection adaptive_select(std::span<const float> query, double scale, const View& kv,
                                  const BlockSummaries& summaries, const SparseConfig& config,
                                  std::span<const float> block_ranking, double target,
                                  std::int64_t max_k) {
  constexpr const char* where = "amc::adaptive_select";
  config.validate();
  detail::check_certified_inputs(where, query, scale, summaries);
  detail::check_view_matches(where, kv, summaries);
  AMC_CHECK(summaries.block_size() == config.block_size, where, "summaries have block_size ",
            summaries.block_size(), " but config.block_size is ", config.block_size);
  AMC_CHECK(block_ranking.size() == static_cast<std::size_t>(summaries.blocks()), where,
            "block_ranking has ", block_ranking.size(), " entries, expected one per block (",
            summaries.blocks(), ")");
  AMC_CHECK(target >= 0.0 && target <= 1.0, where, "target must be in [0, 1], got ", target);
  AMC_CHECK(max_k >= 0, where, "max_k must be >= 0, got ", max_k);

  const CandidateBlocks candidates = candidate_blocks(kv.positions(), config);
  std::vector<std::int64_t> order;
  for (std::int64_t b = candidates.first; b < candidates.last; ++b) order.push_back(b);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    auto key = [&](std::int64_t x) {
      const float s = block_ranking[static_cast<std::size_t>(x)];
      return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
    };
    return key(a) > key(b);  // stable: ties keep increasing block index
  });

  // Term of each candidate in log U: log(positions outside the always-kept parts) + ub_b.
  // log_u[r] >= log U once order[0..r) are selected (an upper bound, rounding included).
  auto new_range = [&](std::int64_t b) {
    return PositionRange{std::max(b * config.block_size, candidates.kept_prefix),
                         std::min((b + 1) * config.block_size, candidates.kept_suffix_begin)};
  };
  std::vector<double> log_u(order.size() + 1, -std::numeric_limits<double>::infinity());
  certified::LogSumExp suffix;
  for (std::size_t r = order.size(); r-- > 0;) {
    const double log_count = std::log(static_cast<double>(new_range(order[r]).size()));
    suffix.add(log_count + block_score_upper_bound(query, scale, summaries, order[r]),
               4.0 * certified::kUnitRoundoff * (log_count + 1.0));
    log_u[r] = suffix.upper();
  }

  // L_S over the growing support, in double with its rounding bounded.
  certified::LogSumExp lse;
  auto absorb = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      const certified::Bounded s = certified::score(query, scale, kv.key(p));
      lse.add(s.value, s.error);
    }
  };
  absorb(0, candidates.kept_prefix);
  absorb(std::max(candidates.kept_suffix_begin, candidates.kept_prefix), kv.positions());

  AdaptiveSelection out;
  const auto limit = static_cast<std::size_t>(std::min<std::int64_t>(max_k, candidates.count()));
  std::size_t k = 0;
  for (;; ++k) {
    const double log_bound = certified::log_omitted_mass_upper(lse.lower(), log_u[k]);
    // A bound for a support also bounds every larger one, so the running minimum is certified
    // too; it makes the bound non-increasing in k even where the rounding allowance of a
    // larger sum grows faster than a tiny added term raises L_S.
    const double bound = certified::mass_from_log_upper(log_bound, k < order.size());
    out.omitted_mass_bound = k == 0 || std::isnan(bound) || std::isnan(out.omitted_mass_bound)
                                 ? bound
                                 : std::min(out.omitted_mass_bound, bound);
    if (out.omitted_mass_bound <= target || k == limit) break;
    const PositionRange added = new_range(order[k]);
    absorb(added.begin, added.end);
  }
  out.target_met = out.omitted_mass_bound <= target;
  out.blocks.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  std::sort(out.blocks.begin(), out.blocks.end());
  out.needed_k = static_cast<std::int64_t>(k);
  out.lse_support_lower = lse.lower();
  build_support(kv.positions(), config, out.blocks, out.support);
  return out;
}

}  // namespace amc

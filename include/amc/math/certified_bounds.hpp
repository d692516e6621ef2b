// Certified bounds on a sparse step's omitted mass and output error from block summaries alone
// (THEORY.md section 5), and adaptive selection that grows the support until the bound meets a
// target.
//
// Per block b the summaries hold the channel-wise min and max key and the largest value norm.
// For any query q, ub_b = c sum_i max(q_i kmin_{b,i}, q_i kmax_{b,i}) >= max_{j in b} s_j, so
// the unnormalised mass outside the support S is at most U = sum_b |b \ S| exp(ub_b), and since
// eps = Z_O / (Z_S + Z_O) grows with Z_O,
//     eps <= U / (Z_S + U)                        (Z_S = exp(L_S), in log space here)
//     ||o - o_S|| <= eps_bound (max_{b with omitted positions} vmax_b + ||o_S||).
// Neither reads an omitted key or value. How tight they are on real attention is a measurement,
// not an assumption: they are loose whenever a block's channel ranges are wide.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "amc/attention/block_summaries.hpp"
#include "amc/attention/selectors.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/attention/support.hpp"
#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/kv_view.hpp"
#include "amc/math/omitted_mass.hpp"

namespace amc {

/// What the summaries certify about one sparse step of one query head.
struct CertifiedBounds {
  double log_omitted_mass_upper = -std::numeric_limits<double>::infinity();  ///< log U
  double omitted_mass_bound = 0.0;  ///< U / (Z_S + U) >= eps; 0 when nothing is omitted
  double error_bound = 0.0;         ///< omitted_mass_bound * (max vmax + ||o_S||) >= ||o - o_S||
  std::int64_t omitted_positions = 0;
};

/// ub_b = c sum_i max(q_i kmin_{b,i}, q_i kmax_{b,i}), in double (no f32 rounding of the bound).
/// \param query [head_dim], unscaled
inline double block_score_upper_bound(std::span<const float> query, double scale,
                                      const BlockSummaries& summaries, std::int64_t block) {
  const auto lo = summaries.channel_min();
  const auto hi = summaries.channel_max();
  double sum = 0.0;
  for (std::int64_t i = 0; i < summaries.head_dim(); ++i) {
    const double q = query[static_cast<std::size_t>(i)];
    sum += std::max(q * lo(block, i), q * hi(block, i));
  }
  return scale * sum;
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

/// eps_bound from log U and L_S. L_S comes from an f32 operator, so it is lowered by its
/// rounding allowance (lse_slack) first: the bound must hold for the exact L_S.
inline double omitted_mass_bound_from_logs(double log_u, double lse_support) {
  // NaN in (a bound on a NaN key) or NaN out: nothing is certified over NaN scores.
  if (std::isnan(log_u) || std::isnan(lse_support)) return std::numeric_limits<double>::quiet_NaN();
  if (log_u == -std::numeric_limits<double>::infinity()) return 0.0;
  if (lse_support == -std::numeric_limits<double>::infinity()) return 1.0;
  const double lse_low = lse_support - lse_slack(lse_support);
  return 1.0 / (1.0 + std::exp(lse_low - log_u));  // U / (Z_S + U), overflow-free
}

/// Positions of [lo, hi) outside the (normalized) support.
inline std::int64_t positions_outside(const Support& support, std::int64_t lo, std::int64_t hi) {
  std::int64_t inside = 0;
  for (const PositionRange& r : support.ranges()) {
    inside += std::max<std::int64_t>(0, std::min(hi, r.end) - std::max(lo, r.begin));
  }
  return (hi - lo) - inside;
}

}  // namespace detail

/// Certified bounds for one query head whose sparse step read `support`.
/// \param query       [head_dim], unscaled (the bound is computed for scores c <q, k>)
/// \param scale       attention scale c
/// \param summaries   built with channel_bounds and value_norms, covering the whole cache
/// \param support     the positions the sparse step read (normalized)
/// \param lse_support HeadResult::lse of that step (-inf if it read nothing)
/// \param sparse_out  [head_dim] the sparse step's output o_S
inline CertifiedBounds certified_bounds(std::span<const float> query, double scale,
                                        const BlockSummaries& summaries, const Support& support,
                                        double lse_support, std::span<const float> sparse_out) {
  constexpr const char* where = "amc::certified_bounds";
  detail::check_certified_inputs(where, query, scale, summaries);
  AMC_CHECK(sparse_out.size() == query.size(), where, "sparse_out has ", sparse_out.size(),
            " elements, expected head_dim ", query.size());
  AMC_CHECK(support.end() <= summaries.positions(), where, "support reaches position ",
            support.end() - 1, " beyond the ", summaries.positions(), " summarised positions");
  AMC_CHECK(!std::isnan(lse_support) && lse_support < std::numeric_limits<double>::infinity(),
            where, "lse_support must be finite or -inf, got ", lse_support);
  CertifiedBounds out;
  double max_value_norm = 0.0;
  const auto value_norms = summaries.value_norm_max();
  for (std::int64_t b = 0; b < summaries.blocks(); ++b) {
    const std::int64_t omitted =
        detail::positions_outside(support, summaries.block_begin(b), summaries.block_end(b));
    if (omitted == 0) continue;
    out.omitted_positions += omitted;
    out.log_omitted_mass_upper = detail::log_add_exp(
        out.log_omitted_mass_upper, std::log(static_cast<double>(omitted)) +
                                        block_score_upper_bound(query, scale, summaries, b));
    // NaN-propagating max (std::max would drop a NaN norm, i.e. a NaN value left out).
    const double norm = value_norms[static_cast<std::size_t>(b)];
    if (!std::isnan(max_value_norm) && !(norm <= max_value_norm)) max_value_norm = norm;
  }
  out.omitted_mass_bound =
      detail::omitted_mass_bound_from_logs(out.log_omitted_mass_upper, lse_support);
  double sparse_norm = 0.0;
  for (const float x : sparse_out) sparse_norm += static_cast<double>(x) * x;
  out.error_bound = out.omitted_mass_bound * (max_value_norm + std::sqrt(sparse_norm));
  return out;
}

/// Result of adaptive selection for one query head.
struct AdaptiveSelection {
  std::vector<std::int64_t> blocks;  ///< selected blocks, increasing
  Support support;                   ///< sinks U window U blocks
  std::int64_t needed_k = 0;         ///< blocks added (== blocks.size())
  double omitted_mass_bound = 1.0;   ///< certified bound at the final support
  double lse_support = -std::numeric_limits<double>::infinity();  ///< over the final support
  bool target_met = false;  ///< bound <= target (false: stopped at max_k or out of blocks)
};

/// Grows the support best-first (by `block_ranking`, higher first, ties to the lower index)
/// from sinks U window until the certified omitted-mass bound is <= `target` or `max_k` blocks
/// were added. Reads only the keys of the support it builds, plus the summaries.
/// \param query         [head_dim], unscaled
/// \param kv            the KV head; summaries must cover all its positions
/// \param config        block_size, sinks and window (top_k is ignored: max_k caps instead)
/// \param block_ranking [blocks] score per block, e.g. a selector's scores
template <KvViewLike View>
AdaptiveSelection adaptive_select(std::span<const float> query, double scale, const View& kv,
                                  const BlockSummaries& summaries, const SparseConfig& config,
                                  std::span<const float> block_ranking, double target,
                                  std::int64_t max_k) {
  using T = typename View::value_type;
  constexpr const char* where = "amc::adaptive_select";
  config.validate();
  detail::check_certified_inputs(where, query, scale, summaries);
  AMC_CHECK(summaries.positions() == kv.positions() && summaries.head_dim() == kv.head_dim(), where,
            "summaries [", summaries.positions(), " positions, head_dim ", summaries.head_dim(),
            "] do not match the KV view [", kv.positions(), ", ", kv.head_dim(), "]");
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
  // suffix[r] = log sum of the terms of order[r..]: log U once order[0..r) are selected.
  auto new_range = [&](std::int64_t b) {
    return PositionRange{std::max(b * config.block_size, candidates.kept_prefix),
                         std::min((b + 1) * config.block_size, candidates.kept_suffix_begin)};
  };
  std::vector<double> suffix(order.size() + 1, -std::numeric_limits<double>::infinity());
  for (std::size_t r = order.size(); r-- > 0;) {
    const double term = std::log(static_cast<double>(new_range(order[r]).size())) +
                        block_score_upper_bound(query, scale, summaries, order[r]);
    suffix[r] = detail::log_add_exp(suffix[r + 1], term);
  }

  // L_S over a growing support, from scores computed by the kernels in f32, summed in f64.
  std::vector<float> scaled(query.begin(), query.end());
  for (float& x : scaled) x = static_cast<float>(x * scale);
  const auto& table = kernels::active();
  std::vector<float> scores;
  double lse = -std::numeric_limits<double>::infinity();
  auto absorb = [&](std::int64_t begin, std::int64_t end) {
    if (begin >= end) return;
    scores.resize(static_cast<std::size_t>(end - begin));
    kv.for_each_run(begin, end,
                    [&](const T* keys, const T*, std::int64_t first, std::int64_t rows) {
                      table.score_rows[kernels::index_of(storage_type_of<T>)](
                          scaled.data(), 1, kv.head_dim(), keys, kv.key_stride(), rows,
                          scores.data() + (first - begin), 0);
                    });
    for (const float s : scores) lse = detail::log_add_exp(lse, s);
  };
  absorb(0, candidates.kept_prefix);
  absorb(std::max(candidates.kept_suffix_begin, candidates.kept_prefix), kv.positions());

  AdaptiveSelection out;
  const auto limit = static_cast<std::size_t>(std::min<std::int64_t>(max_k, candidates.count()));
  std::size_t k = 0;
  for (;; ++k) {
    out.omitted_mass_bound = detail::omitted_mass_bound_from_logs(suffix[k], lse);
    if (out.omitted_mass_bound <= target || k == limit) break;
    const PositionRange added = new_range(order[k]);
    absorb(added.begin, added.end);
  }
  out.target_met = out.omitted_mass_bound <= target;
  out.blocks.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  std::sort(out.blocks.begin(), out.blocks.end());
  out.needed_k = static_cast<std::int64_t>(k);
  out.lse_support = lse;
  build_support(kv.positions(), config, out.blocks, out.support);
  return out;
}

}  // namespace amc

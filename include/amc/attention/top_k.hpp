// Turning block scores into a selection: the k best blocks (select_top_k), or the fewest best
// blocks that hold a share p of the estimated mass (select_top_p, the adaptive budget); and the
// heads' scores of a GQA group combined into one ranking (combine_group_scores).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "amc/attention/selection_input.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/kernels/kernel_table.hpp"

namespace amc {

namespace detail {

/// A score that at least k of the `count` scores at `row` reach, so that the k best all do: the
/// k-th largest of the maxima of disjoint groups (group j: j, j + groups, ...; a vertical max,
/// so it vectorises), NaN as -inf. With `groups` a few times k, few scores besides the k best
/// reach it. Needs k <= groups <= count.
inline float top_k_floor(const float* row, std::int64_t count, std::int64_t k, std::int64_t groups,
                         std::vector<float>& maxima) {
  maxima.assign(static_cast<std::size_t>(groups), -std::numeric_limits<float>::infinity());
  float* m = maxima.data();
  std::int64_t r = 0;
  for (; r + groups <= count; r += groups) {
    for (std::int64_t j = 0; j < groups; ++j) m[j] = row[r + j] > m[j] ? row[r + j] : m[j];
  }
  for (std::int64_t j = 0; r + j < count; ++j) m[j] = row[r + j] > m[j] ? row[r + j] : m[j];
  std::nth_element(maxima.begin(), maxima.begin() + (k - 1), maxima.end(), std::greater<>());
  return maxima[static_cast<std::size_t>(k - 1)];
}

}  // namespace detail

/// select_top_k first bounds the k-th best score from below (detail::top_k_floor) and ranks only
/// the scores that reach it, from this many candidates and 8 per block kept on. Measured at 4096
/// candidates (128K positions in blocks of 32), where a heap over every candidate took longer in
/// unpredictable sift steps than the bound's two vector passes; not at fewer, so it starts where
/// the combination's listing does (kListedFrom).
inline constexpr std::int64_t kTopKFloorFrom = 1024;

/// Picks the `k` best candidate blocks by score, ties broken by the lower block index; NaN scores
/// rank last. Writes the chosen block indices to `selected` in increasing order.
///
/// One pass with a k-element heap whose top is the worst block kept so far: with k much smaller
/// than the number of blocks almost every candidate is rejected by a single comparison, which is
/// what makes selection cheap next to the attention it saves at long contexts. Over many
/// candidates (kTopKFloorFrom) the pass runs over the few that reach a lower bound on the k-th
/// best score. The result is the same either way: the k best under a strict total order.
inline void select_top_k(std::span<const float> scores, const CandidateBlocks& candidates,
                         std::int64_t k, std::vector<std::int64_t>& selected) {
  selected.clear();
  if (k >= candidates.count()) {
    for (std::int64_t b = candidates.first; b < candidates.last; ++b) selected.push_back(b);
    return;
  }
  if (k <= 0) return;
  auto key = [&](std::int64_t b) {
    const float s = scores[static_cast<std::size_t>(b)];
    return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
  };
  // "a ranks before b": higher score, or equal score and lower index. A strict total order.
  auto before = [&](std::int64_t a, std::int64_t b) {
    const float ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  };
  // With `before` as the heap's less-than, the heap top is the block that ranks last. Blocks
  // come in increasing index order, so a later block with the same score as the worst kept one
  // ranks after it: only a strictly higher score gets in. b replaces the top (the worst kept
  // block), sifted down to restore the heap: one pass where pop_heap plus push_heap take two.
  auto replace_worst = [&](std::int64_t b) {
    std::size_t hole = 0;
    for (;;) {
      std::size_t child = 2 * hole + 1;
      if (child >= selected.size()) break;
      if (child + 1 < selected.size() && before(selected[child], selected[child + 1])) ++child;
      if (!before(b, selected[child])) break;  // b ranks after its later-ranked child
      selected[hole] = selected[child];
      hole = child;
    }
    selected[hole] = b;
  };
  const auto& table = kernels::active();
  const std::int64_t count = candidates.count();
  if (count >= kTopKFloorFrom && count >= 8 * k) {
    // Rank only the candidates above a threshold. Whatever the threshold, when every candidate
    // above it is listed and there are at least k, the k best are among them; the lower bound
    // on the k-th best score (just below it, so that ties with it are listed too) makes that
    // the usual case, and few more are listed. Otherwise, the plain pass below.
    thread_local std::vector<float> maxima;
    thread_local std::vector<std::int64_t> reaching;
    const float* row = scores.data() + candidates.first;
    const float floor = detail::top_k_floor(row, count, k, std::max(4 * k, count / 16), maxima);
    const float below = std::nextafter(floor, -std::numeric_limits<float>::infinity());
    const std::int64_t capacity = 8 * k;  // more only with many ties at the floor
    reaching.resize(static_cast<std::size_t>(capacity));
    const std::int64_t found = table.list_above(row, count, below, reaching.data(), capacity);
    if (found >= k && found <= capacity) {
      for (std::int64_t i = 0; i < k; ++i) selected.push_back(candidates.first + reaching[i]);
      std::make_heap(selected.begin(), selected.end(), before);
      for (std::int64_t i = k; i < found; ++i) {
        const std::int64_t b = candidates.first + reaching[static_cast<std::size_t>(i)];
        if (before(b, selected.front())) replace_worst(b);
      }
      std::sort(selected.begin(), selected.end());
      return;
    }
  }
  for (std::int64_t b = candidates.first; b < candidates.first + k; ++b) selected.push_back(b);
  std::make_heap(selected.begin(), selected.end(), before);
  float worst = key(selected.front());
  // The scan for the next block that beats the worst kept one is a vector compare
  // (first_above); NaN never beats it, matching key(NaN) = -inf.
  for (std::int64_t b = candidates.first + k; b < candidates.last; ++b) {
    b += table.first_above(scores.data() + b, candidates.last - b, worst);
    if (b == candidates.last) break;
    replace_worst(b);
    worst = key(selected.front());
  }
  std::sort(selected.begin(), selected.end());
}

/// What block scores are: logs of (unnormalised) block masses, as every rule writes them, or
/// the masses themselves, as per-group combination writes them (sums of per-head softmaxes).
enum class MassScale : std::uint8_t { log, linear };

/// Top-p selection: of the best `cap` candidate blocks (select_top_k), the fewest, best first,
/// whose share of the estimated mass of all candidates reaches `p`. The estimated mass of block
/// b is exp(scores[b]) (MassScale::log) or scores[b] (MassScale::linear); NaN counts as none.
/// Writes the chosen block indices to `selected` in increasing order. When no candidate has
/// any estimated mass (all scores -inf or NaN), there is no share to reach: the `cap` best are
/// kept, as top-k would.
inline void select_top_p(std::span<const float> scores, const CandidateBlocks& candidates, double p,
                         std::int64_t cap, MassScale scale, std::vector<std::int64_t>& selected) {
  select_top_k(scores, candidates, cap, selected);
  if (selected.empty()) return;
  // mass(b) relative to the largest score, so that exp never overflows.
  const float* row = scores.data() + candidates.first;
  const std::int64_t count = candidates.count();
  double shift = 0.0;
  if (scale == MassScale::log) {
    shift = -std::numeric_limits<double>::infinity();
    for (std::int64_t b = 0; b < count; ++b) {
      if (row[b] == row[b]) shift = std::max(shift, static_cast<double>(row[b]));
    }
    if (!std::isfinite(shift)) return;  // no estimated mass (or +inf: no finite share)
  }
  auto mass = [&](std::int64_t b) {
    const double s = scores[static_cast<std::size_t>(b)];
    if (s != s) return 0.0;
    return scale == MassScale::log ? std::exp(s - shift) : std::max(s, 0.0);
  };
  double total = 0.0;
  for (std::int64_t b = candidates.first; b < candidates.last; ++b) total += mass(b);
  if (!(total > 0.0) || !std::isfinite(total)) return;
  // Best first (higher mass, then lower index: select_top_k's order), until the share is met;
  // each kept block's mass computed once.
  thread_local std::vector<std::pair<double, std::int64_t>> ranked;
  ranked.clear();
  for (const std::int64_t b : selected) ranked.emplace_back(mass(b), b);
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  double kept = 0.0;
  std::size_t needed = 0;
  while (needed < ranked.size() && kept < p * total) kept += ranked[needed++].first;
  for (std::size_t i = 0; i < needed; ++i) selected[i] = ranked[i].second;
  selected.resize(needed);
  std::sort(selected.begin(), selected.end());
}

/// Scratch of combine_group_scores, kept by its caller across steps.
struct CombineScratch {
  std::vector<float> weights;        // [candidate blocks]: one head's softmax
  std::vector<std::int64_t> listed;  // candidate offsets whose score is above -inf
};

/// combine_group_scores lists rows of at least this many candidate blocks (32K positions in
/// blocks of 32); shorter rows are exponentiated whole. Measured at 4096 candidates (the listing
/// pays) and 512, where listing every row made the cold mean step 3.3 us slower though it lists
/// none (records/rules-cost-listed-2026-12-06/gate-16384/); 1024 lies between.
inline constexpr std::int64_t kListedFrom = 1024;

/// Per-group combination: each row of `head_scores` ([heads, blocks]) becomes a softmax over the
/// candidate blocks; `combined[b]` is their sum or max over heads. NaN scores count as -inf.
/// Scores of non-candidate blocks are left untouched.
///
/// A row that scores only a few blocks above -inf (a two-stage rule's second stage: its
/// shortlist) is exponentiated at those blocks only (KernelTable::exp_sum_listed), with the
/// same bits as the whole row: the others' exps are exact zeros. That saves one exp per
/// candidate block and head, the bulk of a combination at long contexts.
inline void combine_group_scores(std::span<const float> head_scores, std::int64_t heads,
                                 std::int64_t blocks, const CandidateBlocks& candidates,
                                 GroupCombine combine, std::span<float> combined,
                                 CombineScratch& scratch) {
  const auto& table = kernels::active();
  const std::int64_t count = candidates.count();
  // Listing pays while the listed exps (gathered into vectors) are a small part of the row's;
  // a row above -inf throughout stops being listed after this many. Short rows: kListedFrom.
  const bool listing = count >= kListedFrom;
  const std::int64_t most_listed = listing ? count / 16 : 0;
  float* out = combined.data() + candidates.first;
  std::fill(out, out + count, 0.0f);
  scratch.weights.resize(static_cast<std::size_t>(count));
  scratch.listed.resize(static_cast<std::size_t>(most_listed));
  float* weights = scratch.weights.data();
  std::int64_t* listed = scratch.listed.data();
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for (std::int64_t h = 0; h < heads; ++h) {
    const float* row = head_scores.data() + h * blocks + candidates.first;
    // The blocks above -inf (not NaN), unless there are too many to be worth listing.
    const std::int64_t above =
        listing ? table.list_above(row, count, kMinusInf, listed, most_listed) : 0;
    float max = kMinusInf;
    float sum = 0.0f;
    if (listing && above <= most_listed) {
      std::fill(weights, weights + count, 0.0f);  // exp(-inf - max): the unlisted weights
      for (std::int64_t i = 0; i < above; ++i) {
        weights[listed[i]] = row[listed[i]];
        max = std::max(max, row[listed[i]]);
      }
      if (!std::isfinite(max)) continue;  // this head prefers nothing: it contributes nothing
      sum = table.exp_sum_listed(weights, count, max, listed, above);
    } else {
      for (std::int64_t b = 0; b < count; ++b) {  // branchless, so it vectorises
        weights[b] = row[b] == row[b] ? row[b] : kMinusInf;
      }
      max = table.max(weights, count);
      if (!std::isfinite(max)) continue;
      sum = table.exp_sum(weights, count, max);
    }
    const float inverse_sum = 1.0f / sum;
    if (combine == GroupCombine::sum) {
      table.axpy[kernels::index_of(StorageType::f32)](inverse_sum, weights, out, count);
    } else {
      for (std::int64_t b = 0; b < count; ++b) out[b] = std::max(out[b], weights[b] * inverse_sum);
    }
  }
}

}  // namespace amc

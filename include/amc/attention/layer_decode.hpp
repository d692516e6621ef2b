// All query heads of one attention layer: a decode operator per KV head (GQA group), the groups
// run in parallel on a thread pool (the layer's own, or one the caller shares with its other
// work), optionally beside a dense shadow pass (exact attention over the same keys, for a
// sparse step's retained mass).
//
// Shapes, outermost first: queries and out [query_heads, head_dim]; kv_heads [kv_heads];
// results [query_heads]. Query head h belongs to KV head h / (query_heads / kv_heads), as in
// Qwen2 and every GQA model.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "amc/attention/decode.hpp"
#include "amc/error.hpp"
#include "amc/parallel.hpp"
#include "amc/tensor.hpp"

namespace amc {

/// An operator whose selection LayerDecode can spread over threads: BlockSparseDecode.
template <class Op, class View>
concept SelectsInParts = requires(Op& op, const ConstMatrixRef& queries, const KvHead<View>& head,
                                  MatrixRef out, std::span<HeadResult> results) {
  { op.scores_in_parts() } -> std::same_as<bool>;
  { op.begin_selection(queries, head) } -> std::same_as<std::int64_t>;
  op.score_part(head, std::int64_t{0}, std::int64_t{1});
  op.end_selection(queries, head);
  op.attend_selected(queries, head, out, results);
};

/// Where a dense shadow pass writes: exact attention (DenseDecode, exact_f32, the operator's
/// scale) of the same queries over every position of the same KV heads. Beside a sparse step,
/// exp(results[h].lse - shadow.results[h].lse) is head h's retained mass and out - shadow.out
/// its error, computed in the same parallel section as the sparse pass.
struct DenseShadow {
  MatrixRef out;                  ///< [query_heads, head_dim]
  std::span<HeadResult> results;  ///< [query_heads]
};

/// Parallelism is across KV heads, each group computed exactly as a single-threaded call would
/// compute it, so results are bitwise identical for any thread count. With fewer KV heads than
/// threads, a block-sparse operator's selection, the scoring of every candidate block against
/// the summaries (most of a sparse step at long context), is also split: each group's
/// candidates into up to threads / KV heads parts of at least kMinBlocksPerPart blocks, whose
/// scores do not depend on the split (BlockSparseDecode::score_part). The attention over each
/// support stays one thread per group: splitting it would change the order of its sums.
/// (Qwen2-0.5B has 2 KV heads: 2 threads are used fully without splitting.)
template <class Op>
class LayerDecode {
 public:
  /// \param prototype operator copied once per KV head (each copy owns its scratch)
  /// \param threads   threads to use, the caller included (>= 1), in a pool of the layer's own
  explicit LayerDecode(Op prototype, int threads = 1)
      : prototype_(std::move(prototype)),
        own_pool_(std::make_unique<ThreadPool>(threads)),
        pool_(own_pool_.get()) {}

  /// Runs on `pool`, which the caller also uses for its other parallel work (a model's
  /// projections), so that one set of workers serves the whole step. `pool` must outlive the
  /// layer, and no other parallel section may run on it during decode().
  LayerDecode(Op prototype, ThreadPool& pool) : prototype_(std::move(prototype)), pool_(&pool) {}

  /// Fewest candidate blocks in a part of a split selection: a part then takes several
  /// microseconds (cold, 7 heads at head_dim 64 score a block in 27-45 ns: BM_Select), against
  /// about a microsecond to hand it to a spinning thread.
  static constexpr std::int64_t kMinBlocksPerPart = 256;

  int threads() const { return pool_->threads(); }

  /// The pool the layer runs on. A caller with other parallel work between calls (a model's
  /// projections) can run it here, so that the workers are spinning, not asleep, when the next
  /// call starts (they sleep after about 1 ms without work: parallel.hpp).
  ThreadPool& pool() { return *pool_; }

  /// The operator that ran KV head `kv_head` at the last call (for its supports and scores).
  const Op& group_operator(std::int64_t kv_head) const {
    return operators_[static_cast<std::size_t>(kv_head)];
  }

  /// [kv_heads] the operators of the last call, in KV head order (empty before the first).
  std::span<const Op> group_operators() const { return operators_; }

  /// \param shadow where a dense shadow pass writes, or nullptr for none
  template <KvViewLike View>
  requires DecodeOperator<Op, View>
  void decode(const ConstMatrixRef& queries, std::span<const KvHead<View>> kv_heads, MatrixRef out,
              std::span<HeadResult> results, const DenseShadow* shadow = nullptr) {
    constexpr const char* where = "amc::LayerDecode::decode";
    const auto groups = static_cast<std::int64_t>(kv_heads.size());
    AMC_CHECK(groups > 0, where, "kv_heads is empty");
    AMC_CHECK(queries.rows() % groups == 0, where, "query heads (", queries.rows(),
              ") must be a multiple of KV heads (", groups, ")");
    check_output(queries, out, results, "out", "results");
    if (shadow != nullptr)
      check_output(queries, shadow->out, shadow->results, "shadow.out", "shadow.results");
    while (static_cast<std::int64_t>(operators_.size()) < groups) operators_.push_back(prototype_);
    if (shadow != nullptr) {
      while (static_cast<std::int64_t>(shadows_.size()) < groups) {
        shadows_.push_back(shadow_of(prototype_));
      }
    }
    const std::int64_t per_group = queries.rows() / groups;
    if constexpr (SelectsInParts<Op, View>) {
      if (pool_->threads() >= 2 * groups &&
          decode_in_parts(queries, kv_heads, out, results, shadow, per_group)) {
        return;
      }
    }
    // Tasks [0, groups) run the operators, [groups, 2 groups) the shadow.
    pool_->parallel_for(groups * (shadow != nullptr ? 2 : 1), [&](std::int64_t i) {
      const std::int64_t g = i % groups;
      if (i < groups) {
        run_group(operators_[static_cast<std::size_t>(g)], queries, kv_heads, out, results, g,
                  per_group);
      } else {
        run_shadow(queries, kv_heads, *shadow, g, per_group);
      }
    });
  }

 private:
  static void check_output(const ConstMatrixRef& queries, const MatrixRef& out,
                           std::span<const HeadResult> results, const char* out_name,
                           const char* results_name) {
    constexpr const char* where = "amc::LayerDecode::decode";
    AMC_CHECK(out.rows() == queries.rows() && out.cols() == queries.cols(), where, out_name,
              " is [", out.rows(), ", ", out.cols(), "], expected [", queries.rows(), ", ",
              queries.cols(), "]");
    AMC_CHECK(results.size() == static_cast<std::size_t>(queries.rows()), where, results_name,
              " has ", results.size(), " entries, expected ", queries.rows());
  }

  /// The dense operator of the shadow pass: exact, at the operator's attention scale.
  static DenseDecode shadow_of(const Op& op) {
    if constexpr (requires { op.config().scale; }) {
      return DenseDecode(op.config().scale, AttentionArithmetic::exact_f32);
    } else {
      return DenseDecode({}, AttentionArithmetic::exact_f32);
    }
  }

  /// Group g's query heads through `op`.
  template <class GroupOp, KvViewLike View>
  static void run_group(GroupOp& op, const ConstMatrixRef& queries,
                        std::span<const KvHead<View>> kv_heads, MatrixRef out,
                        std::span<HeadResult> results, std::int64_t g, std::int64_t per_group) {
    op.decode(queries.middleRows(g * per_group, per_group), kv_heads[static_cast<std::size_t>(g)],
              out.middleRows(g * per_group, per_group),
              results.subspan(static_cast<std::size_t>(g * per_group),
                              static_cast<std::size_t>(per_group)));
  }

  template <KvViewLike View>
  void run_shadow(const ConstMatrixRef& queries, std::span<const KvHead<View>> kv_heads,
                  const DenseShadow& shadow, std::int64_t g, std::int64_t per_group) {
    run_group(shadows_[static_cast<std::size_t>(g)], queries, kv_heads, shadow.out, shadow.results,
              g, per_group);
  }

  /// decode() with each group's selection split into parts (the shadow's groups run beside the
  /// parts); false (nothing done) when no group has enough candidate blocks or an operator
  /// cannot split its rule.
  template <KvViewLike View>
  bool decode_in_parts(const ConstMatrixRef& queries, std::span<const KvHead<View>> kv_heads,
                       MatrixRef out, std::span<HeadResult> results, const DenseShadow* shadow,
                       std::int64_t per_group) {
    const auto groups = static_cast<std::int64_t>(kv_heads.size());
    for (std::int64_t g = 0; g < groups; ++g) {
      if (!operators_[static_cast<std::size_t>(g)].scores_in_parts()) return false;
    }
    auto queries_of = [&](std::int64_t g) { return queries.middleRows(g * per_group, per_group); };
    std::int64_t most_candidates = 0;
    for (std::int64_t g = 0; g < groups; ++g) {
      most_candidates =
          std::max(most_candidates, operators_[static_cast<std::size_t>(g)].begin_selection(
                                        queries_of(g), kv_heads[static_cast<std::size_t>(g)]));
    }
    const std::int64_t parts =
        std::min<std::int64_t>(pool_->threads() / groups, most_candidates / kMinBlocksPerPart);
    if (parts < 2) return false;  // begin_selection is repeated by decode(): it only prepares
    // Tasks [0, groups * parts) score the parts, [groups * parts, + groups) run the shadow.
    const std::int64_t scoring = groups * parts;
    pool_->parallel_for(scoring + (shadow != nullptr ? groups : 0), [&](std::int64_t i) {
      if (i >= scoring) return run_shadow(queries, kv_heads, *shadow, i - scoring, per_group);
      const std::int64_t g = i / parts;
      operators_[static_cast<std::size_t>(g)].score_part(kv_heads[static_cast<std::size_t>(g)],
                                                         i % parts, parts);
    });
    pool_->parallel_for(groups, [&](std::int64_t g) {
      Op& op = operators_[static_cast<std::size_t>(g)];
      const KvHead<View>& head = kv_heads[static_cast<std::size_t>(g)];
      op.end_selection(queries_of(g), head);
      op.attend_selected(queries_of(g), head, out.middleRows(g * per_group, per_group),
                         results.subspan(static_cast<std::size_t>(g * per_group),
                                         static_cast<std::size_t>(per_group)));
    });
    return true;
  }

  Op prototype_;
  std::vector<Op> operators_;             // [kv_heads]
  std::vector<DenseDecode> shadows_;      // [kv_heads] once a call asked for the shadow
  std::unique_ptr<ThreadPool> own_pool_;  // null when the caller lends its pool
  ThreadPool* pool_;
};

}  // namespace amc

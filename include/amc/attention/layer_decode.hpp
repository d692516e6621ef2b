// All query heads of one attention layer: a decode operator per KV head (GQA group), the groups
// run in parallel on a thread pool.
//
// Shapes, outermost first: queries and out [query_heads, head_dim]; kv_heads [kv_heads];
// results [query_heads]. Query head h belongs to KV head h / (query_heads / kv_heads), as in
// Qwen2 and every GQA model.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
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
  /// \param threads   threads to use, the caller included (>= 1)
  explicit LayerDecode(Op prototype, int threads = 1)
      : prototype_(std::move(prototype)), pool_(threads) {}

  /// Fewest candidate blocks in a part of a split selection: a part then takes several
  /// microseconds (cold, 7 heads at head_dim 64 score a block in 27-45 ns: BM_Select), against
  /// about a microsecond to hand it to a spinning thread.
  static constexpr std::int64_t kMinBlocksPerPart = 256;

  int threads() const { return pool_.threads(); }

  /// The pool the layer runs on. A caller with other parallel work between calls (a model's
  /// projections) can run it here, so that the workers are spinning, not asleep, when the next
  /// call starts (they sleep after about 1 ms without work: parallel.hpp).
  ThreadPool& pool() { return pool_; }

  /// The operator that ran KV head `kv_head` at the last call (for its supports and scores).
  const Op& group_operator(std::int64_t kv_head) const {
    return operators_[static_cast<std::size_t>(kv_head)];
  }

  template <KvViewLike View>
  requires DecodeOperator<Op, View>
  void decode(const ConstMatrixRef& queries, std::span<const KvHead<View>> kv_heads, MatrixRef out,
              std::span<HeadResult> results) {
    constexpr const char* where = "amc::LayerDecode::decode";
    const auto groups = static_cast<std::int64_t>(kv_heads.size());
    AMC_CHECK(groups > 0, where, "kv_heads is empty");
    AMC_CHECK(queries.rows() % groups == 0, where, "query heads (", queries.rows(),
              ") must be a multiple of KV heads (", groups, ")");
    AMC_CHECK(out.rows() == queries.rows() && out.cols() == queries.cols(), where, "out is [",
              out.rows(), ", ", out.cols(), "], expected [", queries.rows(), ", ", queries.cols(),
              "]");
    AMC_CHECK(results.size() == static_cast<std::size_t>(queries.rows()), where, "results has ",
              results.size(), " entries, expected ", queries.rows());
    while (static_cast<std::int64_t>(operators_.size()) < groups) operators_.push_back(prototype_);
    const std::int64_t per_group = queries.rows() / groups;
    if constexpr (SelectsInParts<Op, View>) {
      if (pool_.threads() >= 2 * groups &&
          decode_in_parts(queries, kv_heads, out, results, per_group)) {
        return;
      }
    }
    pool_.parallel_for(groups, [&](std::int64_t g) {
      operators_[static_cast<std::size_t>(g)].decode(
          queries.middleRows(g * per_group, per_group), kv_heads[static_cast<std::size_t>(g)],
          out.middleRows(g * per_group, per_group),
          results.subspan(static_cast<std::size_t>(g * per_group),
                          static_cast<std::size_t>(per_group)));
    });
  }

 private:
  /// decode() with each group's selection split into parts; false (nothing done) when no group
  /// has enough candidate blocks or an operator cannot split its rule.
  template <KvViewLike View>
  bool decode_in_parts(const ConstMatrixRef& queries, std::span<const KvHead<View>> kv_heads,
                       MatrixRef out, std::span<HeadResult> results, std::int64_t per_group) {
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
        std::min<std::int64_t>(pool_.threads() / groups, most_candidates / kMinBlocksPerPart);
    if (parts < 2) return false;  // begin_selection is repeated by decode(): it only prepares
    pool_.parallel_for(groups * parts, [&](std::int64_t i) {
      const std::int64_t g = i / parts;
      operators_[static_cast<std::size_t>(g)].score_part(kv_heads[static_cast<std::size_t>(g)],
                                                         i % parts, parts);
    });
    pool_.parallel_for(groups, [&](std::int64_t g) {
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
  std::vector<Op> operators_;
  ThreadPool pool_;
};

}  // namespace amc

// All query heads of one attention layer: a decode operator per KV head (GQA group), the groups
// run in parallel on a thread pool.
//
// Shapes, outermost first: queries and out [query_heads, head_dim]; kv_heads [kv_heads];
// results [query_heads]. Query head h belongs to KV head h / (query_heads / kv_heads), as in
// Qwen2 and every GQA model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "amc/attention/decode.hpp"
#include "amc/error.hpp"
#include "amc/parallel.hpp"
#include "amc/tensor.hpp"

namespace amc {

/// Parallelism is across KV heads, each group computed exactly as a single-threaded call would
/// compute it, so results are bitwise identical for any thread count. With fewer KV heads than
/// threads the extra threads idle (Qwen2-0.5B has 2 KV heads: 2 threads are used fully).
template <class Op>
class LayerDecode {
 public:
  /// \param prototype operator copied once per KV head (each copy owns its scratch)
  /// \param threads   threads to use, the caller included (>= 1)
  explicit LayerDecode(Op prototype, int threads = 1)
      : prototype_(std::move(prototype)), pool_(threads) {}

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
    pool_.parallel_for(groups, [&](std::int64_t g) {
      operators_[static_cast<std::size_t>(g)].decode(
          queries.middleRows(g * per_group, per_group), kv_heads[static_cast<std::size_t>(g)],
          out.middleRows(g * per_group, per_group),
          results.subspan(static_cast<std::size_t>(g * per_group),
                          static_cast<std::size_t>(per_group)));
    });
  }

 private:
  Op prototype_;
  std::vector<Op> operators_;
  ThreadPool pool_;
};

}  // namespace amc

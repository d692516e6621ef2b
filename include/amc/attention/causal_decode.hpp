// Dense decode attention of several consecutive positions at once, each over its own causal
// prefix: the verify pass of speculative decoding (docs/speculative.md), which must give, for
// every position, exactly what one-position dense decode gives there.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>

#include "amc/attention/decode.hpp"
#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/kv_view.hpp"
#include "amc/tensor.hpp"

namespace amc {

/// Dense decode of `positions` consecutive query positions of one GQA group over one KV head:
/// the last position attends over every row of the view, each earlier one over one row fewer
/// (its own prefix). Each K/V row the positions share is read once for all of their query heads,
/// and each head's output and result are DenseDecode's (exact_f32) over its prefix, bit for bit,
/// whatever `positions`: the shared rows are attended in one call for every head, up to a
/// multiple of the kernels' chunk (kernels::kAttendChunk) within their last memory run, and
/// each position's remaining rows in a call of its own. The kernels fold rows in chunks counted
/// from the start of each call, carry the softmax state from call to call, and compute a head alike
/// whatever the number of heads beside it, so the chunks, and every sum, are those of one call over
/// the prefix. Not thread-safe: one operator per thread (it owns its scratch).
class CausalDenseDecode {
 public:
  /// \param scale attention scale c; unset means 1/sqrt(head_dim)
  explicit CausalDenseDecode(std::optional<float> scale = {}) : scale_(scale) {
    AMC_CHECK(!scale || (*scale > 0.0f && std::isfinite(*scale)), "amc::CausalDenseDecode",
              "scale must be positive and finite, got ", scale ? *scale : 0.0f);
  }

  /// \param queries   [positions * heads, head_dim] f32: position t's heads are rows
  ///                  [t * heads, (t + 1) * heads), t = 0 the earliest position
  /// \param positions query positions (>= 1); position t attends over the view's first
  ///                  kv.positions() - (positions - 1 - t) rows
  /// \param head      the KV head (summaries unused)
  /// \param out       [positions * heads, head_dim] f32
  /// \param results   [positions * heads]
  template <KvViewLike View>
  void decode(const ConstMatrixRef& queries, std::int64_t positions, const KvHead<View>& head,
              MatrixRef out, std::span<HeadResult> results) {
    constexpr const char* where = "amc::CausalDenseDecode::decode";
    detail::check_decode_shapes(where, queries, head.kv, out, results);
    AMC_CHECK(positions >= 1 && queries.rows() % positions == 0, where, "positions must be >= 1 ",
              "and divide the ", queries.rows(), " query rows, got ", positions);
    AMC_CHECK(head.kv.positions() >= positions, where, "the KV view has ", head.kv.positions(),
              " rows, fewer than the ", positions, " query positions (each attends to itself)");
    const std::int64_t heads = queries.rows() / positions;
    const std::int64_t first_end = head.kv.positions() - (positions - 1);  // position 0's prefix
    const std::int64_t shared = shared_rows(head.kv, first_end);
    workspace_.prepare(queries, detail::resolve_scale(scale_, head.kv.head_dim()));
    if (shared > 0) {
      const PositionRange rows{0, shared};
      detail::attend_support(head.kv, std::span(&rows, 1), 0, queries.rows(), workspace_);
    }
    for (std::int64_t t = 0; t < positions; ++t) {
      const PositionRange rest{shared, first_end + t};
      if (rest.size() > 0) {
        detail::attend_support(head.kv, std::span(&rest, 1), t * heads, heads, workspace_);
      }
      for (std::int64_t h = t * heads; h < (t + 1) * heads; ++h)
        detail::finish(workspace_, h, first_end + t, out, results);
    }
  }

 private:
  /// The rows every position attends in one call: up to the last whole kernel chunk of
  /// [0, end) counted from the start of the memory run (KvViewLike::for_each_run: a page of a
  /// paged view) that holds it, since one-position decode calls the kernel once per run.
  template <KvViewLike View>
  static std::int64_t shared_rows(const View& kv, std::int64_t end) {
    std::int64_t last_run = 0;
    if constexpr (requires { kv.touch_rows(0, end); }) {
      last_run = 0;  // a q8_0 view: one kernel call over the whole range (bind_q8_0_rows)
    } else {
      kv.for_each_run(0, end, [&](const auto*, const auto*, std::int64_t first, std::int64_t) {
        last_run = first;
      });
    }
    return last_run + (end - last_run) / kernels::kAttendChunk * kernels::kAttendChunk;
  }

  std::optional<float> scale_;
  detail::DecodeWorkspace workspace_;
};

}  // namespace amc

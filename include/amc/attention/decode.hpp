// Decode attention for one GQA group (query heads sharing one KV head): dense, over an explicit
// support, and block-sparse with a pluggable rule. All share one interface, so an engine
// swaps dense for sparse with a template argument.
//
// Shapes, outermost first: queries [heads, head_dim] (f32), output [heads, head_dim] (f32),
// results [heads]. A single query head is a group of one.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "amc/aligned.hpp"
#include "amc/attention/adaptive_selection.hpp"
#include "amc/attention/arithmetic.hpp"
#include "amc/attention/block_summaries.hpp"
#include "amc/attention/registered_rule.hpp"
#include "amc/attention/softmax_state.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/attention/support.hpp"
#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/kv_view.hpp"
#include "amc/tensor.hpp"

namespace amc {

/// One KV head as an operator sees it: the cache view and, for operators that select blocks,
/// the block summaries of the same positions (dense operators ignore them).
template <KvViewLike View>
struct KvHead {
  View kv;
  const BlockSummaries* summaries = nullptr;
};

/// Per query head: what the operator read and the log-sum-exp over it. A caller who also has
/// the dense lse L_all gets the omitted mass eps = -expm1(lse - L_all) with no second pass.
///
/// Numerics policy (docs/reliability.md): scores are folded with a running maximum, so finite
/// scores of any size give finite, correct results. NaN or +-Inf in what the head read (q, or
/// the keys and values of the positions read) and scores that overflow f32 make the output or
/// lse NaN or Inf; the operator then sets `finite` to false instead of returning the number as
/// if it were valid. An empty support (lse = -inf, zero output) is not an error: finite stays
/// true. Positions a sparse operator did not read cannot affect its result (selection ranks NaN
/// block scores last).
struct HeadResult {
  float lse = -std::numeric_limits<float>::infinity();  ///< log sum_{j read} exp(s_j)
  std::int64_t positions_read = 0;
  /// The head's output row and lse are finite numbers (lse = -inf allowed when nothing was read).
  bool finite = true;
};

/// A decode-attention operator over KV views of type View.
template <class Op, class View>
concept DecodeOperator = KvViewLike<View> &&
    requires(Op& op, const ConstMatrixRef& queries, const KvHead<View>& head, MatrixRef out,
             std::span<HeadResult> results) {
  { op.decode(queries, head, out, results) } -> std::same_as<void>;
};

namespace detail {

inline float resolve_scale(const std::optional<float>& scale, std::int64_t head_dim) {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

/// Checks shapes shared by every operator; `where` names the calling operator.
template <KvViewLike View>
void check_decode_shapes(const char* where, const ConstMatrixRef& queries, const View& kv,
                         const MatrixRef& out, std::span<const HeadResult> results) {
  AMC_CHECK(queries.rows() > 0, where, "queries must have at least one head (row), got 0");
  AMC_CHECK(queries.cols() == kv.head_dim(), where, "queries have head_dim ", queries.cols(),
            " but the KV view has head_dim ", kv.head_dim());
  AMC_CHECK(out.rows() == queries.rows() && out.cols() == queries.cols(), where, "out is [",
            out.rows(), ", ", out.cols(), "], expected [", queries.rows(), ", ", queries.cols(),
            "]");
  AMC_CHECK(results.size() == static_cast<std::size_t>(queries.rows()), where, "results has ",
            results.size(), " entries, expected one per query head (", queries.rows(), ")");
}

/// Reusable scratch of an operator: scaled queries, softmax state and kernel scratch.
struct DecodeWorkspace {
  AlignedVector<float> scaled_queries;  // [heads, head_dim]
  AlignedVector<float> kernel_scratch;  // kernels::attend_scratch_floats(heads, head_dim)
  SoftmaxState state;

  void prepare(const ConstMatrixRef& queries, float scale) {
    const std::int64_t heads = queries.rows(), head_dim = queries.cols();
    scaled_queries.resize(static_cast<std::size_t>(heads * head_dim));
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < head_dim; ++i)
        scaled_queries[static_cast<std::size_t>(h * head_dim + i)] = queries(h, i) * scale;
    kernel_scratch.resize(
        static_cast<std::size_t>(kernels::attend_scratch_floats(heads, head_dim)));
    state.resize(heads, head_dim);
  }
};

/// Reads one byte of every cache line of the first rows (one kernel chunk) of `range`, keys and
/// values, so they are on their way from memory while the current range is attended: for a q8_0
/// view, whose rows the kernel is not given (ask_range_start). Cold attention over a support
/// gains from these loads (BM_SparseDecodeQ8), where prefetching the whole range at once does
/// not; kernels that pace their asks over the range before do better still. The kernels that
/// do not pace them do these loads themselves (read_next_rows in src/).
/// A view that stores its rows in another form (Q8KvView, amc/q8_kv.hpp) reads them itself
/// (touch_rows), since its key()/value() would widen every row to read one byte.
template <KvViewLike View>
void touch_range_start(const View& kv, const PositionRange& range) {
  using T = typename View::value_type;
  constexpr std::int64_t kLine = 64 / static_cast<std::int64_t>(sizeof(T));  // elements per line
  const std::int64_t end = std::min(range.end, range.begin + kernels::kAttendChunk);
  if constexpr (requires { kv.touch_rows(range.begin, end); }) {
    kv.touch_rows(range.begin, end);
    return;
  }
  unsigned seen = 0;
  for (std::int64_t p = range.begin; p < end; ++p) {
    for (std::int64_t i = 0; i < kv.head_dim(); i += kLine) {
      seen |= *reinterpret_cast<const unsigned char*>(kv.key(p) + i);
      seen |= *reinterpret_cast<const unsigned char*>(kv.value(p) + i);
    }
  }
  detail::keep_loads(seen);
}

/// Points args' next rows (AttendArgs::next_keys) at the first run of `range`, which the
/// attention kernel then asks for during its last chunk. False, leaving args as they are, for a
/// view that stores its rows in another form (a q8_0 view: touch_range_start reads them).
template <KvViewLike View>
bool ask_range_start(const View& kv, const PositionRange& range, kernels::AttendArgs& args) {
  using T = typename View::value_type;
  if constexpr (requires { kv.touch_rows(range.begin, range.end); }) {
    return false;
  } else {
    kv.for_each_run(range.begin, range.end,
                    [&](const T* keys, const T* values, std::int64_t, std::int64_t rows) {
                      if (args.next_rows > 0) return;  // the first run only
                      args.next_keys = keys;
                      args.next_values = values;
                      args.next_rows = rows;
                    });
    return true;
  }
}

/// Folds the ranges of `support` into heads [first_head, first_head + count) of ws.state, in
/// `arithmetic` where available (bf16_products_available), else exact f32.
template <KvViewLike View>
void attend_support(const View& kv, std::span<const PositionRange> ranges, std::int64_t first_head,
                    std::int64_t count, DecodeWorkspace& ws,
                    AttentionArithmetic arithmetic = AttentionArithmetic::exact_f32) {
  using T = typename View::value_type;
  const kernels::KernelTable& table = kernels::active();
  auto attend = table.attend[kernels::index_of(storage_type_of<T>)];
  if (arithmetic == AttentionArithmetic::bf16_products &&
      bf16_products_available(storage_type_of<T>, kv.head_dim()))
    attend = table.attend_bf16_products;
  kernels::AttendArgs args = ws.state.attend_args(first_head, count);
  args.queries = ws.scaled_queries.data() + first_head * kv.head_dim();
  args.key_stride = kv.key_stride();
  args.value_stride = kv.value_stride();
  args.scratch = ws.kernel_scratch.data();
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    // A sparse support is a list of short ranges, and the kernel asks for its next chunk only
    // within a range: the kernel is given the next range's first rows (AttendArgs::next_keys),
    // or, for a view whose rows it cannot read directly, they are read here before it.
    args.next_rows = 0;
    if (i + 1 < ranges.size() && !ask_range_start(kv, ranges[i + 1], args))
      touch_range_start(kv, ranges[i + 1]);
    if constexpr (requires { kv.bind_q8_0_rows(args, 0); }) {
      // Rows stored in 8 bits go to their own kernel, which widens them as it reads.
      kv.bind_q8_0_rows(args, ranges[i].begin);
      args.rows = ranges[i].size();
      table.attend_q8_0(args);
      continue;
    }
    kv.for_each_run(ranges[i].begin, ranges[i].end,
                    [&](const T* keys, const T* values, std::int64_t, std::int64_t rows) {
                      args.keys = keys;
                      args.values = values;
                      args.rows = rows;
                      attend(args);
                    });
  }
}

/// Whether a head's result is valid under the numerics policy (see HeadResult): every output
/// element finite, and lse finite or -inf with nothing read. An element is NaN or +-Inf exactly
/// when its exponent bits are all ones; OR-ing that test over the row is branch-free and
/// vectorises (about 15-25 ns per head of 64, next to microseconds of attention).
inline bool result_is_finite(std::span<const float> row, float lse, std::int64_t positions_read) {
  constexpr std::uint32_t kExponent = 0x7f800000u;
  std::uint32_t non_finite = 0;
  for (const float x : row) {
    non_finite |=
        static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(x) & kExponent) == kExponent);
  }
  const bool lse_ok =
      std::isfinite(lse) || (positions_read == 0 && lse == -std::numeric_limits<float>::infinity());
  return non_finite == 0 && lse_ok;
}

inline void finish(const DecodeWorkspace& ws, std::int64_t head, std::int64_t positions_read,
                   MatrixRef& out, std::span<HeadResult> results) {
  const std::span<float> row(out.row(head).data(), static_cast<std::size_t>(out.cols()));
  ws.state.normalize(head, row);
  const float lse = ws.state.lse(head);
  results[static_cast<std::size_t>(head)] = {lse, positions_read,
                                             result_is_finite(row, lse, positions_read)};
}

}  // namespace detail

/// Attends every query head of a group over an explicit support (sorted disjoint ranges within
/// the view). The building block of both operators; useful on its own for custom selection.
/// \param queries [heads, head_dim] f32, unscaled
/// \param scale   attention scale c (scores are c <q, k>)
/// \param out     [heads, head_dim]: normalised output over the support (zeros if empty)
/// \param results [heads]: lse over the support and positions read
template <KvViewLike View>
void decode_support(const ConstMatrixRef& queries, const View& kv, const Support& support,
                    float scale, MatrixRef out, std::span<HeadResult> results) {
  constexpr const char* where = "amc::decode_support";
  detail::check_decode_shapes(where, queries, kv, out, results);
  AMC_CHECK(support.end() <= kv.positions(), where, "support reaches position ", support.end() - 1,
            " but the KV view has ", kv.positions(), " positions");
  AMC_CHECK(scale > 0.0f && std::isfinite(scale), where, "scale must be positive and finite, got ",
            scale);
  thread_local detail::DecodeWorkspace ws;
  ws.prepare(queries, scale);
  detail::attend_support(kv, support.ranges(), 0, queries.rows(), ws);
  for (std::int64_t h = 0; h < queries.rows(); ++h)
    detail::finish(ws, h, support.size(), out, results);
}

/// Dense decode: every query head of the group over every cached position.
class DenseDecode {
 public:
  /// \param scale      attention scale c; unset means 1/sqrt(head_dim)
  /// \param arithmetic exact_f32 (default) or the opt-in bf16_products (arithmetic.hpp), which
  ///                   runs where bf16_products_available() and falls back to exact_f32 elsewhere
  explicit DenseDecode(std::optional<float> scale = {},
                       AttentionArithmetic arithmetic = AttentionArithmetic::exact_f32)
      : scale_(scale), arithmetic_(arithmetic) {
    AMC_CHECK(!scale || (*scale > 0.0f && std::isfinite(*scale)), "amc::DenseDecode",
              "scale must be positive and finite, got ", scale ? *scale : 0.0f);
    AMC_CHECK(arithmetic == AttentionArithmetic::exact_f32 ||
                  arithmetic == AttentionArithmetic::bf16_products,
              "amc::DenseDecode", "arithmetic has no AttentionArithmetic value (",
              static_cast<int>(arithmetic), ")");
  }

  AttentionArithmetic arithmetic() const { return arithmetic_; }

  /// \param queries [heads, head_dim] f32
  /// \param head    the KV head (summaries unused)
  /// \param out     [heads, head_dim] f32
  /// \param results [heads]
  template <KvViewLike View>
  void decode(const ConstMatrixRef& queries, const KvHead<View>& head, MatrixRef out,
              std::span<HeadResult> results) {
    detail::check_decode_shapes("amc::DenseDecode::decode", queries, head.kv, out, results);
    workspace_.prepare(queries, detail::resolve_scale(scale_, head.kv.head_dim()));
    const PositionRange all{0, head.kv.positions()};
    detail::attend_support(head.kv, std::span(&all, 1), 0, queries.rows(), workspace_, arithmetic_);
    for (std::int64_t h = 0; h < queries.rows(); ++h)
      detail::finish(workspace_, h, all.size(), out, results);
  }

 private:
  std::optional<float> scale_;
  AttentionArithmetic arithmetic_ = AttentionArithmetic::exact_f32;
  detail::DecodeWorkspace workspace_;
};

/// Block-sparse decode: score blocks with `Rule`, keep sinks, window and the top-k blocks
/// (with config.top_p set, the fewest best of them whose estimated mass share reaches top_p:
/// top_k.hpp; with config.target_eps set, the fewest best blocks whose certified omitted-mass
/// bound meets it: adaptive_selection.hpp), attend over that support. Selection is fresh at every
/// call. Not thread-safe: use one operator per thread (it owns its scratch so steady-state
/// top-k calls do not allocate).
template <class Rule = RegisteredRule>
class BlockSparseDecode {
 public:
  /// Validates `config`; the default Rule (RegisteredRule) follows config.rule.
  explicit BlockSparseDecode(const SparseConfig& config) requires std::same_as<Rule, RegisteredRule>
      : BlockSparseDecode(config, RegisteredRule((config.validate(), config))) {}
  explicit BlockSparseDecode(const SparseConfig& config) requires(
      !std::same_as<Rule, RegisteredRule>)
      : BlockSparseDecode(config, Rule{}) {}
  BlockSparseDecode(const SparseConfig& config, Rule rule)
      : config_(config), rule_(std::move(rule)) {
    config_.validate();
    // config.rule names the rule only for RegisteredRule; other rules bring their own needs
    // (and check them as they read), adaptive selection its bound's.
    if constexpr (std::same_as<Rule, RegisteredRule>) {
      required_ = required_summaries(config_);
    } else if (config_.adaptive()) {
      required_ = {.channel_bounds = true, .value_norms = true};
    }
  }

  const SparseConfig& config() const { return config_; }
  const Rule& rule() const { return rule_; }
  [[deprecated("renamed rule()")]] const Rule& selector() const { return rule_; }

  /// Blocks selected for query head h at the last call (for per-group scope, the same for all).
  std::span<const std::int64_t> selected_blocks(std::int64_t head) const {
    return selected_[static_cast<std::size_t>(head)];
  }
  /// Support read by query head h at the last call.
  const Support& support(std::int64_t head) const {
    return supports_[static_cast<std::size_t>(head)];
  }
  /// [heads, blocks] rule scores of the last call (row h for query head h).
  std::span<const float> block_scores() const { return block_scores_; }
  /// Adaptive selection (config().target_eps set) at the last call, per query head: the
  /// blocks added (per group: the largest any head of the group needed) and the certified
  /// omitted-mass bound that head's own search reached, and whether it met the target.
  std::int64_t needed_k(std::int64_t head) const { return adaptive_result(head).needed_k; }
  double omitted_mass_bound(std::int64_t head) const {
    return adaptive_result(head).omitted_mass_bound;
  }
  bool target_met(std::int64_t head) const { return adaptive_result(head).target_met; }

  /// Selection alone: scores blocks, picks the top-k (per head or per group) and builds the
  /// supports, readable afterwards through selected_blocks(), support() and block_scores().
  /// decode() calls it; benchmarks and evaluation call it on its own.
  /// \param queries [heads, head_dim] f32
  /// \param head    the KV head; head.summaries must cover exactly head.kv's positions with
  ///                block_size == config().block_size
  template <KvViewLike View>
  requires BlockRuleLike<Rule, View>
  void select(const ConstMatrixRef& queries, const KvHead<View>& head) {
    begin_selection(queries, head);
    score_part(head, 0, 1);
    end_selection(queries, head);
  }

  /// Selects (see select()) and attends each head over its support.
  /// \param queries [heads, head_dim] f32
  /// \param head    the KV head with its summaries
  /// \param out     [heads, head_dim] f32
  /// \param results [heads]
  template <KvViewLike View>
  requires BlockRuleLike<Rule, View>
  void decode(const ConstMatrixRef& queries, const KvHead<View>& head, MatrixRef out,
              std::span<HeadResult> results) {
    detail::check_decode_shapes("amc::BlockSparseDecode::decode", queries, head.kv, out, results);
    select(queries, head);
    attend_selected(queries, head, out, results);
  }

  // Selection in steps, for a caller that spreads the scoring of one group over threads
  // (LayerDecode, when it has more threads than KV heads): begin_selection, then score_part
  // for every part in [0, parts), on any threads at once, then end_selection and
  // attend_selected. select() is the same steps with one part and decode() adds the last, so
  // results do not depend on the number of parts: each block's score is computed from that block
  // alone, by the same kernel, whichever part it falls in (tested bitwise).

  /// Whether score_part accepts parts > 1: the rule scores each block from that block
  /// alone (RegisteredRule: every rule but the two-stage one, whose shortlist ranks all blocks).
  bool scores_in_parts() const {
    if constexpr (requires { rule_.scores_each_block_alone(); }) {
      return rule_.scores_each_block_alone();
    } else {
      return false;
    }
  }

  /// Checks the inputs, scales the queries and marks the blocks that cannot be selected;
  /// returns the number of candidate blocks, which score_part divides into parts.
  template <KvViewLike View>
  requires BlockRuleLike<Rule, View> std::int64_t begin_selection(const ConstMatrixRef& queries,
                                                                  const KvHead<View>& head) {
    constexpr const char* where = "amc::BlockSparseDecode::select";
    const View& kv = head.kv;
    AMC_CHECK(queries.rows() > 0 && queries.cols() == kv.head_dim(), where, "queries are [",
              queries.rows(), ", ", queries.cols(), "], expected [heads >= 1, head_dim ",
              kv.head_dim(), "]");
    AMC_CHECK(head.summaries != nullptr, where,
              "head.summaries is null: block-sparse decode needs block summaries of the KV head");
    const BlockSummaries& summaries = *head.summaries;
    AMC_CHECK(summaries.block_size() == config_.block_size, where, "summaries have block_size ",
              summaries.block_size(), " but config.block_size is ", config_.block_size);
    AMC_CHECK(summaries.positions() == kv.positions(), where, "summaries cover ",
              summaries.positions(), " positions but the KV view has ", kv.positions());
    AMC_CHECK(summaries.head_dim() == kv.head_dim(), where, "summaries have head_dim ",
              summaries.head_dim(), " but the KV view has head_dim ", kv.head_dim());
    AMC_CHECK(summaries.options().covers(required_), where, "rule ", config_.rule.name(),
              config_.adaptive() ? " with target_eps" : "",
              " reads summaries with channel_bounds=", required_.channel_bounds,
              " value_norms=", required_.value_norms, " sub_blocks=", required_.sub_blocks,
              " bf16_copies=", required_.bf16_copies,
              "; these were built with channel_bounds=", summaries.options().channel_bounds,
              " value_norms=", summaries.options().value_norms,
              " sub_blocks=", summaries.options().sub_blocks,
              " bf16_copies=", summaries.options().bf16_copies, " (required_summaries(config))");

    const std::int64_t heads = queries.rows();
    const std::int64_t blocks = summaries.blocks();
    workspace_.prepare(queries, detail::resolve_scale(config_.scale, queries.cols()));
    candidates_ = candidate_blocks(kv.positions(), config_);
    selection_heads_ = heads;

    // Rules write the candidate range; only the (few) blocks outside it are set to -inf.
    block_scores_.resize(static_cast<std::size_t>(heads * blocks));
    for (std::int64_t h = 0; h < heads; ++h) {
      float* row = block_scores_.data() + h * blocks;
      std::fill(row, row + candidates_.first, -std::numeric_limits<float>::infinity());
      std::fill(row + candidates_.last, row + blocks, -std::numeric_limits<float>::infinity());
    }
    return candidates_.count();
  }

  /// Scores part `part` of `parts` near-equal parts of the candidate blocks (for every head).
  /// Different parts of one call may run on different threads at once; parts > 1 needs
  /// scores_in_parts(). Call after begin_selection with the same head.
  template <KvViewLike View>
  requires BlockRuleLike<Rule, View>
  void score_part(const KvHead<View>& head, std::int64_t part, std::int64_t parts) {
    AMC_CHECK(parts >= 1 && part >= 0 && part < parts, "amc::BlockSparseDecode::score_part",
              "part ", part, " of ", parts, " does not exist");
    AMC_CHECK(parts == 1 || scores_in_parts(), "amc::BlockSparseDecode::score_part", "rule ",
              config_.rule.name(), " ranks all blocks together and cannot be scored in ", parts,
              " parts");
    const View& kv = head.kv;
    const BlockSummaries& summaries = *head.summaries;
    const std::int64_t heads = selection_heads_;
    const std::int64_t blocks = summaries.blocks();
    CandidateBlocks mine = candidates_;
    mine.first = part_boundary(part, parts);
    mine.last = part_boundary(part + 1, parts);
    if (parts > 1 && mine.count() == 0) return;
    if constexpr (requires(const GroupScoringInput& in, std::span<float> out) {
                    rule_.score_blocks_group(in, kv, out);
                  }) {
      rule_.score_blocks_group(
          GroupScoringInput{workspace_.scaled_queries.data(), heads, summaries, mine}, kv,
          block_scores_);
    } else {
      const std::int64_t head_dim = summaries.head_dim();
      for (std::int64_t h = 0; h < heads; ++h) {
        const BlockScoringInput input{
            std::span<const float>(workspace_.scaled_queries.data() + h * head_dim,
                                   static_cast<std::size_t>(head_dim)),
            summaries, mine};
        rule_.score_blocks(input, kv, scores_of(h, blocks));
      }
    }
  }

  /// Picks the blocks from the scores of every part and builds the supports.
  template <KvViewLike View>
  requires BlockRuleLike<Rule, View>
  void end_selection(const ConstMatrixRef& queries, const KvHead<View>& head) {
    const View& kv = head.kv;
    const std::int64_t heads = queries.rows();
    const std::int64_t blocks = head.summaries->blocks();
    selected_.resize(static_cast<std::size_t>(heads));
    supports_.resize(static_cast<std::size_t>(heads));
    const std::int64_t selections = config_.scope == SelectionScope::per_group ? 1 : heads;
    if (config_.adaptive()) {
      select_adaptive(queries, head, candidates_);
      return;
    }
    if (config_.scope == SelectionScope::per_group) {
      combined_.resize(static_cast<std::size_t>(blocks));
      combine_group_scores(block_scores_, heads, blocks, candidates_, config_.combine, combined_,
                           combine_scratch_);
      select_blocks(combined_, candidates_, MassScale::linear, selected_[0]);
    } else {
      for (std::int64_t h = 0; h < heads; ++h) {
        select_blocks(scores_of(h, blocks), candidates_, MassScale::log,
                      selected_[static_cast<std::size_t>(h)]);
      }
    }
    for (std::int64_t h = 0; h < selections; ++h) {
      build_support(kv.positions(), config_, selected_[static_cast<std::size_t>(h)],
                    supports_[static_cast<std::size_t>(h)]);
    }
    for (std::int64_t h = selections; h < heads; ++h) {  // per group: every head shares it
      selected_[static_cast<std::size_t>(h)] = selected_[0];
      supports_[static_cast<std::size_t>(h)] = supports_[0];
    }
  }

  /// Attends each head over the support the last selection built for it (the second half of
  /// decode()).
  template <KvViewLike View>
  void attend_selected(const ConstMatrixRef& queries, const KvHead<View>& head, MatrixRef out,
                       std::span<HeadResult> results) {
    detail::check_decode_shapes("amc::BlockSparseDecode::attend_selected", queries, head.kv, out,
                                results);
    const std::int64_t heads = queries.rows();
    AMC_CHECK(supports_.size() == static_cast<std::size_t>(heads),
              "amc::BlockSparseDecode::attend_selected", "the last selection was for ",
              supports_.size(), " heads, not ", heads);
    if (config_.scope == SelectionScope::per_group) {
      // One pass over the shared support: each selected block is read once for all heads.
      detail::attend_support(head.kv, supports_[0].ranges(), 0, heads, workspace_);
    } else {
      for (std::int64_t h = 0; h < heads; ++h) {
        detail::attend_support(head.kv, supports_[static_cast<std::size_t>(h)].ranges(), h, 1,
                               workspace_);
      }
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      detail::finish(workspace_, h, supports_[static_cast<std::size_t>(h)].size(), out, results);
    }
  }

 private:
  /// Top-k, or top-p with top_k as its cap.
  void select_blocks(std::span<const float> scores, const CandidateBlocks& candidates,
                     MassScale scale, std::vector<std::int64_t>& selected) const {
    if (config_.top_p) {
      select_top_p(scores, candidates, *config_.top_p, config_.top_k, scale, selected);
    } else {
      select_top_k(scores, candidates, config_.top_k, selected);
    }
  }

  const AdaptiveSelection& adaptive_result(std::int64_t head) const {
    AMC_CHECK(config_.adaptive() && head >= 0 && static_cast<std::size_t>(head) < adaptive_.size(),
              "amc::BlockSparseDecode", "no adaptive selection for head ", head,
              " (target_eps set: ", config_.adaptive(), ", heads selected: ", adaptive_.size(),
              ")");
    return adaptive_[static_cast<std::size_t>(head)];
  }

  /// Adaptive selection: per head, blocks in the order of its own scores until its certified
  /// bound meets the target; per group, the order of the combined scores, and the largest k any
  /// head needed (the bound only falls as blocks are added in a fixed order, so that k meets
  /// the target of every head whose own search met it).
  template <KvViewLike View>
  void select_adaptive(const ConstMatrixRef& queries, const KvHead<View>& head,
                       const CandidateBlocks& candidates) {
    const View& kv = head.kv;
    const std::int64_t heads = queries.rows(), head_dim = queries.cols();
    const std::int64_t blocks = head.summaries->blocks();
    const double scale = detail::resolve_scale(config_.scale, head_dim);
    const double target = *config_.target_eps;
    const std::int64_t cap = config_.max_k.value_or(blocks);
    adaptive_.resize(static_cast<std::size_t>(heads));
    std::span<const float> ranking;
    if (config_.scope == SelectionScope::per_group) {
      combined_.resize(static_cast<std::size_t>(blocks));
      combine_group_scores(block_scores_, heads, blocks, candidates, config_.combine, combined_,
                           combine_scratch_);
      ranking = combined_;
    }
    std::int64_t group_k = 0;
    for (std::int64_t h = 0; h < heads; ++h) {
      if (config_.scope == SelectionScope::per_head) ranking = scores_of(h, blocks);
      // The query as given (unscaled; rows of a ConstMatrixRef are contiguous).
      const std::span<const float> query(queries.row(h).data(), static_cast<std::size_t>(head_dim));
      AdaptiveSelection& a = adaptive_[static_cast<std::size_t>(h)];
      a = adaptive_select(query, scale, kv, *head.summaries, config_, ranking, target, cap);
      group_k = std::max(group_k, a.needed_k);
      if (config_.scope == SelectionScope::per_head) {
        selected_[static_cast<std::size_t>(h)] = a.blocks;
        supports_[static_cast<std::size_t>(h)] = a.support;
      }
    }
    if (config_.scope == SelectionScope::per_group) {
      // The group's support: the group_k best blocks of the shared ranking, which is exactly
      // what the head that needed the most grew to.
      select_top_k(combined_, candidates, group_k, selected_[0]);
      build_support(kv.positions(), config_, selected_[0], supports_[0]);
      for (std::int64_t h = 0; h < heads; ++h) {
        adaptive_[static_cast<std::size_t>(h)].needed_k = group_k;
        selected_[static_cast<std::size_t>(h)] = selected_[0];
        supports_[static_cast<std::size_t>(h)] = supports_[0];
      }
    }
  }

  /// The first candidate block of part `part` of `parts` (part == parts: the end). Inner
  /// boundaries fall on multiples of 16 blocks, so that two threads never write one cache line
  /// of scores.
  std::int64_t part_boundary(std::int64_t part, std::int64_t parts) const {
    const std::int64_t b = candidates_.first + candidates_.count() * part / parts;
    if (part == 0 || part == parts) return b;
    return std::clamp((b + 15) / 16 * 16, candidates_.first, candidates_.last);
  }

  SparseConfig config_;
  SummaryOptions required_;  // what select() checks the summaries for
  Rule rule_;
  detail::DecodeWorkspace workspace_;
  std::span<float> scores_of(std::int64_t head, std::int64_t blocks) {
    return std::span(block_scores_)
        .subspan(static_cast<std::size_t>(head * blocks), static_cast<std::size_t>(blocks));
  }

  CandidateBlocks candidates_;        // of the selection in progress or the last one
  std::int64_t selection_heads_ = 0;  // its query heads
  std::vector<float> block_scores_;   // [heads, blocks]
  std::vector<float> combined_;       // [blocks]
  CombineScratch combine_scratch_;
  std::vector<std::vector<std::int64_t>> selected_;
  std::vector<Support> supports_;
  std::vector<AdaptiveSelection> adaptive_;  // [heads], adaptive selection only
};

static_assert(DecodeOperator<DenseDecode, KvView<float>>);
static_assert(DecodeOperator<DenseDecode, PagedKvView<bf16>>);
static_assert(DecodeOperator<BlockSparseDecode<>, KvView<f16>>);
static_assert(DecodeOperator<BlockSparseDecode<MeanPooledRule>, PagedKvView<float>>);

}  // namespace amc

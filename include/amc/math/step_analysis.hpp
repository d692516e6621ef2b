// The omitted-mass analysis of one decode step of one attention layer: what amc-bounds reports,
// as a function, so that the tool, the Python package and C++ callers compute it the same way.
//
// For each KV head g it builds block summaries of the keys and values (what the configured
// rule reads, plus channel bounds and value norms for the certified bounds), runs DenseDecode
// and BlockSparseDecode<RegisteredRule> over the query heads of the group (the operators choose
// the support: top-k, top-p or adaptive, per head or per group), and for each query head
// reports the exact quantities of docs/theory.md section 2 computed in double from the stored
// values (omitted_mass.hpp), how far the f32 operators' outputs are from them, and what the
// summaries certify without reading the omitted keys (certified_bounds.hpp).
//
// Shapes, outermost first: q [query_heads, head_dim], k and v [kv_heads, positions, head_dim],
// f32, contiguous. Query head h belongs to KV head h / (query_heads / kv_heads).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "amc/attention/block_summaries.hpp"
#include "amc/attention/decode.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/attention/support.hpp"
#include "amc/error.hpp"
#include "amc/kv_view.hpp"
#include "amc/math/certified_bounds.hpp"
#include "amc/math/omitted_mass.hpp"
#include "amc/tensor.hpp"

namespace amc {

/// One decode step's attention inputs, borrowed: f32, contiguous, outermost first.
struct StepInputs {
  std::int64_t query_heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t positions = 0;
  std::int64_t head_dim = 0;
  std::span<const float> q;  ///< [query_heads, head_dim], unscaled, after RoPE
  std::span<const float> k;  ///< [kv_heads, positions, head_dim], after RoPE
  std::span<const float> v;  ///< [kv_heads, positions, head_dim]
};

/// The analysis of one query head (amc-bounds' per-head JSON record; docs/bounds-tool.md).
struct HeadAnalysis {
  std::int64_t head = 0;
  std::int64_t kv_head = 0;
  std::int64_t positions = 0;     ///< n
  std::int64_t support_size = 0;  ///< positions the sparse step read
  std::vector<std::int64_t> selected_blocks;
  Support support;
  float lse_support = 0.0f;  ///< L_S as the sparse operator returned it (f32); -inf if empty
  float lse_all = 0.0f;      ///< L_all as the dense operator returned it (f32)
  double retained_mass = 0.0;
  double omitted_mass = 0.0;
  double error_norm = 0.0;  ///< ||o - o_S|| between the exact outputs
  double identity_residual = 0.0;
  double relative_identity_residual = 0.0;
  double dense_operator_error = 0.0;   ///< ||o_f32 - o_exact||
  double sparse_operator_error = 0.0;  ///< ||o_S,f32 - o_S,exact||
  double value_bound = 0.0;
  double loose_value_bound = 0.0;
  double direction_cosine = 0.0;
  double certified_omitted_mass_bound = 0.0;
  double certified_log_omitted_mass_bound = 0.0;  ///< -inf when nothing is omitted
  double certified_error_bound = 0.0;
  std::optional<std::int64_t> needed_k;  ///< adaptive selection only
};

/// Maxima and minima over the heads (amc-bounds' "summary").
struct StepSummary {
  double max_omitted_mass = 0.0;
  double min_retained_mass = 1.0;
  double max_error_norm = 0.0;
  double max_identity_residual = 0.0;
  double max_relative_identity_residual = 0.0;
  double max_operator_error = 0.0;
  double max_certified_omitted_mass_bound = 0.0;
  double max_certified_error_bound = 0.0;
  std::optional<std::int64_t> max_needed_k;  ///< adaptive selection only
};

struct StepAnalysis {
  float scale = 0.0f;               ///< the attention scale used (config.scale or 1/sqrt(head_dim))
  std::vector<HeadAnalysis> heads;  ///< [query_heads], in head order
  StepSummary summary;
};

namespace detail {

inline void check_step_inputs(const StepInputs& in) {
  constexpr const char* where = "amc::analyse_step";
  AMC_CHECK(in.head_dim >= 1, where, "head_dim must be >= 1, got ", in.head_dim);
  AMC_CHECK(in.positions >= 1, where, "k and v hold n = ", in.positions,
            " positions; nothing to analyse");
  AMC_CHECK(in.kv_heads >= 1 && in.query_heads >= 1, where, "q has ", in.query_heads,
            " heads and k ", in.kv_heads, "; both must be >= 1");
  AMC_CHECK(in.query_heads % in.kv_heads == 0, where, "query heads (", in.query_heads,
            ") are not a multiple of KV heads (", in.kv_heads, ")");
  const auto q_size = static_cast<std::size_t>(in.query_heads * in.head_dim);
  const auto kv_size = static_cast<std::size_t>(in.kv_heads * in.positions * in.head_dim);
  AMC_CHECK(in.q.size() == q_size, where, "q has ", in.q.size(), " elements, expected ", q_size);
  AMC_CHECK(in.k.size() == kv_size, where, "k has ", in.k.size(), " elements, expected ", kv_size);
  AMC_CHECK(in.v.size() == kv_size, where, "v has ", in.v.size(), " elements, expected ", kv_size);
  const std::pair<const char*, std::span<const float>> tensors[] = {
      {"q", in.q}, {"k", in.k}, {"v", in.v}};
  for (const auto& [name, values] : tensors) {
    const auto bad =
        std::find_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); });
    AMC_CHECK(bad == values.end(), where, name, " holds a non-finite value ", *bad,
              " at flat index ", bad - values.begin());
  }
}

}  // namespace detail

/// Analyses one decode step with the block-sparse configuration `config` (validated here).
/// Throws amc::error naming the problem for inconsistent shapes, non-finite inputs or a bad
/// configuration.
inline StepAnalysis analyse_step(const StepInputs& in, const SparseConfig& config) {
  detail::check_step_inputs(in);
  const std::int64_t d = in.head_dim, n = in.positions, group = in.query_heads / in.kv_heads;
  StepAnalysis result;
  result.scale = config.scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  const float scale = result.scale;
  const bool adaptive = config.adaptive();
  StepSummary& s = result.summary;
  if (adaptive) s.max_needed_k = 0;

  DenseDecode dense(scale);
  // The operators' own pipeline: top-k or (with target_eps) adaptive selection, per head or
  // per group, then attention over what was selected. The analysis only reads what they chose.
  BlockSparseDecode<> sparse(config);
  SummaryOptions summary_options = required_summaries(config);          // what the rule reads
  summary_options.channel_bounds = summary_options.value_norms = true;  // certified bounds
  for (std::int64_t g = 0; g < in.kv_heads; ++g) {
    const KvView<float> kv(in.k.data() + g * n * d, in.v.data() + g * n * d, n, d);
    const auto summaries = BlockSummaries::build(kv, config.block_size, summary_options);
    const KvHead<KvView<float>> head{kv, &summaries};
    const Eigen::Map<const RowMatrix> queries(in.q.data() + g * group * d, group, d);
    RowMatrix dense_out(group, d), sparse_out(group, d);
    std::vector<HeadResult> dense_results(static_cast<std::size_t>(group)),
        sparse_results(static_cast<std::size_t>(group));
    dense.decode(queries, head, dense_out, dense_results);
    sparse.decode(queries, head, sparse_out, sparse_results);

    const Eigen::Map<const RowMatrix> values(in.v.data() + g * n * d, n, d);
    for (std::int64_t h = 0; h < group; ++h) {
      // The exact analysis, in double from the stored values (products of f32 numbers are exact
      // in double): scores, o and o_S as an exact operator would compute them.
      const std::span<const float> query(queries.row(h).data(), static_cast<std::size_t>(d));
      const Support& support = sparse.support(h);
      const VectorD scores = exact_scores(query, scale, kv);
      const ExactOutputs exact = exact_outputs(scores, values, support);
      const OmissionAnalysis a =
          analyse_omission(scores, values, support, exact.dense, exact.sparse);
      // How far the f32 operators' outputs are from the identity and from the exact outputs.
      const Vector dense_f32 = dense_out.row(h).transpose();
      const Vector sparse_f32 = sparse_out.row(h).transpose();
      const IdentityResidual residual =
          omission_identity_residual(dense_f32, sparse_f32, a.omitted_mass, a.omitted_mean);
      const std::span<const std::int64_t> selected = sparse.selected_blocks(h);
      const CertifiedBounds c = certified_bounds(query, scale, kv, summaries, support);

      HeadAnalysis r;
      r.head = g * group + h;
      r.kv_head = g;
      r.positions = n;
      r.support_size = support.size();
      r.selected_blocks.assign(selected.begin(), selected.end());
      r.support = support;
      r.lse_support = sparse_results[static_cast<std::size_t>(h)].lse;
      r.lse_all = dense_results[static_cast<std::size_t>(h)].lse;
      r.retained_mass = a.retained_mass;
      r.omitted_mass = a.omitted_mass;
      r.error_norm = a.error_norm;
      r.identity_residual = residual.absolute;
      r.relative_identity_residual = residual.relative;
      r.dense_operator_error = (dense_f32.cast<double>() - exact.dense).norm();
      r.sparse_operator_error = (sparse_f32.cast<double>() - exact.sparse).norm();
      r.value_bound = a.value_bound;
      r.loose_value_bound = a.loose_value_bound;
      r.direction_cosine = a.direction_cosine;
      r.certified_omitted_mass_bound = c.omitted_mass_bound;
      r.certified_log_omitted_mass_bound = c.log_omitted_mass_bound;
      r.certified_error_bound = c.error_bound;
      if (adaptive) r.needed_k = sparse.needed_k(h);

      s.max_omitted_mass = std::max(s.max_omitted_mass, r.omitted_mass);
      s.min_retained_mass = std::min(s.min_retained_mass, r.retained_mass);
      s.max_error_norm = std::max(s.max_error_norm, r.error_norm);
      s.max_identity_residual = std::max(s.max_identity_residual, r.identity_residual);
      s.max_relative_identity_residual =
          std::max(s.max_relative_identity_residual, r.relative_identity_residual);
      s.max_operator_error =
          std::max({s.max_operator_error, r.dense_operator_error, r.sparse_operator_error});
      s.max_certified_omitted_mass_bound =
          std::max(s.max_certified_omitted_mass_bound, r.certified_omitted_mass_bound);
      s.max_certified_error_bound = std::max(s.max_certified_error_bound, r.certified_error_bound);
      if (adaptive) s.max_needed_k = std::max(*s.max_needed_k, *r.needed_k);
      result.heads.push_back(std::move(r));
    }
  }
  return result;
}

}  // namespace amc

// Retained mass, error norm and recall per layer and head of sparse decode steps.
#include "layer_probe.hpp"

#include <amc/math/omitted_mass.hpp>
#include <amc/storage.hpp>

#include <algorithm>
#include <cmath>

namespace amc::eval {
namespace {

SparseConfig oracle_config(SparseConfig c) {
  c.scope = SelectionScope::per_head;
  c.rule = RuleName::oracle;
  return c;
}

}  // namespace

LayerProbe::LayerProbe(const transformer::Config& model, const SparseConfig& config)
    : config_(config),
      heads_(model.num_attention_heads),
      kv_heads_(model.num_key_value_heads),
      head_dim_(model.head_dim),
      oracle_(oracle_config(config)),
      oracle_is_rule_(config.rule == RuleName::oracle && config.scope == SelectionScope::per_head),
      recall_(static_cast<std::size_t>(model.num_attention_heads)) {
  stats_.reset(model.num_hidden_layers, heads_);
}

void LayerProbe::reset() { stats_.reset(stats_.layers, stats_.heads); }

void LayerProbe::oracle_recall(const transformer::LayerAttention& a,
                               const transformer::KvCache& cache) {
  for (std::int64_t g = 0; g < kv_heads_; ++g) {
    cache.visit_view(a.layer, g, a.positions, [&]<KvViewLike View>(const View& kv) {
      oracle_.select(map_rows(a.queries + g * a.group * head_dim_, a.group, head_dim_, head_dim_),
                     KvHead<View>{kv, cache.summaries(a.layer, g)});
    });
    const BlockSparseDecode<>& used = a.sparse_operators[static_cast<std::size_t>(g)];
    for (std::int64_t j = 0; j < a.group; ++j) {
      const auto best = oracle_.selected_blocks(j);
      const auto chosen = used.selected_blocks(j);
      // Both are sorted block indices.
      std::size_t hits = 0;
      for (std::size_t x = 0, y = 0; x < best.size() && y < chosen.size();) {
        if (best[x] == chosen[y]) {
          ++hits;
          ++x;
          ++y;
        } else if (best[x] < chosen[y]) {
          ++x;
        } else {
          ++y;
        }
      }
      recall_[static_cast<std::size_t>(g * a.group + j)] =
          best.empty() ? 1.0 : static_cast<double>(hits) / static_cast<double>(best.size());
    }
  }
}

void LayerProbe::observe(const transformer::LayerAttention& a, const transformer::KvCache& cache) {
  AMC_CHECK(a.dense_output != nullptr && !a.sparse_operators.empty(), "amc::eval::LayerProbe",
            "the step ran no sparse and dense attention side by side (needs sparse decode with "
            "retained_mass)");
  if (a.layer == 0) ++stats_.steps;
  if (oracle_is_rule_) {
    std::fill(recall_.begin(), recall_.end(), 1.0);
  } else {
    oracle_recall(a, cache);
  }
  for (std::int64_t h = 0; h < heads_; ++h) {
    const auto hi = static_cast<std::size_t>(h);
    const HeadResult& sparse = a.results[hi];
    const HeadResult& dense = a.dense_results[hi];
    // A non-finite head makes the step's logits non-finite, which the caller refuses with the
    // step named; here it is only left out.
    if (!sparse.finite || !dense.finite) continue;
    const auto i = static_cast<std::size_t>(a.layer * heads_ + h);
    const double mass = retained_mass(sparse.lse, dense.lse);
    double error = 0.0, dense_norm = 0.0;
    for (std::int64_t c = 0; c < head_dim_; ++c) {
      const double o = a.dense_output[h * head_dim_ + c];
      const double d = o - static_cast<double>(a.output[h * head_dim_ + c]);
      error += d * d;
      dense_norm += o * o;
    }
    error = std::sqrt(error);
    dense_norm = std::sqrt(dense_norm);
    stats_.mass_sum[i] += mass;
    stats_.mass_min[i] = std::min(stats_.mass_min[i], mass);
    stats_.error_sum[i] += error;
    stats_.error_max[i] = std::max(stats_.error_max[i], error);
    stats_.relative_error_sum[i] += dense_norm > kTinyNorm ? error / dense_norm : 0.0;
    stats_.recall_sum[i] += recall_[hi];
    stats_.recall_min[i] = std::min(stats_.recall_min[i], recall_[hi]);
    stats_.support_sum[i] += static_cast<double>(sparse.positions_read);
    ++stats_.count[i];
  }
}

}  // namespace amc::eval

// Observes the attention of every layer of a sparse decode step (SessionOptions::on_layer) and
// accumulates, per layer and query head, the retained mass, the error norm of the identity and
// the rule's recall against the oracle.
#pragma once

#include <amc/attention/decode.hpp>
#include <amc/attention/sparse_config.hpp>

#include <cstdint>
#include <vector>

#include "head_statistics.hpp"
#include "transformer/model.hpp"

namespace amc::eval {

class LayerProbe {
 public:
  /// \param config the sparse configuration being measured (its k, scope and score rule)
  LayerProbe(const transformer::Config& model, const SparseConfig& config);

  /// Starts a new run.
  void reset();
  /// Needs a step that ran dense attention too (SessionOptions::retained_mass): `a` must carry
  /// dense_output and dense_results. `cache` is the session's, holding this step's keys.
  void observe(const transformer::LayerAttention& a, const transformer::KvCache& cache);

  const HeadStatistics& statistics() const { return stats_; }

 private:
  void oracle_recall(const transformer::LayerAttention& a, const transformer::KvCache& cache);

  SparseConfig config_;
  std::int64_t heads_, kv_heads_, head_dim_;
  /// The oracle: per query head, the k candidate blocks of largest true softmax mass. Always
  /// per head, also when the run selects per group: recall says how much of each head's own
  /// best blocks its support held.
  BlockSparseDecode<> oracle_;
  bool oracle_is_rule_;         ///< score oracle per head: the selection is the oracle's, recall 1
  std::vector<double> recall_;  ///< [heads] of the current layer
  HeadStatistics stats_;
};

}  // namespace amc::eval

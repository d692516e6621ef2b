// Per layer and query head statistics of a run's sparse decode steps, aggregated over steps:
// retained mass, error norm and rule recall (docs/reproduce.md section 4, item 3).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace amc::eval {

/// Sums, minima and maxima over the decode steps a LayerProbe observed. Arrays are
/// [layers, heads], row-major. A step counts once per layer it reached.
struct HeadStatistics {
  std::int64_t layers = 0;
  std::int64_t heads = 0;
  std::int64_t steps = 0;  ///< decode steps observed (layer 0 calls)

  // Retained mass P_S = exp(L_S - L_all) of each step's support.
  std::vector<double> mass_sum, mass_min;
  // ||o - o_S||, which by the identity is eps * ||mu_O - o_S|| (include/amc/math/omitted_mass.hpp),
  // and the same relative to ||o||.
  std::vector<double> error_sum, error_max, relative_error_sum;
  // |selected blocks ∩ oracle's top-k blocks| / |oracle's top-k|; 1 when the oracle has no
  // block to choose (sinks and window cover the context).
  std::vector<double> recall_sum, recall_min;
  // Positions read (sinks, window and selected blocks: the support actually used, which top-p
  // budgets vary).
  std::vector<double> support_sum;
  /// Steps observed per entry: `steps`, less the steps where the head's result was not finite.
  std::vector<std::int64_t> count;

  void reset(std::int64_t layers_, std::int64_t heads_) {
    layers = layers_;
    heads = heads_;
    steps = 0;
    const auto n = static_cast<std::size_t>(layers * heads);
    const double inf = std::numeric_limits<double>::infinity();
    mass_sum.assign(n, 0.0);
    mass_min.assign(n, inf);
    error_sum.assign(n, 0.0);
    error_max.assign(n, 0.0);
    relative_error_sum.assign(n, 0.0);
    recall_sum.assign(n, 0.0);
    recall_min.assign(n, inf);
    support_sum.assign(n, 0.0);
    count.assign(n, 0);
  }

  /// Means over every entry and step (0 when nothing was observed).
  double mean_of(const std::vector<double>& sums) const {
    std::int64_t n = 0;
    double total = 0.0;
    for (std::size_t i = 0; i < sums.size(); ++i) {
      total += sums[i];
      n += count[i];
    }
    return n > 0 ? total / static_cast<double>(n) : 0.0;
  }
};

}  // namespace amc::eval

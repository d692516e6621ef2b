// amc-eval mass: how much softmax mass the rule's support keeps, by support size, per layer
// and query head. It decodes the dense greedy continuation of each prefix and, at every step
// and layer, runs the block-sparse selection of every support size on the same queries and
// cache: the states are the dense model's own, so no error compounds and every support size
// is measured on identical inputs.
#pragma once

#include "eval_setup.hpp"

namespace amc::eval {

struct MassArguments {
  CommonArguments common;  ///< tokens: dense decode steps + 1 (default 16)
};

/// Writes mass.csv (context, support, k, layer, head, steps, mean and min retained mass) and
/// mass_vs_support plots into the output directory; returns the exit status.
int run_mass(const MassArguments& a);

}  // namespace amc::eval

// Argmax with a finiteness check; log-softmax in double.
#include "greedy.hpp"

#include <algorithm>
#include <cmath>

#include "refuse.hpp"

namespace amc::eval {

LogitMargin greedy_token(std::span<const float> logits, const char* stage, std::int64_t step) {
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      refuse(stage, " step ", step, ": logits[", i, "] = ", logits[i],
             " is not finite (the checkpoint holds NaN or Inf weights, or the forward pass "
             "overflowed)");
    }
  }
  return logit_margin(
      Eigen::Map<const Eigen::VectorXf>(logits.data(), static_cast<Eigen::Index>(logits.size())));
}

double negative_log_likelihood(std::span<const float> logits, std::int32_t token) {
  double max = -INFINITY;
  for (const float x : logits) max = std::max(max, static_cast<double>(x));
  double sum = 0.0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - max);
  return max + std::log(sum) - static_cast<double>(logits[static_cast<std::size_t>(token)]);
}

}  // namespace amc::eval

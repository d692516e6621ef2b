// Greedy decisions and log-likelihoods from a step's logits, shared by the sweep and the probes
// so every command picks tokens exactly as amc-generate does.
#pragma once

#include <cstdint>
#include <span>

#include <amc/math/margin.hpp>

namespace amc::eval {

/// The greedy token of `logits` (the lowest index among equal maxima, as amc-generate picks it)
/// and its margin, after checking that every logit is finite: NaN or Inf weights, or an
/// overflow, give no prediction. Throws amc::error naming `stage`, `step` and the logit.
LogitMargin greedy_token(std::span<const float> logits, const char* stage, std::int64_t step);

/// -log softmax(logits)[token], in double.
double negative_log_likelihood(std::span<const float> logits, std::int32_t token);

}  // namespace amc::eval

// Greedy generation loop with timing.
#include "generate.hpp"

#include <amc/error.hpp>
#include <amc/math/margin.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <string>

namespace amc::transformer {

double GenerationResult::prefill_tokens_per_s() const {
  return prefill_seconds > 0.0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0.0;
}

double GenerationResult::decode_tokens_per_s() const {
  return decode_seconds > 0.0 ? static_cast<double>(decode_steps) / decode_seconds : 0.0;
}

namespace {

/// Refuses logits that are not all finite: the argmax of NaN or Inf logits is no prediction.
/// `stats` (decode steps) says where attention first went non-finite, when it did.
void check_finite_logits(std::span<const float> logits, std::int64_t step, const StepStats* stats) {
  std::size_t bad = 0;
  while (bad < logits.size() && std::isfinite(logits[bad])) ++bad;
  if (bad == logits.size()) return;
  std::string attention;
  if (stats != nullptr && stats->non_finite_heads > 0) {
    attention = "; attention was first non-finite in layer " +
                std::to_string(stats->first_non_finite_layer) + ", query head " +
                std::to_string(stats->first_non_finite_head) + " (" +
                std::to_string(stats->non_finite_heads) + " heads over all layers)";
  }
  const float value = logits[bad];
  const char* shown = std::isnan(value) ? "NaN" : value > 0.0f ? "+Inf" : "-Inf";
  detail::throw_error("amc::transformer::generate", "step ", step, " (",
                      stats ? "decode" : "prefill", "): logits[", bad, "] = ", shown,
                      " is not finite", attention,
                      "; the checkpoint holds NaN or Inf weights or the forward pass overflowed");
}

}  // namespace

GenerationResult generate(Session& session, std::span<const std::int32_t> prompt,
                          const GenerationOptions& options,
                          const std::function<void(const GeneratedToken&)>& on_token) {
  AMC_CHECK(options.max_tokens >= 0, "amc::transformer::generate", "max_tokens must be >= 0, got ",
            options.max_tokens);
  using Clock = std::chrono::steady_clock;
  const std::int64_t vocab = session.config().vocab_size;
  const bool mass = session.options().retained_mass;
  GenerationResult result;
  result.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  // The cache is reserved for the whole run up front: a huge max_tokens must be refused here,
  // not turned into an allocation that exhausts memory (or an overflowing sum).
  const std::int64_t limit = session.config().max_position_embeddings;
  const std::int64_t used = session.positions() + result.prompt_tokens;
  AMC_CHECK(used <= limit && options.max_tokens <= limit - used, "amc::transformer::generate",
            "the cache (", session.positions(), " positions), the prompt (", result.prompt_tokens,
            " tokens) and max_tokens (", options.max_tokens,
            ") exceed the model's max_position_embeddings (", limit, ")");
  session.reserve(used + options.max_tokens);
  std::vector<float> logits(static_cast<std::size_t>(vocab));

  auto emit = [&](std::int64_t step, float retained) {
    const LogitMargin m = logit_margin(Eigen::Map<const Eigen::VectorXf>(logits.data(), vocab));
    GeneratedToken t;
    t.step = step;
    t.token = static_cast<std::int32_t>(m.top);
    t.logit = m.top_logit;
    t.margin = m.margin;
    t.min_retained_mass = retained;
    result.tokens.push_back(t);
    if (options.keep_logits)
      result.logits.insert(result.logits.end(), logits.begin(), logits.end());
    if (on_token) on_token(t);
    return t.token;
  };

  const auto start = Clock::now();
  session.prefill(prompt, logits);
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.max_tokens == 0) return result;
  check_finite_logits(logits, 0, nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::int32_t token = emit(0, mass ? 1.0f : nan);

  // Decode time excludes the callbacks (printing), so tokens/s measures the model.
  for (std::int64_t step = 1; step < options.max_tokens && token != options.stop_token; ++step) {
    const auto begin = Clock::now();
    const StepStats& stats = session.decode(token, logits);
    result.decode_seconds += std::chrono::duration<double>(Clock::now() - begin).count();
    ++result.decode_steps;
    check_finite_logits(logits, step, &stats);
    token = emit(step, mass ? stats.min_retained_mass : nan);
  }
  return result;
}

}  // namespace amc::transformer

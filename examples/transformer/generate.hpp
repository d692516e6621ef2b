// Greedy generation on a Session: dense prefill of the prompt, then one decode step per token,
// each token the argmax of the previous step's logits.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model.hpp"

namespace amc::transformer {

struct GenerationOptions {
  /// Tokens to generate (>= 0); with the prompt and what the session already holds, at most
  /// the model's max_position_embeddings positions.
  std::int64_t max_tokens = 128;
  /// Stop after generating this id (the model's eos_token_id); -1 never stops early.
  std::int64_t stop_token = -1;
  bool keep_logits = false;  ///< keep every step's logits in GenerationResult::logits
};

/// One generated token.
struct GeneratedToken {
  std::int64_t step = 0;  ///< 0 for the token predicted by the prefill
  std::int32_t token = 0;
  float logit = 0.0f;   ///< its logit
  float margin = 0.0f;  ///< over the runner-up (amc::logit_margin)
  /// Minimum retained mass over layers and heads of the step that produced the logits: 1 for
  /// the prefill (dense), NaN when the session does not compute it.
  float min_retained_mass = 0.0f;
};

struct GenerationResult {
  std::vector<GeneratedToken> tokens;
  std::vector<float> logits;  ///< [tokens, vocab] with keep_logits
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  std::int64_t prompt_tokens = 0;
  std::int64_t decode_steps = 0;  ///< decode() calls (tokens - 1 unless nothing generated)

  double prefill_tokens_per_s() const;
  double decode_tokens_per_s() const;  ///< decode steps per second; 0 when none ran
};

/// Generates on `session` (which should be empty: the prompt goes at positions() onwards).
/// `on_token` runs after each token, e.g. to stream it out.
/// Throws amc::error for an empty prompt or ids outside the vocabulary, and when a step's
/// logits are not all finite (NaN or Inf weights, an overflow): the message names the step, the
/// first non-finite logit and, for a decode step, the first layer and head whose attention was
/// non-finite (StepStats::non_finite_heads).
GenerationResult generate(Session& session, std::span<const std::int32_t> prompt,
                          const GenerationOptions& options,
                          const std::function<void(const GeneratedToken&)>& on_token = {});

}  // namespace amc::transformer

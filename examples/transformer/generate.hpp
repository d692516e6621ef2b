// Greedy generation on a Session: dense prefill of the prompt, then one decode step per token,
// each token the argmax of the previous step's logits; or self-speculative decoding, whose
// tokens are dense decoding's: drafted with the session's sparse attention, kept where one
// dense verify pass (Session::verify) agrees (docs/speculative.md).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "model.hpp"

namespace amc::transformer {

/// Self-speculative decoding (the session's decode attention, sparse, drafts; Session::verify
/// checks): each cycle drafts up to draft_tokens tokens with sparse decode steps, then one dense
/// verify pass over the cycle's positions keeps the drafted tokens up to the first that dense
/// decoding would not have chosen and takes dense decoding's token there. The tokens and their
/// logits are those of dense greedy decoding with DenseAttention{}, bit for bit.
struct Speculation {
  /// Most tokens drafted per cycle (>= 0). 0 drafts nothing: each cycle is a verify pass of
  /// one position, which is a dense decode step (and the session may then be dense).
  std::int64_t draft_tokens = 4;
  /// Adaptive length: a cycle stops drafting after a token whose sparse logit margin (top
  /// logit minus runner-up, amc::logit_margin) is below this: where the draft's own margin is
  /// small it is likely to be rejected, and the tokens drafted after it with it. 0 never stops
  /// early.
  float min_draft_margin = 0.0f;
  /// Changes the drafted tokens before they are verified, when set: tests force rejections at
  /// chosen positions with it. The span holds one cycle's drafts.
  std::function<void(std::span<std::int32_t>)> edit_draft;
};

/// How the tokens after the prefill's are decoded.
enum class Decoding : std::uint8_t {
  plain,        ///< one decode step per token, in the session's decode attention
  speculative,  ///< drafted in the session's (sparse) attention, verified densely: Speculation
};

/// "plain" or "speculative".
const char* to_string(Decoding decoding);
/// "plain" or "speculative"; throws amc::error naming `flag` and the text otherwise.
Decoding parse_decoding(std::string_view text, std::string_view flag);

struct GenerationOptions {
  /// Tokens to generate (>= 0); with the prompt and what the session already holds, at most
  /// the model's max_position_embeddings positions.
  std::int64_t max_tokens = 128;
  /// Stop after generating this id (the model's eos_token_id); -1 never stops early.
  std::int64_t stop_token = -1;
  bool keep_logits = false;  ///< keep every step's logits in GenerationResult::logits
  Decoding decoding = Decoding::plain;
  /// The drafts of Decoding::speculative: drafting (draft_tokens > 0) needs a session with
  /// sparse decode attention and without retained mass.
  Speculation speculation;
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
  /// Tokens produced after the prefill's (tokens - 1 unless nothing generated): decode() calls
  /// without speculation.
  std::int64_t decode_steps = 0;
  /// Speculation only: sparse draft steps, tokens drafted that the verify passes kept, and
  /// verify passes (each yields the kept drafts plus one token of its own).
  std::int64_t draft_steps = 0;
  std::int64_t accepted_drafts = 0;
  std::int64_t verify_passes = 0;

  double prefill_tokens_per_s() const;
  double decode_tokens_per_s() const;  ///< decode_steps per second; 0 when none ran
  /// Tokens per verify pass (decode_steps / verify_passes); 0 without speculation.
  double tokens_per_verify() const;
};

/// Generates on `session` (which should be empty: the prompt goes at positions() onwards).
/// `on_token` runs after each token, e.g. to stream it out. With speculation, `on_token` runs
/// for each token once a verify pass has confirmed it, and the session may hold drafted
/// positions past the last token during the cycle (truncated when it ends).
/// Throws amc::error, before the prefill, for drafting on a dense session or with retained mass,
/// a negative draft_tokens or a min_draft_margin that is negative or not finite.
/// Throws amc::error for an empty prompt or ids outside the vocabulary, and when a step's
/// logits are not all finite (NaN or Inf weights, an overflow): the message names the step, the
/// first non-finite logit and, for a decode step, the first layer and head whose attention was
/// non-finite (StepStats::non_finite_heads).
GenerationResult generate(Session& session, std::span<const std::int32_t> prompt,
                          const GenerationOptions& options,
                          const std::function<void(const GeneratedToken&)>& on_token = {});

}  // namespace amc::transformer

// Greedy generation loop with timing.
#include "generate.hpp"

#include <amc/error.hpp>
#include <amc/math/margin.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace amc::transformer {

double GenerationResult::prefill_tokens_per_s() const {
  return prefill_seconds > 0.0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0.0;
}

double GenerationResult::decode_tokens_per_s() const {
  return decode_seconds > 0.0 ? static_cast<double>(decode_steps) / decode_seconds : 0.0;
}

const char* to_string(Decoding decoding) {
  return decoding == Decoding::speculative ? "speculative" : "plain";
}

Decoding parse_decoding(std::string_view text, std::string_view flag) {
  if (text == "plain") return Decoding::plain;
  if (text == "speculative") return Decoding::speculative;
  detail::throw_error("amc::transformer::parse_decoding", flag,
                      ": expected plain or speculative, got '", text, "'");
}

double GenerationResult::tokens_per_verify() const {
  return verify_passes > 0 ? static_cast<double>(decode_steps) / static_cast<double>(verify_passes)
                           : 0.0;
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

/// The greedy token of `logits` with its logit and margin.
LogitMargin greedy(std::span<const float> logits) {
  return logit_margin(
      Eigen::Map<const Eigen::VectorXf>(logits.data(), static_cast<Eigen::Index>(logits.size())));
}

void check_speculation(const Session& session, const Speculation& speculation) {
  constexpr const char* where = "amc::transformer::generate";
  AMC_CHECK(speculation.draft_tokens >= 0, where, "speculation.draft_tokens must be >= 0, got ",
            speculation.draft_tokens);
  AMC_CHECK(std::isfinite(speculation.min_draft_margin) && speculation.min_draft_margin >= 0.0f,
            where, "speculation.min_draft_margin must be finite and >= 0, got ",
            speculation.min_draft_margin);
  if (speculation.draft_tokens == 0) return;
  AMC_CHECK(is_sparse(session.options().attention), where, "speculation.draft_tokens is ",
            speculation.draft_tokens,
            " but the session's decode attention is dense: speculation drafts with sparse "
            "attention (SessionOptions::attention = a SparseConfig)");
  AMC_CHECK(!session.options().retained_mass, where,
            "speculation with retained_mass: the tokens come from dense verify passes, which "
            "compute no retained mass; turn retained_mass off");
}

/// The decode phase of speculative generation, after the prefill emitted `token` (step 0).
/// Each cycle, at P = session.positions() with `token` not yet in the cache: drafts
/// t_1..t_g by sparse decode steps from `token`, truncates the cache back to P, verifies
/// [token, t_1..t_g] in one dense pass (row i's greedy token d_i is dense decoding's after
/// t_i), emits d_0..d_j where j is the first i with t_{i+1} != d_i (or g), and keeps positions
/// P..P+j, whose keys and values the dense pass computed. d_j becomes the next `token`.
template <class Emit>
void speculate(Session& session, std::int32_t token, const GenerationOptions& options,
               GenerationResult& result, Emit& emit) {
  using Clock = std::chrono::steady_clock;
  const Speculation& speculation = options.speculation;
  const auto vocab = static_cast<std::size_t>(session.config().vocab_size);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> draft_logits(vocab);
  std::vector<std::int32_t> verified;  // [token, t_1..t_g]
  std::vector<float> verify_logits;    // [g + 1, vocab]
  std::int64_t step = 1;
  while (step < options.max_tokens && token != options.stop_token) {
    const auto begin = Clock::now();
    const std::int64_t start = session.positions();
    // A cycle yields at most g + 1 tokens: never draft past max_tokens.
    const std::int64_t most = std::min(speculation.draft_tokens, options.max_tokens - step - 1);
    verified.assign(1, token);
    for (std::int64_t i = 0; i < most; ++i) {
      session.decode(verified.back(), draft_logits);
      ++result.draft_steps;
      // A draft whose logits are not all finite guesses nothing: the verify pass decides, and
      // refuses the logits only if dense decoding's own are not finite.
      if (!std::all_of(draft_logits.begin(), draft_logits.end(),
                       [](float x) { return std::isfinite(x); })) {
        break;
      }
      const LogitMargin m = greedy(draft_logits);
      verified.push_back(static_cast<std::int32_t>(m.top));
      if (m.top == options.stop_token || m.margin < speculation.min_draft_margin) break;
    }
    if (speculation.edit_draft) speculation.edit_draft(std::span(verified).subspan(1));
    session.truncate(start);
    verify_logits.resize(verified.size() * vocab);
    const StepStats& stats = session.verify(verified, verify_logits);
    ++result.verify_passes;
    const auto row = [&](std::size_t i) {
      return std::span<const float>(verify_logits).subspan(i * vocab, vocab);
    };
    // Keep the drafts dense decoding agrees with: row i's greedy token is dense decoding's
    // after verified[i], and the draft verified[i + 1] stands where it equals it.
    std::size_t kept = 0;
    for (;; ++kept) {
      check_finite_logits(row(kept), step + static_cast<std::int64_t>(kept), &stats);
      if (kept + 1 == verified.size() || verified[kept + 1] != greedy(row(kept)).top) break;
    }
    session.truncate(start + static_cast<std::int64_t>(kept) + 1);
    result.decode_seconds += std::chrono::duration<double>(Clock::now() - begin).count();
    result.accepted_drafts += static_cast<std::int64_t>(kept);
    // The kept drafts and dense decoding's token after them, with dense decoding's logits.
    for (std::size_t i = 0; i <= kept; ++i, ++step) {
      token = emit(step, row(i), nan);
      ++result.decode_steps;
      if (token == options.stop_token) break;
    }
  }
}

}  // namespace

GenerationResult generate(Session& session, std::span<const std::int32_t> prompt,
                          const GenerationOptions& options,
                          const std::function<void(const GeneratedToken&)>& on_token) {
  AMC_CHECK(options.max_tokens >= 0, "amc::transformer::generate", "max_tokens must be >= 0, got ",
            options.max_tokens);
  const bool speculative = options.decoding == Decoding::speculative;
  if (speculative) check_speculation(session, options.speculation);
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

  // Records the token of `row` (a step's logits) as step `step`.
  auto emit = [&](std::int64_t step, std::span<const float> row, float retained) {
    const LogitMargin m = greedy(row);
    GeneratedToken t;
    t.step = step;
    t.token = static_cast<std::int32_t>(m.top);
    t.logit = m.top_logit;
    t.margin = m.margin;
    t.min_retained_mass = retained;
    result.tokens.push_back(t);
    if (options.keep_logits) result.logits.insert(result.logits.end(), row.begin(), row.end());
    if (on_token) on_token(t);
    return t.token;
  };

  const auto start = Clock::now();
  session.prefill(prompt, logits);
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.max_tokens == 0) return result;
  check_finite_logits(logits, 0, nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::int32_t token = emit(0, logits, mass ? 1.0f : nan);

  // Decode time excludes the callbacks (printing), so tokens/s measures the model.
  if (speculative) {
    speculate(session, token, options, result, emit);
    return result;
  }
  for (std::int64_t step = 1; step < options.max_tokens && token != options.stop_token; ++step) {
    const auto begin = Clock::now();
    const StepStats& stats = session.decode(token, logits);
    result.decode_seconds += std::chrono::duration<double>(Clock::now() - begin).count();
    ++result.decode_steps;
    check_finite_logits(logits, step, &stats);
    token = emit(step, logits, mass ? stats.min_retained_mass : nan);
  }
  return result;
}

}  // namespace amc::transformer

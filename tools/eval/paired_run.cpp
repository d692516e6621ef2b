// The paired protocol on one Session: prefill once, truncate back to the prefix per support.
#include "paired_run.hpp"

#include <chrono>

#include "greedy.hpp"
#include "layer_probe.hpp"

namespace amc::eval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

struct PairedRunner::State {
  PairedRunOptions options;
  std::unique_ptr<LayerProbe> probe;  // set during a teacher-forced pass only
  transformer::Session session;
  std::int64_t prefix_length = 0;
  std::vector<float> logits;

  State(const transformer::Checkpoint& checkpoint, const PairedRunOptions& o)
      : options(o), session(checkpoint, session_options(o)) {
    logits.resize(static_cast<std::size_t>(checkpoint.config().vocab_size));
  }

  // The cache keeps the rule's block summaries from the prefill on, whatever the attention, so
  // switching to any support needs no rebuild.
  transformer::SessionOptions session_options(const PairedRunOptions& o) {
    transformer::SessionOptions s;
    s.summaries_for = o.sparse;
    s.threads = o.threads;
    s.kv_dtype = o.kv_dtype;
    s.kv_quantization = o.kv_quantization;
    s.rope_angles = o.rope_angles;
    s.on_layer = [this](const transformer::LayerAttention& a) {
      if (probe) probe->observe(a, session.cache());
    };
    return s;
  }
};

PairedRunner::PairedRunner(const transformer::Checkpoint& checkpoint,
                           const PairedRunOptions& options)
    : state_(std::make_unique<State>(checkpoint, options)) {}

PairedRunner::~PairedRunner() = default;

DenseReference PairedRunner::reference(std::span<const std::int32_t> prefix, std::int64_t tokens,
                                       const StepCallback& progress) {
  AMC_CHECK(tokens >= 2, "amc::eval::PairedRunner::reference", "tokens must be >= 2, got ", tokens);
  State& s = *state_;
  transformer::Session& session = s.session;
  session.reset();
  session.set_decode(transformer::DenseAttention{}, false);
  s.prefix_length = static_cast<std::int64_t>(prefix.size());
  session.reserve(s.prefix_length + tokens);
  DenseReference r;
  auto start = Clock::now();
  if (progress) progress("dense prefill", 0, tokens);
  session.prefill(prefix, s.logits);
  r.prefill_seconds = seconds_since(start);
  start = Clock::now();
  for (std::int64_t t = 0; t < tokens; ++t) {
    if (t > 0) session.decode(r.tokens.back(), s.logits);
    const LogitMargin m = greedy_token(s.logits, "dense reference", t);
    r.tokens.push_back(static_cast<std::int32_t>(m.top));
    r.nll.push_back(negative_log_likelihood(s.logits, r.tokens.back()));
    r.margins.push_back(m.margin);
    if (progress) progress("dense continuation", t + 1, tokens);
  }
  r.decode_seconds = seconds_since(start);
  return r;
}

SupportRun PairedRunner::run(std::int64_t k, const DenseReference& reference,
                             const StepCallback& progress) {
  State& s = *state_;
  transformer::Session& session = s.session;
  const auto T = static_cast<std::int64_t>(reference.tokens.size());
  SparseConfig config = s.options.sparse;
  config.top_k = k;
  const transformer::Attention attention =
      s.options.dense_control ? transformer::Attention(transformer::DenseAttention{})
                              : transformer::Attention(config);
  const char* stage = s.options.dense_control ? "dense control" : "sparse";

  SupportRun run;
  // Teacher forcing: the reference's tokens through the sparse model, with retained mass (a
  // dense pass beside every sparse one) for the per-layer statistics.
  session.truncate(s.prefix_length);
  session.set_decode(attention, !s.options.dense_control);
  if (!s.options.dense_control) {
    s.probe = std::make_unique<LayerProbe>(session.config(), config);
  }
  run.tf_argmax.push_back(reference.tokens[0]);  // step 0: the shared dense prefill
  run.tf_nll.push_back(reference.nll[0]);
  auto start = Clock::now();
  for (std::int64_t t = 1; t < T; ++t) {
    session.decode(reference.tokens[static_cast<std::size_t>(t - 1)], s.logits);
    const LogitMargin m = greedy_token(s.logits, stage, t);
    run.tf_argmax.push_back(static_cast<std::int32_t>(m.top));
    run.tf_nll.push_back(
        negative_log_likelihood(s.logits, reference.tokens[static_cast<std::size_t>(t)]));
    if (progress) progress("teacher-forced pass", t, T - 1);
  }
  run.teacher_forced_seconds = seconds_since(start);
  if (s.probe) {
    run.heads = s.probe->statistics();
    s.probe.reset();
  }

  // Greedy continuation: identical to the teacher-forced argmaxes through the first divergence.
  run.first_divergence = T;
  for (std::int64_t t = 1; t < T; ++t) {
    if (run.tf_argmax[static_cast<std::size_t>(t)] !=
        reference.tokens[static_cast<std::size_t>(t)]) {
      run.first_divergence = t;
      break;
    }
  }
  const std::int64_t f = run.first_divergence;
  run.tokens.assign(reference.tokens.begin(), reference.tokens.begin() + f);
  if (f < T) run.tokens.push_back(run.tf_argmax[static_cast<std::size_t>(f)]);
  start = Clock::now();
  if (f < T - 1) {
    // Back to the state after feeding d_0 .. d_{f-1}; from here the sparse run feeds its own
    // tokens. No dense pass is needed any more.
    session.truncate(s.prefix_length + f);
    session.set_decode(attention, false);
    for (std::int64_t t = f + 1; t < T; ++t) {
      session.decode(run.tokens.back(), s.logits);
      run.tokens.push_back(static_cast<std::int32_t>(greedy_token(s.logits, stage, t).top));
      if (progress) progress("free-running continuation", t - f, T - 1 - f);
    }
  }
  run.free_run_seconds = seconds_since(start);
  return run;
}

}  // namespace amc::eval

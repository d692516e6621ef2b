// The paired fresh-selection protocol of docs/reproduce.md section 4 for one prefix: one dense
// prefill shared by every support, the dense greedy continuation, and per support the
// teacher-forced pass and the sparse greedy continuation from that same prefill.
//
// Steps are numbered from 0: step 0's token is the argmax of the prefill's logits, which both
// models share (prefill is dense), so step 0 never differs; step t >= 1 comes from the decode
// step fed step t - 1's token. A continuation of T tokens takes T - 1 decode steps.
#pragma once

#include <amc/attention/sparse_config.hpp>
#include <amc/storage.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "head_statistics.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/model.hpp"

namespace amc::eval {

/// The dense model's greedy continuation of a prefix.
struct DenseReference {
  std::vector<std::int32_t> tokens;  ///< [T] d_t
  std::vector<double> nll;           ///< [T] -log p_dense(d_t | prefix, d_<t)
  std::vector<float> margins;        ///< [T] top logit's lead over the runner-up
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

/// One support's run against a DenseReference.
struct SupportRun {
  std::vector<std::int32_t> tokens;     ///< [T] the sparse greedy continuation
  std::vector<std::int32_t> tf_argmax;  ///< [T] sparse argmax at each teacher-forced step
  std::vector<double> tf_nll;           ///< [T] -log p_sparse(d_t | prefix, d_<t)
  /// First step whose sparse greedy token differs from the dense one; T when none does.
  std::int64_t first_divergence = 0;
  /// Per layer and head over the T - 1 teacher-forced decode steps; nullopt for the dense
  /// control, which selects nothing.
  std::optional<HeadStatistics> heads;
  double teacher_forced_seconds = 0.0;
  double free_run_seconds = 0.0;
};

struct PairedRunOptions {
  SparseConfig sparse;  ///< block size, sinks, window, scope, score; top_k is set per support
  /// KV cache dtype and RoPE angles; nullopt: the checkpoint's ("auto",
  /// transformer::SessionOptions).
  std::optional<StorageType> kv_dtype;
  transformer::KvQuantization kv_quantization = transformer::KvQuantization::none;
  std::optional<transformer::RopeAngles> rope_angles;
  int threads = 1;
  /// Control: "sparse" runs decode with dense attention, so every run must equal the reference.
  bool dense_control = false;
};

/// Called during a run with what it is doing and how far it got (`step` of `total` steps).
using StepCallback = std::function<void(const char* stage, std::int64_t step, std::int64_t total)>;

class PairedRunner {
 public:
  /// \param checkpoint must outlive the runner
  PairedRunner(const transformer::Checkpoint& checkpoint, const PairedRunOptions& options);
  ~PairedRunner();

  /// Dense prefill of `prefix` and the dense greedy continuation of `tokens` (>= 2) tokens.
  /// Throws amc::error when a step's logits are not all finite.
  DenseReference reference(std::span<const std::int32_t> prefix, std::int64_t tokens,
                           const StepCallback& progress = {});

  /// Sparse run with `k` blocks from the prefill of the last reference(): the teacher-forced
  /// pass over the reference's tokens (with per-layer statistics), then the greedy
  /// continuation. Until the first divergence the greedy run feeds exactly the reference's
  /// tokens, so its steps are the teacher-forced pass's (bitwise: same cache, same inputs);
  /// only the steps after it are decoded again, from the cache truncated to that point.
  SupportRun run(std::int64_t k, const DenseReference& reference,
                 const StepCallback& progress = {});

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace amc::eval

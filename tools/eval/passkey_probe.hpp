// amc-eval passkey: a model-level retrieval probe. A value (PASSKEY = "DIGITS") is planted at
// chosen depths in held-out code, the prompt asks for it, and the model answers greedily with
// dense attention and with each rule at each support size. Per (context, depth, rule,
// support): the retrieval accuracy, the retained mass at the answering steps, and how often the
// support held every token of the planted value.
//
// A trial (context c, trial t) draws its code window and digits from (seed, c, t) only, so every
// depth, rule and support of a trial sees the same code and digits; a depth moves only the
// record. Per (c, depth, t) the prompt's first c - 1 tokens are prefilled densely once, and
// every run starts from that cache (Session::truncate): the prompt's last token and the answer's
// tokens go through the decode path, dense or sparse, so that every answer token, the first
// included, comes from a step with the run's attention. (The sweep's PairedRunner takes step 0
// from the dense prefill, which here would hand every sparse run the first digit.)
#pragma once

#include <amc/attention/sparse_config.hpp>
#include <amc/storage.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "passkey_prompt.hpp"
#include "support_sizes.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/rope.hpp"
#include "transformer/session_flags.hpp"
#include "transformer/tokenizer.hpp"

namespace amc::eval {

/// What to run, parsed from the flags (passkey_command.hpp). validate() refuses bad values with
/// amc::error "passkey: --flag: ..." naming the flag and the value; the checks that need the
/// model and the documents are prepare_passkey()'s.
struct PasskeyOptions {
  std::string model;                                     ///< --model: checkpoint directory
  std::vector<std::string> text_files;                   ///< --text
  std::vector<std::int64_t> contexts{1024, 2048};        ///< --contexts: prompt tokens
  std::vector<double> depths{0.1, 0.3, 0.5, 0.7, 0.85};  ///< --depths, each in (0, 1)
  std::int64_t trials = 10;                              ///< --trials per (context, depth)
  std::vector<SupportSize> supports;                     ///< --supports, mapped to k
  std::vector<RuleName> rules{RuleName::mean_pooled, RuleName::channel_bound,
                              RuleName::oracle};  ///< --rules
  std::int64_t digits = 5;                        ///< --digits of the value, in [1, 16]
  std::uint64_t seed = 1;                         ///< --seed
  /// Block size, sinks, window, scope, ... (the library's selection options); score and top_k
  /// are set per run from --rules and --supports.
  SparseConfig sparse;
  /// --threads (here "" is 1), --kv-dtype, --weight-dtype, --rope-angles.
  transformer::SessionFlags session{.threads = "1"};
  std::string out;  ///< --out

  static constexpr std::int64_t kMinContext = 64;
  static constexpr std::int64_t kMaxDigits = 16;

  /// Throws amc::error "passkey: --flag: ..." for the first bad option.
  void validate() const;
};

/// One prompt to answer: a (context, depth, trial) and what it plants where.
struct PasskeyCase {
  std::int64_t context = 0;
  double depth = 0.0;
  std::int64_t trial = 0;
  PasskeyDraw draw;
  PasskeyPrompt prompt;
};

/// The model, tokenizer, documents and every prompt, checked before anything runs.
struct PasskeySetup {
  std::unique_ptr<transformer::Checkpoint> checkpoint;  // sessions refer to it: it must not move
  std::unique_ptr<transformer::Tokenizer> tokenizer;
  std::vector<PasskeyDocument> documents;
  StorageType kv_dtype = StorageType::bf16;  ///< "auto" resolved for the checkpoint
  transformer::KvQuantization kv_quantization = transformer::KvQuantization::none;  ///< q8_0 cache
  transformer::RopeAngles rope_angles = transformer::RopeAngles::transformers;
  /// Ordered by context, trial, depth (contexts and depths ascending): a trial's depths one
  /// after the other.
  std::vector<PasskeyCase> cases;
};

/// Loads the model, its tokenizer and the documents, and builds every prompt. Refuses (amc::error
/// "passkey: --flag: ...") a context the model's max_position_embeddings cannot hold with the
/// answer, a context no document is long enough for (naming the longest), and a depth that
/// puts a record inside the sinks or the window (where every support holds it).
PasskeySetup prepare_passkey(const PasskeyOptions& options);

/// One run: dense (no rule) or a rule at a support size.
struct PasskeyRunKind {
  std::optional<RuleName> rule;  ///< nullopt: dense
  SupportSize support;           ///< {0, 0} for dense
};

/// What one run answered, and what its supports held at the answering steps.
struct PasskeyAnswer {
  std::vector<std::int32_t> tokens;  ///< [steps] greedy answer tokens
  std::string text;                  ///< their bytes
  bool correct = false;              ///< text starts with the digits
  /// Mean over answering steps, layers and query heads of exp(L_S - L_all); 1 for dense.
  double retained_mass = 1.0;
  /// Share of (answering step, layer, selection) whose support held every token of the value;
  /// a selection is a query head (scope head) or a KV head (scope group). 1 for dense.
  double planted_in_support = 1.0;
  std::vector<double> planted_by_layer;  ///< [layers] the same per layer; empty for dense
};

/// Answers passkey prompts on one Session: prefill() once per prompt, then answer() per run.
class PasskeyRunner {
 public:
  /// \param checkpoint, tokenizer  must outlive the runner
  /// \param base  the selection settings (block size, sinks, window, scope, ...) the cache
  ///              keeps summaries for; runs set score and top_k
  PasskeyRunner(const transformer::Checkpoint& checkpoint, const transformer::Tokenizer& tokenizer,
                const SparseConfig& base, StorageType kv_dtype,
                transformer::KvQuantization kv_quantization, transformer::RopeAngles rope_angles,
                int threads);
  ~PasskeyRunner();

  /// Dense prefill of all but the prompt's last token.
  void prefill(const PasskeyPrompt& prompt);
  /// From the prefill of the last prefill(): the prompt's last token, then greedy answer
  /// tokens, each step with dense attention (sparse == nullopt) or block-sparse attention with
  /// `sparse`, until the answer's bytes are at least as many as the digits' (at most
  /// digits.size() tokens).
  PasskeyAnswer answer(const std::string& digits, const std::optional<SparseConfig>& sparse);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// A cell: one run kind at one (context, depth), over the trials.
struct PasskeyCell {
  PasskeyRunKind run;
  std::int64_t context = 0;
  double depth = 0.0;
  std::int64_t trials = 0;
  std::int64_t correct = 0;
  double accuracy = 0.0;                 ///< correct / trials
  double mean_retained_mass = 1.0;       ///< mean over trials of each answer's retained mass
  double planted_in_support = 1.0;       ///< mean over trials of each answer's share
  std::vector<double> planted_by_layer;  ///< [layers] the same per layer; empty for dense
};

/// One answer, for trials.csv.
struct PasskeyTrialRow {
  const PasskeyCase* passkey_case = nullptr;  ///< into the PasskeySetup's cases, which outlive it
  PasskeyRunKind run;
  PasskeyAnswer answer;
};

struct PasskeyResults {
  std::vector<PasskeyCell> cells;  ///< by context, depth, then dense and rules x supports
  std::vector<PasskeyTrialRow> rows;
};

class Progress;

/// Runs every case of `setup`: dense, then each rule (in the order given) at each support
/// (ascending). Reports each case to `progress` when given. Throws amc::error naming the case
/// (context, depth, trial, document) when a run fails.
PasskeyResults run_passkey_probe(const PasskeyOptions& options, const PasskeySetup& setup,
                                 Progress* progress = nullptr);

/// The name of a run kind in tables: "dense" or "mean 97".
std::string run_label(const PasskeyRunKind& run);

}  // namespace amc::eval

// The passkey probe: options' checks, setup (model, documents, every prompt), the runner on one
// Session, and the loop over cases and runs. The files it writes are passkey_report.cpp's. See
// passkey_probe.hpp.
#include "passkey_probe.hpp"

#include <amc/attention/decode.hpp>
#include <amc/math/omitted_mass.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <span>
#include <utility>

#include "documents.hpp"
#include "greedy.hpp"
#include "progress.hpp"
#include "refuse.hpp"
#include "text.hpp"
#include "transformer/model.hpp"
#include "transformer/model_files.hpp"

namespace amc::eval {
namespace {

constexpr const char* kWhere = "passkey";

// Bounds that keep a run's memory and time sane; far above any useful setting.
constexpr std::int64_t kMaxContext = std::int64_t{1} << 20;
constexpr std::int64_t kMaxTrials = 1'000'000;

template <class T>
void require_nonempty(const std::vector<T>& values, const char* flag) {
  AMC_CHECK(!values.empty(), kWhere, flag, ": the list is empty; give at least one value");
}

template <class T, class Name>
void require_distinct(const std::vector<T>& values, const char* flag, Name name) {
  std::vector<T> ordered = values;
  std::sort(ordered.begin(), ordered.end());
  const auto repeated = std::adjacent_find(ordered.begin(), ordered.end());
  if (repeated != ordered.end()) {
    detail::throw_error(kWhere, flag, ": ", name(*repeated), " is listed twice");
  }
}

std::vector<PasskeyRunKind> run_kinds(const PasskeyOptions& options) {
  std::vector<SupportSize> supports = options.supports;
  std::sort(supports.begin(), supports.end(),
            [](const SupportSize& a, const SupportSize& b) { return a.support < b.support; });
  std::vector<PasskeyRunKind> runs{PasskeyRunKind{}};
  for (const RuleName s : options.rules) {
    for (const SupportSize& size : supports) runs.push_back({s, size});
  }
  return runs;
}

SparseConfig run_config(const PasskeyOptions& options, const PasskeyRunKind& run) {
  SparseConfig c = options.sparse;
  c.rule = *run.rule;
  c.top_k = run.support.k;
  return c;
}

}  // namespace

// --- options ----------------------------------------------------------------------------------

void PasskeyOptions::validate() const {
  AMC_CHECK(!model.empty(), kWhere, "--model: the checkpoint directory must not be empty");
  AMC_CHECK(!text_files.empty(), kWhere, "--text: give at least one document");
  require_nonempty(contexts, "--contexts");
  require_distinct(contexts, "--contexts", [](std::int64_t c) { return std::to_string(c); });
  for (const std::int64_t c : contexts) {
    AMC_CHECK(c >= kMinContext && c <= kMaxContext, kWhere, "--contexts: ", c, " is not in [",
              kMinContext, ", ", kMaxContext, "]");
  }
  require_nonempty(depths, "--depths");
  require_distinct(depths, "--depths", [](double d) { return round_trip(d); });
  for (const double d : depths) {
    // round_trip: "0.99999999 is not in (0, 1)" is never shown as "1".
    AMC_CHECK(std::isfinite(d) && d > 0.0 && d < 1.0, kWhere, "--depths: ", round_trip(d),
              " is not in (0, 1)");
  }
  AMC_CHECK(trials >= 1 && trials <= kMaxTrials, kWhere, "--trials: must be in [1, ", kMaxTrials,
            "], got ", trials);
  AMC_CHECK(digits >= 1 && digits <= kMaxDigits, kWhere, "--digits: must be in [1, ", kMaxDigits,
            "], got ", digits);
  session.validate(kWhere);

  require_nonempty(supports, "--supports");
  std::vector<std::int64_t> sizes;
  for (const SupportSize& s : supports) sizes.push_back(s.support);
  require_distinct(sizes, "--supports", [](std::int64_t s) { return std::to_string(s); });
  for (const SupportSize& s : supports) {
    AMC_CHECK(s.support == sparse.sinks + sparse.window + s.k * sparse.block_size, kWhere,
              "--supports: ", s.support, " is not sinks + window + ", s.k, " x block size (",
              sparse.sinks, " + ", sparse.window, " + ", s.k, " x ", sparse.block_size, ")");
    // k = 0 would select nothing: every "rule" would read the same sinks and window.
    AMC_CHECK(s.k >= 1, kWhere, "--supports: ", s.support, " is only the sinks and the window (",
              sparse.sinks, " + ", sparse.window, "): no block would be selected; the smallest ",
              "valid size is ", sparse.sinks + sparse.window + sparse.block_size);
  }

  require_nonempty(rules, "--rules");
  require_distinct(rules, "--rules",
                   [](RuleName s) { return std::string("'").append(s.name()).append("'"); });
  for (const RuleName s : rules) {
    SparseConfig c = sparse;
    c.rule = s;
    c.top_k = supports.front().k;
    try {
      c.validate();
    } catch (const amc::error& e) {
      detail::throw_error(kWhere, "--rules: ", s.name(), ": ", e.what());
    }
  }
  AMC_CHECK(!out.empty(), kWhere, "--out: the output directory must not be empty");
}

// --- setup ------------------------------------------------------------------------------------

PasskeySetup prepare_passkey(const PasskeyOptions& options) {
  options.validate();
  PasskeySetup s;
  const std::filesystem::path model(options.model);
  AMC_CHECK(std::filesystem::is_directory(model) || transformer::is_gguf_file(model), kWhere,
            "--model: ", options.model,
            " is neither a checkpoint directory (config.json, model.safetensors, "
            "tokenizer.json) nor a GGUF file");
  s.checkpoint = std::make_unique<transformer::Checkpoint>(
      transformer::Checkpoint::load(model, options.session.load_options()));
  const transformer::Config& config = s.checkpoint->config();
  const transformer::SessionOptions resolved = options.session.session_options(*s.checkpoint);
  s.kv_dtype = *resolved.kv_dtype;
  s.kv_quantization = resolved.kv_quantization;
  s.rope_angles = *resolved.rope_angles;
  for (const std::int64_t c : options.contexts) {
    // The prompt's last token sits at position c - 1 and the last answer token is never fed:
    // an answer of `digits` tokens needs positions [0, c + digits - 1).
    const std::int64_t needed = c + options.digits - 1;
    AMC_CHECK(needed <= config.max_position_embeddings, kWhere, "--contexts: ", c, " with a ",
              options.digits, "-token answer needs ", needed,
              " positions, more than the model's max_position_embeddings (",
              config.max_position_embeddings, ")");
  }

  std::optional<transformer::Tokenizer> tokenizer = transformer::load_model_tokenizer(model);
  AMC_CHECK(tokenizer.has_value(), kWhere,
            "--model: ", transformer::model_tokenizer_source(model).string(),
            " not found (needed to encode the --text documents and the prompts)");
  s.tokenizer = std::make_unique<transformer::Tokenizer>(std::move(*tokenizer));
  for (Document& d : load_documents(options.text_files, s.tokenizer.get(), config.vocab_size)) {
    s.documents.push_back(make_passkey_document(std::move(d.path), d.ids, *s.tokenizer));
  }

  std::vector<std::int64_t> contexts = options.contexts;
  std::sort(contexts.begin(), contexts.end());
  std::vector<double> depths = options.depths;
  std::sort(depths.begin(), depths.end());
  const PasskeyDocument& longest = *std::max_element(
      s.documents.begin(), s.documents.end(),
      [](const PasskeyDocument& a, const PasskeyDocument& b) { return a.tokens() < b.tokens(); });
  for (const std::int64_t c : contexts) {
    AMC_CHECK(longest.tokens() >= c, kWhere, "--contexts: ", c, ": no --text document holds ", c,
              " tokens (the longest, ", longest.path, ", holds ", longest.tokens(),
              "); give longer documents or a shorter context");
  }

  const SparseConfig& sparse = options.sparse;
  for (const std::int64_t c : contexts) {
    for (std::int64_t t = 0; t < options.trials; ++t) {
      const PasskeyDraw draw = draw_passkey(s.documents, c, t, options.seed, options.digits);
      for (const double depth : depths) {
        PasskeyCase k{c, depth, t, draw, {}};
        const PasskeyDocument& document = s.documents[draw.document];
        try {
          k.prompt =
              make_passkey_prompt(*s.tokenizer, document, draw.start_byte, c, depth, draw.digits);
        } catch (const amc::error& e) {
          detail::throw_error(kWhere, "--contexts: ", c, ", trial ", t, ", depth ",
                              round_trip(depth), ": ", e.what());
        }
        const PasskeyPrompt& p = k.prompt;
        // A record in the always-kept parts is in every support: such a run measures nothing.
        // At the first answering step the cache holds c positions and the window is the last
        // `window` of them; later windows lie further right.
        AMC_CHECK(p.record_begin >= sparse.sinks, kWhere, "--depths: depth ", round_trip(depth),
                  " puts the record of context ", c, ", trial ", t, " at positions [",
                  p.record_begin, ", ", p.record_end, "), inside the sinks (--sinks ", sparse.sinks,
                  ": the first positions, always kept); use a larger depth or fewer "
                  "sinks");
        AMC_CHECK(p.record_end <= c - sparse.window, kWhere, "--depths: depth ", round_trip(depth),
                  " puts the record of context ", c, ", trial ", t, " at positions [",
                  p.record_begin, ", ", p.record_end, "), inside the window (--window ",
                  sparse.window,
                  ": the last positions, always kept); use a smaller depth, a smaller window or a "
                  "longer context");
        s.cases.push_back(std::move(k));
      }
    }
  }
  return s;
}

// --- the runner -------------------------------------------------------------------------------

struct PasskeyRunner::State {
  const transformer::Tokenizer& tokenizer;
  transformer::Session session;
  std::vector<float> logits;
  std::int64_t layers = 0;
  // The prompt of the last prefill().
  std::int64_t prefix = 0;
  std::int32_t last_token = 0;
  std::int64_t value_begin = 0, value_end = 0;
  // What the answering steps of a sparse run held; observing only during them.
  bool observing = false;
  SelectionScope scope = SelectionScope::per_head;
  double mass_sum = 0.0;
  std::int64_t mass_count = 0;
  std::vector<std::int64_t> planted, selections;  // [layers]

  State(const transformer::Checkpoint& checkpoint, const transformer::Tokenizer& t,
        const SparseConfig& b, StorageType kv_dtype, transformer::KvQuantization kv_quantization,
        transformer::RopeAngles rope_angles, int threads)
      : tokenizer(t),
        session(checkpoint, options(b, kv_dtype, kv_quantization, rope_angles, threads)),
        logits(static_cast<std::size_t>(checkpoint.config().vocab_size)),
        layers(checkpoint.config().num_hidden_layers) {}

  // The cache keeps block summaries from the prefill on, whatever the attention; set_decode
  // adds what another rule needs.
  transformer::SessionOptions options(const SparseConfig& b, StorageType kv_dtype,
                                      transformer::KvQuantization kv_quantization,
                                      transformer::RopeAngles rope_angles, int threads) {
    transformer::SessionOptions o;
    o.summaries_for = b;
    o.threads = threads;
    o.kv_dtype = kv_dtype;
    o.kv_quantization = kv_quantization;
    o.rope_angles = rope_angles;
    o.on_layer = [this](const transformer::LayerAttention& a) {
      if (observing) observe(a);
    };
    return o;
  }

  void observe(const transformer::LayerAttention& a) {
    AMC_CHECK(a.dense_output != nullptr && !a.sparse_operators.empty(), "amc::eval::PasskeyRunner",
              "the step ran no sparse and dense attention side by side");
    for (std::size_t h = 0; h < a.results.size(); ++h) {
      const HeadResult& sparse = a.results[h];
      const HeadResult& dense = a.dense_results[h];
      // A non-finite head makes the logits non-finite, which greedy_token refuses.
      if (!sparse.finite || !dense.finite) continue;
      mass_sum += retained_mass(sparse.lse, dense.lse);
      ++mass_count;
    }
    // One selection per query head, or one per KV head shared by its group.
    const std::int64_t per_operator = scope == SelectionScope::per_group ? 1 : a.group;
    const auto layer = static_cast<std::size_t>(a.layer);
    for (const BlockSparseDecode<>& op : a.sparse_operators) {
      for (std::int64_t j = 0; j < per_operator; ++j) {
        const Support& support = op.support(j);
        bool all = true;
        for (std::int64_t p = value_begin; p < value_end && all; ++p) all = support.contains(p);
        planted[layer] += all ? 1 : 0;
        ++selections[layer];
      }
    }
  }
};

PasskeyRunner::PasskeyRunner(const transformer::Checkpoint& checkpoint,
                             const transformer::Tokenizer& tokenizer, const SparseConfig& base,
                             StorageType kv_dtype, transformer::KvQuantization kv_quantization,
                             transformer::RopeAngles rope_angles, int threads)
    : state_(std::make_unique<State>(checkpoint, tokenizer, base, kv_dtype, kv_quantization,
                                     rope_angles, threads)) {}

PasskeyRunner::~PasskeyRunner() = default;

void PasskeyRunner::prefill(const PasskeyPrompt& prompt) {
  AMC_CHECK(prompt.ids.size() >= 2, "amc::eval::PasskeyRunner::prefill", "the prompt has ",
            prompt.ids.size(), " tokens; it needs at least 2");
  State& s = *state_;
  s.session.reset();
  s.session.set_decode(transformer::DenseAttention{}, false);
  s.session.reserve(static_cast<std::int64_t>(prompt.ids.size()) + PasskeyOptions::kMaxDigits);
  s.prefix = static_cast<std::int64_t>(prompt.ids.size()) - 1;
  s.session.prefill(std::span(prompt.ids).first(static_cast<std::size_t>(s.prefix)), s.logits);
  s.last_token = prompt.ids.back();
  s.value_begin = prompt.value_begin;
  s.value_end = prompt.value_end;
}

PasskeyAnswer PasskeyRunner::answer(const std::string& digits,
                                    const std::optional<SparseConfig>& sparse) {
  State& s = *state_;
  AMC_CHECK(!digits.empty(), "amc::eval::PasskeyRunner::answer", "the digits are empty");
  AMC_CHECK(s.prefix > 0, "amc::eval::PasskeyRunner::answer", "no prompt: call prefill() first");
  s.session.truncate(s.prefix);
  if (sparse) {
    s.session.set_decode(*sparse, true);
    s.scope = sparse->scope;
    s.mass_sum = 0.0;
    s.mass_count = 0;
    s.planted.assign(static_cast<std::size_t>(s.layers), 0);
    s.selections.assign(static_cast<std::size_t>(s.layers), 0);
    s.observing = true;
  } else {
    s.session.set_decode(transformer::DenseAttention{}, false);
  }
  const char* stage = sparse ? "sparse answer" : "dense answer";
  PasskeyAnswer a;
  std::int32_t token = s.last_token;
  try {
    // Each token carries at least one byte, so `digits` tokens always cover the digits.
    for (std::size_t step = 0; step < digits.size() && a.text.size() < digits.size(); ++step) {
      s.session.decode(token, s.logits);
      token = static_cast<std::int32_t>(
          greedy_token(s.logits, stage, static_cast<std::int64_t>(step)).top);
      a.tokens.push_back(token);
      a.text += s.tokenizer.token_bytes(token);
    }
  } catch (...) {
    s.observing = false;
    throw;
  }
  s.observing = false;
  a.correct = a.text.compare(0, digits.size(), digits) == 0;
  if (sparse) {
    a.retained_mass =
        s.mass_count > 0 ? s.mass_sum / static_cast<double>(s.mass_count) : std::nan("");
    std::int64_t planted = 0, selections = 0;
    for (std::size_t l = 0; l < s.planted.size(); ++l) {
      planted += s.planted[l];
      selections += s.selections[l];
      a.planted_by_layer.push_back(s.selections[l] > 0 ? static_cast<double>(s.planted[l]) /
                                                             static_cast<double>(s.selections[l])
                                                       : std::nan(""));
    }
    a.planted_in_support = selections > 0
                               ? static_cast<double>(planted) / static_cast<double>(selections)
                               : std::nan("");
  }
  return a;
}

// --- the probe --------------------------------------------------------------------------------

std::string run_label(const PasskeyRunKind& run) {
  if (!run.rule) return "dense";
  return std::string(run.rule->name()) + " " + std::to_string(run.support.support);
}

PasskeyResults run_passkey_probe(const PasskeyOptions& options, const PasskeySetup& setup,
                                 Progress* progress) {
  const std::vector<PasskeyRunKind> runs = run_kinds(options);
  const std::int64_t layers = setup.checkpoint->config().num_hidden_layers;
  // The cache keeps the first rule's summaries from the prefill on; set_decode adds others'.
  PasskeyRunner runner(*setup.checkpoint, *setup.tokenizer, run_config(options, runs[1]),
                       setup.kv_dtype, setup.kv_quantization, setup.rope_angles,
                       options.session.thread_count());

  // Cells in output order: context, depth (as the cases come), then the runs.
  PasskeyResults results;
  std::vector<std::pair<std::int64_t, double>> groups;  // (context, depth) in order
  for (const PasskeyCase& k : setup.cases) {
    if (std::find(groups.begin(), groups.end(), std::pair{k.context, k.depth}) == groups.end()) {
      groups.emplace_back(k.context, k.depth);
    }
  }
  std::sort(groups.begin(), groups.end());
  for (const auto& [context, depth] : groups) {
    for (const PasskeyRunKind& run : runs) {
      PasskeyCell cell;
      cell.run = run;
      cell.context = context;
      cell.depth = depth;
      cell.mean_retained_mass = 0.0;
      cell.planted_in_support = 0.0;
      if (run.rule) cell.planted_by_layer.assign(static_cast<std::size_t>(layers), 0.0);
      results.cells.push_back(std::move(cell));
    }
  }
  auto cell_of = [&](const PasskeyCase& k, std::size_t run) -> PasskeyCell& {
    const auto group = static_cast<std::size_t>(
        std::find(groups.begin(), groups.end(), std::pair{k.context, k.depth}) - groups.begin());
    return results.cells[group * runs.size() + run];
  };

  results.rows.reserve(setup.cases.size() * runs.size());
  for (const PasskeyCase& k : setup.cases) {
    const std::string label = "context " + std::to_string(k.context) + ", depth " +
                              round_trip(k.depth) + ", trial " + std::to_string(k.trial);
    const PasskeyDocument& document = setup.documents[k.draw.document];
    if (progress) progress->begin(label);
    std::int64_t sparse_correct = 0;
    bool dense_correct = false;
    try {
      if (progress) progress->stage("dense prefill", 0, static_cast<std::int64_t>(runs.size()));
      runner.prefill(k.prompt);
      for (std::size_t r = 0; r < runs.size(); ++r) {
        const PasskeyRunKind& run = runs[r];
        if (progress) {
          progress->stage(run_label(run).c_str(), static_cast<std::int64_t>(r + 1),
                          static_cast<std::int64_t>(runs.size()));
        }
        std::optional<SparseConfig> config;
        if (run.rule) config = run_config(options, run);
        PasskeyAnswer answer = runner.answer(k.draw.digits, config);
        PasskeyCell& cell = cell_of(k, r);
        ++cell.trials;
        cell.correct += answer.correct ? 1 : 0;
        cell.mean_retained_mass += answer.retained_mass;
        cell.planted_in_support += answer.planted_in_support;
        for (std::size_t l = 0; l < answer.planted_by_layer.size(); ++l) {
          cell.planted_by_layer[l] += answer.planted_by_layer[l];
        }
        if (run.rule) {
          sparse_correct += answer.correct ? 1 : 0;
        } else {
          dense_correct = answer.correct;
        }
        results.rows.push_back({&k, run, std::move(answer)});
      }
    } catch (const amc::error& e) {
      if (progress) progress->finish();
      refuse("passkey: ", label, " (", document.path, "): ", e.what());
    }
    if (progress) {
      progress->end(std::string("dense ") + (dense_correct ? "correct" : "wrong") + ", " +
                    std::to_string(sparse_correct) + " of " + std::to_string(runs.size() - 1) +
                    " sparse runs correct");
    }
  }
  for (PasskeyCell& cell : results.cells) {
    const auto n = static_cast<double>(cell.trials);
    cell.accuracy = cell.trials > 0 ? static_cast<double>(cell.correct) / n : std::nan("");
    cell.mean_retained_mass /= n;
    cell.planted_in_support /= n;
    for (double& x : cell.planted_by_layer) x /= n;
  }
  return results;
}

}  // namespace amc::eval

// amc-generate (alias amc-qwen2, its former name): greedy generation with the reference
// transformer, dense or block-sparse decode attention through amc, on a checkpoint of any
// family of the family table (family.cpp: config.json's "architectures", or a GGUF file's
// general.architecture, says which).
//
//   amc-generate --model DIR|FILE.gguf (--prompt TEXT | --prompt-ids 1,2,3) [-n 128]
//             [--attention dense|sparse] [--block-size B --top-k K --sinks S --window W
//             --scope head|group --rule RULE --summary-precision f32|bf16 --combine sum|max
//             --target-eps E --max-k K] [--decoding plain|speculative --draft-tokens N
//             --draft-margin M] [--threads N]
//             [--kv-dtype auto|bf16|f32] [--rope-angles auto|transformers|exact]
//             [--json] [--retained-mass] [--logits-out FILE.safetensors] [--ignore-eos]
//   amc-generate --model DIR --demo [--prompt TEXT] [sparse flags]
//
// --kv-dtype auto (the default) is the weights' dtype (bf16 for bf16 weights, f32 otherwise);
// --rope-angles auto is config.json's "amc_rope_angles", else transformers' float32 angles.
// --decoding speculative drafts up to --draft-tokens tokens per cycle with the sparse settings
// and verifies them in one dense pass: the tokens are dense decoding's (generate.hpp).
// Text goes to stdout as it is generated; timings to stderr. --json writes JSON lines instead:
// {"prompt_ids": [...], and the resolved settings}, one object per generated token, then a
// summary. Bad input (missing
// model files, bad flags, ids outside the vocabulary): one line on stderr, exit status 2.
#include <CLI/CLI.hpp>
#include <amc/amc.hpp>
#include <amc/cli/sparse_options.hpp>
#include <amc/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "demo_prompt.hpp"
#include "family.hpp"
#include "generate.hpp"
#include "model.hpp"
#include "model_files.hpp"
#include "session_flags.hpp"
#include "tokenizer.hpp"

namespace {

using amc::transformer::GeneratedToken;
using amc::transformer::GenerationResult;

struct Arguments {
  std::string model;
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_ids;
  std::int64_t tokens = 128;
  std::string attention = "dense";
  std::string decoding = "plain";
  amc::transformer::Speculation speculation;
  amc::SparseConfig sparse;                ///< from the selection options (amc::cli::SparseOptions)
  amc::transformer::SessionFlags session;  ///< --threads, --kv-dtype, --weight-dtype, --rope-angles
  bool json = false, retained_mass = false, demo = false, ignore_eos = false;
  std::string logits_out;
};

[[noreturn]] void fail(const std::string& message) { throw amc::error(message); }

std::vector<std::int32_t> parse_ids(const std::string& text, std::int64_t vocab) {
  std::vector<std::int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    if (first == std::string::npos) fail("--prompt-ids: empty entry in '" + text + "'");
    item = item.substr(first, last - first + 1);
    std::size_t used = 0;
    long long id = 0;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) fail("--prompt-ids: '" + item + "' is not an integer");
    if (id < 0 || id >= vocab) {
      fail("--prompt-ids: id " + item + " is outside the vocabulary [0, " + std::to_string(vocab) +
           ")");
    }
    ids.push_back(static_cast<std::int32_t>(id));
  }
  if (ids.empty()) fail("--prompt-ids: no ids given");
  return ids;
}

/// Turns token bytes into complete UTF-8 text: a token may end inside a multi-byte character
/// (byte-level BPE), so bytes wait until their character is complete.
class Utf8Stream {
 public:
  std::string push(const std::string& bytes) {
    pending_ += bytes;
    std::size_t complete = 0, i = 0;
    while (i < pending_.size()) {
      const auto c = static_cast<unsigned char>(pending_[i]);
      const std::size_t length = c < 0x80           ? 1
                                 : (c >> 5) == 0x6  ? 2
                                 : (c >> 4) == 0xE  ? 3
                                 : (c >> 3) == 0x1E ? 4
                                                    : 1;
      if (i + length > pending_.size()) break;  // wait for the rest of this character
      i += length;
      complete = i;
    }
    std::string out = pending_.substr(0, complete);
    pending_.erase(0, complete);
    return out;
  }
  /// What is left at the end (an incomplete character), replaced by U+FFFD.
  std::string flush() {
    std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
    pending_.clear();
    return out;
  }

 private:
  std::string pending_;
};

/// The text of one token; ids the tokenizer lacks (padding rows of the embedding) are shown
/// as <|id:N|>.
std::string token_text(const amc::transformer::Tokenizer* tokenizer, std::int32_t id) {
  if (tokenizer != nullptr && id < tokenizer->vocab_size()) {
    try {
      return tokenizer->token_bytes(id);
    } catch (const amc::error&) {
    }
  }
  return "<|id:" + std::to_string(id) + "|>";
}

double json_number(float x) { return static_cast<double>(x); }

using Json = nlohmann::ordered_json;  // keys in the documented order

Json nullable(float x) { return std::isnan(x) ? Json(nullptr) : Json(json_number(x)); }

std::string dump(const Json& j) {
  // Invalid UTF-8 cannot reach here (Utf8Stream), but never let output abort the run.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

amc::transformer::SessionOptions session_options(const Arguments& a,
                                                 const amc::transformer::Checkpoint& checkpoint,
                                                 bool sparse) {
  amc::transformer::SessionOptions o;
  if (sparse) o.attention = a.sparse;
  o.retained_mass = a.retained_mass;
  return a.session.session_options(checkpoint, o);
}

/// The KV cache dtype, RoPE angles and weight dtype a run resolved, with what was asked for
/// ("auto" or the explicit choice): the settings --json records.
Json resolved_settings(const Arguments& a, const amc::transformer::Checkpoint& checkpoint,
                       const amc::transformer::Session& session) {
  Json out = Json::object();
  amc::transformer::record_session(out, a.session, session.options(), checkpoint);
  return out;
}

/// "KV cache f32 (auto), RoPE angles exact (auto)" for the text outputs.
std::string describe_resolved(const Arguments& a, const amc::transformer::Session& session) {
  const auto source = [](const std::string& requested) {
    return requested == "auto" ? std::string(" (auto)") : std::string();
  };
  const amc::transformer::SessionOptions& o = session.options();
  return "KV cache " +
         (o.kv_quantization == amc::transformer::KvQuantization::q8_0
              ? std::string("q8_0")
              : std::string(amc::to_string(*o.kv_dtype))) +
         source(a.session.kv_dtype) + ", RoPE angles " +
         std::string(amc::transformer::to_string(*session.options().rope_angles)) +
         source(a.session.rope_angles);
}

std::string describe(const amc::SparseConfig& c) {
  std::ostringstream s;
  s << "block " << c.block_size << ", top-k " << c.top_k << ", sinks " << c.sinks << ", window "
    << c.window << ", scope " << amc::to_string(c.scope) << ", rule " << amc::to_string(c.rule)
    << " (support <= " << c.nominal_support() << " positions)";
  return s.str();
}

int run_generate(const Arguments& a, const amc::transformer::Checkpoint& checkpoint,
                 const amc::transformer::Tokenizer* tokenizer,
                 const std::vector<std::int32_t>& prompt) {
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const bool speculative = a.decoding == "speculative";
  // Speculation drafts with the sparse settings whatever --attention says (its verify passes
  // are dense); a draft length of 0 drafts nothing.
  const bool sparse = a.attention == "sparse" || (speculative && a.speculation.draft_tokens > 0);
  amc::transformer::Session session(checkpoint, session_options(a, checkpoint, sparse));
  amc::transformer::GenerationOptions g;
  g.max_tokens = a.tokens;
  g.decoding = amc::transformer::parse_decoding(a.decoding, "--decoding");
  g.speculation = a.speculation;
  g.stop_token = a.ignore_eos ? -1 : checkpoint.config().eos_token_id;
  g.keep_logits = !a.logits_out.empty();
  if (a.json) {
    Json first{{"prompt_ids", prompt}};
    first.update(resolved_settings(a, checkpoint, session));
    std::cout << dump(first) << '\n' << std::flush;
  }
  Utf8Stream text;
  const GenerationResult result =
      amc::transformer::generate(session, prompt, g, [&](const GeneratedToken& t) {
        const std::string piece = text.push(token_text(tokenizer, t.token));
        if (a.json) {
          std::cout << dump(Json{{"step", t.step},
                                 {"token", t.token},
                                 {"text", piece},
                                 {"logit", json_number(t.logit)},
                                 {"margin", json_number(t.margin)},
                                 {"min_retained_mass", nullable(t.min_retained_mass)}})
                    << '\n';
        } else {
          std::cout << piece;
        }
        std::cout << std::flush;
      });
  std::vector<std::int32_t> ids;
  for (const GeneratedToken& t : result.tokens) ids.push_back(t.token);
  if (!a.logits_out.empty()) {
    // Before the summary, so that a file that cannot be written leaves one line on stderr (and,
    // written to a temporary file renamed into place, never a partial file).
    const auto steps = static_cast<std::int64_t>(result.tokens.size());
    const amc::TensorToWrite tensor =
        amc::make_tensor_to_write("logits", {steps, vocab}, std::span<const float>(result.logits));
    amc::write_safetensors(a.logits_out, std::span(&tensor, 1));
  }
  // "dense attention", or "speculative decoding, drafts of <= 4 tokens, 4.50 tokens per verify
  // pass".
  char decoding[128];
  if (speculative) {
    std::snprintf(decoding, sizeof decoding,
                  "speculative decoding, drafts of <= %lld tokens, %.2f tokens per verify pass",
                  static_cast<long long>(a.speculation.draft_tokens), result.tokens_per_verify());
  } else {
    std::snprintf(decoding, sizeof decoding, "%s attention", a.attention.c_str());
  }
  if (a.json) {
    Json summary{{"tokens", ids},
                 {"prefill_tokens_per_s", result.prefill_tokens_per_s()},
                 {"decode_tokens_per_s", result.decode_tokens_per_s()}};
    if (speculative) {  // (plain decoding's summary keeps the keys it always had)
      summary["decoding"] = a.decoding;
      summary["draft_tokens"] = a.speculation.draft_tokens;
      summary["draft_margin"] = json_number(a.speculation.min_draft_margin);
      summary["draft_steps"] = result.draft_steps;
      summary["accepted_drafts"] = result.accepted_drafts;
      summary["verify_passes"] = result.verify_passes;
      summary["tokens_per_verify"] = result.tokens_per_verify();
    }
    std::cout << dump(summary) << '\n';
  } else {
    std::cout << text.flush() << '\n';
    std::fprintf(
        stderr,
        "amc-generate: %zu tokens; prefill %lld tokens at %.1f tokens/s; decode %.2f "
        "tokens/s (%s; %s; %s)\n",
        ids.size(), static_cast<long long>(result.prompt_tokens), result.prefill_tokens_per_s(),
        result.decode_tokens_per_s(), decoding, describe_resolved(a, session).c_str(),
        std::string(amc::transformer::to_string(checkpoint.config().architecture)).c_str());
  }
  return 0;
}

/// What config.json says about where the checkpoint came from: the note for a checkpoint that
/// amc-synth wrote (random weights) or its "amc_description" (data/qwen2-tiny has one); empty
/// for any other checkpoint, e.g. Qwen2-0.5B.
std::string provenance(const std::filesystem::path& dir) {
  try {
    std::ifstream in(dir / "config.json");
    const nlohmann::json config = nlohmann::json::parse(in);
    if (config.value("amc_synthetic", false)) {
      return "a synthetic checkpoint (amc-synth): random weights, so the text means nothing; what "
             "to watch is where dense and sparse decoding part and how much softmax mass the "
             "sparse supports kept";
    }
    return config.value("amc_description", std::string());
  } catch (const std::exception&) {
    return "";  // already loaded once: a failure here only loses the remark
  }
}

/// Retained mass exp(L_S - L_all) per layer over a sparse generation, from the Session's
/// on_layer hook (which sees the sparse and the dense lse of every head when retained_mass is
/// on): the mean and the minimum over decode steps and query heads.
class RetainedMassPerLayer {
 public:
  explicit RetainedMassPerLayer(std::int64_t layers)
      : sum_(static_cast<std::size_t>(layers)),
        min_(static_cast<std::size_t>(layers), 1.0),
        count_(static_cast<std::size_t>(layers)) {}

  void add(const amc::transformer::LayerAttention& a) {
    const auto layer = static_cast<std::size_t>(a.layer);
    for (std::size_t h = 0; h < a.results.size() && h < a.dense_results.size(); ++h) {
      const double mass = std::exp(static_cast<double>(a.results[h].lse) -
                                   static_cast<double>(a.dense_results[h].lse));
      sum_[layer] += mass;
      min_[layer] = std::min(min_[layer], mass);
      ++count_[layer];
    }
  }

  void print() const {
    std::printf("retained mass per layer (mean and minimum over decode steps and heads):\n");
    for (std::size_t l = 0; l < sum_.size(); ++l) {
      if (count_[l] == 0) continue;
      std::printf("  layer %2zu: mean %.4f, min %.4f\n", l,
                  sum_[l] / static_cast<double>(count_[l]), min_[l]);
    }
  }

 private:
  std::vector<double> sum_, min_;
  std::vector<std::int64_t> count_;
};

/// The text of a continuation's first tokens (enough to hold the demo's answer).
std::string continuation_text(const amc::transformer::Tokenizer* tokenizer,
                              const GenerationResult& result) {
  std::string text;
  for (std::size_t i = 0; i < result.tokens.size() && i < 16; ++i) {
    text += token_text(tokenizer, result.tokens[i].token);
  }
  return text;
}

int run_demo(const Arguments& a, const amc::transformer::Checkpoint& checkpoint,
             const amc::transformer::Tokenizer* tokenizer, const std::vector<std::int32_t>& prompt,
             const std::optional<amc::transformer::DemoPrompt>& demo_prompt) {
  const amc::transformer::Config& c = checkpoint.config();
  std::printf(
      "amc-generate demo: %s (%s, %lld layers, hidden %lld, %lld query heads sharing %lld KV "
      "heads)\n",
      checkpoint.directory().string().c_str(),
      std::string(amc::transformer::to_string(c.architecture)).c_str(),
      static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
      static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads));
  if (const std::string note = provenance(checkpoint.directory()); !note.empty()) {
    std::printf("%s\n", note.c_str());
  }
  std::printf("prompt: %zu tokens; greedy generation of up to %lld tokens, dense then sparse\n",
              prompt.size(), static_cast<long long>(a.tokens));
  amc::transformer::GenerationOptions g;
  g.max_tokens = a.tokens;
  g.stop_token = a.ignore_eos ? -1 : c.eos_token_id;

  // Dense, then sparse decoding, each timed as a user runs it: nothing measured inside.
  GenerationResult results[2];
  for (int sparse = 0; sparse < 2; ++sparse) {
    Arguments run = a;
    run.retained_mass = false;
    amc::transformer::Session session(checkpoint, session_options(run, checkpoint, sparse == 1));
    if (sparse == 1) {
      std::printf("\nsparse decoding: %s; dense prefill\n",
                  describe(*sparse_config(session.options().attention)).c_str());
    } else {
      std::printf("%s\n\ndense decoding:\n", describe_resolved(a, session).c_str());
    }
    std::fflush(stdout);
    Utf8Stream text;
    results[sparse] = amc::transformer::generate(session, prompt, g, [&](const GeneratedToken& t) {
      std::cout << text.push(token_text(tokenizer, t.token)) << std::flush;
    });
    std::cout << text.flush() << '\n';
    std::printf("  [%zu tokens; decode %.2f tokens/s; prefill %.1f tokens/s]\n",
                results[sparse].tokens.size(), results[sparse].decode_tokens_per_s(),
                results[sparse].prefill_tokens_per_s());
  }

  const auto& dense = results[0].tokens;
  const auto& sparse = results[1].tokens;
  std::printf("\n");
  std::size_t step = 0;
  while (step < dense.size() && step < sparse.size() && dense[step].token == sparse[step].token)
    ++step;
  if (step == dense.size() && step == sparse.size()) {
    std::printf("the continuations are identical through all %zu tokens\n", dense.size());
  } else if (step < dense.size() && step < sparse.size()) {
    std::printf("first difference at step %zu: dense chose %d (margin %.3f), sparse chose %d\n",
                step, dense[step].token, static_cast<double>(dense[step].margin),
                sparse[step].token);
  } else {
    std::printf("the continuations agree for %zu tokens, then one of them stopped\n", step);
  }
  std::printf("decode tokens/s: dense %.2f, sparse %.2f (each run timed on its own)\n",
              results[0].decode_tokens_per_s(), results[1].decode_tokens_per_s());

  // Speculative decoding: sparse drafts, dense verify passes, dense decoding's tokens.
  {
    amc::transformer::GenerationOptions speculative = g;
    speculative.decoding = amc::transformer::Decoding::speculative;
    speculative.speculation = a.speculation;
    Arguments run = a;
    run.retained_mass = false;
    amc::transformer::Session session(checkpoint, session_options(run, checkpoint, true));
    const GenerationResult r = amc::transformer::generate(session, prompt, speculative, nullptr);
    bool same = r.tokens.size() == dense.size();
    for (std::size_t i = 0; same && i < dense.size(); ++i)
      same = r.tokens[i].token == dense[i].token;
    std::printf(
        "speculative decoding (drafts of up to %lld sparse tokens, one dense verify pass each): "
        "%s dense decoding's tokens; %.2f tokens per verify pass; decode %.2f tokens/s\n",
        static_cast<long long>(a.speculation.draft_tokens), same ? "exactly" : "NOT",
        r.tokens_per_verify(), r.decode_tokens_per_s());
  }

  // The softmax mass sparse decoding kept, measured apart: the sparse generation once more,
  // untimed, with a dense pass beside every sparse step (the same tokens: the dense pass only
  // reads).
  std::printf(
      "\nmeasuring the retained mass: the sparse run again, with dense attention beside "
      "every step (untimed)\n");
  std::fflush(stdout);
  Arguments measured = a;
  measured.retained_mass = true;
  amc::transformer::SessionOptions options = session_options(measured, checkpoint, true);
  RetainedMassPerLayer mass_per_layer(c.num_hidden_layers);
  options.on_layer = [&](const amc::transformer::LayerAttention& l) { mass_per_layer.add(l); };
  amc::transformer::Session session(checkpoint, options);
  const GenerationResult with_mass = amc::transformer::generate(session, prompt, g, nullptr);
  bool same_tokens = with_mass.tokens.size() == sparse.size();
  for (std::size_t i = 0; same_tokens && i < sparse.size(); ++i)
    same_tokens = with_mass.tokens[i].token == sparse[i].token;
  if (!same_tokens) {
    std::printf(
        "(the measuring pass chose other tokens than the timed sparse run: a bug; its "
        "retained mass is that of its own tokens)\n");
  }
  float min_mass = 1.0f;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < with_mass.tokens.size(); ++i) {
    if (with_mass.tokens[i].min_retained_mass < min_mass) {
      min_mass = with_mass.tokens[i].min_retained_mass;
      worst = i;
    }
  }
  std::printf(
      "sparse decoding kept at least %.4f of the softmax mass in every layer and head "
      "(lowest at step %zu)\n",
      static_cast<double>(min_mass), worst);
  mass_per_layer.print();
  if (demo_prompt) {
    // The question the default prompt ends with, and whether each run found the answer.
    const std::string dense_answer = demo_prompt->answer(continuation_text(tokenizer, results[0]));
    const std::string sparse_answer = demo_prompt->answer(continuation_text(tokenizer, results[1]));
    const auto verdict = [&](const std::string& answer) {
      return answer == demo_prompt->value ? "found it" : "missed it";
    };
    std::printf("\nthe prompt %.*s: dense answered \"%s\" (%s), sparse \"%s\" (%s)\n",
                static_cast<int>(demo_prompt->where.size()), demo_prompt->where.data(),
                dense_answer.c_str(), verdict(dense_answer), sparse_answer.c_str(),
                verdict(sparse_answer));
  }
  return 0;
}

int run(const Arguments& a) {
  if (a.prompt && a.prompt_ids) fail("give either --prompt or --prompt-ids, not both");
  if (!a.demo && !a.prompt && !a.prompt_ids) fail("one of --prompt or --prompt-ids is required");
  if (a.demo && (a.json || !a.logits_out.empty()))
    fail("--demo prints text; it does not take --json or --logits-out");
  if (a.tokens < 0) fail("-n must be >= 0");
  const std::filesystem::path model(a.model);
  a.session.validate("");  // main() prefixes "amc-generate: "
  const amc::transformer::Checkpoint checkpoint =
      amc::transformer::Checkpoint::load(model, a.session.load_options());
  const std::optional<amc::transformer::Tokenizer> tokenizer =
      amc::transformer::load_model_tokenizer(model);
  if (!tokenizer && (a.prompt || a.demo)) {
    fail(amc::transformer::model_tokenizer_source(model).string() +
         ": file not found (needed to encode the prompt)");
  }
  // Without a prompt, the demo's: English in a chat for a model whose tokenizer speaks ChatML
  // (SmolLM2-Instruct, Qwen's chat models), else Python code (demo_prompt.hpp).
  std::optional<amc::transformer::DemoPrompt> demo_prompt;
  if (a.demo && !a.prompt && !a.prompt_ids) {
    demo_prompt = tokenizer->token_id("<|im_start|>") && tokenizer->token_id("<|im_end|>") &&
                          checkpoint.format() == amc::transformer::CheckpointFormat::gguf
                      ? amc::transformer::chat_demo_prompt()
                      : amc::transformer::code_demo_prompt();
  }
  std::vector<std::int32_t> prompt;
  if (a.prompt_ids) {
    prompt = parse_ids(*a.prompt_ids, checkpoint.config().vocab_size);
  } else {
    // As Hugging Face's tokenizer(prompt) encodes it: inside the post-processor's template, so
    // a Llama 3.1/3.2 prompt starts with <|begin_of_text|> as the model was trained to see;
    // Qwen's files (and byte-level ones) add nothing.
    prompt = tokenizer->encode_with_special_tokens(a.prompt ? *a.prompt : demo_prompt->text);
    if (prompt.empty()) fail("--prompt: the prompt encodes to no tokens");
    for (const std::int32_t id : prompt) {
      if (id >= checkpoint.config().vocab_size) {
        fail("--prompt: token id " + std::to_string(id) +
             " is outside the model's vocabulary [0, " +
             std::to_string(checkpoint.config().vocab_size) + ")");
      }
    }
  }
  const amc::transformer::Tokenizer* t = tokenizer ? &*tokenizer : nullptr;
  return a.demo ? run_demo(a, checkpoint, t, prompt, demo_prompt)
                : run_generate(a, checkpoint, t, prompt);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"amc-generate: greedy generation with a checkpoint of any supported family (" +
               std::string(amc::transformer::known_class_names()) +
               "), dense or block-sparse decode attention"};
  Arguments a;
  app.add_option("--model", a.model,
                 "checkpoint directory (config.json, model.safetensors, tokenizer.json) or GGUF "
                 "file")
      ->required();
  app.add_option("--prompt", a.prompt, "prompt text");
  app.add_option("--prompt-ids", a.prompt_ids, "prompt token ids, comma-separated");
  app.add_option("-n,--tokens", a.tokens, "tokens to generate")->capture_default_str();
  app.add_option("--attention", a.attention, "decode attention")
      ->check(CLI::IsMember({"dense", "sparse"}))
      ->capture_default_str();
  // --block-size, --top-k, --sinks, --window, --scope, --rule, --combine, --target-eps,
  // --max-k: the library's selection options (the scale is the model's).
  amc::cli::SparseOptions sparse_options(app, amc::SparseConfig{}, {"scale"});
  app.add_option("--decoding", a.decoding,
                 "plain: one decode step per token in the --attention given; speculative: tokens "
                 "drafted with the sparse settings and verified in one dense pass per cycle, so "
                 "that they are dense decoding's")
      ->check(CLI::IsMember({"plain", "speculative"}))
      ->capture_default_str();
  app.add_option("--draft-tokens", a.speculation.draft_tokens,
                 "with --decoding speculative: most tokens drafted per verify pass (0: each step "
                 "a dense verify pass)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{64}))
      ->capture_default_str();
  app.add_option("--draft-margin", a.speculation.min_draft_margin,
                 "with --decoding speculative: stop drafting after a token whose sparse logit "
                 "margin is below this (0: never early)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  amc::transformer::add_session_flags(app, a.session);
  app.add_flag("--json", a.json, "JSON lines instead of text");
  app.add_flag("--retained-mass", a.retained_mass,
               "also run dense attention to report the retained mass of sparse decoding");
  app.add_option("--logits-out", a.logits_out,
                 "save every generated step's logits, F32 [steps, vocab]");
  app.add_flag("--ignore-eos", a.ignore_eos, "generate all -n tokens even after end-of-text");
  app.add_flag("--demo", a.demo, "dense then sparse generation of the same prompt, compared");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "amc-generate: %s\n", e.what());
    return 2;
  }
  try {
    a.sparse = sparse_options.config();
    return run(a);
  } catch (const std::exception& e) {
    std::cout << std::flush;
    std::fprintf(stderr, "amc-generate: %s\n", e.what());
    return 2;
  }
}

// Checking options, loading the model and documents, planning prefixes.
#include "eval_setup.hpp"

#include <amc/io/sparse_config_json.hpp>

#include <algorithm>
#include <set>

#include "refuse.hpp"
#include "transformer/model.hpp"
#include "transformer/model_files.hpp"
#include "transformer/tokenizer.hpp"

namespace amc::eval {
namespace {

void check_list(const std::vector<std::int64_t>& values, const char* flag) {
  if (values.empty()) refuse(flag, " needs at least one value");
  std::set<std::int64_t> seen;
  for (const std::int64_t v : values) {
    if (v <= 0) refuse(flag, " ", v, ": must be positive");
    if (!seen.insert(v).second) refuse(flag, " lists ", v, " twice");
  }
}

/// Absolute and normalised, without a trailing separator ("m/" and "./m" name "m"), so that
/// --resume compares paths, not spellings.
std::string absolute_path(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p.string();
}

}  // namespace

Setup prepare(const CommonArguments& a) {
  if (a.text_files.empty() == a.id_files.empty()) {
    refuse("give documents either as --text files or as --ids files (one of the two)");
  }
  check_list(a.contexts, "--contexts");
  check_list(a.supports, "--supports");
  if (a.prefixes < 1) refuse("--prefixes must be >= 1, got ", a.prefixes);
  if (a.tokens < 2) {
    refuse("--tokens must be >= 2, got ", a.tokens,
           " (step 0 comes from the dense prefill; sparse attention acts from step 1)");
  }
  a.session.validate("");
  Setup s;
  s.sparse = a.sparse;
  s.sparse.validate();
  s.supports = map_supports(a.supports, s.sparse.block_size, s.sparse.sinks, s.sparse.window);
  std::sort(s.supports.begin(), s.supports.end(),
            [](const SupportSize& x, const SupportSize& y) { return x.support < y.support; });

  const std::filesystem::path model(a.model);
  if (!std::filesystem::is_directory(model) && !transformer::is_gguf_file(model)) {
    refuse("--model ", a.model,
           ": neither a checkpoint directory (config.json, model.safetensors, tokenizer.json) "
           "nor a GGUF file");
  }
  s.checkpoint = std::make_unique<transformer::Checkpoint>(
      transformer::Checkpoint::load(model, a.session.load_options()));
  const transformer::Config& c = s.checkpoint->config();
  s.session = a.session.session_options(*s.checkpoint);
  const std::int64_t longest_context = *std::max_element(a.contexts.begin(), a.contexts.end());
  if (longest_context > c.max_position_embeddings - a.tokens) {
    refuse("--contexts ", longest_context, " plus --tokens ", a.tokens,
           " exceeds the model's max_position_embeddings (", c.max_position_embeddings, ")");
  }

  if (!a.text_files.empty()) {
    const std::optional<transformer::Tokenizer> tokenizer =
        transformer::load_model_tokenizer(model);
    if (!tokenizer) {
      refuse(transformer::model_tokenizer_source(model).string(),
             ": file not found (needed to encode the --text documents)");
    }
    s.documents = load_documents(a.text_files, &*tokenizer, c.vocab_size);
  } else {
    s.documents = load_documents(a.id_files, nullptr, c.vocab_size);
  }
  s.plans = plan_prefixes(s.documents, a.contexts, a.prefixes);
  for (const ContextPlan& p : s.plans) {
    std::string note = "context " + std::to_string(p.context) + ": " +
                       std::to_string(p.documents.size()) + " of " + std::to_string(a.prefixes) +
                       " requested prefixes";
    if (p.skipped > 0) {
      note += " (" + std::to_string(p.skipped) + " of " + std::to_string(s.documents.size()) +
              " documents are shorter than " + std::to_string(p.context) + " tokens)";
    }
    s.prefix_notes.push_back(note);
  }

  s.out = a.out;
  std::error_code error;
  std::filesystem::create_directories(s.out, error);
  if (error || !std::filesystem::is_directory(s.out)) {
    refuse("--out ", a.out, ": cannot create the directory",
           error ? ": " + error.message() : std::string());
  }
  return s;
}

Json settings_json(const CommonArguments& a, const Setup& setup) {
  Json documents = Json::array();
  for (const Document& d : setup.documents) {
    documents.push_back(absolute_path(d.path));
  }
  Json s;
  s["format"] = "amc-eval-run/1";
  s["model"] = absolute_path(a.model);
  s["input"] = a.text_files.empty() ? "ids" : "text";
  s["documents"] = documents;
  s["tokens"] = a.tokens;
  // The selection settings as the library writes them, unset ones as null (top_k varies by
  // support; the others not taken keep their defaults).
  const Json selection = to_json<Json>(setup.sparse);  // named: items() refers into it
  for (const auto& [key, value] : selection.items()) {
    if (std::find(std::begin(kSettingsNotTaken), std::end(kSettingsNotTaken), key) ==
        std::end(kSettingsNotTaken)) {
      s[key] = value;
    }
  }
  // The resolved values, and what was asked for ("auto" or the explicit choice).
  transformer::record_session(s, a.session, setup.session, *setup.checkpoint);
  s["prefill"] = "dense";
  return s;
}

}  // namespace amc::eval

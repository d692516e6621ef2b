// The tokenizer a GGUF file's metadata describes (tokenizer.ggml.model "gpt2": byte-level BPE),
// read into a BpeVocabulary as llama.cpp reads it (src/llama-vocab.cpp, llama_vocab::impl::load).
//
// Only GgufFile's inline accessors (metadata(), source()) are used, so this file needs the GGUF
// reader's header and not its implementation: from_gguf_metadata and gguf_bpe_vocabulary can be
// tested on metadata built by hand, and from_gguf links wherever a GgufFile can be had.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "amc/error.hpp"
#include "transformer/tokenizer.hpp"
#include "transformer/tokenizer_internal.hpp"

namespace amc::transformer {
namespace {

constexpr std::string_view kModel = "tokenizer.ggml.model";
constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kMerges = "tokenizer.ggml.merges";
constexpr std::string_view kTokenType = "tokenizer.ggml.token_type";
constexpr std::string_view kBos = "tokenizer.ggml.bos_token_id";
constexpr std::string_view kEos = "tokenizer.ggml.eos_token_id";
constexpr std::string_view kAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kAddEos = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kPre = "tokenizer.ggml.pre";
constexpr std::array<std::string_view, 9> kKeys{kModel, kTokens, kMerges, kTokenType, kBos,
                                                kEos,   kAddBos, kAddEos, kPre};

std::string quote(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The type's name, as the GGUF reader spells it (its to_string lives in the reader's
/// implementation, which this file does without).
std::string_view type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8:
      return "uint8";
    case GgufValueType::int8:
      return "int8";
    case GgufValueType::uint16:
      return "uint16";
    case GgufValueType::int16:
      return "int16";
    case GgufValueType::uint32:
      return "uint32";
    case GgufValueType::int32:
      return "int32";
    case GgufValueType::float32:
      return "float32";
    case GgufValueType::boolean:
      return "boolean";
    case GgufValueType::string:
      return "string";
    case GgufValueType::array:
      return "array";
    case GgufValueType::uint64:
      return "uint64";
    case GgufValueType::int64:
      return "int64";
    case GgufValueType::float64:
      return "float64";
  }
  return "invalid";
}

bool is_integer_type(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8:
    case GgufValueType::int8:
    case GgufValueType::uint16:
    case GgufValueType::int16:
    case GgufValueType::uint32:
    case GgufValueType::int32:
    case GgufValueType::uint64:
    case GgufValueType::int64:
      return true;
    default:
      return false;
  }
}

/// The tokenizer keys of one file's metadata, with errors "<function>: <source>: metadata
/// '<key>' ...".
class Metadata {
 public:
  Metadata(std::span<const std::pair<std::string, GgufValue>> metadata, const std::string& source,
           const char* function)
      : source_(source), function_(function) {
    for (const auto& [key, value] : metadata) {
      const auto known = std::find(kKeys.begin(), kKeys.end(), key);
      if (known == kKeys.end()) continue;
      const auto index = static_cast<std::size_t>(known - kKeys.begin());
      if (values_[index]) fail(key, "appears twice");
      values_[index] = &value;
    }
  }

  template <class... Parts>
  [[noreturn]] void fail(std::string_view key, Parts&&... parts) const {
    detail::throw_error(function_, source_, ": metadata '", key, "' ",
                        std::forward<Parts>(parts)...);
  }

  const GgufValue* find(std::string_view key) const {
    const auto index =
        static_cast<std::size_t>(std::find(kKeys.begin(), kKeys.end(), key) - kKeys.begin());
    return values_[index];
  }

  const GgufValue& require(std::string_view key) const {
    const GgufValue* value = find(key);
    if (!value) fail(key, "is missing");
    return *value;
  }

  [[noreturn]] void wrong_type(std::string_view key, const GgufValue& value,
                               std::string_view expected) const {
    std::string stored(type_name(value.type));
    if (value.type == GgufValueType::array) {
      stored += " of ";
      stored += type_name(std::get<GgufArray>(value.value).element_type);
    }
    fail(key, "is ", stored, ", not ", expected);
  }

  std::string string(std::string_view key, const GgufValue& value) const {
    if (value.type != GgufValueType::string) wrong_type(key, value, "a string");
    return std::get<std::string>(value.value);
  }

  std::optional<bool> optional_boolean(std::string_view key) const {
    const GgufValue* value = find(key);
    if (!value) return std::nullopt;
    if (value->type != GgufValueType::boolean) wrong_type(key, *value, "a boolean");
    return std::get<bool>(value->value);
  }

  /// An id: any integer type, in [0, 2^31).
  std::optional<std::int32_t> optional_id(std::string_view key) const {
    const GgufValue* value = find(key);
    if (!value) return std::nullopt;
    if (!is_integer_type(value->type)) wrong_type(key, *value, "an integer");
    return id_of(key, *value);
  }

  const std::vector<GgufValue>& array(std::string_view key, const GgufValue& value,
                                      std::string_view expected) const {
    if (value.type != GgufValueType::array) wrong_type(key, value, expected);
    return std::get<GgufArray>(value.value).elements;
  }

  std::vector<std::string> strings(std::string_view key) const {
    const GgufValue& value = require(key);
    const std::vector<GgufValue>& elements = array(key, value, "an array of strings");
    if (std::get<GgufArray>(value.value).element_type != GgufValueType::string) {
      wrong_type(key, value, "an array of strings");
    }
    std::vector<std::string> out;
    out.reserve(elements.size());
    for (const GgufValue& element : elements) out.push_back(string(key, element));
    return out;
  }

  std::vector<std::int32_t> token_types(std::string_view key) const {
    const GgufValue* value = find(key);
    if (!value) return {};
    const std::vector<GgufValue>& elements = array(key, *value, "an array of integers");
    if (!is_integer_type(std::get<GgufArray>(value->value).element_type)) {
      wrong_type(key, *value, "an array of integers");
    }
    std::vector<std::int32_t> out;
    out.reserve(elements.size());
    for (std::size_t i = 0; i < elements.size(); ++i) {
      const GgufValue& element = elements[i];
      std::int64_t type = 0;
      if (const auto* u = std::get_if<std::uint64_t>(&element.value)) {
        type = *u > 1000 ? 1000 : static_cast<std::int64_t>(*u);
      } else if (const auto* s = std::get_if<std::int64_t>(&element.value)) {
        type = *s;
      } else {
        fail(key, "element [", i, "] is not an integer");
      }
      // Out-of-range values are kept recognisably wrong for from_vocabulary's message.
      out.push_back(static_cast<std::int32_t>(std::clamp<std::int64_t>(type, -1000, 1000)));
    }
    return out;
  }

 private:
  std::int32_t id_of(std::string_view key, const GgufValue& value) const {
    constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
    std::int64_t id = 0;
    if (const auto* u = std::get_if<std::uint64_t>(&value.value)) {
      if (*u > static_cast<std::uint64_t>(kMax)) fail(key, "= ", *u, " is not a token id");
      id = static_cast<std::int64_t>(*u);
    } else if (const auto* s = std::get_if<std::int64_t>(&value.value)) {
      id = *s;
    } else {
      fail(key, "is not an integer");
    }
    if (id < 0 || id > kMax) fail(key, "= ", id, " is not a token id");
    return static_cast<std::int32_t>(id);
  }

  const std::string& source_;
  const char* function_;
  std::array<const GgufValue*, kKeys.size()> values_{};
};

BpeVocabulary read_vocabulary(std::span<const std::pair<std::string, GgufValue>> metadata,
                              const std::string& source, const char* function) {
  const Metadata keys(metadata, source, function);
  const std::string model = keys.string(kModel, keys.require(kModel));
  if (model != "gpt2") {
    const char* what = model == "llama"  ? " (SentencePiece)"
                       : model == "bert" ? " (WordPiece)"
                       : model == "t5"   ? " (Unigram)"
                                         : "";
    keys.fail(kModel, "= ", quote(model), what,
              " is not supported (only \"gpt2\", byte-level BPE)");
  }
  BpeVocabulary vocabulary;
  vocabulary.tokens = keys.strings(kTokens);
  vocabulary.merges = keys.strings(kMerges);  // llama.cpp requires them for "gpt2" too
  vocabulary.token_types = keys.token_types(kTokenType);
  vocabulary.bos = keys.optional_id(kBos);
  vocabulary.eos = keys.optional_id(kEos);
  const GgufValue* pre = keys.find(kPre);
  if (!pre) {
    keys.fail(
        kPre,
        "is missing (llama.cpp falls back to \"default\" and warns that generation quality "
        "will be degraded; amc needs the name: ",
        [] {
          std::string list;
          for (const std::string& name : bpe_pre_tokenizer_names()) {
            if (!list.empty()) list += ", ";
            list += quote(name);
          }
          return list;
        }(),
        ")");
  }
  vocabulary.pre = keys.string(kPre, *pre);
  // As llama.cpp: the pre-tokenizer's default (true for the Llama 3 names), then the key.
  const std::optional<bool> add_bos = keys.optional_boolean(kAddBos);
  vocabulary.add_bos = add_bos.value_or(tokenizer_internal::pre_tokenizer_adds_bos(vocabulary.pre));
  if (!add_bos && vocabulary.add_bos && !vocabulary.bos) {
    keys.fail(kAddBos, "is absent, so true for pre-tokenizer ", quote(vocabulary.pre),
              " (as in llama.cpp), but ", kBos, " is not set");
  }
  vocabulary.add_eos = keys.optional_boolean(kAddEos).value_or(false);
  return vocabulary;
}

}  // namespace

BpeVocabulary gguf_bpe_vocabulary(std::span<const std::pair<std::string, GgufValue>> metadata,
                                  const std::string& source) {
  return read_vocabulary(metadata, source, "amc::transformer::gguf_bpe_vocabulary");
}

Tokenizer Tokenizer::from_gguf_metadata(std::span<const std::pair<std::string, GgufValue>> metadata,
                                        const std::string& source) {
  const char* function = "amc::transformer::Tokenizer::from_gguf";
  return build(read_vocabulary(metadata, source, function), source, function, true);
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  return from_gguf_metadata(file.metadata(), file.source());
}

}  // namespace amc::transformer

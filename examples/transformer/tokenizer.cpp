// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Qwen2, Qwen3, Llama 3).
//
// Encoding follows the Hugging Face `tokenizers` pipeline for the structures Qwen2, Qwen2.5,
// Qwen3 and Llama 3 use, step by step (as the Rust implementation's AddedVocabulary and BPE do):
//   1. added tokens (special or not) with "normalized": false are cut out of the raw text first,
//      leftmost-longest;
//   2. each remaining segment is normalised (NFC, utf8proc; Llama 3 has no normalizer), and added
//      tokens with "normalized": true are cut out of the normalised text, leftmost-longest;
//   3. the Split pre-tokenizers cut what remains into pieces (PCRE2, UTF + Unicode properties;
//      behaviour Isolated: matches and the gaps between them are pieces);
//   4. ByteLevel: each piece's bytes become the GPT-2 byte-to-unicode characters, whose vocabulary
//      ids are the initial BPE symbols; with ignore_merges (Llama 3) a piece that is itself in the
//      vocabulary is one token and BPE is skipped;
//   5. BPE: repeatedly merge the adjacent pair of lowest merge rank (leftmost first), as the Rust
//      implementation does with its priority queue.
// Decoding maps each token's characters back to bytes (ByteLevel decoder); added tokens decode
// to their content.
#include "transformer/tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "amc/error.hpp"
#include "transformer/tokenizer_internal.hpp"

namespace amc::transformer {
namespace {

using json = nlohmann::json;

using tokenizer_internal::kMaxTokenId;
using tokenizer_internal::pair_key;

/// Ids may leave gaps, but the per-id tables are sized by the largest id (about 80 bytes per
/// id): one id of 2^24 - 1 in a 100-byte file would allocate 1.3 GB. So ids must stay below
/// twice the number of tokens the file defines plus this slack.
constexpr std::int64_t kIdSlack = std::int64_t{1} << 16;

/// The regex a ByteLevel pre-tokenizer with use_regex true applies (GPT-2's).
constexpr const char* kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// --- UTF-8 ---------------------------------------------------------------------------------------

const utf8proc_uint8_t* as_u8(const char* p) {
  return reinterpret_cast<const utf8proc_uint8_t*>(p);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Offset of the first byte that does not start a valid UTF-8 sequence, or npos.
std::size_t invalid_utf8_offset(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(
        as_u8(text.data() + i), static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n <= 0) return i;
    i += static_cast<std::size_t>(n);
  }
  return std::string_view::npos;
}

/// Length of the valid prefix of a UTF-8 sequence starting at text[i] (the "maximal subpart" of
/// Unicode's U+FFFD substitution practice) and whether it is a complete character.
std::pair<std::size_t, bool> utf8_sequence_at(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return {1, true};
  std::size_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // valid range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, false};
  }
  std::size_t k = 1;
  for (; k < length && i + k < text.size(); ++k) {
    const unsigned char b = byte(i + k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  return {k, k == length};
}

/// `bytes` with every ill-formed sequence replaced by U+FFFD (as Rust's from_utf8_lossy, which
/// the Hugging Face decoder uses).
std::string utf8_lossy(std::string_view bytes) {
  if (invalid_utf8_offset(bytes) == std::string_view::npos) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  std::size_t i = 0;
  while (i < bytes.size()) {
    const auto [length, complete] = utf8_sequence_at(bytes, i);
    if (complete) {
      out.append(bytes.substr(i, length));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += length;
  }
  return out;
}

/// NFC of valid UTF-8 text (utf8proc).
std::string nfc_of_valid(std::string_view text) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(text);  // ASCII is always NFC
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(as_u8(text.data()), static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (length < 0) {
    detail::throw_error("amc::transformer::nfc", "utf8proc: ", utf8proc_errmsg(length));
  }
  std::string out(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(length));
  std::free(mapped);
  return out;
}

// --- byte <-> unicode (GPT-2's bytes_to_unicode) -------------------------------------------------

struct ByteMap {
  std::array<std::string, 256> utf8_of_byte;  ///< the character standing for each byte
  std::array<char32_t, 256> char_of_byte{};
  /// byte_of_char[c]: the byte character c stands for, or -1 (all such characters are < 324).
  std::array<std::int16_t, 324> byte_of_char{};
  std::array<unsigned char, 256> order{};  ///< bytes in bytes_to_unicode order (Qwen's ids 0..255)

  ByteMap() {
    std::size_t n = 0;
    std::array<bool, 256> printable{};
    for (int b = 0; b < 256; ++b) {
      printable[static_cast<std::size_t>(b)] =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    }
    for (int b = 0; b < 256; ++b) {
      if (printable[static_cast<std::size_t>(b)]) order[n++] = static_cast<unsigned char>(b);
    }
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const auto ub = static_cast<std::size_t>(b);
      char_of_byte[ub] = printable[ub] ? static_cast<char32_t>(b) : next++;
      if (!printable[ub]) order[n++] = static_cast<unsigned char>(b);
    }
    byte_of_char.fill(-1);
    for (std::size_t b = 0; b < 256; ++b) {
      append_utf8(utf8_of_byte[b], char_of_byte[b]);
      byte_of_char[char_of_byte[b]] = static_cast<std::int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

/// The byte-level spelling of raw bytes.
std::string byte_level(std::string_view bytes) {
  const ByteMap& map = byte_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += map.utf8_of_byte[static_cast<unsigned char>(c)];
  return out;
}

/// The bytes a byte-level token spelling stands for. As the Hugging Face ByteLevel decoder does,
/// a token holding a character outside the map stands for its own UTF-8 bytes.
std::string bytes_of_byte_level(std::string_view token) {
  const ByteMap& map = byte_map();
  std::string out;
  std::size_t i = 0;
  while (i < token.size()) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(
        as_u8(token.data() + i), static_cast<utf8proc_ssize_t>(token.size() - i), &cp);
    if (n <= 0) return std::string(token);
    const std::int16_t byte = cp >= 0 && static_cast<std::size_t>(cp) < map.byte_of_char.size()
                                  ? map.byte_of_char[static_cast<std::size_t>(cp)]
                                  : -1;
    if (byte < 0) return std::string(token);
    out += static_cast<char>(byte);
    i += static_cast<std::size_t>(n);
  }
  return out;
}

// --- PCRE2 ---------------------------------------------------------------------------------------

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  pcre2_get_error_message(code, buffer.data(), buffer.size());
  return std::string(reinterpret_cast<const char*>(buffer.data()));
}

/// A compiled Split pattern (immutable, shareable between threads; match data is per call).
class Regex {
 public:
  /// Throws amc::error "<where>: <what> ..." when the pattern does not compile.
  Regex(const std::string& pattern, bool literal, const std::string& where,
        const std::string& what) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    // NEVER_BACKSLASH_C: \C matches one byte even in UTF mode, so a Split step could cut a
    // character in two, and the next step (matched with PCRE2_NO_UTF_CHECK) would run PCRE2 on
    // invalid UTF-8, which its documentation leaves undefined (reads past the subject). No real
    // tokenizer uses \C; a pattern with it fails to compile and is refused.
    // A literal ("String") pattern has no escapes or classes, and PCRE2_LITERAL refuses both
    // options ("invalid option bits"): with PCRE2_UCP no String pattern ever compiled.
    const std::uint32_t options =
        PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C);
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &error_code, &error_offset, nullptr));
    if (!code_) {
      detail::throw_error(where.c_str(), what, " does not compile with PCRE2 at offset ",
                          error_offset, ": ", pcre2_message(error_code));
    }
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // falls back to the interpreter
  }

  /// Appends the pieces of `text` (valid UTF-8) for behaviour Isolated: every non-empty match and
  /// every non-empty stretch between matches, in order.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr));
    if (!data) throw std::bad_alloc();
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t last = 0, offset = 0;
    while (offset < text.size()) {
      int rc = pcre2_match(code_.get(), subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                           data.get(), nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code_.get(), subject, text.size(), offset,
                         PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.get(), nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        detail::throw_error("amc::transformer::Tokenizer::encode",
                            "pre-tokenizer regex failed: ", pcre2_message(rc));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
      const std::size_t begin = ovector[0], end = ovector[1];
      if (end > begin) {
        if (begin > last) pieces.push_back(text.substr(last, begin - last));
        pieces.push_back(text.substr(begin, end - begin));
        last = offset = end;
      } else {  // empty match: step over one character
        offset = begin + 1;
        while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) {
          ++offset;
        }
      }
    }
    if (last < text.size()) pieces.push_back(text.substr(last));
  }

 private:
  std::unique_ptr<pcre2_code, CodeDeleter> code_;
};

// --- JSON helpers --------------------------------------------------------------------------------

/// Errors while reading one tokenizer.json: "amc::transformer::Tokenizer: <source>: <problem>".
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    detail::throw_error("amc::transformer::Tokenizer", source_, ": ",
                        std::forward<Parts>(parts)...);
  }

  const std::string& source() const { return source_; }

  /// obj[key], which must be a string.
  std::string string_field(const json& obj, const char* key, const std::string& where) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail(where, ".", key, " is missing");
    if (!it->is_string()) fail(where, ".", key, " is not a string");
    return it->get<std::string>();
  }

  /// obj[key] when it is a boolean; `fallback` when absent or null.
  bool bool_field(const json& obj, const char* key, const std::string& where, bool fallback) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(where, ".", key, " is not a boolean");
    return it->get<bool>();
  }

  /// Refuses obj[key] unless absent, null or equal to `expected`.
  void require_bool(const json& obj, const char* key, const std::string& where, bool expected,
                    const char* why) const {
    if (bool_field(obj, key, where, expected) != expected) {
      fail(where, ".", key, " = ", expected ? "false" : "true", " is not supported (", why, ")");
    }
  }

  std::string type_of(const json& obj, const std::string& where) const {
    if (!obj.is_object()) fail(where, " is not an object");
    return string_field(obj, "type", where);
  }

  std::int32_t id(const json& value, const std::string& where) const {
    if (!value.is_number_integer()) fail(where, " is not an integer id");
    const std::int64_t id = value.is_number_unsigned()
                                ? static_cast<std::int64_t>(std::min<std::uint64_t>(
                                      value.get<std::uint64_t>(), std::uint64_t{1} << 62))
                                : value.get<std::int64_t>();
    if (id < 0) fail(where, " = ", id, " is negative");
    if (id >= kMaxTokenId) fail(where, " = ", id, " is beyond the cap of ", kMaxTokenId, " ids");
    return static_cast<std::int32_t>(id);
  }

 private:
  std::string source_;
};

/// `text` as a JSON string literal (quoted, control characters escaped) for messages.
std::string quote(std::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

/// A short description of a JSON value for messages: scalars as written, an object by its first
/// key (with its value when scalar), anything else by its type. Never dumps a container, whose
/// dump() recurses once per level of nesting.
std::string brief(const json& value) {
  if (value.is_string()) return quote(value.get_ref<const std::string&>());
  if (value.is_primitive()) return value.dump();
  if (value.is_object() && !value.empty()) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on "{" + std::string.
    const auto first = value.begin();
    std::string out = "{";
    out += quote(first.key());
    out += ": ";
    out += first->is_primitive() ? brief(*first) : std::string("...");
    out += "}";
    return out;
  }
  return value.type_name();
}

// --- the loaded tokenizer ------------------------------------------------------------------------

/// Added tokens to cut out of text, leftmost-longest (as the Rust implementation's
/// Aho-Corasick automaton with MatchKind::LeftmostLongest).
class AddedMatcher {
 public:
  struct Added {
    std::string content;  ///< what is matched (NFC'd for normalized tokens under NFC)
    std::int32_t id;
  };

  void add(std::string content, std::int32_t id) { added_.push_back({std::move(content), id}); }

  /// Call once after the last add: longest first; equal lengths keep the file's order.
  void finish() {
    std::stable_sort(added_.begin(), added_.end(), [](const Added& a, const Added& b) {
      return a.content.size() > b.content.size();
    });
    for (std::size_t i = 0; i < added_.size(); ++i) {
      by_first_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(i);
    }
  }

  bool empty() const { return added_.empty(); }

  /// The longest added token starting at text[i], if any.
  const Added* match_at(std::string_view text, std::size_t i) const {
    for (const std::size_t k : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      if (text.substr(i).starts_with(added_[k].content)) return &added_[k];  // longest first
    }
    return nullptr;
  }

  /// Calls on_text(stretch) for each stretch of `text` between matches (possibly empty) and
  /// on_added(id) for each match, in order.
  template <class OnText, class OnAdded>
  void split(std::string_view text, OnText&& on_text, OnAdded&& on_added) const {
    std::size_t begin = 0, i = 0;
    while (i < text.size()) {
      const Added* match = empty() ? nullptr : match_at(text, i);
      if (!match) {
        ++i;
        continue;
      }
      on_text(text.substr(begin, i - begin));
      on_added(match->id);
      i += match->content.size();
      begin = i;
    }
    on_text(text.substr(begin));
  }

 private:
  std::vector<Added> added_;
  std::array<std::vector<std::size_t>, 256> by_first_byte_;  ///< indices into added_
};

struct Model {
  enum class Kind : std::uint8_t { kNone, kVocab, kAdded };
  struct Merge {
    std::int32_t rank;
    std::int32_t id;  ///< the merged token
  };

  std::string source;
  std::unordered_map<std::string, std::int32_t> vocab;  ///< byte-level spelling -> id
  std::vector<std::string> spelling;                    ///< id -> vocab spelling or added content
  std::vector<std::string> bytes;                       ///< id -> the bytes it stands for
  std::vector<Kind> kind;                               ///< id -> what it is
  std::unordered_map<std::uint64_t, Merge> merges;      ///< (left id, right id) -> merge
  /// Initial BPE symbol of each byte; -1 for a byte the vocabulary lacks (a BpeVocabulary may
  /// lack some: SmolLM2's lacks 21), which is dropped before merging, as Hugging Face's BPE
  /// without unk_token drops it (its neighbours become adjacent). A tokenizer.json must have all.
  std::array<std::int32_t, 256> byte_id{};
  AddedMatcher added_raw;         ///< added tokens with "normalized": false, on the raw text
  AddedMatcher added_normalized;  ///< added tokens with "normalized": true, on normalised text
  std::unordered_map<std::string, std::int32_t> added_id;  ///< content -> id
  std::vector<Regex> splits;
  bool nfc = false;
  bool ignore_merges = false;
  /// The post-processor's single-sequence template (TemplateProcessing, as Llama 3.1 and 3.2
  /// files have): ids before and after the text's. Only encode_with_special_tokens uses them.
  /// A BpeVocabulary's add_bos / add_eos put its BOS / EOS here.
  std::vector<std::int32_t> template_prefix, template_suffix;
  /// A BpeVocabulary's BOS and EOS (a tokenizer.json names none).
  std::optional<std::int32_t> bos, eos;

  // Words already encoded. Guarded by the mutex so that a shared tokenizer stays thread-safe.
  static constexpr std::size_t kCacheEntries = 1 << 15;
  static constexpr std::size_t kCacheWordBytes = 64;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache;

  void check_id(std::int32_t id, const char* where) const {
    AMC_CHECK(id >= 0 && static_cast<std::size_t>(id) < kind.size() &&
                  kind[static_cast<std::size_t>(id)] != Kind::kNone,
              where, "id ", id, " is not in the vocabulary (", source, ", vocab_size ", kind.size(),
              ")");
  }

  /// BPE of one pre-tokenized piece (raw bytes), appended to `out`.
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
    if (word.empty()) return;
    const bool cacheable = word.size() <= kCacheWordBytes;
    if (cacheable) {
      const std::lock_guard lock(cache_mutex);
      const auto it = cache.find(std::string(word));
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<std::int32_t> ids = bpe(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
      const std::lock_guard lock(cache_mutex);
      if (cache.size() >= kCacheEntries) cache.clear();
      cache.emplace(std::string(word), std::move(ids));
    }
  }

  std::vector<std::int32_t> bpe(std::string_view word) const {
    if (ignore_merges) {
      const auto it = vocab.find(byte_level(word));
      if (it != vocab.end()) return {it->second};
    }
    struct Symbol {
      std::int32_t id, prev, next;
      bool alive;
    };
    struct Candidate {
      std::int32_t rank, pos, left, right, merged;
      bool operator>(const Candidate& other) const {
        return rank != other.rank ? rank > other.rank : pos > other.pos;
      }
    };
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    for (const char c : word) {
      const std::int32_t id = byte_id[static_cast<unsigned char>(c)];
      if (id >= 0) symbols.push_back({id, 0, 0, true});  // a missing byte is dropped
    }
    const auto n = static_cast<std::int32_t>(symbols.size());
    if (n == 0) return {};
    for (std::int32_t i = 0; i < n; ++i) {
      symbols[static_cast<std::size_t>(i)].prev = i - 1;
      symbols[static_cast<std::size_t>(i)].next = i + 1 < n ? i + 1 : -1;
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    const auto push = [&](std::int32_t pos) {
      if (pos < 0) return;
      const Symbol& left = symbols[static_cast<std::size_t>(pos)];
      if (left.next < 0) return;
      const Symbol& right = symbols[static_cast<std::size_t>(left.next)];
      const auto it = merges.find(pair_key(left.id, right.id));
      if (it != merges.end()) queue.push({it->second.rank, pos, left.id, right.id, it->second.id});
    };
    for (std::int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[static_cast<std::size_t>(top.pos)];
      if (!left.alive || left.next < 0 || left.id != top.left) continue;
      Symbol& right = symbols[static_cast<std::size_t>(left.next)];
      if (right.id != top.right) continue;
      left.id = top.merged;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
      push(left.prev);
      push(top.pos);
    }
    std::vector<std::int32_t> ids;
    for (std::int32_t i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
      ids.push_back(symbols[static_cast<std::size_t>(i)].id);
    }
    return ids;
  }

  /// Normalises a stretch of text without raw-matched added tokens, cuts out the normalized
  /// added tokens, pre-tokenizes and BPE-encodes the rest.
  void encode_segment(std::string_view segment, std::vector<std::int32_t>& out) const {
    if (segment.empty()) return;
    const std::string normalized = nfc ? nfc_of_valid(segment) : std::string(segment);
    added_normalized.split(
        normalized, [&](std::string_view stretch) { pre_tokenize_and_encode(stretch, out); },
        [&](std::int32_t id) { out.push_back(id); });
  }

  void pre_tokenize_and_encode(std::string_view text, std::vector<std::int32_t>& out) const {
    if (text.empty()) return;
    std::vector<std::string_view> pieces{text};
    for (const Regex& regex : splits) {
      std::vector<std::string_view> next;
      for (const std::string_view piece : pieces) regex.split(piece, next);
      pieces = std::move(next);
    }
    for (const std::string_view piece : pieces) encode_word(piece, out);
  }
};

// --- loading -------------------------------------------------------------------------------------

/// Deepest nesting of normalizer Sequences accepted (real files nest at most one level). Without
/// a cap a Sequence nested 100,000 deep in a 3.6 MB file recursed once per level and built a
/// location string per level: quadratic, gigabytes (found by reasoning from fuzz_tokenizer_json;
/// fuzz/regressions/fuzz_tokenizer_json/).
constexpr std::size_t kMaxNormalizerDepth = 16;

void read_normalizer(const Reader& reader, const json& root, Model& impl) {
  const auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return;
  const std::function<void(const json&, const std::string&, std::size_t)> visit =
      [&](const json& node, const std::string& where, std::size_t depth) {
        if (depth > kMaxNormalizerDepth) {
          reader.fail(where, " nests normalizer Sequences deeper than ", kMaxNormalizerDepth,
                      " levels");
        }
        const std::string type = reader.type_of(node, where);
        if (type == "NFC") {
          impl.nfc = true;
        } else if (type == "Sequence") {
          const auto list = node.find("normalizers");
          if (list == node.end() || !list->is_array()) {
            reader.fail(where, ".normalizers is missing or not an array");
          }
          for (std::size_t i = 0; i < list->size(); ++i) {
            visit((*list)[i], where + ".normalizers[" + std::to_string(i) + "]", depth + 1);
          }
        } else {
          reader.fail(where, ".type ", quote(type), " is not supported (only NFC)");
        }
      };
  visit(*it, "normalizer", 0);
}

void read_pre_tokenizer(const Reader& reader, const json& root, Model& impl) {
  const auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null()) {
    reader.fail("pre_tokenizer is missing (a ByteLevel pre-tokenizer is required)");
  }
  std::vector<std::pair<const json*, std::string>> steps;
  if (reader.type_of(*it, "pre_tokenizer") == "Sequence") {
    const auto list = it->find("pretokenizers");
    if (list == it->end() || !list->is_array()) {
      reader.fail("pre_tokenizer.pretokenizers is missing or not an array");
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      steps.emplace_back(&(*list)[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
    }
  } else {
    steps.emplace_back(&*it, "pre_tokenizer");
  }
  bool byte_level_seen = false;
  for (const auto& [node, where] : steps) {
    const std::string type = reader.type_of(*node, where);
    if (byte_level_seen) {
      reader.fail(where, ".type ", quote(type),
                  " after ByteLevel is not supported (ByteLevel must come last)");
    }
    if (type == "Split") {
      const auto pattern = node->find("pattern");
      if (pattern == node->end() || !pattern->is_object() || pattern->size() != 1) {
        reader.fail(where, ".pattern is missing or not {\"Regex\": ...} / {\"String\": ...}");
      }
      const bool literal = pattern->contains("String");
      if (!literal && !pattern->contains("Regex")) {
        reader.fail(where, ".pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
      }
      const std::string text =
          reader.string_field(*pattern, literal ? "String" : "Regex", where + ".pattern");
      const std::string behavior = reader.string_field(*node, "behavior", where);
      if (behavior != "Isolated") {
        reader.fail(where, ".behavior ", quote(behavior), " is not supported (only Isolated)");
      }
      reader.require_bool(*node, "invert", where, false, "only matches are split off");
      impl.splits.emplace_back(text, literal, "amc::transformer::Tokenizer",
                               reader.source() + ": " + where + ".pattern");
    } else if (type == "ByteLevel") {
      // trim_offsets (true in Llama 3's file) only moves the offsets of an encoding, never ids.
      reader.require_bool(*node, "add_prefix_space", where, false,
                          "neither Qwen nor Llama 3 adds a prefix space");
      if (reader.bool_field(*node, "use_regex", where, true)) {
        impl.splits.emplace_back(kGpt2SplitRegex, false, "amc::transformer::Tokenizer",
                                 reader.source() + ": GPT-2 regex");
      }
      byte_level_seen = true;
    } else {
      reader.fail(where, ".type ", quote(type), " is not supported (only Split and ByteLevel)");
    }
  }
  if (!byte_level_seen) reader.fail("pre_tokenizer has no ByteLevel step (byte-level BPE only)");
}

/// A TemplateProcessing post-processor: its "single" template (encode has no pair, so "pair" is
/// not read) as the ids before and after the text, each special token's ids taken from
/// "special_tokens" as the Rust implementation does. type_id is not read: encode returns no
/// token type ids.
void read_template(const Reader& reader, const json& node, const std::string& where, Model& impl) {
  const auto single = node.find("single");
  if (single == node.end() || !single->is_array()) {
    reader.fail(where, ".single is missing or not an array");
  }
  const auto specials = node.find("special_tokens");
  bool sequence_seen = false;
  for (std::size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    const std::string item_where = where + ".single[" + std::to_string(i) + "]";
    if (!item.is_object() || item.size() != 1) {
      reader.fail(item_where, " is not {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
    if (const auto sequence = item.find("Sequence"); sequence != item.end()) {
      if (!sequence->is_object()) reader.fail(item_where, ".Sequence is not an object");
      const std::string id = reader.string_field(*sequence, "id", item_where + ".Sequence");
      if (id != "A") {
        reader.fail(item_where, ".Sequence.id ", quote(id),
                    " is not supported (a single template holds sequence \"A\" only)");
      }
      if (sequence_seen) reader.fail(item_where, " repeats sequence \"A\"");
      sequence_seen = true;
      continue;
    }
    const auto special = item.find("SpecialToken");
    if (special == item.end() || !special->is_object()) {
      reader.fail(item_where, " is not {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
    const std::string name = reader.string_field(*special, "id", item_where + ".SpecialToken");
    if (specials == node.end() || !specials->is_object() || !specials->contains(name)) {
      reader.fail(item_where, ".SpecialToken.id ", quote(name), " is not in ", where,
                  ".special_tokens");
    }
    const json& entry = (*specials)[name];
    const std::string entry_where = where + ".special_tokens[" + quote(name) + "]";
    if (!entry.is_object() || !entry.contains("ids") || !entry["ids"].is_array() ||
        entry["ids"].empty()) {
      reader.fail(entry_where, ".ids is missing, empty or not an array");
    }
    std::vector<std::int32_t>& out = sequence_seen ? impl.template_suffix : impl.template_prefix;
    for (std::size_t k = 0; k < entry["ids"].size(); ++k) {
      out.push_back(reader.id(entry["ids"][k], entry_where + ".ids[" + std::to_string(k) + "]"));
    }
  }
  if (!sequence_seen) reader.fail(where, ".single has no {\"Sequence\": {\"id\": \"A\"}}");
}

void read_decoder_and_post(const Reader& reader, const json& root, Model& impl) {
  const auto decoder = root.find("decoder");
  if (decoder == root.end() || decoder->is_null()) {
    reader.fail("decoder is missing (a ByteLevel decoder is required)");
  }
  // The ByteLevel decoder's and post-processor's options (add_prefix_space, trim_offsets,
  // use_regex; Llama 3's file sets them true) change no id and no decoded byte: the Rust
  // ByteLevel decoder maps characters back to bytes whatever they say, and its post-processor
  // only trims offsets.
  const std::string type = reader.type_of(*decoder, "decoder");
  if (type != "ByteLevel") {
    reader.fail("decoder.type ", quote(type), " is not supported (only ByteLevel)");
  }
  const auto post = root.find("post_processor");
  if (post != root.end() && !post->is_null()) {
    // ByteLevel and TemplateProcessing, alone or in one Sequence (Llama 3.1 and 3.2:
    // [ByteLevel, TemplateProcessing]); at most one template.
    std::vector<std::pair<const json*, std::string>> steps;
    if (reader.type_of(*post, "post_processor") == "Sequence") {
      const auto list = post->find("processors");
      if (list == post->end() || !list->is_array()) {
        reader.fail("post_processor.processors is missing or not an array");
      }
      for (std::size_t i = 0; i < list->size(); ++i) {
        steps.emplace_back(&(*list)[i], "post_processor.processors[" + std::to_string(i) + "]");
      }
    } else {
      steps.emplace_back(&*post, "post_processor");
    }
    bool template_seen = false;
    for (const auto& [node, where] : steps) {
      const std::string post_type = reader.type_of(*node, where);
      if (post_type == "TemplateProcessing") {
        if (template_seen) reader.fail(where, " is a second TemplateProcessing");
        read_template(reader, *node, where, impl);
        template_seen = true;
      } else if (post_type != "ByteLevel") {
        reader.fail(where, ".type ", quote(post_type),
                    " is not supported (only ByteLevel and TemplateProcessing, alone or in a "
                    "Sequence)");
      }
    }
  }
  const auto truncation = root.find("truncation");
  if (truncation != root.end() && !truncation->is_null()) {
    reader.fail("truncation is set; not supported (encode returns every token)");
  }
  // The Rust implementation pads single encodings too: to a Fixed length, or to a multiple of
  // pad_to_multiple_of. BatchLongest alone pads a single text to its own length: nothing.
  const auto padding = root.find("padding");
  if (padding != root.end() && !padding->is_null()) {
    if (!padding->is_object()) reader.fail("padding is not an object");
    const auto strategy = padding->find("strategy");
    if (strategy == padding->end() || *strategy != "BatchLongest") {
      reader.fail("padding.strategy ",
                  strategy == padding->end() ? std::string("(missing)") : brief(*strategy),
                  " is not supported (only \"BatchLongest\": encode adds no padding)");
    }
    const auto multiple = padding->find("pad_to_multiple_of");
    if (multiple != padding->end() && !multiple->is_null()) {
      reader.fail("padding.pad_to_multiple_of = ", brief(*multiple),
                  " is not supported (encode adds no padding)");
    }
  }
}

/// The bound on ids of a file (see kIdSlack), from the number of tokens it defines.
struct IdLimit {
  std::int64_t tokens = 0;
  std::int64_t limit = 0;

  explicit IdLimit(const json& root) {
    const auto model = root.find("model");
    if (model != root.end() && model->is_object()) {
      const auto vocab = model->find("vocab");
      if (vocab != model->end() && vocab->is_object()) {
        tokens += static_cast<std::int64_t>(vocab->size());
      }
    }
    const auto added = root.find("added_tokens");
    if (added != root.end() && added->is_array()) {
      tokens += static_cast<std::int64_t>(added->size());
    }
    limit = std::min(kMaxTokenId, 2 * tokens + kIdSlack);
  }

  void check(const Reader& reader, std::int32_t id, const std::string& where) const {
    if (id >= limit) {
      reader.fail(where, " = ", id, " is far beyond the ", tokens,
                  " tokens the file defines (ids must be below ", limit,
                  "; the tables are sized by the largest id)");
    }
  }
};

void read_model(const Reader& reader, const json& root, Model& impl, std::int32_t& max_id,
                const IdLimit& id_limit) {
  const auto model_it = root.find("model");
  if (model_it == root.end() || model_it->is_null()) reader.fail("\"model\" is missing");
  const json& model = *model_it;
  if (!model.is_object()) reader.fail("model is not an object");
  if (model.contains("type") && !model["type"].is_null()) {
    const std::string type = reader.string_field(model, "type", "model");
    if (type != "BPE") reader.fail("model.type ", quote(type), " is not supported (only BPE)");
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    if (!model["dropout"].is_number() || model["dropout"].get<double>() != 0.0) {
      reader.fail("model.dropout is set; not supported (encoding must be deterministic)");
    }
  }
  reader.require_bool(model, "byte_fallback", "model", false, "byte-level BPE needs none");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() &&
        (!model[key].is_string() || !model[key].get<std::string>().empty())) {
      reader.fail("model.", key, " is set; not supported (byte-level BPE uses none)");
    }
  }
  impl.ignore_merges = reader.bool_field(model, "ignore_merges", "model", false);

  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) {
    reader.fail("model.vocab is missing or not an object");
  }
  if (vocab_it->empty()) reader.fail("model.vocab is empty");
  impl.vocab.reserve(vocab_it->size());
  std::vector<const std::string*> by_id;
  for (const auto& [token, value] : vocab_it->items()) {
    const std::string where = "model.vocab[" + quote(token) + "]";
    const std::int32_t id = reader.id(value, where);
    id_limit.check(reader, id, where);
    const auto index = static_cast<std::size_t>(id);
    if (index >= by_id.size()) by_id.resize(index + 1, nullptr);
    if (by_id[index]) {
      reader.fail("duplicate id ", id, " in model.vocab: ", quote(*by_id[index]), " and ",
                  quote(token));
    }
    const auto [it, inserted] = impl.vocab.emplace(token, id);
    by_id[index] = &it->first;
    max_id = std::max(max_id, id);
  }
  impl.spelling.assign(by_id.size(), {});
  impl.bytes.assign(by_id.size(), {});
  impl.kind.assign(by_id.size(), Model::Kind::kNone);
  for (std::size_t id = 0; id < by_id.size(); ++id) {
    if (!by_id[id]) continue;
    impl.spelling[id] = *by_id[id];
    impl.bytes[id] = bytes_of_byte_level(*by_id[id]);
    impl.kind[id] = Model::Kind::kVocab;
  }
  const ByteMap& map = byte_map();
  for (std::size_t b = 0; b < 256; ++b) {
    const auto it = impl.vocab.find(map.utf8_of_byte[b]);
    if (it == impl.vocab.end()) {
      std::ostringstream hex;
      hex << std::hex << b;
      reader.fail("model.vocab lacks the byte token ", quote(map.utf8_of_byte[b]), " (byte 0x",
                  hex.str(), "): byte-level BPE needs all 256");
    }
    impl.byte_id[b] = it->second;
  }

  const auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) {
    reader.fail("model.merges is missing or not an array");
  }
  const json& merges = *merges_it;
  if (merges.size() >= static_cast<std::size_t>(kMaxTokenId)) {
    reader.fail("model.merges has ", merges.size(), " entries, beyond the cap of ", kMaxTokenId);
  }
  impl.merges.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const json& entry = merges[rank];
    const std::string where = "model.merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (entry.is_string()) {
      const std::string& text = entry.get_ref<const std::string&>();
      const std::size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos ||
          space == 0 || space + 1 == text.size()) {
        reader.fail(where, " = ", quote(text), " is not two tokens separated by one space");
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      left = entry[0].get_ref<const std::string&>();
      right = entry[1].get_ref<const std::string&>();
    } else {
      reader.fail(where, " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto a = impl.vocab.find(left);
    const auto b = impl.vocab.find(right);
    if (a == impl.vocab.end() || b == impl.vocab.end()) {
      reader.fail(where, " names the unknown token ", quote(a == impl.vocab.end() ? left : right));
    }
    const auto merged = impl.vocab.find(left + right);
    if (merged == impl.vocab.end()) {
      reader.fail(where, " merges ", quote(left), " and ", quote(right), " into ",
                  quote(left + right), ", which is not in model.vocab");
    }
    // As in the Hugging Face implementation, a repeated pair takes its last rank.
    impl.merges[pair_key(a->second, b->second)] = {static_cast<std::int32_t>(rank), merged->second};
  }
}

void read_added_tokens(const Reader& reader, const json& root, Model& impl, std::int32_t& max_id,
                       const IdLimit& id_limit) {
  const auto list = root.find("added_tokens");
  if (list == root.end() || list->is_null()) return;
  if (!list->is_array()) reader.fail("added_tokens is not an array");
  for (std::size_t i = 0; i < list->size(); ++i) {
    const json& entry = (*list)[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!entry.is_object()) reader.fail(where, " is not an object");
    if (!entry.contains("id")) reader.fail(where, ".id is missing");
    const std::int32_t id = reader.id(entry["id"], where + ".id");
    id_limit.check(reader, id, where + ".id");
    const std::string content = reader.string_field(entry, "content", where);
    if (content.empty()) reader.fail(where, ".content is empty");
    if (invalid_utf8_offset(content) != std::string_view::npos) {
      reader.fail(where, ".content is not valid UTF-8");
    }
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      reader.require_bool(entry, key, where, false, "added tokens match their content exactly");
    }
    // As tokenizers.js reads a missing flag (the Rust implementation requires both): special
    // defaults to false and normalized to !special.
    const bool special = reader.bool_field(entry, "special", where, false);
    const bool normalized = reader.bool_field(entry, "normalized", where, !special);
    const auto index = static_cast<std::size_t>(id);
    if (index >= impl.kind.size()) {
      impl.kind.resize(index + 1, Model::Kind::kNone);
      impl.spelling.resize(index + 1);
      impl.bytes.resize(index + 1);
    }
    switch (impl.kind[index]) {
      case Model::Kind::kAdded:
        reader.fail("duplicate id ", id, " in added_tokens: ", quote(impl.spelling[index]), " and ",
                    quote(content));
      case Model::Kind::kVocab:
        if (impl.spelling[index] != content) {
          reader.fail(where, ".id ", id, " (", quote(content), ") is already the vocabulary token ",
                      quote(impl.spelling[index]));
        }
        break;
      case Model::Kind::kNone:
        break;
    }
    if (!impl.added_id.emplace(content, id).second) {
      reader.fail(where, ".content ", quote(content), " is already added token id ",
                  impl.added_id.at(content));
    }
    impl.kind[index] = Model::Kind::kAdded;
    impl.spelling[index] = content;
    impl.bytes[index] = content;
    if (normalized) {
      // Matched in the normalised text, so its content is normalised too (read_normalizer ran).
      impl.added_normalized.add(impl.nfc ? nfc_of_valid(content) : content, id);
    } else {
      impl.added_raw.add(content, id);
    }
    max_id = std::max(max_id, id);
  }
  impl.added_raw.finish();
  impl.added_normalized.finish();
}

// --- pre-tokenizers by llama.cpp's name (BpeVocabulary::pre, GGUF tokenizer.ggml.pre) ----------

// The regexes are llama.cpp's, character for character (src/llama-vocab.cpp, llm_tokenizer_bpe:
// regex_exprs per LLAMA_VOCAB_PRE_TYPE_*), applied as llama.cpp's unicode_regex_split applies
// them: each splits every piece the one before left (matches and the gaps between them are
// pieces, Hugging Face's behaviour Isolated), then ByteLevel maps the bytes.
//
// Against the Hugging Face tokenizer.json pre-tokenizers of the same models:
// - GPT-2's regex has no trailing "|\s+" (ByteLevel's use_regex regex has it): the same pieces,
//   since that alternative only ever matches one whitespace character before a non-space, which
//   the gap between matches gives as its own piece too.
// - Qwen2's and Llama 3's "(?i:'s|'t|'re|'ve|'m|'ll|'d)" became "(?:'[sS]|'[tT]|...)" in
//   llama.cpp (std::regex has no (?i:)): the same except for U+017F LATIN SMALL LETTER LONG S,
//   which case-folds to s: Hugging Face cuts "'ſt" as "'ſ" + "t", llama.cpp (and amc here) keeps
//   "'ſt" whole.
// - smollm's "\p{N}" step is Hugging Face's Digits(individual_digits=true) (SmolLM2's file:
//   Sequence[Digits(individual_digits), ByteLevel(use_regex)]).
constexpr const char* kLlamaCppGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kLlamaCppLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlamaCppQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizer {
  const char* name;
  std::vector<const char*> regexes;
  bool ignore_merges;  ///< llama.cpp's ignore_merges for this name
  bool add_bos;        ///< llama.cpp's add_bos when tokenizer.ggml.add_bos_token is absent
};

/// llama.cpp's names (llama_vocab::impl::load) for the pre-tokenizer types supported here.
const std::vector<PreTokenizer>& pre_tokenizers() {
  static const std::vector<PreTokenizer> table = {
      // LLAMA_VOCAB_PRE_TYPE_DEFAULT: llama.cpp's own fallback, no Hugging Face counterpart.
      {"default",
       {R"([\p{P}\$\+<=>\^~\|]+)", kLlamaCppGpt2Regex, R"(\p{N}+)", "[0-9][0-9][0-9]"},
       false,
       false},
      {"gpt-2", {kLlamaCppGpt2Regex}, false, false},               // LLAMA_VOCAB_PRE_TYPE_GPT2
      {"smollm", {R"(\p{N})", kLlamaCppGpt2Regex}, false, false},  // ..._SMOLLM
      {"qwen2", {kLlamaCppQwen2Regex}, false, false},              // ..._QWEN2
      {"deepseek-r1-qwen", {kLlamaCppQwen2Regex}, false, false},   // ..._QWEN2
      {"llama3", {kLlamaCppLlama3Regex}, true, true},              // ..._LLAMA3
      {"llama-v3", {kLlamaCppLlama3Regex}, true, true},            // ..._LLAMA3
      {"llama-bpe", {kLlamaCppLlama3Regex}, true, true},           // ..._LLAMA3
  };
  return table;
}

const PreTokenizer* find_pre_tokenizer(std::string_view name) {
  for (const PreTokenizer& pre : pre_tokenizers()) {
    if (name == pre.name) return &pre;
  }
  return nullptr;
}

/// "\"default\", \"gpt-2\", ..." for messages.
std::string pre_tokenizer_list() {
  std::string list;
  for (const PreTokenizer& pre : pre_tokenizers()) {
    if (!list.empty()) list += ", ";
    list += quote(pre.name);
  }
  return list;
}

/// amc::error "<function>: <source>: <parts>" for one BpeVocabulary.
struct VocabularyError {
  const char* function;
  const std::string& source;

  template <class... Parts>
  [[noreturn]] void operator()(Parts&&... parts) const {
    detail::throw_error(function, source, ": ", std::forward<Parts>(parts)...);
  }
};

/// What a BpeVocabulary's fields are called in errors: their own names, or the GGUF keys.
struct VocabularyFields {
  const char* tokens;
  const char* merges;
  const char* token_types;
  const char* bos;
  const char* eos;
  const char* add_bos;
  const char* add_eos;
  const char* pre;
};

constexpr VocabularyFields kVocabularyFields{"tokens", "merges",  "token_types", "bos",
                                             "eos",    "add_bos", "add_eos",     "pre"};
constexpr VocabularyFields kGgufFields{
    "tokenizer.ggml.tokens",        "tokenizer.ggml.merges",       "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",  "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token", "tokenizer.ggml.pre"};

const PreTokenizer& pre_tokenizer_of(const std::string& name, const VocabularyError& fail,
                                     const VocabularyFields& fields) {
  const PreTokenizer* pre = find_pre_tokenizer(name);
  if (pre) return *pre;
  // "gpt2" is the tokenizer.ggml.model of every byte-level BPE file, not a pre-tokenizer name:
  // llama.cpp refuses it there too.
  fail(fields.pre, " ", quote(name), " is not supported (supported: ", pre_tokenizer_list(),
       name == "gpt2" ? "; GPT-2's pre-tokenizer is \"gpt-2\" in llama.cpp" : "", ")");
}

/// The tables of `model` from a BpeVocabulary (everything but the pre-tokenizer).
void read_vocabulary(const BpeVocabulary& vocabulary, Model& model, const VocabularyError& fail,
                     const VocabularyFields& fields) {
  const std::vector<std::string>& tokens = vocabulary.tokens;
  if (tokens.empty()) fail(fields.tokens, " is empty");
  if (tokens.size() >= static_cast<std::size_t>(kMaxTokenId)) {
    fail(fields.tokens, " has ", tokens.size(), " entries, beyond the cap of ", kMaxTokenId);
  }
  const std::vector<std::int32_t>& types = vocabulary.token_types;
  if (!types.empty() && types.size() != tokens.size()) {
    fail(fields.token_types, " has ", types.size(), " entries for ", tokens.size(), " tokens");
  }
  const std::size_t n = tokens.size();
  model.vocab.reserve(n);
  model.spelling.assign(n, {});
  model.bytes.assign(n, {});
  model.kind.assign(n, Model::Kind::kNone);
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& token = tokens[i];
    const auto id = static_cast<std::int32_t>(i);
    if (token.empty()) fail(fields.tokens, "[", i, "] is empty");
    if (const std::size_t bad = invalid_utf8_offset(token); bad != std::string_view::npos) {
      fail(fields.tokens, "[", i, "] is not valid UTF-8 (byte offset ", bad, ")");
    }
    const std::int32_t type = types.empty() ? 1 : types[i];
    switch (static_cast<BpeTokenType>(type)) {
      case BpeTokenType::normal:
      case BpeTokenType::unused:
        model.kind[i] = Model::Kind::kVocab;
        model.bytes[i] = bytes_of_byte_level(token);
        break;
      case BpeTokenType::unknown:
      case BpeTokenType::control:
      case BpeTokenType::user_defined:
        model.kind[i] = Model::Kind::kAdded;
        model.bytes[i] = token;
        model.added_raw.add(token, id);
        model.added_id.emplace(token, id);
        break;
      case BpeTokenType::byte:
        fail(fields.token_types, "[", i, "] = 6 (byte, token ", quote(token),
             ") is not supported: SentencePiece's <0xXX> byte tokens have no place in "
             "byte-level BPE");
      default:
        fail(fields.token_types, "[", i, "] = ", type, " (token ", quote(token),
             ") is not a token type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, "
             "6 byte)");
    }
    model.spelling[i] = token;
    const auto [it, inserted] = model.vocab.emplace(token, id);
    if (!inserted) {
      fail(fields.tokens, "[", i, "] = ", quote(token), " repeats ", fields.tokens, "[", it->second,
           "]");
    }
  }
  const ByteMap& map = byte_map();
  for (std::size_t b = 0; b < 256; ++b) {
    const auto it = model.vocab.find(map.utf8_of_byte[b]);
    model.byte_id[b] =
        it != model.vocab.end() &&
                model.kind[static_cast<std::size_t>(it->second)] == Model::Kind::kVocab
            ? it->second
            : -1;
  }

  const std::vector<std::string>& merges = vocabulary.merges;
  if (merges.size() >= static_cast<std::size_t>(kMaxTokenId)) {
    fail(fields.merges, " has ", merges.size(), " entries, beyond the cap of ", kMaxTokenId);
  }
  model.merges.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& text = merges[rank];
    const std::size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos ||
        space == 0 || space + 1 == text.size()) {
      fail(fields.merges, "[", rank, "] = ", quote(text),
           " is not two tokens separated by one space");
    }
    const std::string left = text.substr(0, space), right = text.substr(space + 1);
    const auto a = model.vocab.find(left);
    const auto b = model.vocab.find(right);
    if (a == model.vocab.end() || b == model.vocab.end()) {
      fail(fields.merges, "[", rank, "] = ", quote(text), " names the unknown token ",
           quote(a == model.vocab.end() ? left : right));
    }
    const auto merged = model.vocab.find(left + right);
    if (merged == model.vocab.end()) {
      fail(fields.merges, "[", rank, "] = ", quote(text), " merges into ", quote(left + right),
           ", which is not in ", fields.tokens);
    }
    // A repeated pair: Hugging Face keeps its last rank, llama.cpp its first. Refused.
    const auto [it, inserted] =
        model.merges.emplace(pair_key(a->second, b->second),
                             Model::Merge{static_cast<std::int32_t>(rank), merged->second});
    if (!inserted) {
      fail(fields.merges, "[", rank, "] = ", quote(text), " repeats ", fields.merges, "[",
           it->second.rank, "]");
    }
  }

  const auto check_special = [&](const std::optional<std::int32_t>& id, bool add,
                                 const char* id_field, const char* add_field) {
    if (id && (*id < 0 || static_cast<std::size_t>(*id) >= n)) {
      fail(id_field, " = ", *id, " is outside the vocabulary (", n, " tokens)");
    }
    if (add && !id) fail(add_field, " is true but ", id_field, " is not set");
  };
  check_special(vocabulary.bos, vocabulary.add_bos, fields.bos, fields.add_bos);
  check_special(vocabulary.eos, vocabulary.add_eos, fields.eos, fields.add_eos);
  model.bos = vocabulary.bos;
  model.eos = vocabulary.eos;
  if (vocabulary.add_bos) model.template_prefix.push_back(*vocabulary.bos);
  if (vocabulary.add_eos) model.template_suffix.push_back(*vocabulary.eos);
  model.added_raw.finish();
  model.added_normalized.finish();
}

}  // namespace

namespace tokenizer_internal {

const std::array<std::string, 256>& byte_spellings() { return byte_map().utf8_of_byte; }

const std::array<unsigned char, 256>& byte_token_order() { return byte_map().order; }

std::vector<std::string_view> split_isolated(std::string_view text, const std::string& pattern,
                                             const std::string& where) {
  const Regex regex(pattern, false, where, "regex");
  std::vector<std::string_view> pieces;
  regex.split(text, pieces);
  return pieces;
}

std::vector<std::string> pre_tokenize(std::string_view pre, std::string_view text) {
  const PreTokenizer* found = find_pre_tokenizer(pre);
  AMC_CHECK(found, "amc::transformer::tokenizer_internal::pre_tokenize", "pre-tokenizer ",
            quote(pre), " is not supported (supported: ", pre_tokenizer_list(), ")");
  const std::size_t bad = invalid_utf8_offset(text);
  AMC_CHECK(bad == std::string_view::npos, "amc::transformer::tokenizer_internal::pre_tokenize",
            "invalid UTF-8 at byte offset ", bad);
  std::vector<std::string_view> pieces{text};
  for (const char* pattern : found->regexes) {
    const Regex regex(pattern, false, "amc::transformer::tokenizer_internal::pre_tokenize",
                      "regex");
    std::vector<std::string_view> next;
    for (const std::string_view piece : pieces) regex.split(piece, next);
    pieces = std::move(next);
  }
  return {pieces.begin(), pieces.end()};
}

bool pre_tokenizer_adds_bos(std::string_view pre) {
  const PreTokenizer* found = find_pre_tokenizer(pre);
  return found && found->add_bos;
}

}  // namespace tokenizer_internal

struct Tokenizer::Impl {
  Model model;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  const Reader reader(source);
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    reader.fail("not valid JSON: ", e.what());
  }
  if (!root.is_object()) reader.fail("the top level is not a JSON object");
  auto impl = std::make_unique<Impl>();
  Model& model = impl->model;
  model.source = source;
  try {
    std::int32_t max_id = -1;
    const IdLimit id_limit(root);
    read_model(reader, root, model, max_id, id_limit);
    read_normalizer(reader, root, model);  // before the added tokens: normalized ones need it
    read_added_tokens(reader, root, model, max_id, id_limit);
    read_pre_tokenizer(reader, root, model);
    read_decoder_and_post(reader, root, model);
    model.kind.resize(static_cast<std::size_t>(max_id) + 1);
    model.spelling.resize(model.kind.size());
    model.bytes.resize(model.kind.size());
    for (const auto* ids : {&model.template_prefix, &model.template_suffix}) {
      for (const std::int32_t id : *ids) {
        if (static_cast<std::size_t>(id) >= model.kind.size() ||
            model.kind[static_cast<std::size_t>(id)] == Model::Kind::kNone) {
          reader.fail("the post_processor template adds id ", id,
                      ", which is not in the vocabulary or added tokens");
        }
      }
    }
  } catch (const json::exception& e) {  // a field of an unexpected type deep inside
    reader.fail("unexpected JSON content: ", e.what());
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::build(const BpeVocabulary& vocabulary, const std::string& source,
                           const char* function, bool gguf) {
  const VocabularyError fail{function, source};
  const VocabularyFields& fields = gguf ? kGgufFields : kVocabularyFields;
  const PreTokenizer& pre = pre_tokenizer_of(vocabulary.pre, fail, fields);
  auto impl = std::make_unique<Impl>();
  Model& model = impl->model;
  model.source = source;
  read_vocabulary(vocabulary, model, fail, fields);
  model.ignore_merges = pre.ignore_merges;
  for (const char* pattern : pre.regexes) {
    model.splits.emplace_back(pattern, false, function,
                              source + ": " + fields.pre + " " + quote(pre.name) + " regex");
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_vocabulary(const BpeVocabulary& vocabulary, const std::string& source) {
  return build(vocabulary, source, "amc::transformer::Tokenizer::from_vocabulary", false);
}

const std::vector<std::string>& bpe_pre_tokenizer_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const PreTokenizer& pre : pre_tokenizers()) out.emplace_back(pre.name);
    return out;
  }();
  return names;
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "tokenizer.json";
  std::ifstream in(file, std::ios::binary);
  AMC_CHECK(in.good(), "amc::transformer::Tokenizer::load", file.string(), ": cannot open (",
            std::filesystem::exists(file, ec) ? "unreadable" : "no such file", ")");
  std::ostringstream text;
  text << in.rdbuf();
  AMC_CHECK(!in.bad(), "amc::transformer::Tokenizer::load", file.string(), ": read error");
  return from_json(text.str(), file.string());
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  AMC_CHECK(text.size() < (std::size_t{1} << 31), "amc::transformer::Tokenizer::encode", "text of ",
            text.size(), " bytes is beyond 2 GiB");
  const std::size_t bad = invalid_utf8_offset(text);
  AMC_CHECK(bad == std::string_view::npos, "amc::transformer::Tokenizer::encode",
            "invalid UTF-8 at byte offset ", bad, " of ", text.size());
  const Model& impl = impl_->model;
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  impl.added_raw.split(
      text, [&](std::string_view segment) { impl.encode_segment(segment, ids); },
      [&](std::int32_t id) { ids.push_back(id); });
  return ids;
}

std::vector<std::int32_t> Tokenizer::encode_with_special_tokens(std::string_view text) const {
  const Model& impl = impl_->model;
  std::vector<std::int32_t> ids = impl.template_prefix;
  const std::vector<std::int32_t> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), impl.template_suffix.begin(), impl.template_suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string bytes;
  for (const std::int32_t id : ids) {
    impl_->model.check_id(id, "amc::transformer::Tokenizer::decode");
    bytes += impl_->model.bytes[static_cast<std::size_t>(id)];
  }
  return utf8_lossy(bytes);
}

std::string Tokenizer::token_bytes(std::int32_t id) const {
  impl_->model.check_id(id, "amc::transformer::Tokenizer::token_bytes");
  return impl_->model.bytes[static_cast<std::size_t>(id)];
}

std::optional<std::int32_t> Tokenizer::token_id(std::string_view token) const {
  const std::string key(token);
  if (const auto it = impl_->model.added_id.find(key); it != impl_->model.added_id.end())
    return it->second;
  if (const auto it = impl_->model.vocab.find(key); it != impl_->model.vocab.end())
    return it->second;
  return std::nullopt;
}

std::int64_t Tokenizer::vocab_size() const {
  return static_cast<std::int64_t>(impl_->model.kind.size());
}

std::optional<std::int32_t> Tokenizer::bos_id() const { return impl_->model.bos; }

std::optional<std::int32_t> Tokenizer::eos_id() const { return impl_->model.eos; }

std::string nfc(std::string_view text) {
  const std::size_t bad = invalid_utf8_offset(text);
  AMC_CHECK(bad == std::string_view::npos, "amc::transformer::nfc", "invalid UTF-8 at byte offset ",
            bad, " of ", text.size());
  return nfc_of_valid(text);
}

}  // namespace amc::transformer

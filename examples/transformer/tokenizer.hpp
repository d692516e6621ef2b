// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Qwen2, Qwen3, Llama 3) or
// from the tokenizer.ggml.* metadata of a GGUF file (tokenizer.ggml.model "gpt2").
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "amc/io/gguf.hpp"

namespace amc::transformer {

/// Token types of a BpeVocabulary, numbered as llama.cpp's (and GGUF's tokenizer.ggml.token_type).
enum class BpeTokenType : std::int32_t {
  normal = 1,        ///< a BPE token, spelled byte-level (GPT-2's bytes_to_unicode)
  unknown = 2,       ///< treated as control (llama.cpp matches it with the special tokens)
  control = 3,       ///< a special token: its raw text, matched in the text before BPE
  user_defined = 4,  ///< an added, non-special token: its raw text, matched as control is
  unused = 5,        ///< a padding entry: a vocabulary token like a normal one, never matched
  byte = 6,          ///< SentencePiece's <0xXX>: refused (byte-level BPE spells bytes itself)
};

/// A byte-level BPE tokenizer described without any file format: what GGUF's tokenizer.ggml.*
/// keys for tokenizer.ggml.model "gpt2" say, and what a tokenizer.json with a BPE model and a
/// ByteLevel pre-tokenizer says, less its normalizer. Tokenizer::from_vocabulary builds it.
struct BpeVocabulary {
  /// id -> token. Normal and unused tokens are byte-level spellings ("Ġworld"); control,
  /// user-defined and unknown tokens are their raw text ("<|im_end|>"). Unique, not empty,
  /// valid UTF-8. Byte tokens may be missing (SmolLM2 lacks 21): such a byte is dropped from
  /// its pre-token before merging (its neighbours may then merge), as Hugging Face's BPE
  /// without unk_token does.
  std::vector<std::string> tokens;
  /// Merges by rank, "left right" (one space; both tokens and their concatenation in `tokens`).
  std::vector<std::string> merges;
  /// id -> BpeTokenType value, or empty for all normal.
  std::vector<std::int32_t> token_types;
  std::optional<std::int32_t> bos, eos;
  /// encode_with_special_tokens puts bos first / eos last (each needs its id).
  bool add_bos = false;
  bool add_eos = false;
  /// The pre-tokenizer, by llama.cpp's name (tokenizer.ggml.pre): one of
  /// bpe_pre_tokenizer_names(). It also decides ignore_merges (true for the Llama 3 names), as
  /// in llama.cpp.
  std::string pre;
};

/// The names BpeVocabulary::pre accepts, each with llama.cpp's regexes (llama-vocab.cpp):
/// "default", "gpt-2", "smollm", "qwen2", "deepseek-r1-qwen", "llama3", "llama-v3", "llama-bpe".
const std::vector<std::string>& bpe_pre_tokenizer_names();

/// The BpeVocabulary that GGUF metadata describes (the keys of GgufFile::metadata(); `source`
/// names the file in errors). Reads tokenizer.ggml.model (must be "gpt2": "llama"
/// (SentencePiece), "bert", ... are refused by name), .tokens, .merges, .token_type (optional),
/// .bos_token_id and .eos_token_id (optional), .add_bos_token (optional; absent: what llama.cpp
/// does for the pre-tokenizer, true for the Llama 3 names and false otherwise), .add_eos_token
/// (optional, false) and .pre (required: llama.cpp falls back to "default" without it, with a
/// warning that generation quality will be degraded; amc refuses). Other keys are not read
/// (add_space_prefix does nothing in llama.cpp's BPE). A missing key or one of the wrong type
/// is an amc::error naming the key; the vocabulary itself is checked by from_vocabulary.
BpeVocabulary gguf_bpe_vocabulary(std::span<const std::pair<std::string, GgufValue>> metadata,
                                  const std::string& source);

/// Encodes and decodes exactly as a byte-level BPE tokenizer.json (or a BpeVocabulary) says (Qwen2,
/// Qwen2.5, Qwen3, Llama 3; tested on the real files of Qwen2, Qwen3 and Llama 3): added/special
/// tokens matched first, NFC normalisation where the file asks for it (Llama 3 has no normalizer),
/// the Split pre-tokenizer regex (PCRE2, Unicode classes; Llama 3 groups digits in threes), the
/// byte-to-unicode map, ranked BPE merges ("a b" strings or ["a", "b"] pairs) or, with
/// ignore_merges (Llama 3), a whole pre-token found in the vocabulary, ByteLevel decode. encode
/// adds no BOS; encode_with_special_tokens applies the post-processor's template. Immutable after
/// loading, so one tokenizer may be shared by threads (its cache of encoded words is internally
/// locked).
///
/// Accepted tokenizer.json structures: normalizer null, NFC or a Sequence of NFC, nested at most
/// 16 deep; pre_tokenizer Split (behavior Isolated, Regex or String pattern; a Regex may not use
/// \C, which could cut a character) steps followed by ByteLevel (add_prefix_space false;
/// use_regex true adds GPT-2's regex), alone or in a Sequence; model BPE without dropout,
/// byte_fallback, subword prefix or suffix, all 256 byte tokens present, optional ignore_merges;
/// added tokens without lstrip/rstrip/single_word, matched on the raw text ("normalized": false)
/// or on the normalised text ("normalized": true); decoder ByteLevel (whatever its options: they
/// change no byte); post_processor null, ByteLevel or TemplateProcessing (its single template:
/// special tokens around sequence A), alone or in a Sequence; truncation null; padding null or
/// BatchLongest without pad_to_multiple_of. Anything else is refused with an amc::error naming
/// the field and its value.
class Tokenizer {
 public:
  /// Loads DIR/tokenizer.json (or the file itself). Throws amc::error naming the file and the
  /// problem (missing model, unknown merge tokens, duplicate ids, unsupported settings).
  static Tokenizer load(const std::filesystem::path& path);
  /// Same, from the JSON text; `source` names it in errors.
  static Tokenizer from_json(std::string_view json_text,
                             const std::string& source = "tokenizer.json");

  /// The tokenizer a BpeVocabulary describes, with the tables the JSON path builds (no JSON
  /// involved). Encoding: control, user-defined and unknown tokens are cut out of the raw text
  /// first, leftmost-longest (as Hugging Face matches added tokens, special or not, and as
  /// llama.cpp does with parse_special; llama.cpp takes the longest token first over the whole
  /// text instead, which differs only for overlapping tokens); no normalisation (llama.cpp has
  /// none; Hugging Face's Qwen2 file applies NFC, so non-NFC text can encode differently);
  /// the pre-tokenizer's regexes (PCRE2, each step splitting the pieces of the one before,
  /// behaviour Isolated); byte-level BPE by merge rank (with ignore_merges, a piece that is a
  /// token is that token). Decode concatenates the tokens' bytes (control and user-defined
  /// tokens: their text), with no clean-up of spaces. Throws amc::error
  /// "amc::transformer::Tokenizer::from_vocabulary: <source>: <field> ..." for an unknown
  /// pre-tokenizer (listing the supported ones), duplicate, empty or invalid UTF-8 tokens,
  /// token_types of another length or with a value outside 1-5, merges that are not "a b", name
  /// unknown tokens, make an unknown token or repeat a pair, bos/eos outside the vocabulary, and
  /// add_bos/add_eos without the id.
  static Tokenizer from_vocabulary(const BpeVocabulary& vocabulary,
                                   const std::string& source = "vocabulary");
  /// from_vocabulary(gguf_bpe_vocabulary(file.metadata(), file.source())), with errors naming
  /// the GGUF keys ("amc::transformer::Tokenizer::from_gguf: <file>: tokenizer.ggml.tokens[7]
  /// ...").
  static Tokenizer from_gguf(const GgufFile& file);
  /// Same, from metadata key/value pairs (a GgufFile's, or built by hand).
  static Tokenizer from_gguf_metadata(std::span<const std::pair<std::string, GgufValue>> metadata,
                                      const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `text` (UTF-8; invalid UTF-8 is an amc::error naming the byte offset), with no
  /// token added: Hugging Face's encode(text, add_special_tokens=False), what a prompt built
  /// with its chat template (which spells out <|begin_of_text|> itself) needs.
  std::vector<std::int32_t> encode(std::string_view text) const;
  /// encode(text) inside the post-processor's template: Hugging Face's encode(text) with
  /// add_special_tokens=True. Llama 3.1 and 3.2 files put <|begin_of_text|> first; files without
  /// a TemplateProcessing post-processor (Qwen, the Llama 3 file tested) add nothing. A
  /// BpeVocabulary's tokenizer puts BOS first when add_bos and EOS last when add_eos, as
  /// llama.cpp does (SmolLM2's GGUF: neither), and nothing else.
  std::vector<std::int32_t> encode_with_special_tokens(std::string_view text) const;
  /// The UTF-8 text of `ids`; ids outside the vocabulary are an amc::error naming the id. Bytes
  /// that do not form valid UTF-8 (a character cut off at the end) become U+FFFD, as in the
  /// Hugging Face decoder.
  std::string decode(std::span<const std::int32_t> ids) const;
  /// The bytes one token stands for (for streaming output: may be an incomplete UTF-8 sequence).
  std::string token_bytes(std::int32_t id) const;
  /// The id of a token string as written in the vocabulary or added tokens, if any.
  std::optional<std::int32_t> token_id(std::string_view token) const;
  /// Largest id + 1 over the vocabulary and added tokens.
  std::int64_t vocab_size() const;
  /// The BOS and EOS ids a BpeVocabulary (GGUF: tokenizer.ggml.bos_token_id, eos_token_id)
  /// gives; nullopt when it gives none, and always for a tokenizer.json (which names neither:
  /// Hugging Face keeps them in tokenizer_config.json).
  std::optional<std::int32_t> bos_id() const;
  std::optional<std::int32_t> eos_id() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  /// from_vocabulary with errors from `function`, naming the fields as GGUF keys when `gguf`.
  static Tokenizer build(const BpeVocabulary& vocabulary, const std::string& source,
                         const char* function, bool gguf);
  std::unique_ptr<Impl> impl_;
};

/// NFC normalisation of UTF-8 text (utf8proc), as the Qwen2 normalizer does; the tests compare
/// decode(encode(text)) with it. Invalid UTF-8 is an amc::error naming the byte offset.
std::string nfc(std::string_view text);

}  // namespace amc::transformer

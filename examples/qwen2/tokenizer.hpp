// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Qwen2, Qwen3, Llama 3).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace amc {
class GgufFile;
}

namespace amc::qwen2 {

/// Encodes and decodes exactly as a byte-level BPE tokenizer.json says (Qwen2, Qwen2.5, Qwen3,
/// Llama 3; tested on the real files of Qwen2, Qwen3 and Llama 3): added/special tokens matched
/// first, NFC normalisation where the file asks for it (Llama 3 has no normalizer), the Split
/// pre-tokenizer regex (PCRE2, Unicode classes; Llama 3 groups digits in threes), the
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
  /// The tokenizer a GGUF file's metadata describes (tokenizer.ggml.*).
  static Tokenizer from_gguf(const GgufFile& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `text` (UTF-8; invalid UTF-8 is an amc::error naming the byte offset), with no
  /// token added: Hugging Face's encode(text, add_special_tokens=False), what a prompt built
  /// with its chat template (which spells out <|begin_of_text|> itself) needs.
  std::vector<std::int32_t> encode(std::string_view text) const;
  /// encode(text) inside the post-processor's template: Hugging Face's encode(text) with
  /// add_special_tokens=True. Llama 3.1 and 3.2 files put <|begin_of_text|> first; files without
  /// a TemplateProcessing post-processor (Qwen, the Llama 3 file tested) add nothing.
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

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// NFC normalisation of UTF-8 text (utf8proc), as the Qwen2 normalizer does; the tests compare
/// decode(encode(text)) with it. Invalid UTF-8 is an amc::error naming the byte offset.
std::string nfc(std::string_view text);

}  // namespace amc::qwen2

// What the synthetic-tokenizer trainer (synth_tokenizer.cpp), the GGUF reader of the tokenizer
// (tokenizer_gguf.cpp) and the tests share with the tokenizer: the id cap, merge-pair keys,
// GPT-2's byte-to-unicode map, the Split pre-tokenizer's regex splitting and the named
// pre-tokenizers. Not part of the tokenizer's API.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace amc::transformer::tokenizer_internal {

/// Token ids at or beyond this are refused: no real vocabulary comes near it, and a typo'd id
/// must not make the loader allocate gigabytes.
inline constexpr std::int64_t kMaxTokenId = std::int64_t{1} << 24;

/// The key of the merge pair (a, b) in the tokenizer's tables.
inline std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

/// GPT-2's bytes_to_unicode: the character (UTF-8) standing for each byte.
const std::array<std::string, 256>& byte_spellings();
/// The bytes in bytes_to_unicode order: the bytes of Qwen's ids 0..255.
const std::array<unsigned char, 256>& byte_token_order();

/// The pieces of `text` (valid UTF-8) that a Split pre-tokenizer step with the regex `pattern`
/// and behaviour Isolated cuts: every non-empty match and every non-empty stretch between
/// matches, in order (views into `text`). Throws amc::error "<where>: regex ..." when the
/// pattern does not compile.
std::vector<std::string_view> split_isolated(std::string_view text, const std::string& pattern,
                                             const std::string& where);

/// The pieces the pre-tokenizer named `pre` (a BpeVocabulary::pre, llama.cpp's name) cuts valid
/// UTF-8 `text` into, before ByteLevel. Throws amc::error for an unknown name or invalid UTF-8.
std::vector<std::string> pre_tokenize(std::string_view pre, std::string_view text);

/// llama.cpp's add_bos for the pre-tokenizer `pre` when the GGUF has no
/// tokenizer.ggml.add_bos_token: true for the Llama 3 names; false otherwise (unknown names too).
bool pre_tokenizer_adds_bos(std::string_view pre);

}  // namespace amc::transformer::tokenizer_internal

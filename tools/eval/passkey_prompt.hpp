// The prompts of `amc-eval passkey`: a record PASSKEY = "DIGITS" planted at a chosen depth in a
// window of held-out code, and the question that asks for it.
//
//   prompt = code_before + `PASSKEY = "DIGITS"\n` + code_after + `\nPASSKEY = "`
//
// exactly `context` tokens long, the record at the start of a line. Each part is tokenized on
// its own and the ids are concatenated, so the record's token positions, and those of its
// value (the digits), are known exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace amc::transformer {
class Tokenizer;
}

namespace amc::eval {

/// The parts of a prompt besides the code. The record is tokenized as head, value, tail.
inline constexpr std::string_view kPasskeyRecordHead = "PASSKEY = \"";
inline constexpr std::string_view kPasskeyRecordTail = "\"\n";
inline constexpr std::string_view kPasskeyQuestion = "\nPASSKEY = \"";

/// A document as the model sees it: the bytes of its tokens (the file's text, after the
/// tokenizer's normalisation) and where each token starts, so that token counts can be turned
/// into byte offsets without a second tokenization.
struct PasskeyDocument {
  std::string path;
  std::string text;  ///< concatenated bytes of the tokens
  std::vector<std::int64_t>
      token_offsets;  ///< [tokens + 1] byte offset of each token; back() = size

  std::int64_t tokens() const { return static_cast<std::int64_t>(token_offsets.size()) - 1; }
};

/// The document of `ids` (a file encoded with `tokenizer`).
PasskeyDocument make_passkey_document(std::string path, std::span<const std::int32_t> ids,
                                      const transformer::Tokenizer& tokenizer);

/// What a (context, trial) draws, shared by all its depths, rules and supports.
struct PasskeyDraw {
  std::size_t document = 0;     ///< index into the documents
  std::int64_t start_byte = 0;  ///< the code window starts here, at the start of a line
  std::string digits;           ///< the value to retrieve
};

/// Draws the window and the digits of (context, trial), seeded by (seed, context, trial) only.
/// The window starts at a position drawn uniformly among those that leave `context` tokens of
/// the document (over all documents holding that many), moved back to the start of its line.
/// Throws amc::error when no document holds `context` tokens.
PasskeyDraw draw_passkey(const std::vector<PasskeyDocument>& documents, std::int64_t context,
                         std::int64_t trial, std::uint64_t seed, std::int64_t digits);

/// A prompt and where its record lies. Positions are token indices into `ids`, ranges
/// half-open.
struct PasskeyPrompt {
  std::vector<std::int32_t> ids;  ///< [context]
  std::int64_t record_begin = 0;  ///< first token of `PASSKEY = "`
  std::int64_t value_begin = 0;   ///< first token of the digits
  std::int64_t value_end = 0;     ///< one past the last token of the digits
  std::int64_t record_end = 0;    ///< one past the record's `"\n`
  std::int64_t body_tokens = 0;   ///< code tokens: code_before + code_after
  std::int64_t split_byte = 0;    ///< byte of the document where the record is inserted
};

/// The prompt of `context` tokens planting `digits` at `depth` in the code of `document` from
/// `start_byte` (a line start). The body (code) gets body = context - |record| - |question|
/// tokens; its nominal text is the bytes of the document's next `body` tokens, of length L. The
/// record goes at the first line start at or after start_byte + floor(depth * L) inside that
/// text (else the last line start before it; else that offset itself), and code_after is cut
/// to the tokens that make the prompt exactly `context` long. Throws amc::error when the
/// document lacks the text (it needs `context` tokens from start_byte) or the context is too
/// short for the record and the question.
PasskeyPrompt make_passkey_prompt(const transformer::Tokenizer& tokenizer,
                                  const PasskeyDocument& document, std::int64_t start_byte,
                                  std::int64_t context, double depth, const std::string& digits);

}  // namespace amc::eval

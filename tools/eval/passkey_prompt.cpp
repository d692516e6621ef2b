// Drawing the code windows and digits of the passkey probe, and building its prompts. See
// passkey_prompt.hpp.
#include "passkey_prompt.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "amc/error.hpp"
#include "transformer/tokenizer.hpp"

namespace amc::eval {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// Uniform in [0, n) (n >= 1) by rejection of the values below 2^64 mod n: exact, and the same
/// on every standard library, which std::uniform_int_distribution is not, so a seed names the
/// same prompts everywhere.
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  while (true) {
    const std::uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

bool is_line_start(const std::string& text, std::int64_t byte) {
  return byte == 0 || text[static_cast<std::size_t>(byte - 1)] == '\n';
}

bool is_continuation_byte(const std::string& text, std::int64_t byte) {
  return byte < static_cast<std::int64_t>(text.size()) &&
         (static_cast<unsigned char>(text[static_cast<std::size_t>(byte)]) & 0xC0) == 0x80;
}

}  // namespace

PasskeyDocument make_passkey_document(std::string path, std::span<const std::int32_t> ids,
                                      const transformer::Tokenizer& tokenizer) {
  PasskeyDocument d;
  d.path = std::move(path);
  d.token_offsets.reserve(ids.size() + 1);
  for (const std::int32_t id : ids) {
    d.token_offsets.push_back(static_cast<std::int64_t>(d.text.size()));
    d.text += tokenizer.token_bytes(id);
  }
  d.token_offsets.push_back(static_cast<std::int64_t>(d.text.size()));
  return d;
}

PasskeyDraw draw_passkey(const std::vector<PasskeyDocument>& documents, std::int64_t context,
                         std::int64_t trial, std::uint64_t seed, std::int64_t digits) {
  constexpr const char* where = "amc::eval::draw_passkey";
  AMC_CHECK(context >= 1 && trial >= 0 && digits >= 1, where, "context ", context, ", trial ",
            trial, " and digits ", digits, " must be positive (trial >= 0)");
  // Every start that leaves `context` tokens, over all documents: a uniform draw over the
  // corpus's windows, not over documents (a long file is not a short file's equal).
  std::uint64_t starts = 0;
  for (const PasskeyDocument& d : documents) {
    if (d.tokens() >= context) starts += static_cast<std::uint64_t>(d.tokens() - context + 1);
  }
  AMC_CHECK(starts > 0, where, "no document holds ", context, " tokens");
  std::mt19937_64 rng(
      splitmix64(splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(context))) +
                 static_cast<std::uint64_t>(trial)));
  std::uint64_t pick = uniform_below(rng, starts);
  PasskeyDraw draw;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    const PasskeyDocument& d = documents[i];
    if (d.tokens() < context) continue;
    const auto here = static_cast<std::uint64_t>(d.tokens() - context + 1);
    if (pick < here) {
      draw.document = i;
      // Back to the start of the line: the code then starts as a file's line would. Moving
      // back only adds text after the start, so `context` tokens still follow it.
      std::int64_t start = d.token_offsets[static_cast<std::size_t>(pick)];
      while (!is_line_start(d.text, start)) --start;
      draw.start_byte = start;
      break;
    }
    pick -= here;
  }
  draw.digits.reserve(static_cast<std::size_t>(digits));
  for (std::int64_t i = 0; i < digits; ++i) {
    draw.digits += static_cast<char>('0' + uniform_below(rng, 10));
  }
  return draw;
}

PasskeyPrompt make_passkey_prompt(const transformer::Tokenizer& tokenizer,
                                  const PasskeyDocument& document, std::int64_t start_byte,
                                  std::int64_t context, double depth, const std::string& digits) {
  constexpr const char* where = "amc::eval::make_passkey_prompt";
  const std::int64_t size = static_cast<std::int64_t>(document.text.size());
  AMC_CHECK(start_byte >= 0 && start_byte < size, where, "start_byte ", start_byte,
            " is outside the document ", document.path, " of ", size, " bytes");
  AMC_CHECK(std::isfinite(depth) && depth >= 0.0 && depth <= 1.0, where, "depth ", depth,
            " is not in [0, 1]");
  AMC_CHECK(!digits.empty(), where, "the digits are empty");

  // Each part on its own. For a BPE tokenizer this can differ from encoding the whole prompt
  // at once: a merge across a seam (the code's last characters with `PASSKEY`, a quote with
  // the first digit) is not made. That is the point: no token straddles a seam, so the value
  // occupies exactly the tokens of the digits, whose positions are then known (what "planted
  // in support" is measured on), and the answer's first token is the first digit's own token,
  // as the question expects. The model sees a valid if slightly unusual tokenization. For a
  // byte-level tokenizer (data/qwen2-tiny) the two are the same.
  const std::vector<std::int32_t> head = tokenizer.encode(kPasskeyRecordHead);
  const std::vector<std::int32_t> value = tokenizer.encode(digits);
  const std::vector<std::int32_t> tail = tokenizer.encode(kPasskeyRecordTail);
  const std::vector<std::int32_t> question = tokenizer.encode(kPasskeyQuestion);
  const auto record_tokens = static_cast<std::int64_t>(head.size() + value.size() + tail.size());
  const std::int64_t body = context - record_tokens - static_cast<std::int64_t>(question.size());
  AMC_CHECK(body >= 1, where, "context ", context, " leaves no room for code beside the record (",
            record_tokens, " tokens) and the question (", question.size(), ")");

  // The token holding start_byte, and the nominal body: the bytes of the next `body` tokens.
  const auto& offsets = document.token_offsets;
  const std::int64_t first =
      std::upper_bound(offsets.begin(), offsets.end(), start_byte) - offsets.begin() - 1;
  AMC_CHECK(first + context <= document.tokens(), where, "document ", document.path, " holds ",
            document.tokens() - first, " tokens from byte ", start_byte,
            ", fewer than the context ", context);
  const std::int64_t nominal_end = offsets[static_cast<std::size_t>(first + body)];
  const std::int64_t length = nominal_end - start_byte;
  const std::int64_t offset = std::clamp<std::int64_t>(
      start_byte + static_cast<std::int64_t>(std::floor(depth * static_cast<double>(length))),
      start_byte, nominal_end);

  // The first line start at or after the offset within the body; else the last one before it;
  // else (one long line) the offset itself, on a UTF-8 character boundary.
  std::int64_t split = offset;
  while (split < nominal_end && !is_line_start(document.text, split)) ++split;
  if (split == nominal_end) {
    split = offset;
    while (split > start_byte && !is_line_start(document.text, split)) --split;
    if (!is_line_start(document.text, split)) {
      split = offset;
      while (split < nominal_end && is_continuation_byte(document.text, split)) ++split;
    }
  }

  // code_after: from the split, some tokens beyond what the prompt needs (encoding on its own
  // may take a few more or fewer than the document's tokens), ending on a character boundary.
  std::int64_t after_end =
      offsets[static_cast<std::size_t>(std::min(first + context + 64, document.tokens()))];
  while (after_end > split && is_continuation_byte(document.text, after_end)) --after_end;

  const std::string_view text = document.text;
  const std::vector<std::int32_t> before = tokenizer.encode(text.substr(
      static_cast<std::size_t>(start_byte), static_cast<std::size_t>(split - start_byte)));
  std::vector<std::int32_t> after = tokenizer.encode(
      text.substr(static_cast<std::size_t>(split), static_cast<std::size_t>(after_end - split)));
  const std::int64_t needed = body - static_cast<std::int64_t>(before.size());
  AMC_CHECK(needed >= 0 && static_cast<std::int64_t>(after.size()) >= needed, where, "document ",
            document.path, " from byte ", start_byte, ": the code before the record (",
            before.size(), " tokens) and after it (", after.size(), " tokens) do not make the ",
            body, " tokens of code a context of ", context, " needs");
  after.resize(static_cast<std::size_t>(needed));

  PasskeyPrompt p;
  p.ids.reserve(static_cast<std::size_t>(context));
  p.ids.insert(p.ids.end(), before.begin(), before.end());
  p.record_begin = static_cast<std::int64_t>(p.ids.size());
  p.ids.insert(p.ids.end(), head.begin(), head.end());
  p.value_begin = static_cast<std::int64_t>(p.ids.size());
  p.ids.insert(p.ids.end(), value.begin(), value.end());
  p.value_end = static_cast<std::int64_t>(p.ids.size());
  p.ids.insert(p.ids.end(), tail.begin(), tail.end());
  p.record_end = static_cast<std::int64_t>(p.ids.size());
  p.ids.insert(p.ids.end(), after.begin(), after.end());
  p.ids.insert(p.ids.end(), question.begin(), question.end());
  p.body_tokens = body;
  p.split_byte = split;
  AMC_CHECK(static_cast<std::int64_t>(p.ids.size()) == context, where, "built ", p.ids.size(),
            " tokens for a context of ", context);
  return p;
}

}  // namespace amc::eval

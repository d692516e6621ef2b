// libFuzzer target: Tokenizer::encode on arbitrary bytes, with a fixed tokenizer (the synthetic
// byte-level BPE of synthetic_tokenizer_json(300): Qwen2's normalizer, Split regex and special
// tokens, built once).
//
// Invalid UTF-8 must be refused with amc::error; valid UTF-8 must encode, every id must be in
// the vocabulary, and decode(encode(x)) must give x back after NFC. The added (special) tokens
// are cut out of the raw text before normalisation, as in Hugging Face's pipeline, so the
// expected text is x with each stretch between special tokens normalised on its own.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "amc/error.hpp"
#include "transformer/synth_tokenizer.hpp"
#include "transformer/tokenizer.hpp"

namespace {

const amc::transformer::Tokenizer& tokenizer() {
  static const amc::transformer::Tokenizer instance = amc::transformer::Tokenizer::from_json(
      amc::transformer::synthetic_tokenizer_json(300), "synthetic");
  return instance;
}

/// x with the special tokens left as they are and the text between them NFC-normalised
/// (leftmost match; the three tokens share no prefix that makes longest-first matter).
std::string expected_decode(std::string_view x) {
  constexpr std::string_view specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  std::string out;
  std::size_t segment = 0, i = 0;
  while (i < x.size()) {
    std::size_t length = 0;
    for (const std::string_view s : specials) {
      if (x.substr(i).starts_with(s)) length = s.size();
    }
    if (length == 0) {
      ++i;
      continue;
    }
    out += amc::transformer::nfc(x.substr(segment, i - segment));
    out += x.substr(i, length);
    i += length;
    segment = i;
  }
  out += amc::transformer::nfc(x.substr(segment));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const amc::transformer::Tokenizer& t = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::int32_t> ids;
  try {
    ids = t.encode(text);
  } catch (const amc::error&) {
    // Only invalid UTF-8 may be refused: nfc() must refuse the same text.
    try {
      static_cast<void>(amc::transformer::nfc(text));
    } catch (const amc::error&) {
      return 0;
    }
    std::fprintf(stderr, "encode refused text that nfc() accepts as valid UTF-8\n");
    std::abort();
  }
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size()) std::abort();
  }
  const std::string decoded = t.decode(ids);
  if (decoded != expected_decode(text)) {
    std::fprintf(stderr, "decode(encode(x)) differs from x after NFC (%zu ids, %zu bytes)\n",
                 ids.size(), decoded.size());
    std::abort();
  }
  return 0;
}

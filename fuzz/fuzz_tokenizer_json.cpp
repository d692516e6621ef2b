// libFuzzer target: tokenizer.json loading on arbitrary text.
//
// Tokenizer::from_json must either refuse the text with amc::error or load a tokenizer that
// then works: a fixed text (plain words, digits, an added-token lookalike, non-ASCII) encodes,
// every id it returns is in the vocabulary, and the ids decode; token_bytes() of every id below
// vocab_size() either answers or refuses with amc::error. The patterns of fuzzed Split steps run
// through PCRE2 here, so regex compilation and matching are exercised as well. For printable
// ASCII without spaces decode(encode(x)) must be x exactly, whatever the file says.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "amc/error.hpp"
#include "transformer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const amc::transformer::Tokenizer tokenizer =
        amc::transformer::Tokenizer::from_json(text, "fuzz/tokenizer.json");
    const std::int64_t vocab = tokenizer.vocab_size();
    if (vocab < 256) std::abort();  // all 256 byte tokens are required
    const std::vector<std::int32_t> ids =
        tokenizer.encode("Hello world, it's 2024!\n<|endoftext|> caf\xC3\xA9 \xE5\x90\x8D  x");
    for (const std::int32_t id : ids) {
      if (id < 0 || id >= vocab) std::abort();
    }
    static_cast<void>(tokenizer.decode(ids));
    // Printable ASCII without spaces is NFC, and its byte-level spelling is itself, so whatever
    // the file's splits, merges and added tokens, the round trip must give it back exactly.
    const std::string plain = "Hello,world!it's2024<|endoftext|>x--y__z";
    if (tokenizer.decode(tokenizer.encode(plain)) != plain) {
      std::fprintf(stderr, "decode(encode(x)) != x for printable ASCII x\n");
      std::abort();
    }
    const std::int64_t probe = vocab < 4096 ? vocab : 4096;
    for (std::int32_t id = 0; id < probe; ++id) {
      try {
        static_cast<void>(tokenizer.token_bytes(id));
      } catch (const amc::error&) {
        // a hole in the id range
      }
    }
  } catch (const amc::error&) {
    // refused, naming the field
  }
  return 0;
}

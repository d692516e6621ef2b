// The tokenizer of amc-synth's synthetic checkpoints: a deterministic byte-level BPE trained on
// a small built-in sample, written as a Qwen2-style tokenizer.json.
#pragma once

#include <cstdint>
#include <string>

namespace amc::transformer {

/// A deterministic byte-level BPE tokenizer.json for synthetic checkpoints: the 256 byte tokens,
/// merges learned greedily from a small built-in English and code sample up to
/// `vocab_size` - 3 regular tokens (once the sample has no pair left, filler merges of existing
/// tokens in a fixed order), and <|endoftext|>, <|im_start|>, <|im_end|> as the last three
/// ids. Same pre-tokenizer, normalizer and decoder as Qwen2, so Tokenizer loads it unchanged.
/// \param vocab_size total ids, >= 259 + 1
std::string synthetic_tokenizer_json(std::int64_t vocab_size);

}  // namespace amc::transformer

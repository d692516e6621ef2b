// The synthetic checkpoints' tokenizer: greedy byte-level BPE training on a built-in sample of
// English prose, C++ and Python, written as a tokenizer.json in Qwen2's format.
#include "transformer/synth_tokenizer.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "amc/error.hpp"
#include "transformer/tokenizer_internal.hpp"

namespace amc::transformer {

using tokenizer_internal::byte_spellings;
using tokenizer_internal::byte_token_order;
using tokenizer_internal::kMaxTokenId;
using tokenizer_internal::pair_key;
using tokenizer_internal::split_isolated;

namespace {

/// The Qwen2 Split regex (tokenizer.json's pre_tokenizer; docs/transformer.md, "Tokenizer").
constexpr const char* kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr const char* kSpecialTokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

/// The text the synthetic tokenizer's merges are learned from: English prose, C++ and Python.
constexpr std::string_view kSampleText = R"SAMPLE(
The reference transformer reads a configuration, a checkpoint and a tokenizer, and then it
generates text one token at a time. Each step computes attention over every position that came
before it, so the cost of a step grows with the length of the context. When the context is
long, most of the attention mass falls on a small number of blocks: the first few tokens, the
most recent window, and a handful of places where the query finds what it is looking for.
A block-sparse decoder reads only those blocks, and the omitted mass tells us how much of the
softmax was left out. If the omitted mass is small, the output is close to the dense output;
if it is large, we should read more blocks, or fall back to the dense path.

On a grey morning in the harbour town, the ferry left an hour late. She opened the
window, looked at the garden, and said that the weather would change before the evening.
"They'll be here soon," he answered, "and I'm sure they've brought the books we wanted."
We don't know yet whether the results will hold for larger models, but the first numbers are
encouraging: the sparse path was faster at long context, and the tokens it produced were the
same as the dense ones in almost every case we tried. There are 24 layers, 14 heads and 2 key
value heads; the hidden size is 896 and the vocabulary has 151936 rows.

Questions worth asking: what is the bandwidth of the machine? How many bytes does one decode
step read? Which part of the time goes to the weights, and which part to the cache? These are
the questions that decide whether a change is worth making, and the answers are in the numbers.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace example {

/// Returns the index of the largest value, or -1 when the span is empty.
template <class T>
std::int64_t argmax(const std::vector<T>& values) {
  if (values.empty()) return -1;
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < static_cast<std::int64_t>(values.size()); ++i) {
    if (values[i] > values[best]) best = i;
  }
  return best;
}

struct Config {
  int hidden_size = 896;
  int num_heads = 14;
  int num_kv_heads = 2;
  double rope_theta = 1000000.0;
};

class Cache {
 public:
  explicit Cache(std::size_t capacity) : capacity_(capacity) {}
  void append(const float* key, const float* value, std::size_t head_dim) {
    for (std::size_t i = 0; i < head_dim; ++i) {
      keys_.push_back(key[i]);
      values_.push_back(value[i]);
    }
    ++length_;
  }
  std::size_t size() const { return length_; }

 private:
  std::size_t capacity_ = 0;
  std::size_t length_ = 0;
  std::vector<float> keys_;
  std::vector<float> values_;
};

}  // namespace example

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& arg : args) {
    if (arg == "--help") return 0;
  }
  return example::argmax(std::vector<int>{3, 1, 4, 1, 5, 9, 2, 6}) == 5 ? 0 : 1;
}

import json
import math
import sys


def softmax(values):
    """Returns the softmax of a list of floats."""
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    total = sum(exps)
    return [e / total for e in exps]


class Tokenizer:
    def __init__(self, path):
        with open(path, "r", encoding="utf-8") as f:
            self.data = json.load(f)
        self.vocab = self.data["model"]["vocab"]

    def encode(self, text):
        ids = []
        for word in text.split():
            if word in self.vocab:
                ids.append(self.vocab[word])
            else:
                ids.extend(self.vocab[c] for c in word if c in self.vocab)
        return ids


def main(argv):
    if len(argv) < 2:
        print("usage: tokenize.py TOKENIZER_JSON [TEXT...]", file=sys.stderr)
        return 2
    tokenizer = Tokenizer(argv[1])
    for text in argv[2:]:
        print(json.dumps({"text": text, "ids": tokenizer.encode(text)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
)SAMPLE";

/// Greedy BPE training on kSampleText: the most frequent adjacent pair (ties: the smaller pair of
/// spellings) is merged until `regular` tokens exist or no pair is left; then filler merges of
/// existing tokens, in a fixed order, make up the rest.
struct SyntheticBpe {
  std::vector<std::string> tokens;  ///< byte-level spellings by id
  std::vector<std::pair<std::int32_t, std::int32_t>> merges;

  explicit SyntheticBpe(std::size_t regular) {
    const std::array<std::string, 256>& byte_spelling = byte_spellings();
    std::unordered_map<std::string, std::int32_t> ids;
    const auto add_token = [&](const std::string& spelling) {
      ids.emplace(spelling, static_cast<std::int32_t>(tokens.size()));
      tokens.push_back(spelling);
    };
    for (const unsigned char b : byte_token_order()) add_token(byte_spelling[b]);

    // Words of the sample with their counts, as sequences of token ids.
    std::map<std::string, std::int64_t> word_counts;
    for (const std::string_view piece : split_isolated(
             kSampleText, kQwen2SplitRegex, "amc::transformer::synthetic_tokenizer_json")) {
      ++word_counts[std::string(piece)];
    }
    std::vector<std::pair<std::vector<std::int32_t>, std::int64_t>> words;
    for (const auto& [word, count] : word_counts) {
      std::vector<std::int32_t> symbols;
      for (const char c : word)
        symbols.push_back(ids.at(byte_spelling[static_cast<unsigned char>(c)]));
      words.emplace_back(std::move(symbols), count);
    }

    std::unordered_set<std::uint64_t> merged;
    while (tokens.size() < regular) {
      std::unordered_map<std::uint64_t, std::int64_t> counts;
      for (const auto& [symbols, count] : words) {
        for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
          counts[pair_key(symbols[i], symbols[i + 1])] += count;
        }
      }
      std::uint64_t best = 0;
      std::int64_t best_count = 0;
      const auto spelling_pair = [&](std::uint64_t key) {
        return std::make_pair(std::string_view(tokens[key >> 32]),
                              std::string_view(tokens[key & 0xFFFFFFFFu]));
      };
      for (const auto& [key, count] : counts) {
        if (merged.contains(key)) continue;
        if (count > best_count ||
            (count == best_count && spelling_pair(key) < spelling_pair(best))) {
          best = key;
          best_count = count;
        }
      }
      if (best_count == 0) break;  // the sample is exhausted
      const auto left = static_cast<std::int32_t>(best >> 32);
      const auto right = static_cast<std::int32_t>(best & 0xFFFFFFFFu);
      const std::string spelling =
          tokens[static_cast<std::size_t>(left)] + tokens[static_cast<std::size_t>(right)];
      if (!ids.contains(spelling)) add_token(spelling);
      const std::int32_t id = ids.at(spelling);
      merges.emplace_back(left, right);
      merged.insert(best);
      for (auto& [symbols, count] : words) {
        std::vector<std::int32_t> next;
        next.reserve(symbols.size());
        for (std::size_t i = 0; i < symbols.size(); ++i) {
          if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
            next.push_back(id);
            ++i;
          } else {
            next.push_back(symbols[i]);
          }
        }
        symbols = std::move(next);
      }
    }

    // Fillers: pairs (i, j) of existing tokens along anti-diagonals i + j = s, skipping pairs
    // already merged and spellings already present.
    for (std::size_t s = 0; tokens.size() < regular; ++s) {
      for (std::size_t i = 0; i <= s && tokens.size() < regular; ++i) {
        const std::size_t j = s - i;
        if (i >= tokens.size() || j >= tokens.size()) continue;
        const auto left = static_cast<std::int32_t>(i), right = static_cast<std::int32_t>(j);
        if (merged.contains(pair_key(left, right))) continue;
        const std::string spelling = tokens[i] + tokens[j];
        if (ids.contains(spelling)) continue;
        add_token(spelling);
        merges.emplace_back(left, right);
        merged.insert(pair_key(left, right));
      }
    }
  }
};

}  // namespace

std::string synthetic_tokenizer_json(std::int64_t vocab_size) {
  AMC_CHECK(vocab_size >= 260 && vocab_size <= kMaxTokenId,
            "amc::transformer::synthetic_tokenizer_json", "vocab_size ", vocab_size,
            " is outside [260, ", kMaxTokenId, "] (256 byte tokens, merges, 3 special tokens)");
  const auto regular = static_cast<std::size_t>(vocab_size - 3);
  const SyntheticBpe bpe(regular);

  using ordered = nlohmann::ordered_json;
  // In id order, as real files are. ordered_json's own insertion searches linearly for the key;
  // the spellings are unique, so append to its underlying vector directly.
  ordered vocab = ordered::object();
  auto& entries = vocab.get_ref<ordered::object_t&>();
  entries.reserve(bpe.tokens.size());
  for (std::size_t id = 0; id < bpe.tokens.size(); ++id) {
    entries.emplace_back(bpe.tokens[id], ordered(id));
  }
  ordered merges = ordered::array();
  for (const auto& [left, right] : bpe.merges) {
    merges.push_back(bpe.tokens[static_cast<std::size_t>(left)] + " " +
                     bpe.tokens[static_cast<std::size_t>(right)]);
  }
  ordered added = ordered::array();
  for (std::size_t k = 0; k < 3; ++k) {
    ordered token = ordered::object();
    token["id"] = regular + k;
    token["content"] = kSpecialTokens[k];
    token["single_word"] = false;
    token["lstrip"] = false;
    token["rstrip"] = false;
    token["normalized"] = false;
    token["special"] = true;
    added.push_back(std::move(token));
  }
  const auto byte_level_step = [] {
    ordered step = ordered::object();
    step["type"] = "ByteLevel";
    step["add_prefix_space"] = false;
    step["trim_offsets"] = false;
    step["use_regex"] = false;
    return step;
  };
  ordered split = ordered::object();
  split["type"] = "Split";
  split["pattern"] = ordered::object({{"Regex", kQwen2SplitRegex}});
  split["behavior"] = "Isolated";
  split["invert"] = false;
  ordered pre_tokenizer = ordered::object();
  pre_tokenizer["type"] = "Sequence";
  pre_tokenizer["pretokenizers"] = ordered::array({split, byte_level_step()});

  ordered model = ordered::object();
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = "";
  model["end_of_word_suffix"] = "";
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);

  ordered root = ordered::object();
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = std::move(added);
  root["normalizer"] = ordered::object({{"type", "NFC"}});
  root["pre_tokenizer"] = std::move(pre_tokenizer);
  root["post_processor"] = byte_level_step();
  root["decoder"] = byte_level_step();
  root["model"] = std::move(model);
  return root.dump();
}

}  // namespace amc::transformer

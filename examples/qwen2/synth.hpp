// Synthetic Qwen2 checkpoints: the exact file layout of a Hugging Face Qwen2 model (config.json,
// model.safetensors with Qwen2's tensor names and shapes, tokenizer.json) filled with seeded
// random weights, for tests, demos and benchmarks where the real weights are not available.
#pragma once

#include <amc/storage.hpp>

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "config.hpp"

namespace amc::qwen2 {

struct SynthSpec {
  /// Shape and constants written to config.json (head_dim is derived, bos/eos ignored: they are
  /// set to the tokenizer's <|endoftext|>).
  Config config;
  StorageType dtype = StorageType::bf16;  ///< bf16 or f32 weights
  std::uint64_t seed = 0;
  /// Tokens of the synthetic tokenizer (>= 260); 0 means min(vocab_size, 4096). Embedding rows
  /// beyond it are zero, so greedy decoding never produces an id the tokenizer lacks.
  std::int64_t tokenizer_vocab = 0;
  /// Number of safetensors files; more than 1 writes model-0000i-of-0000N.safetensors and
  /// model.safetensors.index.json, as Hugging Face does for large models.
  int shards = 1;
};

/// The named shapes: "tiny" (2 layers, hidden 64, 4 heads, 2 KV heads, head_dim 16,
/// intermediate 128, vocab 320) and "qwen2-0.5b" (Qwen2-0.5B's config). Throws amc::error for
/// another name.
Config synth_shape(std::string_view name);

/// Writes config.json, the weights and tokenizer.json into `dir` (created if needed). The
/// bytes depend only on `spec`: the same spec gives identical files on every machine.
/// Throws amc::error for an invalid spec (checked as parse_config checks a config.json).
void write_synthetic_checkpoint(const std::filesystem::path& dir, const SynthSpec& spec);

}  // namespace amc::qwen2

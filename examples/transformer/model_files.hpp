// What a --model PATH names: a Hugging Face checkpoint directory (config.json, safetensors
// weights, tokenizer.json) or a single GGUF file (weights, config and tokenizer in one). The
// tools, the eval and the benches load through these, so every one of them reads both.
#pragma once

#include <amc/storage.hpp>

#include <filesystem>
#include <optional>
#include <string_view>

#include "checkpoint.hpp"
#include "tokenizer.hpp"

namespace amc::transformer {

/// The tokenizer of the model at `path`: a GGUF file's from its metadata
/// (Tokenizer::from_gguf), a directory's from DIR/tokenizer.json; nullopt for a directory
/// without one (a synthetic checkpoint's, driven by token ids). Throws amc::error for a file
/// that is neither a directory nor a GGUF file, and the tokenizer readers' errors.
std::optional<Tokenizer> load_model_tokenizer(const std::filesystem::path& path);

/// Where the tokenizer of the model at `path` is read from, for messages: the GGUF file
/// itself, or DIR/tokenizer.json.
std::filesystem::path model_tokenizer_source(const std::filesystem::path& path);

/// The --weight-dtype values: "auto" (nullopt: as a safetensors checkpoint stores them, bf16
/// for GGUF), "bf16" or "f32". Throws amc::error naming `flag` and the text otherwise.
std::optional<StorageType> parse_weight_dtype(std::string_view text,
                                              std::string_view flag = "--weight-dtype");

}  // namespace amc::transformer

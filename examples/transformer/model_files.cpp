// Loading what a --model PATH names (model_files.hpp).
#include "model_files.hpp"

#include <amc/error.hpp>
#include <amc/io/gguf.hpp>

namespace amc::transformer {

std::filesystem::path model_tokenizer_source(const std::filesystem::path& path) {
  return is_gguf_file(path) ? path : path / "tokenizer.json";
}

std::optional<Tokenizer> load_model_tokenizer(const std::filesystem::path& path) {
  if (is_gguf_file(path)) return Tokenizer::from_gguf(GgufFile::open(path));
  if (!std::filesystem::is_directory(path)) {
    detail::throw_error("amc::transformer::load_model_tokenizer", path.string(),
                        std::filesystem::exists(path)
                            ? ": neither a checkpoint directory nor a GGUF file"
                            : ": no such file or directory");
  }
  if (!std::filesystem::exists(path / "tokenizer.json")) return std::nullopt;
  return Tokenizer::load(path / "tokenizer.json");
}

std::optional<StorageType> parse_weight_dtype(std::string_view text, std::string_view flag) {
  if (text == "auto") return std::nullopt;
  if (text == "bf16") return StorageType::bf16;
  if (text == "f32") return StorageType::f32;
  detail::throw_error("amc::transformer::parse_weight_dtype", flag,
                      ": expected auto, bf16 or f32, got '", text, "'");
}

}  // namespace amc::transformer

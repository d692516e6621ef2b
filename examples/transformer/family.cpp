// The family table (family.hpp): one row per supported config.json architecture.
#include "family.hpp"

#include <amc/error.hpp>

#include <string>

namespace amc::transformer {
namespace {

// Values from transformers' Qwen2Config / Qwen2Attention, Qwen3Config / Qwen3Attention and
// LlamaConfig / LlamaAttention (docs/transformer.md, "Model families").
constexpr Family kFamilies[] = {
    {Architecture::qwen2, "Qwen2ForCausalLM", "qwen2", false, false, false, 0},
    {Architecture::qwen3, "Qwen3ForCausalLM", "qwen3", true, false, true, 128},
    {Architecture::llama, "LlamaForCausalLM", "llama", true, false, false, 0},
};

}  // namespace

std::span<const Family> families() { return kFamilies; }

const Family& family(Architecture architecture) {
  for (const Family& f : kFamilies) {
    if (f.architecture == architecture) return f;
  }
  detail::throw_error("amc::transformer::family", "architecture ", static_cast<int>(architecture),
                      " is not in the family table");
}

std::optional<Architecture> architecture_from_class_name(std::string_view name) {
  for (const Family& f : kFamilies) {
    if (f.class_name == name) return f.architecture;
  }
  return std::nullopt;
}

std::optional<Architecture> architecture_from_model_type(std::string_view name) {
  for (const Family& f : kFamilies) {
    if (f.model_type == name) return f.architecture;
  }
  return std::nullopt;
}

Architecture parse_architecture(std::string_view name, std::string_view field) {
  if (const auto a = architecture_from_model_type(name)) return *a;
  detail::throw_error("amc::transformer::parse_architecture", std::string(field),
                      " must be qwen2, qwen3 or llama, got \"", std::string(name), "\"");
}

std::string_view to_string(Architecture architecture) { return family(architecture).class_name; }

std::string_view known_class_names() {
  return "Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM";
}

}  // namespace amc::transformer

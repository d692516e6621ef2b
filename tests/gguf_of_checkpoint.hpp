// A safetensors checkpoint of any family rewritten as an F32 GGUF file the way llama.cpp's
// converter lays one out: the family's general.architecture (Family::gguf_architecture) and
// metadata keys, tensor_names.def's GGUF names, and the rows of the q and k projections permuted
// head by head where the family says llama.cpp permutes them (the permutation written here with
// plain loops). For the tests that check a row of the family or tensor table reaches the GGUF
// loader (tests/test_tensor_names.cpp, tests/test_family_extension.cpp); the names are the
// table's on purpose. tests/test_gguf_checkpoint.cpp converts with names of its own.
#pragma once

#include <amc/io/gguf.hpp>
#include <amc/io/safetensors.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "transformer/config.hpp"
#include "transformer/family.hpp"
#include "transformer/tensor_names.hpp"

namespace amc::transformer::test {

/// llama.cpp's permutation of a projection's rows (convert_hf_to_gguf.py, LlamaModel.permute):
/// within each of `heads` heads of d rows, Hugging Face's row a * d/2 + i is the file's row
/// 2i + a. `cols` values per row (1 for a bias).
inline std::vector<float> llama_permuted(const std::vector<float>& w, std::int64_t heads,
                                         std::int64_t cols) {
  const auto rows = static_cast<std::int64_t>(w.size()) / cols;
  const std::int64_t d = rows / heads;
  std::vector<float> out(w.size());
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t a = 0; a < 2; ++a) {
      for (std::int64_t i = 0; i < d / 2; ++i) {
        const std::int64_t from = h * d + a * d / 2 + i, to = h * d + 2 * i + a;
        for (std::int64_t c = 0; c < cols; ++c) out[to * cols + c] = w[from * cols + c];
      }
    }
  }
  return out;
}

/// Writes `out` from the checkpoint directory `dir` (config.json, model.safetensors), leaving out
/// the GGUF tensors named in `skip` (to see the loader ask for them).
inline void write_gguf_of_checkpoint(const std::filesystem::path& dir,
                                     const std::filesystem::path& out,
                                     const std::set<std::string>& skip = {}) {
  const Config c = load_config(dir / "config.json");
  const Family& f = family(c.architecture);
  const std::string a(f.gguf_architecture);
  auto u32 = [](std::int64_t v) {
    return GgufValue{GgufValueType::uint32, static_cast<std::uint64_t>(v)};
  };
  auto f32 = [](double v) { return GgufValue{GgufValueType::float32, v}; };
  const std::vector<std::pair<std::string, GgufValue>> metadata = {
      {"general.architecture", GgufValue{GgufValueType::string, a}},
      {a + ".block_count", u32(c.num_hidden_layers)},
      {a + ".context_length", u32(c.max_position_embeddings)},
      {a + ".embedding_length", u32(c.hidden_size)},
      {a + ".feed_forward_length", u32(c.intermediate_size)},
      {a + ".attention.head_count", u32(c.num_attention_heads)},
      {a + ".attention.head_count_kv", u32(c.num_key_value_heads)},
      {a + ".attention.key_length", u32(c.head_dim)},
      {a + ".attention.value_length", u32(c.head_dim)},
      {a + ".rope.dimension_count", u32(c.head_dim)},
      {a + ".rope.freq_base", f32(c.rope_theta)},
      {a + ".attention.layer_norm_rms_epsilon", f32(c.rms_norm_eps)},
  };
  // Every Hugging Face name the table knows: its GGUF name, and the heads its rows are permuted
  // over (0: not permuted).
  std::map<std::string, std::pair<std::string, std::int64_t>> names;
  for (const GlobalTensor& t : kGlobalTensors) {
    names[std::string(t.hugging_face)] = {std::string(t.gguf), 0};
  }
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const LayerTensor& t : kLayerTensors) {
      const std::int64_t heads = f.gguf_qk_permuted ? rope_head_count(t.rope_heads, c) : 0;
      names[hugging_face_name(t, l)] = {gguf_name(t, l), heads};
    }
  }
  const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
  std::vector<std::vector<float>> values;
  values.reserve(file.tensors().size());
  std::vector<GgufTensorToWrite> tensors;
  for (const TensorInfo& t : file.tensors()) {
    const auto& [name, heads] = names.at(t.name);
    if (skip.count(name) != 0) continue;
    std::vector<float> v = file.to_f32(t.name);
    if (heads > 0) v = llama_permuted(v, heads, t.shape.size() == 2 ? t.shape[1] : 1);
    values.push_back(std::move(v));
    tensors.push_back({name, GgmlType::F32, t.shape, std::as_bytes(std::span(values.back()))});
  }
  write_gguf(out, metadata, tensors);
}

}  // namespace amc::transformer::test

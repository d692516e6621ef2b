// The tensors of a checkpoint (tensor_names.def) as C++ tables: their names in safetensors and
// GGUF files, shapes, when they are present, and the Weights or LayerWeights field each fills.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint.hpp"
#include "config.hpp"

namespace amc::transformer {

/// A size a tensor's shape is made of (tensor_names.def, "dims").
enum class Dim : std::uint8_t { hidden, q_rows, kv_rows, head_dim, intermediate, vocab };
/// When a checkpoint holds a tensor (tensor_names.def, "presence").
enum class Presence : std::uint8_t { always, qkv_bias, o_bias, qk_norm, untied };
/// The heads whose channels a tensor's rows are, where llama.cpp permutes them for its RoPE
/// (tensor_names.def, "rope_heads").
enum class RopeHeads : std::uint8_t { none, query, key_value };

/// One or two dims, outermost first.
struct TensorShape {
  std::array<Dim, 2> dims{};
  std::size_t rank = 0;
};
constexpr TensorShape tensor_shape(Dim rows) { return {{rows, rows}, 1}; }
constexpr TensorShape tensor_shape(Dim rows, Dim cols) { return {{rows, cols}, 2}; }

/// The global tensors, by field.
enum class GlobalTensorId : std::uint8_t {
#define AMC_GLOBAL_TENSOR(field, ...) field,
#define AMC_LAYER_TENSOR(...)
#include "tensor_names.def"
};

/// Every layer's tensors, by field.
enum class LayerTensorId : std::uint8_t {
#define AMC_GLOBAL_TENSOR(...)
#define AMC_LAYER_TENSOR(field, ...) field,
#include "tensor_names.def"
};

/// A row of tensor_names.def.
struct TensorName {
  std::string_view field;
  std::string_view
      hugging_face;       ///< the name, or for a layer tensor the suffix of "model.layers.N."
  std::string_view gguf;  ///< the name, or for a layer tensor the suffix of "blk.N."
  TensorShape shape;
  Presence presence = Presence::always;
};

struct GlobalTensor : TensorName {
  GlobalTensorId id{};
};

struct LayerTensor : TensorName {
  LayerTensorId id{};
  RopeHeads rope_heads = RopeHeads::none;
  /// The field it fills: a matrix (two dims) or a vector (one), the other null.
  Matrix LayerWeights::*matrix = nullptr;
  std::vector<float> LayerWeights::*vector = nullptr;
};

/// `row` with the field it fills, whose type says which of the two it is.
constexpr LayerTensor with_field(LayerTensor row, Matrix LayerWeights::*field) {
  row.matrix = field;
  return row;
}
constexpr LayerTensor with_field(LayerTensor row, std::vector<float> LayerWeights::*field) {
  row.vector = field;
  return row;
}

/// tensor_names.def's global rows, in its order (GlobalTensorId's).
inline constexpr auto kGlobalTensors = [] {
  using enum Dim;
  using enum Presence;
  return std::array{
#define AMC_GLOBAL_TENSOR(field, hf, gguf, dims, presence) \
  GlobalTensor{{#field, hf, gguf, tensor_shape dims, presence}, GlobalTensorId::field},
#define AMC_LAYER_TENSOR(...)
#include "tensor_names.def"
  };
}();

/// tensor_names.def's layer rows, in its order (LayerTensorId's).
inline constexpr auto kLayerTensors = [] {
  using enum Dim;
  using enum Presence;
  using enum RopeHeads;
  return std::array{
#define AMC_GLOBAL_TENSOR(...)
#define AMC_LAYER_TENSOR(field, hf, gguf, dims, presence, rope)                                 \
  with_field(                                                                                   \
      LayerTensor{{#field, hf, gguf, tensor_shape dims, presence}, LayerTensorId::field, rope}, \
      &LayerWeights::field),
#include "tensor_names.def"
  };
}();

// A matrix row has two dims, a vector row one: the field's type must say the same.
static_assert([] {
  for (const LayerTensor& t : kLayerTensors) {
    if ((t.matrix != nullptr) != (t.shape.rank == 2)) return false;
  }
  return true;
}());

constexpr const GlobalTensor& global_tensor(GlobalTensorId id) {
  return kGlobalTensors[static_cast<std::size_t>(id)];
}
constexpr const LayerTensor& layer_tensor(LayerTensorId id) {
  return kLayerTensors[static_cast<std::size_t>(id)];
}

/// The tensor's name in layer `layer`: "model.layers.<layer>.<suffix>".
inline std::string hugging_face_name(const LayerTensor& t, std::int64_t layer) {
  return "model.layers." + std::to_string(layer) + "." + std::string(t.hugging_face);
}
/// The tensor's name in layer `layer` of a GGUF file: "blk.<layer>.<suffix>".
inline std::string gguf_name(const LayerTensor& t, std::int64_t layer) {
  return "blk." + std::to_string(layer) + "." + std::string(t.gguf);
}

/// The size `dim` stands for in `c`.
inline std::int64_t dim_size(Dim dim, const Config& c) {
  switch (dim) {
    case Dim::hidden:
      return c.hidden_size;
    case Dim::q_rows:
      return c.num_attention_heads * c.head_dim;
    case Dim::kv_rows:
      return c.num_key_value_heads * c.head_dim;
    case Dim::head_dim:
      return c.head_dim;
    case Dim::intermediate:
      return c.intermediate_size;
    case Dim::vocab:
      return c.vocab_size;
  }
  return 0;
}

/// The shape in `c`'s sizes, outermost first.
inline std::vector<std::int64_t> shape_of(const TensorShape& shape, const Config& c) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < shape.rank; ++i) out.push_back(dim_size(shape.dims[i], c));
  return out;
}

/// Whether a checkpoint of config `c` holds a tensor of this presence.
inline bool present(Presence presence, const Config& c) {
  switch (presence) {
    case Presence::always:
      return true;
    case Presence::qkv_bias:
      return c.qkv_bias;
    case Presence::o_bias:
      return c.o_bias;
    case Presence::qk_norm:
      return c.qk_norm;
    case Presence::untied:
      return !c.tie_word_embeddings;
  }
  return false;
}

/// How many heads of `c` the rows are divided into (0 for RopeHeads::none).
inline std::int64_t rope_head_count(RopeHeads heads, const Config& c) {
  switch (heads) {
    case RopeHeads::none:
      return 0;
    case RopeHeads::query:
      return c.num_attention_heads;
    case RopeHeads::key_value:
      return c.num_key_value_heads;
  }
  return 0;
}

}  // namespace amc::transformer

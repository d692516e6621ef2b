// tensor_names.def against the C++ code that reads and writes it: amc-synth writes exactly the
// table's tensors (names and shapes), and the safetensors and GGUF loaders each ask for every row
// by the table's name and put its values in the row's field. With these, a row added to the table
// reaches all three or a test here fails. (tools/checkpoint-to-gguf, the fourth reader, is
// checked against the table in tests/tools/test_checkpoint_to_gguf.py.)
#include <amc/error.hpp>
#include <amc/io/safetensors.hpp>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gguf_of_checkpoint.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/synth.hpp"
#include "transformer/tensor_names.hpp"
#include "transformer_test_support.hpp"

namespace {

using namespace amc::transformer;
using amc::transformer::test::TempDir;
namespace fs = std::filesystem;

/// A Qwen3 checkpoint with attention_bias true and an untied unembedding: every feature, so
/// every row of the table (checked below).
SynthSpec every_row_spec() {
  SynthSpec spec = test::family_spec(Architecture::qwen3, amc::StorageType::f32, 21);
  spec.config.qkv_bias = true;  // attention_bias true: q, k, v and o_proj biases
  spec.config.tie_word_embeddings = false;
  return spec;
}

std::vector<float> values_of(const Matrix& m) {
  REQUIRE(m.dtype == amc::StorageType::f32);
  REQUIRE_FALSE(m.blocks.has_value());
  std::vector<float> out(static_cast<std::size_t>(m.rows * m.cols));
  std::memcpy(out.data(), m.data, out.size() * sizeof(float));
  return out;
}

/// Every tensor of a loaded checkpoint against the file's values under the table's names: each
/// row's field holds the tensor of that row.
void check_fields(const Checkpoint& checkpoint, const amc::SafetensorsFile& file) {
  const Weights& w = checkpoint.weights();
  const Config& c = checkpoint.config();
  auto name = [](GlobalTensorId id) { return std::string(global_tensor(id).hugging_face); };
  CHECK(values_of(w.embed) == file.to_f32(name(GlobalTensorId::embed)));
  CHECK(w.final_norm == file.to_f32(name(GlobalTensorId::final_norm)));
  CHECK_FALSE(w.tied);
  CHECK(values_of(w.lm_head) == file.to_f32(name(GlobalTensorId::lm_head)));
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& layer = w.layers[static_cast<std::size_t>(l)];
    for (const LayerTensor& t : kLayerTensors) {
      INFO("layer " << l << ", " << t.field);
      const std::vector<float> want = file.to_f32(hugging_face_name(t, l));
      if (t.matrix != nullptr) {
        const Matrix& m = layer.*t.matrix;
        CHECK(std::vector<std::int64_t>{m.rows, m.cols} == shape_of(t.shape, c));
        CHECK(values_of(m) == want);
      } else {
        CHECK(layer.*t.vector == want);
      }
    }
  }
}

/// The checkpoint in `from` without the tensor `name`, in `to`.
void copy_without(const fs::path& from, const fs::path& to, const std::string& name) {
  fs::create_directories(to);
  fs::copy_file(from / "config.json", to / "config.json", fs::copy_options::overwrite_existing);
  const amc::SafetensorsFile file = amc::SafetensorsFile::open(from / "model.safetensors");
  std::vector<std::vector<float>> values;
  values.reserve(file.tensors().size());
  std::vector<amc::TensorToWrite> tensors;
  for (const amc::TensorInfo& t : file.tensors()) {
    if (t.name == name) continue;
    values.push_back(file.to_f32(t.name));
    tensors.push_back(
        amc::make_tensor_to_write(t.name, t.shape, std::span<const float>(values.back())));
  }
  amc::write_safetensors(to / "model.safetensors", tensors);
}

std::string load_error(const fs::path& path) {
  try {
    Checkpoint::load(path,
                     {.weights = WeightMemory::mapped, .weight_dtype = amc::StorageType::f32});
  } catch (const amc::error& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST_CASE("amc-synth writes exactly tensor_names.def's tensors", "[tensor_names]") {
  TempDir dir("tensor_names_synth");
  write_synthetic_checkpoint(dir.path(), every_row_spec());
  const Config c = load_config(dir / "config.json");
  REQUIRE(c.qkv_bias);
  REQUIRE(c.o_bias);
  REQUIRE(c.qk_norm);
  REQUIRE_FALSE(c.tie_word_embeddings);
  std::map<std::string, std::vector<std::int64_t>> want;
  for (const GlobalTensor& t : kGlobalTensors) {
    REQUIRE(present(t.presence, c));
    want[std::string(t.hugging_face)] = shape_of(t.shape, c);
  }
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const LayerTensor& t : kLayerTensors) {
      REQUIRE(present(t.presence, c));
      want[hugging_face_name(t, l)] = shape_of(t.shape, c);
    }
  }
  std::map<std::string, std::vector<std::int64_t>> got;
  const amc::SafetensorsFile written = amc::SafetensorsFile::open(dir / "model.safetensors");
  for (const amc::TensorInfo& t : written.tensors()) got[t.name] = t.shape;
  CHECK(got == want);

  // A Qwen2 checkpoint (tied, no o_proj bias, no q/k norms): the rows whose presence says so are
  // left out, and only they.
  TempDir qwen2("tensor_names_synth_qwen2");
  write_synthetic_checkpoint(qwen2.path(), test::tiny_spec(amc::StorageType::bf16));
  const Config q = load_config(qwen2 / "config.json");
  const amc::SafetensorsFile file = amc::SafetensorsFile::open(qwen2 / "model.safetensors");
  std::size_t expected = 0;
  for (const GlobalTensor& t : kGlobalTensors) {
    CHECK((file.find(std::string(t.hugging_face)) != nullptr) == present(t.presence, q));
    expected += present(t.presence, q) ? 1 : 0;
  }
  for (const LayerTensor& t : kLayerTensors) {
    INFO(t.field);
    CHECK((file.find(hugging_face_name(t, 1)) != nullptr) == present(t.presence, q));
    expected += present(t.presence, q) ? static_cast<std::size_t>(q.num_hidden_layers) : 0;
  }
  CHECK(file.tensors().size() == expected);
}

TEST_CASE("both loaders ask for every tensor_names.def row and fill its field", "[tensor_names]") {
  TempDir dir("tensor_names_load");
  write_synthetic_checkpoint(dir / "st", every_row_spec());
  const amc::SafetensorsFile file = amc::SafetensorsFile::open(dir / "st" / "model.safetensors");
  const LoadOptions f32{.weights = WeightMemory::mapped, .weight_dtype = amc::StorageType::f32};

  SECTION("safetensors") {
    check_fields(Checkpoint::load(dir / "st", f32), file);
    // Each row's tensor is asked for: without it (in layer 1, or the global one) the load is
    // refused naming it.
    for (const LayerTensor& t : kLayerTensors) {
      const std::string name = hugging_face_name(t, 1);
      copy_without(dir / "st", dir / "missing", name);
      CHECK_THAT(load_error(dir / "missing"), AMC_CONTAINS("tensor '" + name + "' is missing"));
    }
    for (const GlobalTensor& t : kGlobalTensors) {
      const std::string name(t.hugging_face);
      copy_without(dir / "st", dir / "missing", name);
      CHECK_THAT(load_error(dir / "missing"), AMC_CONTAINS("tensor '" + name + "' is missing"));
    }
  }

  SECTION("GGUF") {
    // Qwen3's rows are not permuted: the file holds the checkpoint's values as they are, and
    // every tensor in it must be used (the loader refuses one it does not ask for).
    REQUIRE_FALSE(family(Architecture::qwen3).gguf_qk_permuted);
    test::write_gguf_of_checkpoint(dir / "st", dir / "all.gguf");
    check_fields(Checkpoint::load(dir / "all.gguf", f32), file);
    for (const LayerTensor& t : kLayerTensors) {
      const std::string name = gguf_name(t, 1);
      test::write_gguf_of_checkpoint(dir / "st", dir / "missing.gguf", {name});
      CHECK_THAT(load_error(dir / "missing.gguf"),
                 AMC_CONTAINS("tensor '" + name + "' is missing"));
    }
    // The embedding and the final norm are required; without output.weight the file is tied.
    for (const GlobalTensorId id : {GlobalTensorId::embed, GlobalTensorId::final_norm}) {
      const std::string name(global_tensor(id).gguf);
      test::write_gguf_of_checkpoint(dir / "st", dir / "missing.gguf", {name});
      CHECK_THAT(load_error(dir / "missing.gguf"),
                 AMC_CONTAINS("tensor '" + name + "' is missing"));
    }
    test::write_gguf_of_checkpoint(dir / "st", dir / "tied.gguf",
                                   {std::string(global_tensor(GlobalTensorId::lm_head).gguf)});
    CHECK(Checkpoint::load(dir / "tied.gguf", f32).weights().tied);
  }
}

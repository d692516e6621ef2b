// Checkpoint loading: file discovery, the shard index, and name/shape/dtype checks per tensor.
#include "checkpoint.hpp"

#include <amc/aligned.hpp>
#include <amc/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "tensor_names.hpp"

namespace amc::transformer {

std::size_t Weights::decode_bytes() const {
  std::size_t total = lm_head.bytes();
  for (const LayerWeights& l : layers) {
    for (const LayerTensor& t : kLayerTensors) {
      if (t.matrix != nullptr) total += (l.*t.matrix).bytes();
    }
  }
  return total;
}

const char* to_string(WeightMemory memory) {
  switch (memory) {
    case WeightMemory::mapped:
      return "mapped";
    case WeightMemory::huge_pages:
      return "huge_pages";
  }
  return "invalid";
}

Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

namespace {

constexpr const char* kWhere = "amc::transformer::Checkpoint::load";

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) detail::throw_error(kWhere, file.string(), ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

/// Finds tensors across the shards and turns them into checked views.
class CheckpointLoader {
 public:
  CheckpointLoader(Checkpoint& c, std::optional<StorageType> weight_dtype)
      : c_(c), weight_dtype_(weight_dtype) {}

  void open_files() {
    const std::filesystem::path single = c_.directory_ / "model.safetensors";
    const std::filesystem::path index = c_.directory_ / "model.safetensors.index.json";
    if (std::filesystem::exists(single)) {
      c_.shards_.push_back(SafetensorsFile::open(single));
      for (const TensorInfo& t : c_.shards_[0].tensors()) location_[t.name] = 0;
      return;
    }
    if (!std::filesystem::exists(index)) {
      detail::throw_error(kWhere, c_.directory_.string(),
                          ": no model.safetensors or model.safetensors.index.json");
    }
    open_shards(index);
  }

  void open_shards(const std::filesystem::path& index_file) {
    using nlohmann::json;
    json index;
    try {
      index = json::parse(read_text(index_file));
    } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
      detail::throw_error(kWhere, index_file.string(), ": not valid JSON: ", e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      detail::throw_error(kWhere, index_file.string(), ": missing object 'weight_map'");
    }
    std::map<std::string, std::size_t> shard_of_file;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) {
        detail::throw_error(kWhere, index_file.string(), ": weight_map entry for '", name,
                            "' is not a file name");
      }
      const std::string shard = file.get<std::string>();
      // Shards are plain file names next to the index: refuse paths that would leave the
      // checkpoint directory.
      if (shard.empty() || shard.find('/') != std::string::npos ||
          shard.find('\\') != std::string::npos || shard == "." || shard == "..") {
        detail::throw_error(kWhere, index_file.string(), ": weight_map entry for '", name,
                            "' is not a plain file name: '", shard, "'");
      }
      auto [it, inserted] = shard_of_file.emplace(shard, c_.shards_.size());
      if (inserted) {
        const std::filesystem::path path = c_.directory_ / shard;
        if (!std::filesystem::exists(path)) {
          detail::throw_error(kWhere, index_file.string(), ": shard '", shard, "' (tensor '", name,
                              "') does not exist");
        }
        c_.shards_.push_back(SafetensorsFile::open(path));
      }
      if (c_.shards_[it->second].find(name) == nullptr) {
        detail::throw_error(kWhere, (c_.directory_ / shard).string(), ": tensor '", name,
                            "' is listed in ", index_file.filename().string(),
                            " but missing from the shard");
      }
      location_[name] = it->second;
    }
  }

  bool has(const std::string& name) const { return location_.count(name) != 0; }

  /// The tensor `name` with its shard, checked for presence and shape.
  std::pair<const SafetensorsFile*, const TensorInfo*> find(
      const std::string& name, const std::vector<std::int64_t>& shape) const {
    const auto it = location_.find(name);
    if (it == location_.end()) {
      detail::throw_error(kWhere, source_name(), ": tensor '", name,
                          "' is missing (expected shape ", shape_string(shape), ")");
    }
    const SafetensorsFile& file = c_.shards_[it->second];
    const TensorInfo& info = file.at(name);
    if (info.shape != shape) {
      detail::throw_error(kWhere, file.source(), ": tensor '", name, "' has shape ",
                          shape_string(info.shape), ", expected ", shape_string(shape));
    }
    if (info.dtype != Dtype::BF16 && info.dtype != Dtype::F16 && info.dtype != Dtype::F32) {
      detail::throw_error(kWhere, file.source(), ": tensor '", name, "' has dtype ",
                          to_string(info.dtype), "; expected BF16, F16 or F32");
    }
    return {&file, &info};
  }

  Matrix matrix(const std::string& name, std::int64_t rows, std::int64_t cols) {
    const auto [file, info] = find(name, {rows, cols});
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    const std::span<const std::byte> bytes = file->bytes(*info);
    stored_f32_ = stored_f32_ || info->dtype == Dtype::F32;
    stored_f16_ = stored_f16_ || info->dtype == Dtype::F16;
    const StorageType stored = info->dtype == Dtype::F32    ? StorageType::f32
                               : info->dtype == Dtype::BF16 ? StorageType::bf16
                                                            : StorageType::f16;
    const StorageType wanted = weight_dtype_.value_or(stored);
    if (wanted == stored &&
        reinterpret_cast<std::uintptr_t>(bytes.data()) % storage_size(stored) == 0) {
      m.dtype = stored;
      m.data = bytes.data();
    } else {
      // A conversion asked for (LoadOptions::weight_dtype), or a file whose tensors are not
      // aligned for their type (legal, but no writer we know of makes one; then f32, exact).
      const StorageType to = wanted == stored ? StorageType::f32 : wanted;
      const std::vector<float> values = file->to_f32(name);
      auto copy = std::make_unique<AlignedVector<std::byte>>(values.size() * storage_size(to));
      if (to == StorageType::f32) {
        std::memcpy(copy->data(), values.data(), copy->size());
      } else {
        auto* out = reinterpret_cast<bf16*>(copy->data());
        for (std::size_t i = 0; i < values.size(); ++i) out[i] = to_bf16(values[i]);
      }
      m.dtype = to;
      m.data = copy->data();
      c_.owned_.push_back(std::move(copy));
    }
    return m;
  }

  std::vector<float> vector(const std::string& name, std::int64_t size) {
    const auto [file, info] = find(name, {size});
    return file->to_f32(name);
  }

  /// The file to name in a message about a missing tensor: the single file, or the index.
  std::string source() const { return source_name(); }

  /// The widest dtype among the matrices loaded so far, or the one they were converted to.
  StorageType stored_dtype() const {
    if (weight_dtype_) return *weight_dtype_;
    return stored_f32_ ? StorageType::f32 : stored_f16_ ? StorageType::f16 : StorageType::bf16;
  }

 private:
  std::string source_name() const {
    return c_.shards_.size() == 1 ? c_.shards_[0].source()
                                  : (c_.directory_ / "model.safetensors.index.json").string();
  }

  Checkpoint& c_;
  std::optional<StorageType> weight_dtype_;       // LoadOptions::weight_dtype
  std::map<std::string, std::size_t> location_;   // tensor name -> shard
  bool stored_f32_ = false, stored_f16_ = false;  // dtypes of the matrices in the files
};

namespace {

/// Copies a tensor's bytes out of a shard's mapping, slice by slice. With from_file, every
/// whole page of the source is taken out of this process's mapping once it is copied, so that
/// the weights count once in its resident set, not twice (bench/memory-qwen2), not even while
/// the largest matrix (the 272 MB unembedding of Qwen2-0.5B) is being copied. Only for bytes of
/// a shard that SafetensorsFile::open mapped read-only and private, as the loader's are: there
/// MADV_DONTNEED drops the page table entries and the file's page cache stays, so a later read
/// would fault the same bytes back in (on an anonymous mapping it would zero them instead).
/// Pages the tensor shares with its neighbours in the file stay.
void copy_out_of_file(std::byte* to, const void* from, std::size_t bytes,
                      [[maybe_unused]] bool from_file) {
  constexpr std::size_t kSlice = std::size_t{16} << 20;
  const auto* source = static_cast<const std::byte*>(from);
#if defined(__linux__)
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(from);
  std::uintptr_t released = (begin + page - 1) / page * page;  // first whole page not yet dropped
#endif
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t slice = std::min(kSlice, bytes - done);
    std::memcpy(to + done, source + done, slice);
    done += slice;
#if defined(__linux__)
    const std::uintptr_t copied = (begin + done) / page * page;  // end of the whole pages copied
    if (from_file && released < copied) {
      ::madvise(reinterpret_cast<void*>(released), copied - released, MADV_DONTNEED);
      released = copied;
    }
#endif
  }
}

/// Copies the matrices a decode step streams into one huge-page block, in the order the step
/// reads them, and points the Matrix views there. Leaves them mapped when the kernel refuses
/// the huge-page advice (returns false then).
bool copy_to_huge_pages(Weights& w, std::vector<std::unique_ptr<AlignedVector<std::byte>>>& owned,
                        HugePageBuffer& block) {
  std::vector<Matrix*> streamed;
  for (LayerWeights& l : w.layers) {
    for (const LayerTensor& t : kLayerTensors) {
      if (t.matrix != nullptr) streamed.push_back(&(l.*t.matrix));
    }
  }
  // Tied, the unembedding is the embedding, whose rows the step also reads one at a time.
  streamed.push_back(w.tied ? &w.embed : &w.lm_head);
  // Each matrix starts on a cache line, as the file's bf16 tensors need not.
  auto padded = [](std::size_t bytes) {
    return (bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
  };
  std::size_t total = 0;
  for (const Matrix* m : streamed) total += padded(m->bytes());
  HugePageBuffer copy;
  try {
    copy = HugePageBuffer(total);
  } catch (const amc::error&) {
    // No memory for a copy: the mapped file still serves (its pages can be evicted and
    // re-read, so it runs where a copy does not fit), only slower.
    return false;
  }
  if (!copy.huge_pages_advised()) return false;
  std::size_t offset = 0;
  for (Matrix* m : streamed) {
    // A converted copy (an unaligned tensor in the file, or a weight_dtype conversion) is
    // copied again: drop it after.
    const bool fallback = std::any_of(owned.begin(), owned.end(),
                                      [&](const auto& v) { return v->data() == m->data; });
    copy_out_of_file(copy.data() + offset, m->data, m->bytes(), !fallback);
    std::erase_if(owned, [&](const auto& v) { return v->data() == m->data; });
    m->data = copy.data() + offset;
    offset += padded(m->bytes());
  }
  if (w.tied) w.lm_head = w.embed;
  block = std::move(copy);
  return true;
}

}  // namespace

bool is_gguf_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

void check_load_options(const LoadOptions& options) {
  AMC_CHECK(options.weights == WeightMemory::mapped || options.weights == WeightMemory::huge_pages,
            kWhere, "options.weights is ", static_cast<int>(options.weights),
            "; expected WeightMemory::mapped or WeightMemory::huge_pages");
  AMC_CHECK(!options.weight_dtype || *options.weight_dtype == StorageType::bf16 ||
                *options.weight_dtype == StorageType::f32,
            kWhere, "options.weight_dtype is ",
            options.weight_dtype ? to_string(*options.weight_dtype) : "", "; expected bf16 or f32");
  AMC_CHECK(!options.keep_blocks || !options.weight_dtype, kWhere,
            "options.keep_blocks keeps the stored types, options.weight_dtype (",
            options.weight_dtype ? to_string(*options.weight_dtype) : "",
            ") asks for another: set one of them");
  AMC_CHECK(!options.interleave_rows || options.keep_blocks, kWhere,
            "options.interleave_rows interleaves stored blocks and needs options.keep_blocks");
}

Checkpoint Checkpoint::load(const std::filesystem::path& dir, const LoadOptions& options) {
  check_load_options(options);
  if (is_gguf_file(dir)) return load_gguf(dir, options);
  Checkpoint c;
  c.directory_ = dir;
  if (!std::filesystem::is_directory(dir)) {
    detail::throw_error(kWhere, dir.string(),
                        std::filesystem::exists(dir)
                            ? ": neither a checkpoint directory nor a GGUF file"
                            : ": no such file or directory");
  }
  if (!std::filesystem::exists(dir / "config.json")) {
    detail::throw_error(kWhere, (dir / "config.json").string(), ": file not found");
  }
  c.config_ = load_config(dir / "config.json");
  const Config& cfg = c.config_;
  CheckpointLoader loader(c, options.weight_dtype);
  loader.open_files();

  const std::string family_name(to_string(cfg.architecture));
  Weights& w = c.weights_;
  // A vector the config's features call for, or, when they do not, a check that the
  // checkpoint does not hold it either.
  auto feature = [&](bool wanted, const std::string& name, std::int64_t size,
                     const char* why_absent) {
    if (wanted) return loader.vector(name, size);
    if (loader.has(name)) {
      detail::throw_error(kWhere, (dir / "config.json").string(), ": the checkpoint has tensor '",
                          name, "', but config.json describes ", family_name, " ", why_absent,
                          ": does it name the right architecture?");
    }
    return std::vector<float>{};
  };
  const char* no_attention_bias =
      family(cfg.architecture).attention_bias_key ? "with attention_bias false" : "";
  // What config.json says about a feature whose tensor it does not call for.
  auto why_absent = [&](Presence presence) {
    switch (presence) {
      case Presence::qkv_bias:
        return no_attention_bias;
      case Presence::o_bias:
        return cfg.qkv_bias ? "(no o_proj bias)" : no_attention_bias;
      case Presence::qk_norm:
        return "(no q/k norms)";
      case Presence::always:
      case Presence::untied:
        break;
    }
    return "";
  };
  // The global tensors' names and shapes.
  auto global = [&](GlobalTensorId id) {
    const GlobalTensor& t = global_tensor(id);
    return std::pair(std::string(t.hugging_face), shape_of(t.shape, cfg));
  };
  const auto [embed, embed_shape] = global(GlobalTensorId::embed);
  w.embed = loader.matrix(embed, embed_shape[0], embed_shape[1]);
  w.layers.resize(static_cast<std::size_t>(cfg.num_hidden_layers));
  for (std::int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<std::size_t>(i)];
    for (const LayerTensor& t : kLayerTensors) {
      const std::string name = hugging_face_name(t, i);
      const std::vector<std::int64_t> shape = shape_of(t.shape, cfg);
      if (t.matrix != nullptr) {
        l.*t.matrix = loader.matrix(name, shape[0], shape[1]);
      } else {
        l.*t.vector = feature(present(t.presence, cfg), name, shape[0], why_absent(t.presence));
      }
    }
    // No family has MLP biases: a checkpoint with them computes another model.
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* m : {"gate_proj", "up_proj", "down_proj"}) {
      feature(false, p + "mlp." + m + ".bias", 0, "(no MLP biases)");
    }
  }
  const auto [final_norm, final_norm_shape] = global(GlobalTensorId::final_norm);
  w.final_norm = loader.vector(final_norm, final_norm_shape[0]);
  const auto [lm_head, lm_head_shape] = global(GlobalTensorId::lm_head);
  w.tied = !loader.has(lm_head);
  if (w.tied && !cfg.tie_word_embeddings) {
    detail::throw_error(kWhere, loader.source(), ": tensor '", lm_head,
                        "' is missing (expected shape ", shape_string(lm_head_shape),
                        ": config.json says tie_word_embeddings false)");
  }
  w.lm_head = w.tied ? w.embed : loader.matrix(lm_head, lm_head_shape[0], lm_head_shape[1]);
  c.weight_dtype_ = loader.stored_dtype();
  if (options.weights == WeightMemory::huge_pages &&
      copy_to_huge_pages(w, c.owned_, c.weight_copy_)) {
    c.weight_memory_ = WeightMemory::huge_pages;
  }
  return c;
}

}  // namespace amc::transformer

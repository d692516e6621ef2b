// GGUF checkpoints: the config from the file's metadata, llama.cpp's tensor names, and every
// tensor dequantized at load into the weight dtype (checkpoint.hpp, Checkpoint::load_gguf).
//
// llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.permute) reorders the rows of every
// llama-architecture q and k projection, head by head, so that its "normal" RoPE, which rotates
// adjacent pairs (x[2i], x[2i+1]), computes what Hugging Face's rotate-half RoPE computes on
// the original rows, which pairs (x[i], x[i + d/2]). This transformer implements the Hugging
// Face forward pass, so the loader puts the rows back: within each head of d rows, the file's
// row 2i + a (a in {0, 1}, i < d/2) is Hugging Face's row a * d/2 + i. Qwen2 and Qwen3 files
// use NEOX RoPE (rotate-half) and are stored unpermuted. The family table says which
// architectures are permuted (Family::gguf_qk_permuted), tensor_names.def which rows
// (rope_heads).
#include <amc/error.hpp>
#include <amc/io/gguf.hpp>
#include <amc/io/gguf_quants.hpp>
#include <amc/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "checkpoint.hpp"
#include "config.hpp"
#include "tensor_names.hpp"

namespace amc::transformer {
namespace {

constexpr const char* kConfigWhere = "amc::transformer::config_from_gguf";
constexpr const char* kLoadWhere = "amc::transformer::Checkpoint::load";

// The same limits as config.json's (config.cpp): far beyond any model of these families, low
// enough that a corrupt file cannot make the loader reserve terabytes.
constexpr std::int64_t kMaxHidden = 1 << 16;
constexpr std::int64_t kMaxIntermediate = 1 << 20;
constexpr std::int64_t kMaxLayers = 1 << 12;
constexpr std::int64_t kMaxHeads = 1 << 12;
constexpr std::int64_t kMaxHeadDim = 1 << 12;
constexpr std::int64_t kMaxVocab = 1 << 24;
constexpr std::int64_t kMaxPositions = std::int64_t{1} << 30;

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Reads the <arch>.* keys, naming the file in every error.
class MetadataReader {
 public:
  MetadataReader(const GgufFile& file, std::string prefix)
      : file_(file), prefix_(std::move(prefix)) {}

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    detail::throw_error(kConfigWhere, file_.source(), ": ", std::forward<Parts>(parts)...);
  }

  std::string key(std::string_view name) const { return prefix_ + std::string(name); }

  /// A size in [1, limit]: the key <arch>.<name>, required unless `fallback` is given.
  std::int64_t size(std::string_view name, std::int64_t limit,
                    std::optional<std::int64_t> fallback = std::nullopt) const {
    const std::string k = key(name);
    const std::optional<std::int64_t> v = file_.optional_integer(k);
    if (!v && !fallback) fail("metadata '", k, "' is missing");
    const std::int64_t value = v ? *v : *fallback;
    if (value < 1 || value > limit) {
      fail("metadata '", k, "' = ", value, " is outside [1, ", limit, "]");
    }
    return value;
  }

  const GgufFile& file() const { return file_; }

 private:
  const GgufFile& file_;
  std::string prefix_;
};

}  // namespace

Config config_from_gguf(const GgufFile& file) {
  const std::string arch_name = file.string("general.architecture");
  const std::optional<Architecture> arch = architecture_from_gguf(arch_name);
  if (!arch) {
    detail::throw_error(kConfigWhere, file.source(), ": general.architecture '", arch_name,
                        "' is not supported (", known_gguf_architectures(), ")");
  }
  const MetadataReader r(file, arch_name + ".");
  Config c;
  c.architecture = *arch;
  c.hidden_size = r.size("embedding_length", kMaxHidden);
  c.intermediate_size = r.size("feed_forward_length", kMaxIntermediate);
  c.num_hidden_layers = r.size("block_count", kMaxLayers);
  c.num_attention_heads = r.size("attention.head_count", kMaxHeads);
  c.num_key_value_heads = r.size("attention.head_count_kv", kMaxHeads, c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    r.fail("metadata '", r.key("attention.head_count_kv"), "' = ", c.num_key_value_heads,
           " does not divide '", r.key("attention.head_count"), "' = ", c.num_attention_heads);
  }
  std::optional<std::int64_t> derived_head_dim;
  if (c.hidden_size % c.num_attention_heads == 0) {
    derived_head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (!file.find_value(r.key("attention.key_length")) && !derived_head_dim) {
    r.fail("metadata '", r.key("attention.key_length"), "' is missing and '",
           r.key("attention.head_count"), "' = ", c.num_attention_heads, " does not divide '",
           r.key("embedding_length"), "' = ", c.hidden_size);
  }
  c.head_dim = r.size("attention.key_length", kMaxHeadDim, derived_head_dim);
  if (c.head_dim % 2 != 0) {
    r.fail("metadata '", r.key("attention.key_length"), "' = ", c.head_dim,
           " must be even for RoPE");
  }
  if (const auto v = file.optional_integer(r.key("attention.value_length"));
      v && *v != c.head_dim) {
    r.fail("metadata '", r.key("attention.value_length"), "' = ", *v, " differs from '",
           r.key("attention.key_length"), "' = ", c.head_dim, " (not supported)");
  }
  if (const auto v = file.optional_integer(r.key("rope.dimension_count")); v && *v != c.head_dim) {
    r.fail("metadata '", r.key("rope.dimension_count"), "' = ", *v, " is not the head dimension ",
           c.head_dim, ": partial RoPE is not supported");
  }
  c.max_position_embeddings = r.size("context_length", kMaxPositions);
  c.rope_theta = file.optional_number(r.key("rope.freq_base")).value_or(10000.0);
  if (!(c.rope_theta > 1.0) || !std::isfinite(c.rope_theta)) {
    r.fail("metadata '", r.key("rope.freq_base"), "' = ", c.rope_theta, " must be finite and > 1");
  }
  c.rms_norm_eps = file.number(r.key("attention.layer_norm_rms_epsilon"));
  if (!(c.rms_norm_eps > 0.0) || !(c.rms_norm_eps < 1.0)) {
    r.fail("metadata '", r.key("attention.layer_norm_rms_epsilon"), "' = ", c.rms_norm_eps,
           " must be in (0, 1)");
  }
  // What llama.cpp may write for these families that this transformer does not compute.
  if (const auto type = file.optional_string(r.key("rope.scaling.type")); type && *type != "none") {
    r.fail("metadata '", r.key("rope.scaling.type"), "' = '", *type,
           "' is not supported (only none)");
  }
  if (const auto experts = file.optional_integer(r.key("expert_count")); experts && *experts > 0) {
    r.fail("metadata '", r.key("expert_count"), "' = ", *experts,
           ": mixture-of-experts models are not supported");
  }
  if (file.find_value(r.key("attention.sliding_window"))) {
    r.fail("metadata '", r.key("attention.sliding_window"),
           "' is set: sliding-window attention is not supported (full attention only)");
  }

  // The vocabulary is the embedding's rows (llama.cpp reads it from there too; <arch>.vocab_size
  // is optional and, when present, must agree).
  const std::string embed_name(global_tensor(GlobalTensorId::embed).gguf);
  const GgufTensorInfo* embed = file.find(embed_name);
  if (embed == nullptr) {
    detail::throw_error(kConfigWhere, file.source(), ": tensor '", embed_name, "' is missing");
  }
  if (embed->shape.size() != 2 || embed->shape[1] != c.hidden_size) {
    detail::throw_error(kConfigWhere, file.source(), ": tensor '", embed_name, "' has shape ",
                        shape_string(embed->shape), ", expected [vocab, ", c.hidden_size, "]");
  }
  c.vocab_size = embed->shape[0];
  if (c.vocab_size > kMaxVocab) {
    detail::throw_error(kConfigWhere, file.source(), ": tensor '", embed_name, "' has ",
                        c.vocab_size, " rows, beyond the supported vocabulary of ", kMaxVocab);
  }
  if (const auto v = file.optional_integer(r.key("vocab_size")); v && *v != c.vocab_size) {
    r.fail("metadata '", r.key("vocab_size"), "' = ", *v, " disagrees with ", embed_name, "'s ",
           c.vocab_size, " rows");
  }

  // Features: GGUF has no attention_bias key, so the tensors of layer 0 say (and the loader
  // then requires the same in every layer). Qwen2's q/k/v biases are not optional.
  const Family& fam = family(c.architecture);
  c.qk_norm = fam.qk_norm;
  if (fam.attention_bias_key) {
    c.qkv_bias = file.find(gguf_name(layer_tensor(LayerTensorId::q_bias), 0)) != nullptr;
    c.o_bias = file.find(gguf_name(layer_tensor(LayerTensorId::o_bias), 0)) != nullptr;
  } else {
    c.qkv_bias = true;
    c.o_bias = false;
  }
  c.tie_word_embeddings =
      file.find(std::string(global_tensor(GlobalTensorId::lm_head).gguf)) == nullptr;
  c.bos_token_id = file.optional_integer("tokenizer.ggml.bos_token_id").value_or(-1);
  c.eos_token_id = file.optional_integer("tokenizer.ggml.eos_token_id").value_or(-1);
  for (const auto* id : {&c.bos_token_id, &c.eos_token_id}) {
    if (*id < -1 || *id >= c.vocab_size) {
      detail::throw_error(kConfigWhere, file.source(), ": metadata 'tokenizer.ggml.",
                          id == &c.bos_token_id ? "bos" : "eos", "_token_id' = ", *id,
                          " is outside the vocabulary [0, ", c.vocab_size, ")");
    }
  }
  return c;
}

/// Finds, checks and dequantizes the tensors of a GGUF file into a Checkpoint.
class GgufLoader {
 public:
  /// \param dtype       what matrices are dequantized into
  /// \param keep_blocks keep block-quantized matrices as stored instead (LoadOptions)
  GgufLoader(Checkpoint& c, const GgufFile& file, StorageType dtype, bool keep_blocks, int threads)
      : c_(c), file_(file), dtype_(dtype), keep_blocks_(keep_blocks), pool_(threads) {}

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    detail::throw_error(kLoadWhere, file_.source(), ": ", std::forward<Parts>(parts)...);
  }

  /// The tensor `name`, checked for presence, shape and a type this loader dequantizes.
  const GgufTensorInfo& find(const std::string& name, const std::vector<std::int64_t>& shape) {
    const GgufTensorInfo* t = file_.find(name);
    if (t == nullptr)
      fail("tensor '", name, "' is missing (expected shape ", shape_string(shape), ")");
    if (t->shape != shape) {
      fail("tensor '", name, "' has shape ", shape_string(t->shape), ", expected ",
           shape_string(shape));
    }
    if (!can_dequantize(t->type)) {
      fail("tensor '", name, "' has type ", to_string(t->type), ", which amc does not dequantize (",
           dequantizable_type_names(), ")");
    }
    used_.insert(name);
    return *t;
  }

  std::vector<float> vector(const std::string& name, std::int64_t size) {
    const GgufTensorInfo& t = find(name, {size});
    std::vector<float> out(static_cast<std::size_t>(size));
    dequantize(t.type, file_.bytes(t), out);
    return out;
  }

  /// A vector the config's features call for, or, when they do not, a check that the file
  /// does not hold it either (it would compute another model).
  std::vector<float> feature(bool wanted, const std::string& name, std::int64_t size) {
    if (wanted) return vector(name, size);
    if (file_.find(name) != nullptr) {
      fail("tensor '", name, "' is present, but layer 0 of this ",
           to_string(c_.config_.architecture), " file says the feature is absent");
    }
    return {};
  }

  /// Records the matrix `name` [rows, cols] for dequantizing; `heads` > 0 undoes llama.cpp's
  /// RoPE row permutation over that many heads (file comment).
  Matrix* matrix(Matrix& m, const std::string& name, std::int64_t rows, std::int64_t cols,
                 std::int64_t heads = 0) {
    const GgufTensorInfo& t = find(name, {rows, cols});
    m.dtype = dtype_;
    m.rows = rows;
    m.cols = cols;
    if (keep_blocks_) {
      // can_dequantize (find) has checked the type: it has a layout.
      if (ggml_type_layout(static_cast<std::uint32_t>(t.type))->block_elements > 1) {
        m.blocks = t.type;
        m.block_row_bytes = file_.bytes(t).size() / static_cast<std::size_t>(rows);
      } else {
        // Plain types as they are where the forward pass has them; F16 exactly in f32.
        m.dtype = t.type == GgmlType::BF16 ? StorageType::bf16 : StorageType::f32;
      }
    }
    pending_.push_back({&m, &t, heads});
    return &m;
  }

  /// A bias the permutation also reorders (q and k of a llama file with attention biases).
  std::vector<float> permuted_vector(std::vector<float> v, std::int64_t heads) {
    if (heads == 0 || v.empty()) return v;
    std::vector<float> out(v.size());
    const auto d = static_cast<std::int64_t>(v.size()) / heads;
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(v.size()); ++r) {
      out[static_cast<std::size_t>(hf_row(r, d))] = v[static_cast<std::size_t>(r)];
    }
    return out;
  }

  /// Every tensor of the file the model uses: refuse the rest by name.
  void check_all_used() const {
    for (const GgufTensorInfo& t : file_.tensors()) {
      if (used_.count(t.name) != 0) continue;
      if (t.name == "rope_freqs.weight") {
        fail(
            "tensor 'rope_freqs.weight' (RoPE frequency factors, Llama 3's scaled RoPE) is not "
            "supported for GGUF files");
      }
      fail("tensor '", t.name, "' is not part of the ", to_string(c_.config_.architecture),
           " model this transformer implements");
    }
  }

  /// Dequantizes every recorded matrix, in order, into one block: huge pages when asked for
  /// (and granted by the kernel), else ordinary aligned memory.
  /// `interleave`: also an interleaved copy of every Q8_0, Q4_0 and Q4_1 matrix, after its rows
  /// (LoadOptions::interleave_rows).
  void dequantize_matrices(WeightMemory memory, bool interleave) {
    auto padded = [](std::size_t bytes) {
      return (bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
    };
    auto interleaved_size = [&](const Matrix& m) -> std::size_t {
      if (!interleave || !m.blocks || !can_interleave(*m.blocks)) return 0;
      return padded(interleaved_bytes(*m.blocks, m.rows, m.cols));
    };
    std::size_t total = 0;
    for (const Pending& p : pending_) {
      total += padded(p.matrix->bytes()) + interleaved_size(*p.matrix);
    }
    std::byte* block = nullptr;
    c_.weight_memory_ = WeightMemory::mapped;
    if (memory == WeightMemory::huge_pages) {
      try {
        c_.weight_copy_ = HugePageBuffer(total);
        block = c_.weight_copy_.data();
        if (c_.weight_copy_.huge_pages_advised()) c_.weight_memory_ = WeightMemory::huge_pages;
      } catch (const amc::error&) {
        // No such mapping to be had: ordinary memory serves as well, only slower to stream.
      }
    }
    if (block == nullptr) {
      c_.dequantized_.resize(total);
      block = c_.dequantized_.data();
    }
    std::size_t offset = 0;
    for (const Pending& p : pending_) {
      Matrix& m = *p.matrix;
      m.data = block + offset;
      offset += padded(m.bytes());
      dequantize_rows(p);
      if (const std::size_t size = interleaved_size(m); size > 0) {
        std::byte* to = block + offset;
        offset += size;
        interleave_rows(*m.blocks, m.rows, m.cols,
                        std::span(static_cast<const std::byte*>(m.data), m.bytes()),
                        std::span(to, interleaved_bytes(*m.blocks, m.rows, m.cols)));
        m.interleaved = to;
      }
    }
  }

 private:
  struct Pending {
    Matrix* matrix;
    const GgufTensorInfo* tensor;
    std::int64_t heads;  // > 0: undo the RoPE row permutation over this many heads
  };

  /// Hugging Face's row for the file's row r of a permuted projection with heads of d rows.
  static std::int64_t hf_row(std::int64_t r, std::int64_t d) {
    const std::int64_t head = r / d, within = r % d;
    return head * d + (within % 2) * (d / 2) + within / 2;
  }

  void dequantize_rows(const Pending& p) {
    Matrix& m = *p.matrix;
    const std::span<const std::byte> bytes = file_.bytes(*p.tensor);
    const auto row_bytes = bytes.size() / static_cast<std::size_t>(m.rows);
    const std::int64_t d = p.heads > 0 ? m.rows / p.heads : 0;
    // Rows in chunks of about 64K elements: enough work per task to hide the pool's overhead.
    const std::int64_t rows_per_task = std::max<std::int64_t>(1, 65536 / m.cols);
    const std::int64_t tasks = (m.rows + rows_per_task - 1) / rows_per_task;
    pool_.parallel_for(tasks, [&](std::int64_t task) {
      const std::int64_t end = std::min(m.rows, (task + 1) * rows_per_task);
      for (std::int64_t r = task * rows_per_task; r < end; ++r) {
        const std::int64_t to = d > 0 ? hf_row(r, d) : r;
        const std::span<const std::byte> from =
            bytes.subspan(static_cast<std::size_t>(r) * row_bytes, row_bytes);
        auto* row = static_cast<std::byte*>(const_cast<void*>(m.row(to)));
        const auto cols = static_cast<std::size_t>(m.cols);
        if (m.blocks) {
          std::memcpy(row, from.data(), row_bytes);  // a row of blocks, as stored
        } else if (m.dtype == StorageType::f32) {
          dequantize(p.tensor->type, from, std::span(reinterpret_cast<float*>(row), cols));
        } else {
          dequantize(p.tensor->type, from, std::span(reinterpret_cast<bf16*>(row), cols));
        }
      }
    });
  }

  Checkpoint& c_;
  const GgufFile& file_;
  StorageType dtype_;
  bool keep_blocks_;
  ThreadPool pool_;
  std::set<std::string> used_;
  std::vector<Pending> pending_;
};

namespace {

/// "Q4_1 x210, F32 x61, Q8_0 x1": the file's tensor types, most numerous first.
std::string count_types(const GgufFile& file) {
  std::map<std::string_view, int> count;
  for (const GgufTensorInfo& t : file.tensors()) ++count[to_string(t.type)];
  std::vector<std::pair<std::string_view, int>> sorted(count.begin(), count.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s;
  for (const auto& [name, n] : sorted) {
    s += (s.empty() ? "" : ", ") + std::string(name) + " x" + std::to_string(n);
  }
  return s;
}

}  // namespace

Checkpoint Checkpoint::load_gguf(const std::filesystem::path& path, const LoadOptions& options) {
  check_load_options(options);
  const GgufFile file = GgufFile::open(path);
  Checkpoint c;
  c.directory_ = path;
  c.format_ = CheckpointFormat::gguf;
  c.config_ = config_from_gguf(file);
  c.weight_dtype_ = options.weight_dtype.value_or(StorageType::bf16);
  c.stored_types_ = count_types(file);
  const Config& cfg = c.config_;
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  c.blocks_kept_ = options.keep_blocks;
  c.rows_interleaved_ = options.interleave_rows && int8_interleaved_accelerated();
  GgufLoader loader(c, file, c.weight_dtype_, options.keep_blocks, threads);

  // q and k rows stored permuted for llama.cpp's RoPE (llama files; file comment).
  const bool permuted = family(cfg.architecture).gguf_qk_permuted;
  Weights& w = c.weights_;
  w.layers.resize(static_cast<std::size_t>(cfg.num_hidden_layers));
  // Matrices in the order a decode step reads them (as the safetensors huge-page copy): every
  // layer's, the unembedding, the embedding.
  for (std::int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<std::size_t>(i)];
    for (const LayerTensor& t : kLayerTensors) {
      const std::string name = gguf_name(t, i);
      const std::vector<std::int64_t> shape = shape_of(t.shape, cfg);
      const std::int64_t heads = permuted ? rope_head_count(t.rope_heads, cfg) : 0;
      if (t.matrix != nullptr) {
        loader.matrix(l.*t.matrix, name, shape[0], shape[1], heads);
      } else {
        l.*t.vector =
            loader.permuted_vector(loader.feature(present(t.presence, cfg), name, shape[0]), heads);
      }
    }
  }
  auto global = [&](GlobalTensorId id) {
    const GlobalTensor& t = global_tensor(id);
    return std::pair(std::string(t.gguf), shape_of(t.shape, cfg));
  };
  const auto [final_norm, final_norm_shape] = global(GlobalTensorId::final_norm);
  w.final_norm = loader.vector(final_norm, final_norm_shape[0]);
  w.tied = cfg.tie_word_embeddings;
  if (!w.tied) {
    const auto [lm_head, shape] = global(GlobalTensorId::lm_head);
    loader.matrix(w.lm_head, lm_head, shape[0], shape[1]);
  }
  const auto [embed, embed_shape] = global(GlobalTensorId::embed);
  loader.matrix(w.embed, embed, embed_shape[0], embed_shape[1]);
  loader.check_all_used();
  loader.dequantize_matrices(options.weights, c.rows_interleaved_);
  if (w.tied) w.lm_head = w.embed;
  return c;
}

}  // namespace amc::transformer

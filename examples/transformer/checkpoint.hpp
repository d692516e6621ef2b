// A checkpoint of any supported family (family.hpp), from one of two formats:
// - Hugging Face's, memory-mapped: config.json plus model.safetensors (or
//   model.safetensors.index.json and its shards). Weight matrices keep the dtype the file
//   stores (BF16, F16 or F32) unless LoadOptions::weight_dtype asks for another, so a 1 GB bf16
//   checkpoint costs 1 GB, not 2 GB of f32 copies. By default the matrices a decode step
//   streams are copied once, byte for byte, into transparent huge pages (WeightMemory).
// - GGUF (llama.cpp's single file, gguf_checkpoint.cpp): the config from the file's metadata,
//   every tensor dequantized at load (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
//   Q6_K) into LoadOptions::weight_dtype (bf16 by default), or, with LoadOptions::keep_blocks,
//   the block-quantized matrices kept as stored; the Q/K row permutation of llama-architecture
//   files undone either way, so the forward pass is the Hugging Face one.
#pragma once

#include <amc/aligned.hpp>
#include <amc/huge_pages.hpp>
#include <amc/io/gguf.hpp>
#include <amc/io/safetensors.hpp>
#include <amc/storage.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"

namespace amc::transformer {

/// A non-owning view of one weight matrix [rows, cols], row-major (a Linear's [out, in]).
/// `data` points at rows * cols elements of `dtype`, or, for a matrix kept as the ggml blocks a
/// GGUF file stores (LoadOptions::keep_blocks), at rows rows of cols / block_elements blocks of
/// `blocks`, block_row_bytes apart. The owning Checkpoint keeps it alive.
struct Matrix {
  StorageType dtype = StorageType::f32;  ///< the element type; unused when `blocks` is set
  const void* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::optional<GgmlType> blocks;   ///< the ggml block type of rows kept as stored
  std::size_t block_row_bytes = 0;  ///< bytes of one row of blocks
  /// The rows' blocks interleaved 16 to a group (amc::interleave_rows), beside the rows, for the
  /// int8 activations' matvec (LoadOptions::interleave_rows); null when there is no such copy.
  const std::byte* interleaved = nullptr;

  // Not amc::storage_size: this runs twice per row in the decode loop (matvec), where its
  // check for an invalid type would cost a compare and branch per row.
  std::size_t element_bytes() const { return dtype == StorageType::f32 ? 4 : 2; }
  std::size_t row_bytes() const {
    return blocks ? block_row_bytes : static_cast<std::size_t>(cols) * element_bytes();
  }
  std::size_t bytes() const { return static_cast<std::size_t>(rows) * row_bytes(); }
  /// First byte of row r.
  const void* row(std::int64_t r) const {
    return static_cast<const std::byte*>(data) + static_cast<std::size_t>(r) * row_bytes();
  }
};

/// One decoder layer; every field is a row of tensor_names.def, which names it in safetensors and
/// GGUF files. Vectors (norm weights, biases) are small, so they are kept as f32 copies; those of
/// features the config does not have (Config::qkv_bias, o_bias, qk_norm) are empty.
struct LayerWeights {
  /// [hidden]: RMSNorm weight of the attention block's input (on disk input_layernorm, attn_norm)
  std::vector<float> pre_attention_norm;
  Matrix q;                   ///< [heads * head_dim, hidden]
  Matrix k;                   ///< [kv_heads * head_dim, hidden]
  Matrix v;                   ///< [kv_heads * head_dim, hidden]
  std::vector<float> q_bias;  ///< [heads * head_dim] or empty
  std::vector<float> k_bias;  ///< [kv_heads * head_dim] or empty
  std::vector<float> v_bias;  ///< [kv_heads * head_dim] or empty
  std::vector<float> q_norm;  ///< [head_dim] or empty: RMSNorm weight of every query head
  std::vector<float> k_norm;  ///< [head_dim] or empty: RMSNorm weight of every key head
  Matrix o;                   ///< [hidden, heads * head_dim]
  std::vector<float> o_bias;  ///< [hidden] or empty
  /// [hidden]: RMSNorm weight of the MLP block's input (on disk post_attention_layernorm,
  /// ffn_norm)
  std::vector<float> pre_mlp_norm;
  Matrix gate;  ///< [intermediate, hidden]
  Matrix up;    ///< [intermediate, hidden]
  Matrix down;  ///< [hidden, intermediate]
};

struct Weights {
  Matrix embed;                      ///< [vocab, hidden]
  std::vector<LayerWeights> layers;  ///< [layers]
  std::vector<float> final_norm;     ///< [hidden]
  Matrix lm_head;                    ///< [vocab, hidden]; the embedding itself when tied
  /// No lm_head.weight in the checkpoint (tie_word_embeddings true or absent); with one, it is
  /// used whatever the flag says (docs/transformer.md, "Model families"), and tie_word_embeddings
  /// false requires one.
  bool tied = true;

  /// Bytes of the matrices one decode step reads (every layer matrix and the unembedding).
  std::size_t decode_bytes() const;
};

/// Where the weight matrices a decode step streams (every layer's projections and the
/// unembedding) live.
enum class WeightMemory {
  /// In place in the mapped file: no copy, the page cache's 4 KiB pages.
  mapped,
  /// Copied at load, in decode order, into one HugePageBuffer (transparent huge pages on
  /// Linux): decode read them 1.18-1.77x faster on the project's VM (docs/performance.md), at
  /// the price of one copy at load (0.76 s for Qwen2-0.5B's 988 MB here, 2.9 s the first time
  /// in a process; a mapped load reads nothing up front) and of anonymous memory the kernel
  /// cannot drop and re-read from the file under pressure, as it can the page cache. Where the
  /// kernel refuses the huge-page advice the copy would gain nothing, and where the memory for
  /// it cannot be had the file still serves: the load stays mapped then
  /// (Checkpoint::weight_memory() reports what it did).
  huge_pages,
};

/// "mapped" or "huge_pages" ("invalid" for a value that is neither).
const char* to_string(WeightMemory memory);

struct LoadOptions {
  WeightMemory weights = WeightMemory::huge_pages;
  /// The dtype of the weight matrices in memory, bf16 or f32 (norm weights and biases are f32
  /// whatever it says). nullopt: as stored for a safetensors checkpoint (no conversion), bf16
  /// for a GGUF file (whose quantized types have no in-memory matrix of their own). A value
  /// that differs from what a safetensors checkpoint stores converts the matrices at load (f32
  /// exactly; bf16 rounded to nearest even), at the cost of a copy.
  std::optional<StorageType> weight_dtype = std::nullopt;
  /// GGUF: keep every block-quantized matrix (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) as
  /// the file stores its blocks (`--weight-dtype stored`), multiplied by kernels on the blocks
  /// (amc::quantized_dot in decode, a dequantized tile per GEMM in prefill), so a decode step
  /// streams the file's bytes, not a widened copy. Plain matrices keep their dtype (F32 and BF16;
  /// F16 is widened to f32, exactly). Requires weight_dtype unset; ignored for safetensors,
  /// whose matrices are kept as stored anyway.
  bool keep_blocks = false;
  /// With keep_blocks, also keep a copy of every Q8_0, Q4_0 and Q4_1 matrix interleaved 16 rows
  /// to a group (Matrix::interleaved), which decode with int8 activations (Activations::int8)
  /// multiplies 16 rows at a time: SmolLM2-135M's Q4_1 decode ran 2.1x faster at short context
  /// on the project's VM (docs/performance.md). Costs the matrices' bytes a second time (prefill
  /// and the embedding read the rows). Only where amc::int8_interleaved_accelerated() (AVX-512
  /// VNNI): elsewhere the row-by-row kernels are faster, and it is ignored
  /// (Checkpoint::rows_interleaved() says).
  bool interleave_rows = false;
};

/// The file formats Checkpoint::load reads.
enum class CheckpointFormat : std::uint8_t { safetensors, gguf };

/// Whether `path` is a GGUF file: a regular file whose first four bytes are "GGUF".
bool is_gguf_file(const std::filesystem::path& path);

/// Throws amc::error "amc::transformer::Checkpoint::load: options.<field> is <value>; expected ..."
/// for a WeightMemory or weight dtype outside the accepted values (Checkpoint::load does).
void check_load_options(const LoadOptions& options);

class Checkpoint {
 public:
  /// Loads PATH: a GGUF file (is_gguf_file), or a directory with config.json, then
  /// model.safetensors, or model.safetensors.index.json and the shards it names: the tensors
  /// the config's family and features call for. A GGUF file is read as load_gguf says. Throws
  /// amc::error "amc::transformer::Checkpoint::load: <file>: ..." naming the missing file, the
  /// missing tensor, the tensor with its expected and found shape, or a tensor of a feature
  /// the config does not have (a q_norm in a Qwen2 checkpoint, biases in a Llama one: the
  /// config.json names the wrong family, and ignoring them would compute another model).
  /// options.weights says where the decode-streamed matrices go (WeightMemory); a value that
  /// is neither is refused with amc::error naming options.weights.
  static Checkpoint load(const std::filesystem::path& path, const LoadOptions& options = {});

  /// Loads a GGUF file (gguf_checkpoint.cpp): the config from its metadata (config_from_gguf),
  /// then every tensor the config calls for, by llama.cpp's names (token_embd.weight,
  /// blk.N.attn_q.weight, ..., output_norm.weight, output.weight or, without it, the tied
  /// embedding), dequantized into options.weight_dtype (bf16 when nullopt). Throws amc::error
  /// "amc::transformer::Checkpoint::load: <file>: ..." naming a missing tensor, a tensor whose
  /// shape or type is not what the config implies, a tensor the model would not use (e.g.
  /// rope_freqs.weight: Llama 3's scaled RoPE, not implemented for GGUF), and the GGUF
  /// reader's own errors (amc::GgufFile::open). Under WeightMemory::huge_pages the matrices
  /// are dequantized into one HugePageBuffer (weight_memory() says mapped when the kernel
  /// refused the advice or the buffer); under mapped, and where no HugePageBuffer could be
  /// had, into ordinary aligned memory (there is nothing to map in place: the file holds
  /// quantized blocks).
  static Checkpoint load_gguf(const std::filesystem::path& file, const LoadOptions& options = {});

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  const Config& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  /// The checkpoint directory, or the GGUF file.
  const std::filesystem::path& directory() const { return directory_; }
  CheckpointFormat format() const { return format_; }
  /// The safetensors files the weights live in (one, or the shards); 0 for a GGUF file.
  std::size_t shard_count() const { return shards_.size(); }
  /// The dtype of the weight matrices as the forward pass reads them: for safetensors as
  /// stored in the file (BF16, F16 or F32; when they mix dtypes, the widest: f32 over f16 over
  /// bf16) or LoadOptions::weight_dtype when it asked for a conversion; for GGUF the dtype
  /// they were dequantized into. Not Matrix::dtype, which is f32 for a matrix the loader had
  /// to copy, and not config.json's torch_dtype, which only declares it.
  StorageType weight_dtype() const { return weight_dtype_; }
  /// Whether block-quantized matrices were kept as stored (LoadOptions::keep_blocks on a GGUF
  /// file); weight_dtype() then says bf16, the dtype the KV cache defaults to for them.
  bool blocks_kept() const { return blocks_kept_; }
  /// Whether the Q8_0, Q4_0 and Q4_1 matrices have interleaved copies (LoadOptions::interleave_rows
  /// on a CPU with AVX-512 VNNI).
  bool rows_interleaved() const { return rows_interleaved_; }
  /// For a GGUF file, the ggml types of its tensors with their counts, most numerous first
  /// ("Q4_1 x210, F32 x61, Q8_0 x1"); empty for safetensors.
  const std::string& stored_types() const { return stored_types_; }
  /// Where the decode-streamed matrices live: LoadOptions::weights, or mapped when huge pages
  /// were asked for and the kernel refused them.
  WeightMemory weight_memory() const { return weight_memory_; }

 private:
  Checkpoint() = default;

  std::filesystem::path directory_;
  Config config_;
  std::vector<SafetensorsFile> shards_;
  // Matrices whose bytes in the file are not aligned for in-place use, converted to f32, or
  // converted to LoadOptions::weight_dtype: a cache-line-aligned block each.
  std::vector<std::unique_ptr<AlignedVector<std::byte>>> owned_;
  // GGUF under WeightMemory::mapped: every dequantized matrix, in ordinary pages.
  AlignedVector<std::byte> dequantized_;
  // The decode-streamed matrices under WeightMemory::huge_pages (empty when mapped).
  HugePageBuffer weight_copy_;
  Weights weights_;
  StorageType weight_dtype_ = StorageType::bf16;
  bool blocks_kept_ = false;
  bool rows_interleaved_ = false;
  WeightMemory weight_memory_ = WeightMemory::mapped;
  CheckpointFormat format_ = CheckpointFormat::safetensors;
  std::string stored_types_;

  friend class CheckpointLoader;
  friend class GgufLoader;
};

}  // namespace amc::transformer

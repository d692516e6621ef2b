// The forward pass over a Checkpoint of any supported family (Qwen2, Qwen3, Llama: family.hpp):
// batched dense prefill and single-token decode with dense or block-sparse attention through amc.
//
// Per layer (as in transformers' modeling_qwen2.py, modeling_qwen3.py, modeling_llama.py):
// x += o_proj(attention(rope(qn(q)), rope(kn(k)), v)) of rmsnorm(x), where qn and kn are Qwen3's
// per-head RMSNorms (identity for the other families) and q, k, v, o carry biases as the config
// says; x += down(silu(gate(h)) * up(h)) of h = rmsnorm(x); then a final rmsnorm and the
// unembedding (tied or lm_head). Everything is computed in f32; weights are read in their
// stored dtype.
#pragma once

#include <amc/attention/decode.hpp>
#include <amc/attention/sparse_config.hpp>
#include <amc/storage.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "checkpoint.hpp"
#include "kv_cache.hpp"
#include "rope.hpp"

namespace amc::transformer {

/// Dense decode attention, with the arithmetic of its products: exact_f32, or the opt-in
/// bf16_products (amc/attention/arithmetic.hpp: AVX512_BF16 on a bf16 cache, else exact_f32).
struct DenseAttention {
  AttentionArithmetic arithmetic = AttentionArithmetic::exact_f32;
  friend bool operator==(const DenseAttention&, const DenseAttention&) = default;
};

/// Decode attention, chosen as one value: dense, or block-sparse with its selection settings
/// (block size, k, sinks, window, scope, rule; selection is fresh at every decode step, layer
/// and head). Prefill is always dense. `options.attention = config;` makes a session sparse.
using Attention = std::variant<DenseAttention, SparseConfig>;

/// The block-sparse settings of `attention`, or nullptr when it is dense.
inline const SparseConfig* sparse_config(const Attention& attention) {
  return std::get_if<SparseConfig>(&attention);
}
inline bool is_sparse(const Attention& attention) {
  return std::holds_alternative<SparseConfig>(attention);
}

/// What the attention of one layer did in a decode step, for evaluation tools (retained mass,
/// error norms, selector recall). Pointers are valid during the callback only.
struct LayerAttention {
  std::int64_t layer = 0;
  std::int64_t positions = 0;      ///< cached positions attended over (the new token's included)
  std::int64_t group = 0;          ///< query heads per KV head; head h uses KV head h / group
  const float* queries = nullptr;  ///< [heads, head_dim] after RoPE, unscaled
  const float* output = nullptr;   ///< [heads, head_dim] the attention output the model used
  std::span<const HeadResult> results;  ///< [heads] lse and positions read of that output
  /// Dense output and results when the step also ran dense attention (sparse decode with
  /// retained mass); nullptr and empty otherwise.
  const float* dense_output = nullptr;
  std::span<const HeadResult> dense_results;
  /// [kv_heads] the block-sparse operators of this layer's call (their selected_blocks(),
  /// support() and block_scores()); empty for dense decode.
  std::span<const BlockSparseDecode<>> sparse_operators;
};

/// What decode multiplies weights kept as stored blocks with (Checkpoint::blocks_kept()).
enum class Activations : std::uint8_t {
  /// f32: the products of the exact block values and the f32 activations
  /// (amc::quantized_dot); the logits are those of f32 weights, to rounding.
  f32,
  /// int8: the activations quantized per block of 32 (amc::quantize_activations) and
  /// multiplied in integers (amc::int8_dot_kernel), as llama.cpp does: faster where the CPU has
  /// integer dot products, at the cost of the activations' rounding. Only Q8_0, Q4_0, Q4_1,
  /// Q5_0, Q5_1, Q4_K, Q5_K and Q6_K blocks; other matrices (unquantized) as with f32.
  int8,
  q8 [[deprecated("use Activations::int8")]] = int8,  ///< int8's old name
};

/// "f32" or "int8".
const char* to_string(Activations activations);
/// "f32" or "int8" (or "q8", int8's old name); throws amc::error naming `flag` and the text
/// otherwise.
Activations parse_activations(std::string_view text, std::string_view flag);

struct SessionOptions {
  /// Decode attention, dense unless set; prefill is always dense.
  Attention attention;
  /// Threads for everything, the caller included (capped at the hardware's). Results are
  /// identical for every count.
  int threads = 1;
  /// Block summaries the cache keeps whatever the attention: those this configuration's rule
  /// reads, at its block size. For a caller that looks at sparse selection on a session it may
  /// decode densely (the eval's reference runs and probes), so that the summaries do not depend
  /// on the attention mode. Sparse attention's own summaries are kept beside them (the same
  /// block size; throws amc::error otherwise).
  std::optional<SparseConfig> summaries_for;
  /// Sparse decode also runs dense attention (always in exact_f32), to
  /// report the retained mass exp(L_S - L_all).
  bool retained_mass = false;
  /// KV cache storage, bf16 or f32; nullopt ("auto") is the checkpoint's: auto_kv_dtype().
  /// Session::options() holds the resolved value.
  std::optional<StorageType> kv_dtype;
  /// KV cache in q8_0 blocks (amc/q8_kv.hpp), which the operators read widened to f32, so
  /// kv_dtype must resolve to f32: 34 bytes per 32 values against bf16's 64, each value within
  /// amc::q8_0_error_bound of the f32 one (the tools' --kv-dtype q8_0).
  KvQuantization kv_quantization = KvQuantization::none;
  /// RoPE angle convention (rope.hpp); nullopt ("auto") is the one the checkpoint's
  /// config.json names, else transformers': auto_rope_angles(). Session::options() holds the
  /// resolved value.
  std::optional<RopeAngles> rope_angles;
  /// How decode multiplies weights kept as stored blocks (no effect on other weights).
  Activations activations = Activations::f32;
  /// Called after the attention of every layer of every decode step, when set.
  std::function<void(const LayerAttention&)> on_layer;
};

/// The KV cache dtype "auto" means for a checkpoint: the dtype its weight matrices are stored
/// in (Checkpoint::weight_dtype()), which is what amc computes with (it never converts them to
/// config.json's torch_dtype, a declaration a re-saved file need not match): bf16 weights give
/// a bf16 cache, f32 weights an f32 cache, so that an f32 checkpoint's keys and values are not
/// rounded to bf16 (issue 13 measured step 0's logits 2.3e-3 of the logit range away from a
/// float64 reference with a bf16 cache, 6.8e-7 with an f32 one). f16 weights give an f32
/// cache: the cache offers bf16 and f32 only, and bf16 would keep 3 mantissa bits fewer than
/// the f16 model's own activations, while f32 holds every f16 value exactly.
StorageType auto_kv_dtype(const Checkpoint& checkpoint);

/// The RoPE angle convention "auto" means for a config: its "amc_rope_angles" when present
/// (models amc trained, such as data/qwen2-tiny with "exact"), else transformers' (float32
/// angles, as pretrained Qwen2 models were trained and as transformers runs them).
RopeAngles auto_rope_angles(const Config& config);

/// What one decode step read.
struct StepStats {
  /// [layers, heads] retained mass exp(L_S - L_all) per query head, when the step computed it
  /// (sparse decode with retained_mass); empty otherwise.
  std::vector<float> retained_mass;
  /// Minimum of retained_mass, or NaN when it was not computed.
  float min_retained_mass = 0.0f;
  /// Positions read by the attention, summed over layers and query heads.
  std::int64_t positions_read = 0;
  /// Query heads, over all layers, whose attention result was not finite (HeadResult::finite
  /// false: NaN or Inf reached the attention, e.g. from NaN weights); 0 on a healthy step.
  std::int64_t non_finite_heads = 0;
  /// Layer and query head of the first of them; -1 when there is none.
  std::int64_t first_non_finite_layer = -1;
  std::int64_t first_non_finite_head = -1;
};

/// One sequence being generated: the KV cache, scratch and threads of a forward pass over a
/// Checkpoint (which must outlive the session). Not thread-safe; use one session per sequence.
class Session {
 public:
  /// Throws amc::error on invalid options (sparse config, threads < 1, KV dtype). Options left
  /// to "auto" (kv_dtype, rope_angles) are resolved for the checkpoint.
  explicit Session(const Checkpoint& checkpoint, SessionOptions options = {});
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  const Config& config() const;
  const SessionOptions& options() const;
  /// Positions in the cache (tokens processed so far).
  std::int64_t positions() const;
  const KvCache& cache() const;
  /// Allocates the cache for `positions` tokens up front.
  void reserve(std::int64_t positions);

  /// Dense batched forward of `tokens` at positions [positions(), positions() + n), appending
  /// their keys and values to the cache.
  /// \param logits [vocab]: the last token's logits; with all_positions, [n, vocab]: every
  ///               token's. Throws amc::error for ids outside [0, vocab) or a wrong size.
  void prefill(std::span<const std::int32_t> tokens, std::span<float> logits,
               bool all_positions = false);

  /// One token at position positions() through the decode path (dense or block-sparse
  /// attention per the options). Non-finite numbers are not an error here: they show in the
  /// logits and in StepStats::non_finite_heads (generate() refuses them). \param logits [vocab]
  const StepStats& decode(std::int32_t token, std::span<float> logits);

  /// Dense decoding of `tokens` at positions [positions(), positions() + n) in one pass, the
  /// verify pass of speculative decoding (generate.hpp): each weight row is read from memory
  /// once for all n positions, yet the logits of every position are bit for bit those decode()
  /// gives with DenseAttention{} when fed the same tokens one at a time, whatever n and the
  /// thread count (every product, norm and attention of a position is computed as decode
  /// computes it; each position's attention reads the KV heads again). Appends the n positions
  /// to the cache; truncate() takes back those a caller rejects. Whatever the session's decode
  /// attention, this pass is dense; on_layer is not called and no retained mass is computed.
  /// \param logits [n, vocab]: row t the logits after tokens[t]. Throws amc::error for an
  /// empty span, ids outside [0, vocab) or a wrong size.
  const StepStats& verify(std::span<const std::int32_t> tokens, std::span<float> logits);

  /// Forgets every position.
  void reset();
  /// Keeps the first `positions` positions of the cache and forgets the rest, so one prefill
  /// can be shared by several continuations (truncate(prefix length), then decode again) and
  /// speculative decoding can take back rejected drafts. What follows is bitwise what a fresh
  /// session holding only those positions would compute. Costs at most a block of positions
  /// per KV head (the block summaries' cut block is read again), not the cache's length.
  /// Throws amc::error unless 0 <= positions <= positions().
  void truncate(std::int64_t positions);
  /// Switches decode attention without a new prefill (the options' attention and
  /// retained_mass), validated as the constructor validates them. Block summaries are
  /// rebuilt from the cache when the new configuration needs a block size or channel bounds
  /// the cache does not keep; otherwise the existing ones stay (dense decode keeps them
  /// current, so switching back costs nothing). Throws amc::error on an invalid sparse config.
  void set_decode(const Attention& attention, bool retained_mass);
  /// Replaces the cache with `positions` random keys and values (benchmarks of long contexts).
  void fill_random_cache(std::int64_t positions, std::uint64_t seed);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amc::transformer

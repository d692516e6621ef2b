// The forward pass of every family (family.hpp), written once over n positions: each layer an
// attention block and an MLP block. Prefill runs it over a chunk of the prompt (GEMM
// projections, causal flash-style attention), decode over one position (matrix-vector
// projections, attention through amc::LayerDecode, dense or sparse). Family differences arrive
// as Config flags and as empty or present weights.
#include "model.hpp"

#include <amc/amc.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include <amc/parallel.hpp>
#include "linear.hpp"
#include "prefill_attention.hpp"

namespace amc::transformer {
namespace {

/// Fewest weight rows per decode task (57 KB of bf16 rows of 896).
constexpr std::int64_t kRowChunk = 32;
/// Decode tasks per thread and matrix: few and long, so each thread streams long contiguous
/// runs of rows (the hardware prefetchers ramp up per run; 32-row tasks read ~10% slower),
/// yet enough to even out a thread that lost its CPU for a moment.
constexpr std::int64_t kTasksPerThread = 4;
/// Tokens per batched forward in prefill: bounds the activations ([chunk, intermediate] f32,
/// 20 MB for Qwen2-0.5B) while keeping the GEMMs large.
constexpr std::int64_t kPrefillChunk = 1024;
/// Query positions per prefill attention task (a block of queries for one GQA group).
constexpr std::int64_t kQueryRows = 64;
/// Tokens per task of the prefill's row-wise steps (norms, RoPE, SwiGLU, residual additions).
constexpr std::int64_t kTokenRows = 16;
/// GEMM tiles (runs of consecutive output rows) of each projection over several positions:
/// few large tiles keep Eigen from packing X once per tile; multiples of 4 balance 1, 2 and 4
/// threads. The unembedding takes kUnembeddingTilesPer4096 per 4096 vocabulary rows.
constexpr std::int64_t kQkvTiles = 8;
constexpr std::int64_t kOutputTiles = 8;
constexpr std::int64_t kGateUpTiles = 16;
constexpr std::int64_t kDownTiles = 4;
constexpr std::int64_t kUnembeddingTilesPer4096 = 4;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// out = x * rsqrt(mean(x^2) + eps) * w, in f32 with the sum of squares in f64.
void rms_norm(const float* x, const float* w, std::int64_t n, double eps, float* out) {
  double squares = 0.0;
  for (std::int64_t i = 0; i < n; ++i) squares += static_cast<double>(x[i]) * x[i];
  const auto inverse = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(n) + eps));
  for (std::int64_t i = 0; i < n; ++i) out[i] = x[i] * inverse * w[i];
}

/// h = silu(g) * u = g / (1 + exp(-g)) * u over n elements, with amc's SIMD exp.
/// \param scratch [n]
void silu_mul(const float* g, const float* u, float* h, std::int64_t n, float* scratch) {
  for (std::int64_t i = 0; i < n; ++i) scratch[i] = -g[i];
  kernels::active().exp_sum(scratch, n, 0.0f);  // scratch := exp(-g)
  for (std::int64_t i = 0; i < n; ++i) h[i] = g[i] / (1.0f + scratch[i]) * u[i];
}

/// The bias vector of an optional feature, or nullptr when the checkpoint has none (an empty
/// vector's data() need not be null).
const float* optional_data(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

/// Qwen3's per-head RMSNorm of q and k, in place over `heads` consecutive heads of head_dim;
/// nothing when `weight` is empty (the family has none).
void norm_heads(float* x, std::int64_t heads, std::int64_t head_dim,
                const std::vector<float>& weight, double eps) {
  if (weight.empty()) return;
  for (std::int64_t h = 0; h < heads; ++h) {
    rms_norm(x + h * head_dim, weight.data(), head_dim, eps, x + h * head_dim);
  }
}

/// Rotate-half RoPE of one head in place: element i pairs with element i + half.
/// \param x [2 * half]; cos, sin [half] for this position
void apply_rope(float* x, std::int64_t half, const float* cos, const float* sin) {
  for (std::int64_t i = 0; i < half; ++i) {
    const float a = x[i];
    const float b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

}  // namespace

struct Session::Impl {
  /// Which attention and products a forward pass runs: prefill attends causally and densely
  /// over the cache (flash-style, prefill_attention.hpp) with GEMM projections; decode runs the
  /// session's decode attention, dense or sparse, through amc::LayerDecode; verify runs dense
  /// decode at each of its positions, every product and attention computed as a one-position
  /// decode computes it (batch invariance, Session::verify).
  enum class Pass : std::uint8_t { prefill, decode, verify };

  const Config& cfg;
  const Weights& w;
  SessionOptions options;
  KvCache cache;
  ThreadPool pool;  // every parallel section of a step: projections, attention, row-wise steps
  // Decode attention, one of the two, on the session's pool (declared after it: they borrow
  // it). One layer object serves every model layer: its operators keep scratch only.
  std::optional<LayerDecode<DenseDecode>> dense_layer;
  std::optional<LayerDecode<BlockSparseDecode<>>> sparse_layer;
  // verify()'s attention: per KV head, the operator and its positions' queries, outputs and
  // results gathered from QKV ([n * group, head_dim], position-major).
  struct VerifyGroup {
    CausalDenseDecode op;
    std::vector<float> queries, out;
    std::vector<HeadResult> results;
  };
  std::vector<VerifyGroup> verify_groups;  // [kv_heads], made at the first verify()

  // Shape.
  std::int64_t hidden, heads, kv_heads, head_dim, half, group, q_dim, kv_dim, qkv_dim, inter, vocab;
  float attention_scale;
  RotaryTable rope;  // the cos and sin of every position, in the options' convention

  // Per layer the stacked [q; k; v] and [gate; up] projections and their biases: one product
  // each, since they multiply the same input.
  struct LayerStacks {
    std::vector<const Matrix*> qkv, o, gate_up, down;
    std::vector<float> qkv_bias;  // [q_dim + 2 kv_dim], or empty without q/k/v biases
  };
  std::vector<LayerStacks> stacks;
  std::vector<const Matrix*> unembedding;  // {lm_head}

  // Activations of the positions in flight, row-major [n, width] (n = 1 in decode).
  std::vector<float> X;         // [n, hidden] the residual stream
  std::vector<float> XN;        // [n, hidden] its RMS-normalised copy, the blocks' input
  std::vector<float> QKV;       // [n, q_dim + 2 kv_dim] Q | K | V per position
  std::vector<float> A;         // [n, q_dim] attention output
  std::vector<float> GU;        // [n, 2 inter] gate | up; the gate half becomes silu(gate) * up
  std::vector<float> T;         // [n, hidden] a block's output before it joins the residual stream
  std::vector<float> COS, SIN;  // [n, half] RoPE of each position
  std::vector<Int8Activations> x_int8;  // [n] a projection's input in int8 (Activations::int8)
  Pass pass = Pass::decode;             // the pass in flight
  // Decode attention's per-head results, and the dense shadow pass's (retained mass).
  std::vector<HeadResult> results, dense_results;  // [heads]
  std::vector<float> dense_attn;                   // [heads, head_dim]
  std::vector<KvHead<KvView<float>>> kv_f32;       // [kv_heads] this layer's KV heads
  std::vector<KvHead<KvView<bf16>>> kv_bf16;
  std::vector<KvHead<Q8KvView>> kv_q8;
  StepStats stats;

  Impl(const Checkpoint& c, SessionOptions o)
      : cfg(c.config()),
        w(c.weights()),
        options(o),
        cache(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, cache_options(o)),
        pool(pool_threads(o.threads)),
        rope(*o.rope_angles, cfg.rope_theta, cfg.head_dim, cfg.rope_scaling) {
    hidden = cfg.hidden_size;
    heads = cfg.num_attention_heads;
    kv_heads = cfg.num_key_value_heads;
    head_dim = cfg.head_dim;
    half = head_dim / 2;
    group = heads / kv_heads;
    q_dim = heads * head_dim;
    kv_dim = kv_heads * head_dim;
    qkv_dim = q_dim + 2 * kv_dim;
    inter = cfg.intermediate_size;
    vocab = cfg.vocab_size;
    // The same expression amc's operators use for their default scale, so prefill attention
    // (which takes this scale) and decode attention scale queries identically.
    attention_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    make_operators();
    results.resize(static_cast<std::size_t>(heads));
    dense_results.resize(static_cast<std::size_t>(heads));
    dense_attn.assign(static_cast<std::size_t>(q_dim), 0.0f);
    for (const LayerWeights& l : w.layers) {
      LayerStacks st;
      st.qkv = {&l.q, &l.k, &l.v};
      st.o = {&l.o};
      st.gate_up = {&l.gate, &l.up};
      st.down = {&l.down};
      st.qkv_bias = l.q_bias;
      st.qkv_bias.insert(st.qkv_bias.end(), l.k_bias.begin(), l.k_bias.end());
      st.qkv_bias.insert(st.qkv_bias.end(), l.v_bias.begin(), l.v_bias.end());
      stacks.push_back(std::move(st));
    }
    unembedding = {&w.lm_head};
  }

  /// More threads than the hardware has would only make the spinning workers take turns;
  /// results do not depend on the count, so it is capped.
  static int pool_threads(int requested) {
    const auto hardware = static_cast<int>(std::thread::hardware_concurrency());
    return hardware > 0 ? std::min(requested, hardware) : requested;
  }

  /// The decode attention the options call for. A sparse step with retained mass runs a dense
  /// shadow pass beside it (LayerDecode's, always exact_f32).
  void make_operators() {
    sparse_layer.reset();
    dense_layer.reset();
    if (const SparseConfig* config = sparse_config(options.attention)) {
      sparse_layer.emplace(BlockSparseDecode<>(*config), pool);
    } else {
      const auto arithmetic = std::get<DenseAttention>(options.attention).arithmetic;
      dense_layer.emplace(DenseDecode({}, arithmetic), pool);
    }
  }

  void set_decode(const Attention& attention, bool retained_mass) {
    SessionOptions next = options;
    next.attention = attention;
    next.retained_mass = retained_mass;
    const KvCacheOptions wanted = cache_options(next);  // validates before anything changes
    const KvCacheOptions& held = cache.options();
    if (wanted.block_size > 0 &&
        (held.block_size != wanted.block_size || !held.summaries.covers(wanted.summaries))) {
      cache.set_summaries(wanted.block_size, wanted.summaries);
    }
    options = next;
    make_operators();
  }

  static KvCacheOptions cache_options(const SessionOptions& o) {
    AMC_CHECK(o.threads >= 1, "amc::transformer::Session", "threads must be >= 1, got ", o.threads);
    AMC_CHECK(o.kv_dtype.has_value() && o.rope_angles.has_value(), "amc::transformer::Session",
              "options not resolved");  // Session's constructor resolves them first
    KvCacheOptions c;
    c.dtype = *o.kv_dtype;
    c.quantization = o.kv_quantization;
    // What a configured rule reads, kept beside what the cache already keeps.
    const auto keep = [&c](const SparseConfig& config, const char* field) {
      config.validate();
      AMC_CHECK(c.block_size == 0 || c.block_size == config.block_size, "amc::transformer::Session",
                field, ".block_size ", config.block_size, " differs from sparse.block_size ",
                c.block_size, " (the cache keeps summaries at one block size)");
      const SummaryOptions wanted = required_summaries(config);
      AMC_CHECK(c.summaries.sub_blocks == 0 || wanted.sub_blocks == 0 ||
                    c.summaries.sub_blocks == wanted.sub_blocks,
                "amc::transformer::Session", field, " needs ", wanted.sub_blocks,
                " sub-blocks per block, sparse ", c.summaries.sub_blocks);
      c.block_size = config.block_size;
      c.summaries = c.summaries.merged(wanted);
    };
    if (const SparseConfig* config = sparse_config(o.attention)) keep(*config, "sparse");
    if (o.summaries_for) keep(*o.summaries_for, "summaries_for");
    return c;
  }

  void check_token(std::int32_t token, const char* where, std::size_t index) const {
    AMC_CHECK(token >= 0 && token < vocab, where, "token id ", token, " at index ", index,
              " is outside the vocabulary [0, ", vocab, ")");
  }

  // ---- the entry points --------------------------------------------------------------------

  void prefill(std::span<const std::int32_t> tokens, std::span<float> logits, bool all_positions) {
    constexpr const char* where = "amc::transformer::Session::prefill";
    const auto n = static_cast<std::int64_t>(tokens.size());
    AMC_CHECK(n > 0, where, "tokens is empty");
    for (std::size_t i = 0; i < tokens.size(); ++i) check_token(tokens[i], where, i);
    const std::int64_t expected = (all_positions ? n : 1) * vocab;
    AMC_CHECK(static_cast<std::int64_t>(logits.size()) == expected, where, "logits has ",
              logits.size(), " entries, expected ", expected,
              all_positions ? " (tokens x vocab_size)" : " (vocab_size)");
    cache.reserve(cache.positions() + n);
    for (std::int64_t begin = 0; begin < n; begin += kPrefillChunk) {
      const std::int64_t count = std::min(kPrefillChunk, n - begin);
      forward(tokens.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(count)),
              Pass::prefill);
      if (all_positions) {
        logits_of(0, count, logits.data() + begin * vocab);
      } else if (begin + count == n) {
        logits_of(count - 1, 1, logits.data());
      }
    }
  }

  void decode(std::int32_t token, std::span<float> logits) {
    check_token(token, "amc::transformer::Session::decode", 0);
    AMC_CHECK(static_cast<std::int64_t>(logits.size()) == vocab,
              "amc::transformer::Session::decode", "logits has ", logits.size(),
              " entries, expected vocab_size ", vocab);
    start_step_stats();
    forward(std::span(&token, 1), Pass::decode);
    logits_of(0, 1, logits.data());
    if (!stats.retained_mass.empty()) {
      stats.min_retained_mass =
          *std::min_element(stats.retained_mass.begin(), stats.retained_mass.end());
    }
  }

  /// Empty statistics for the step about to run (the retained-mass vector keeps its capacity).
  void start_step_stats() {
    std::vector<float> retained_mass = std::move(stats.retained_mass);
    retained_mass.clear();
    stats = StepStats{.retained_mass = std::move(retained_mass),
                      .min_retained_mass = std::numeric_limits<float>::quiet_NaN()};
  }

  void verify(std::span<const std::int32_t> tokens, std::span<float> logits) {
    constexpr const char* where = "amc::transformer::Session::verify";
    const auto n = static_cast<std::int64_t>(tokens.size());
    AMC_CHECK(n > 0, where, "tokens is empty");
    for (std::size_t i = 0; i < tokens.size(); ++i) check_token(tokens[i], where, i);
    AMC_CHECK(static_cast<std::int64_t>(logits.size()) == n * vocab, where, "logits has ",
              logits.size(), " entries, expected ", n * vocab, " (tokens x vocab_size)");
    if (verify_groups.empty()) verify_groups.resize(static_cast<std::size_t>(kv_heads));
    start_step_stats();
    cache.reserve(cache.positions() + n);
    forward(tokens, Pass::verify);
    logits_of(0, n, logits.data());
  }

  // ---- the forward pass ----------------------------------------------------------------

  /// The model over `tokens` at positions [p0, p0 + n), p0 = cache.positions(): appends their
  /// keys and values to the cache and leaves their last hidden states in X.
  void forward(std::span<const std::int32_t> tokens, Pass pass_of_these) {
    pass = pass_of_these;
    const auto n = static_cast<std::int64_t>(tokens.size());
    const std::int64_t p0 = cache.positions();
    for (auto [buffer, width] : {std::pair{&X, hidden},
                                 {&XN, hidden},
                                 {&QKV, qkv_dim},
                                 {&A, q_dim},
                                 {&GU, 2 * inter},
                                 {&T, hidden},
                                 {&COS, half},
                                 {&SIN, half}}) {
      buffer->resize(static_cast<std::size_t>(n * width));
    }
    for (std::int64_t t = 0; t < n; ++t) {
      row_to_f32(w.embed, tokens[static_cast<std::size_t>(t)], X.data() + t * hidden);
      rope.cos_sin(p0 + t, COS.data() + t * half, SIN.data() + t * half);
    }
    for (std::int64_t layer = 0; layer < cfg.num_hidden_layers; ++layer) {
      attention_block(layer, p0, n);
      mlp_block(layer, n);
    }
    cache.commit(n);
  }

  /// The epilogue of a block's last projection into T [n, hidden]: X[:, b:e] += T[:, b:e], the
  /// block's output joining the residual stream, by the task that computed those columns.
  auto add_to_residual(std::int64_t n) {
    return [this, n](std::int64_t b, std::int64_t e) {
      for (std::int64_t t = 0; t < n; ++t) {
        float* x_row = X.data() + t * hidden;
        const float* t_row = T.data() + t * hidden;
        for (std::int64_t r = b; r < e; ++r) x_row[r] += t_row[r];
      }
    };
  }

  /// x += W_o attention(q, K, V) + b_o for every position, where [q; k; v] = W_qkv rmsnorm(x)
  /// + b_qkv with q and k per-head normed (Qwen3) and rotated; k and v join the cache first.
  void attention_block(std::int64_t layer, std::int64_t p0, std::int64_t n) {
    const LayerWeights& l = w.layers[static_cast<std::size_t>(layer)];
    const LayerStacks& st = stacks[static_cast<std::size_t>(layer)];
    norm_rows(0, n, l.pre_attention_norm.data());  // XN = rmsnorm(X)
    project(st.qkv, kQkvTiles, XN.data(), n, hidden, optional_data(st.qkv_bias), QKV.data(),
            qkv_dim);  // QKV = [q | k | v]
    norm_and_rotate_queries_and_keys(l, n);
    cache.write(layer, QKV.data() + q_dim, QKV.data() + q_dim + kv_dim, n, qkv_dim);
    attend(layer, p0, n);  // A = attention(q, K, V)
    // X += A W_o^T + b_o: each task adds the columns it computed, while they are in its cache.
    project(st.o, kOutputTiles, A.data(), n, q_dim, optional_data(l.o_bias), T.data(), hidden,
            add_to_residual(n));
  }

  /// x += W_down (silu(W_gate rmsnorm(x)) * W_up rmsnorm(x)) for every position.
  void mlp_block(std::int64_t layer, std::int64_t n) {
    const LayerWeights& l = w.layers[static_cast<std::size_t>(layer)];
    const LayerStacks& st = stacks[static_cast<std::size_t>(layer)];
    norm_rows(0, n, l.pre_mlp_norm.data());  // XN = rmsnorm(X)
    project(st.gate_up, kGateUpTiles, XN.data(), n, hidden, nullptr, GU.data(), 2 * inter);
    for_rows(n, kTokenRows, [&](std::int64_t b, std::int64_t e) {
      thread_local std::vector<float> scratch;
      scratch.resize(static_cast<std::size_t>(inter));
      for (std::int64_t t = b; t < e; ++t) {
        float* gate = GU.data() + t * 2 * inter;
        silu_mul(gate, gate + inter, gate, inter, scratch.data());  // gate := silu(gate) * up
      }
    });
    // X += GU W_down^T, added by the tasks as above.
    project(st.down, kDownTiles, GU.data(), n, 2 * inter, nullptr, T.data(), hidden,
            add_to_residual(n));
  }

  /// Qwen3's per-head norms of q and k (nothing for the other families), then RoPE on both, in
  /// QKV for every position.
  void norm_and_rotate_queries_and_keys(const LayerWeights& l, std::int64_t n) {
    for_rows(n, kTokenRows, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t t = b; t < e; ++t) {
        float* row = QKV.data() + t * qkv_dim;
        norm_heads(row, heads, head_dim, l.q_norm, cfg.rms_norm_eps);
        norm_heads(row + q_dim, kv_heads, head_dim, l.k_norm, cfg.rms_norm_eps);
        for (std::int64_t hd = 0; hd < heads + kv_heads; ++hd) {
          apply_rope(row + hd * head_dim, half, COS.data() + t * half, SIN.data() + t * half);
        }
      }
    });
  }

  /// A = attention of the positions' queries over the cache, on the cache's view type: causal
  /// and dense in prefill, the session's decode attention in decode, dense decode attention at
  /// each position in verify.
  void attend(std::int64_t layer, std::int64_t p0, std::int64_t n) {
    const auto on = [&]<KvViewLike View>(std::type_identity<View>) {
      switch (pass) {
        case Pass::decode:
          attend_decode<View>(layer, p0 + 1);
          break;
        case Pass::verify:
          attend_verify<View>(layer, p0, n);
          break;
        case Pass::prefill:
          attend_prefill<View>(layer, p0, n);
          break;
      }
    };
    if (cache.quantized()) {
      on(std::type_identity<Q8KvView>{});
    } else {
      visit_storage<float, bf16>(cache.options().dtype, [&](auto type) {
        on(std::type_identity<KvView<typename decltype(type)::type>>{});
      });
    }
  }

  /// logits [rows, vocab] of the hidden states X[first, first + rows): the final norm, then
  /// the unembedding.
  void logits_of(std::int64_t first, std::int64_t rows, float* logits) {
    norm_rows(first, rows, w.final_norm.data());
    project(unembedding, kUnembeddingTilesPer4096 * ceil_div(vocab, 4096),
            XN.data() + first * hidden, rows, hidden, nullptr, logits, vocab);
  }

  // ---- the forward pass's parallel steps -----------------------------------------------

  /// Runs task(begin, end) over [0, rows) in chunks of `chunk` rows on the pool.
  template <class Task>
  void for_rows(std::int64_t rows, std::int64_t chunk, Task&& task) {
    pool.parallel_for(ceil_div(rows, chunk),
                      [&](std::int64_t i) { task(i * chunk, std::min(rows, (i + 1) * chunk)); });
  }

  /// Y = X W^T (+ bias) for stacked weights W; after each task's rows [b, e) of W,
  /// epilogue(b, e) runs on the same thread for those columns of Y.
  /// One position (decode, or a one-token prefill), and every position of a verify pass,
  /// streams the weights through matvec in row_chunk() rows per task (matvec_positions); more
  /// positions in prefill go through GEMM in `gemm_tiles` tiles of consecutive rows. Both split
  /// by shape alone (tiles never follow the thread count), so every element is computed
  /// identically whatever the number of threads. Few large tiles keep Eigen from repacking X
  /// once per tile (kQkvTiles and the others).
  /// \param x [n, x_stride], the first cols() columns used; y [n, y_stride]
  template <class Epilogue = void (*)(std::int64_t, std::int64_t)>
  void project(
      const std::vector<const Matrix*>& parts, std::int64_t gemm_tiles, const float* x,
      std::int64_t n, std::int64_t x_stride, const float* bias, float* y, std::int64_t y_stride,
      Epilogue&& epilogue = [](std::int64_t, std::int64_t) {}) {
    const Stack stack{parts};
    const std::int64_t rows = stack.rows();
    if (n == 1 || pass == Pass::verify) {
      // int8 activations: each position's x quantized once here, for every task's rows.
      const bool int8 = options.activations == Activations::int8 && has_int8_kernel(stack);
      if (int8) {
        if (static_cast<std::int64_t>(x_int8.size()) < n)
          x_int8.resize(static_cast<std::size_t>(n));
        for (std::int64_t t = 0; t < n; ++t) {
          quantize_activations(std::span(x + t * x_stride, static_cast<std::size_t>(stack.cols())),
                               x_int8[static_cast<std::size_t>(t)]);
        }
      }
      // Each position's products are matvec's (or matvec_int8's), bit for bit.
      for_rows(rows, row_chunk(rows), [&](std::int64_t b, std::int64_t e) {
        if (int8) {
          matvec_int8_positions(stack, x, x_stride,
                                std::span(x_int8).first(static_cast<std::size_t>(n)), bias, b, e, y,
                                y_stride);
        } else {
          matvec_positions(stack, x, x_stride, n, bias, b, e, y, y_stride);
        }
        epilogue(b, e);
      });
      return;
    }
    const std::int64_t tile = ceil_div(ceil_div(rows, gemm_tiles), 16) * 16;
    for_rows(rows, tile, [&](std::int64_t b, std::int64_t e) {
      matmul(stack, b, e, x, n, x_stride, bias, y, y_stride);
      epilogue(b, e);
    });
  }

  /// Rows of W per matvec task (a multiple of 16, at least kRowChunk).
  std::int64_t row_chunk(std::int64_t rows) const {
    const std::int64_t chunk = ceil_div(rows, kTasksPerThread * pool.threads());
    return std::max(kRowChunk, ceil_div(chunk, 16) * 16);
  }

  /// XN[t] = rmsnorm(X[t]) * weight for t in [first, first + rows), spread over the pool.
  void norm_rows(std::int64_t first, std::int64_t rows, const float* weight) {
    for_rows(rows, kTokenRows, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t t = first + b; t < first + e; ++t) {
        rms_norm(X.data() + t * hidden, weight, hidden, cfg.rms_norm_eps, XN.data() + t * hidden);
      }
    });
  }

  // ---- attention -----------------------------------------------------------------------

  /// One KV head of the cache over positions [0, positions), as a View (KvView<float>,
  /// KvView<bf16>, or Q8KvView for a q8_0 cache).
  template <KvViewLike View>
  View view_of(std::int64_t layer, std::int64_t head, std::int64_t positions) const {
    if constexpr (std::same_as<View, Q8KvView>) {
      return cache.q8_view(layer, head, positions);
    } else {
      return cache.view<typename View::value_type>(layer, head, positions);
    }
  }

  /// This layer's KV heads over positions [0, positions), as the decode operators take them.
  template <KvViewLike View>
  std::span<const KvHead<View>> kv_heads_of(std::int64_t layer, std::int64_t positions) {
    std::vector<KvHead<View>>& out = [this]() -> auto& {
      if constexpr (std::same_as<View, KvView<float>>) {
        return kv_f32;
      } else if constexpr (std::same_as<View, KvView<bf16>>) {
        return kv_bf16;
      } else {
        return kv_q8;
      }
    }
    ();
    out.clear();
    for (std::int64_t g = 0; g < kv_heads; ++g) {
      out.push_back({view_of<View>(layer, g, positions), cache.summaries(layer, g)});
    }
    return out;
  }

  /// Attention of the decode step's queries (QKV's first q_dim columns, [heads, head_dim]) over
  /// positions [0, positions) of each KV head, into A: the session's dense or sparse layer,
  /// with retained mass the dense shadow pass beside the sparse one (into dense_attn).
  template <KvViewLike View>
  void attend_decode(std::int64_t layer, std::int64_t positions) {
    const auto kv = kv_heads_of<View>(layer, positions);
    const auto queries = map_rows(static_cast<const float*>(QKV.data()), heads, head_dim, head_dim);
    const auto out = map_rows(A.data(), heads, head_dim, head_dim);
    if (!sparse_layer) {
      dense_layer->decode(queries, kv, out, results);
    } else if (options.retained_mass) {
      const DenseShadow shadow{map_rows(dense_attn.data(), heads, head_dim, head_dim),
                               dense_results};
      sparse_layer->decode(queries, kv, out, results, &shadow);
    } else {
      sparse_layer->decode(queries, kv, out, results);
    }
    record_step_stats(layer);
    if (options.on_layer) report_layer(layer, positions);
  }

  /// Attention of a verify pass: position t's queries (QKV row t) over positions
  /// [0, p0 + t + 1) of each KV head, into A row t, through amc::CausalDenseDecode: each KV row
  /// read once for all positions and heads of a group, and each head's output the one-position
  /// dense decode's, bit for bit.
  template <KvViewLike View>
  void attend_verify(std::int64_t layer, std::int64_t p0, std::int64_t n) {
    const auto kv = kv_heads_of<View>(layer, p0 + n);
    const std::int64_t rows = n * group;
    pool.parallel_for(kv_heads, [&](std::int64_t g) {
      VerifyGroup& v = verify_groups[static_cast<std::size_t>(g)];
      v.queries.resize(static_cast<std::size_t>(rows * head_dim));
      v.out.resize(v.queries.size());
      v.results.resize(static_cast<std::size_t>(rows));
      // QKV row t holds position t's heads; group g's are group rows from head g * group.
      for (std::int64_t t = 0; t < n; ++t) {
        std::copy_n(QKV.data() + t * qkv_dim + g * group * head_dim, group * head_dim,
                    v.queries.data() + t * group * head_dim);
      }
      v.op.decode(map_rows(static_cast<const float*>(v.queries.data()), rows, head_dim, head_dim),
                  n, kv[static_cast<std::size_t>(g)],
                  map_rows(v.out.data(), rows, head_dim, head_dim), v.results);
      for (std::int64_t t = 0; t < n; ++t) {
        std::copy_n(v.out.data() + t * group * head_dim, group * head_dim,
                    A.data() + t * q_dim + g * group * head_dim);
      }
    });
    for (std::int64_t g = 0; g < kv_heads; ++g) {
      const VerifyGroup& v = verify_groups[static_cast<std::size_t>(g)];
      for (std::int64_t row = 0; row < rows; ++row) {
        // Row t * group + j is query head g * group + j of position t.
        note_result(layer, g * group + row % group, v.results[static_cast<std::size_t>(row)]);
      }
    }
  }

  /// Counts one head's result into the step's statistics: positions read, and whether it is
  /// the first that was not finite.
  void note_result(std::int64_t layer, std::int64_t head, const HeadResult& result,
                   bool finite_elsewhere = true) {
    stats.positions_read += result.positions_read;
    if (result.finite && finite_elsewhere) return;
    if (stats.non_finite_heads++ == 0) {
      stats.first_non_finite_layer = layer;
      stats.first_non_finite_head = head;
    }
  }

  /// The step's statistics from this layer's results: retained mass per head (with
  /// retained_mass, in decode), positions read, and the first head whose attention was not
  /// finite.
  void record_step_stats(std::int64_t layer) {
    const bool sparse_step = sparse_layer.has_value();
    const bool shadow = sparse_step && options.retained_mass;
    if (options.retained_mass) {
      for (std::int64_t hd = 0; hd < heads; ++hd) {
        const auto i = static_cast<std::size_t>(hd);
        // exp(L_S - L_all); exactly 1 when the step is dense.
        stats.retained_mass.push_back(shadow ? std::exp(results[i].lse - dense_results[i].lse)
                                             : 1.0f);
      }
    }
    for (std::int64_t hd = 0; hd < heads; ++hd) {
      const auto i = static_cast<std::size_t>(hd);
      note_result(layer, hd, results[i], !shadow || dense_results[i].finite);
    }
  }

  /// SessionOptions::on_layer with this layer's decode attention: queries, outputs, results,
  /// the dense shadow pass's when there is one, and the sparse operators.
  void report_layer(std::int64_t layer, std::int64_t positions) {
    LayerAttention a;
    a.layer = layer;
    a.positions = positions;
    a.group = group;
    a.queries = QKV.data();
    a.output = A.data();
    a.results = results;
    if (sparse_layer && options.retained_mass) {
      a.dense_output = dense_attn.data();
      a.dense_results = dense_results;
    }
    if (sparse_layer) a.sparse_operators = sparse_layer->group_operators();
    options.on_layer(a);
  }

  /// Causal attention of the chunk's queries over the cache (keys [0, p0 + t] for token t),
  /// flash-style per GQA group and block of kQueryRows positions (prefill_attention.hpp): no
  /// [n, n] score matrix, and matrix-product speed.
  template <KvViewLike View>
  void attend_prefill(std::int64_t layer, std::int64_t p0, std::int64_t n) {
    const std::int64_t blocks = ceil_div(n, kQueryRows);
    pool.parallel_for(blocks * kv_heads, [&](std::int64_t i) {
      // Later blocks attend over more keys: hand them out first.
      const std::int64_t b = blocks - 1 - i / kv_heads;
      const std::int64_t g = i % kv_heads;
      const std::int64_t t0 = b * kQueryRows;
      QueryBlock block;
      block.queries = QKV.data() + t0 * qkv_dim + g * group * head_dim;
      block.q_stride = qkv_dim;
      block.out = A.data() + t0 * q_dim + g * group * head_dim;
      block.out_stride = q_dim;
      block.positions = std::min(kQueryRows, n - t0);
      block.group = group;
      block.first_position = p0 + t0;
      prefill_attention(view_of<View>(layer, g, p0 + t0 + block.positions), block, attention_scale);
    });
  }
};

const char* to_string(Activations activations) {
  return activations == Activations::int8 ? "int8" : "f32";
}

Activations parse_activations(std::string_view text, std::string_view flag) {
  if (text == "f32") return Activations::f32;
  if (text == "int8" || text == "q8") return Activations::int8;  // q8: int8's old name
  detail::throw_error("amc::transformer::parse_activations", flag, ": expected f32 or int8, got '",
                      text, "'");
}

StorageType auto_kv_dtype(const Checkpoint& checkpoint) {
  // bf16 weights: a bf16 cache, as the model's own dtype. f32 weights: f32. f16 weights: f32
  // too, since the cache has no f16 and bf16 would drop 3 of f16's mantissa bits.
  return checkpoint.weight_dtype() == StorageType::bf16 ? StorageType::bf16 : StorageType::f32;
}

RopeAngles auto_rope_angles(const Config& config) {
  return config.rope_angles.value_or(RopeAngles::transformers);
}

namespace {

SessionOptions resolve(const Checkpoint& checkpoint, SessionOptions options) {
  if (!options.kv_dtype) options.kv_dtype = auto_kv_dtype(checkpoint);
  if (!options.rope_angles) options.rope_angles = auto_rope_angles(checkpoint.config());
  return options;
}

}  // namespace

Session::Session(const Checkpoint& checkpoint, SessionOptions options)
    : impl_(std::make_unique<Impl>(checkpoint, resolve(checkpoint, std::move(options)))) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

const Config& Session::config() const { return impl_->cfg; }
const SessionOptions& Session::options() const { return impl_->options; }
std::int64_t Session::positions() const { return impl_->cache.positions(); }
const KvCache& Session::cache() const { return impl_->cache; }
void Session::reserve(std::int64_t positions) { impl_->cache.reserve(positions); }

void Session::prefill(std::span<const std::int32_t> tokens, std::span<float> logits,
                      bool all_positions) {
  impl_->prefill(tokens, logits, all_positions);
}

const StepStats& Session::decode(std::int32_t token, std::span<float> logits) {
  impl_->decode(token, logits);
  return impl_->stats;
}

const StepStats& Session::verify(std::span<const std::int32_t> tokens, std::span<float> logits) {
  impl_->verify(tokens, logits);
  return impl_->stats;
}

void Session::reset() { impl_->cache.clear(); }

void Session::truncate(std::int64_t positions) {
  AMC_CHECK(positions >= 0 && positions <= impl_->cache.positions(),
            "amc::transformer::Session::truncate", "positions must lie in [0, ",
            impl_->cache.positions(), "] (the positions held), got ", positions);
  impl_->cache.truncate(positions);
}

void Session::set_decode(const Attention& attention, bool retained_mass) {
  impl_->set_decode(attention, retained_mass);
}

void Session::fill_random_cache(std::int64_t positions, std::uint64_t seed) {
  impl_->cache.fill_random(positions, seed);
}

}  // namespace amc::transformer

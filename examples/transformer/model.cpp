// The forward pass of every family (family.hpp): prefill (batched, Eigen GEMM, tiled causal
// attention) and decode (matrix-vector products, attention through amc's decode operators per
// GQA group). Family differences arrive as Config flags and as empty or present weights.
#include "model.hpp"

#include <amc/amc.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

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
/// Tokens per task of the prefill's row-wise steps (norms, RoPE, SwiGLU).
constexpr std::int64_t kTokenRows = 16;

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
  const Config& cfg;
  const Weights& w;
  SessionOptions options;
  KvCache cache;
  ThreadPool pool;
  // One operator per KV head (GQA group), as amc::LayerDecode keeps them, run on this session's
  // pool so that with retained mass the dense and the sparse pass of every group share one
  // parallel section.
  std::vector<DenseDecode> dense;           // [kv_heads] dense decode or retained mass
  std::vector<BlockSparseDecode<>> sparse;  // [kv_heads] sparse decode

  // Shape.
  std::int64_t hidden, heads, kv_heads, head_dim, half, group, q_dim, kv_dim, inter, vocab;
  float attention_scale;
  RotaryTable rope;  // the cos and sin of every position, in the options' convention

  // Decode scratch: vectors of one token.
  std::vector<float> x, xn, q, k, v, attn, dense_attn, h, tmp, silu_scratch, cos, sin;
  std::vector<HeadResult> results, dense_results;  // [heads]
  StepStats stats;

  // Prefill: per layer the stacked [q; k; v] and [gate; up] projections and their biases,
  // and scratch [tokens, width] row-major matrices of one chunk.
  struct LayerStacks {
    std::vector<const Matrix*> qkv, o, gate_up, down;
    std::vector<float> qkv_bias;  // [q_dim + 2 kv_dim], or empty without q/k/v biases
  };
  std::vector<LayerStacks> stacks;
  std::int64_t qkv_dim;
  std::vector<float> X, XN, QKV, A, GU, T, COS, SIN;

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
    inter = cfg.intermediate_size;
    vocab = cfg.vocab_size;
    // The same expression amc's operators use for their default scale, so prefill attention
    // (which takes this scale) and decode attention scale queries identically.
    attention_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    make_operators();
    auto size = [](std::vector<float>& b, std::int64_t n) {
      b.assign(static_cast<std::size_t>(n), 0.0f);
    };
    size(x, hidden);
    size(xn, hidden);
    size(q, q_dim);
    size(k, kv_dim);
    size(v, kv_dim);
    size(attn, q_dim);
    size(dense_attn, q_dim);
    size(h, inter);
    size(tmp, std::max(hidden, inter));
    size(silu_scratch, inter);
    size(cos, half);
    size(sin, half);
    results.resize(static_cast<std::size_t>(heads));
    dense_results.resize(static_cast<std::size_t>(heads));
    qkv_dim = q_dim + 2 * kv_dim;
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
  }

  /// More threads than the hardware has would only make the spinning workers take turns;
  /// results do not depend on the count, so it is capped.
  static int pool_threads(int requested) {
    const auto hardware = static_cast<int>(std::thread::hardware_concurrency());
    return hardware > 0 ? std::min(requested, hardware) : requested;
  }

  /// The decode operators the options call for, one per KV head.
  void make_operators() {
    sparse.clear();
    dense.clear();
    if (const SparseConfig* config = sparse_config(options.attention)) {
      sparse.assign(static_cast<std::size_t>(kv_heads), BlockSparseDecode<>(*config));
    }
    const auto* dense_attention = std::get_if<DenseAttention>(&options.attention);
    if (dense_attention != nullptr || options.retained_mass) {
      // The retained-mass pass beside sparse attention is always exact.
      const AttentionArithmetic arithmetic =
          dense_attention ? dense_attention->arithmetic : AttentionArithmetic::exact_f32;
      dense.assign(static_cast<std::size_t>(kv_heads), DenseDecode({}, arithmetic));
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
      c.summaries.channel_bounds = c.summaries.channel_bounds || wanted.channel_bounds;
      c.summaries.value_norms = c.summaries.value_norms || wanted.value_norms;
      c.summaries.sub_blocks = std::max(c.summaries.sub_blocks, wanted.sub_blocks);
    };
    if (const SparseConfig* config = sparse_config(o.attention)) keep(*config, "sparse");
    if (o.summaries_for) keep(*o.summaries_for, "summaries_for");
    return c;
  }

  void check_token(std::int32_t token, const char* where, std::size_t index) const {
    AMC_CHECK(token >= 0 && token < vocab, where, "token id ", token, " at index ", index,
              " is outside the vocabulary [0, ", vocab, ")");
  }

  void embed(std::int32_t token, float* out) const {
    kernels::active().load[kernels::index_of(w.embed.dtype)](w.embed.row(token), out, hidden);
  }

  void angles(std::int64_t position, float* c, float* s) const { rope.cos_sin(position, c, s); }

  /// Runs task(begin, end) over [0, rows) in chunks of `chunk` rows on the pool.
  template <class Task>
  void for_rows(std::int64_t rows, std::int64_t chunk, Task&& task) {
    pool.parallel_for(ceil_div(rows, chunk),
                      [&](std::int64_t i) { task(i * chunk, std::min(rows, (i + 1) * chunk)); });
  }

  /// Rows per decode task for a matrix of `rows` rows (a multiple of 16, at least kRowChunk).
  std::int64_t row_chunk(std::int64_t rows) const {
    const std::int64_t chunk = ceil_div(rows, kTasksPerThread * pool.threads());
    return std::max(kRowChunk, ceil_div(chunk, 16) * 16);
  }

  // ---- decode --------------------------------------------------------------------------

  void decode(std::int32_t token, std::span<float> logits) {
    check_token(token, "amc::transformer::Session::decode", 0);
    AMC_CHECK(static_cast<std::int64_t>(logits.size()) == vocab,
              "amc::transformer::Session::decode", "logits has ", logits.size(),
              " entries, expected vocab_size ", vocab);
    const std::int64_t position = cache.positions();
    stats.positions_read = 0;
    stats.non_finite_heads = 0;
    stats.first_non_finite_layer = -1;
    stats.first_non_finite_head = -1;
    stats.retained_mass.clear();
    stats.min_retained_mass = std::numeric_limits<float>::quiet_NaN();
    embed(token, x.data());
    angles(position, cos.data(), sin.data());
    for (std::int64_t layer = 0; layer < cfg.num_hidden_layers; ++layer) {
      const LayerWeights& l = w.layers[static_cast<std::size_t>(layer)];
      rms_norm(x.data(), l.input_norm.data(), hidden, cfg.rms_norm_eps, xn.data());
      // q, k and v in one parallel pass: their rows are independent.
      const std::int64_t q_chunk = row_chunk(q_dim), kv_chunk = row_chunk(kv_dim);
      const std::int64_t q_tasks = ceil_div(q_dim, q_chunk);
      const std::int64_t kv_tasks = ceil_div(kv_dim, kv_chunk);
      pool.parallel_for(q_tasks + 2 * kv_tasks, [&](std::int64_t i) {
        if (i < q_tasks) {
          matvec(l.q, xn.data(), optional_data(l.q_bias), i * q_chunk,
                 std::min(q_dim, (i + 1) * q_chunk), q.data());
          return;
        }
        i -= q_tasks;
        const bool is_k = i < kv_tasks;
        if (!is_k) i -= kv_tasks;
        matvec(is_k ? l.k : l.v, xn.data(), optional_data(is_k ? l.k_bias : l.v_bias), i * kv_chunk,
               std::min(kv_dim, (i + 1) * kv_chunk), (is_k ? k : v).data());
      });
      norm_heads(q.data(), heads, head_dim, l.q_norm, cfg.rms_norm_eps);
      norm_heads(k.data(), kv_heads, head_dim, l.k_norm, cfg.rms_norm_eps);
      for (std::int64_t hd = 0; hd < heads; ++hd)
        apply_rope(q.data() + hd * head_dim, half, cos.data(), sin.data());
      for (std::int64_t hd = 0; hd < kv_heads; ++hd)
        apply_rope(k.data() + hd * head_dim, half, cos.data(), sin.data());
      cache.write(layer, k.data(), v.data(), 1, kv_dim);
      visit_storage<float, bf16>(cache.options().dtype, [&](auto type) {
        attend_decode<typename decltype(type)::type>(layer, position + 1);
      });
      for_rows(hidden, row_chunk(hidden), [&](std::int64_t b, std::int64_t e) {
        matvec(l.o, attn.data(), optional_data(l.o_bias), b, e, tmp.data());
        for (std::int64_t r = b; r < e; ++r) x[r] += tmp[r];
      });
      rms_norm(x.data(), l.post_norm.data(), hidden, cfg.rms_norm_eps, xn.data());
      for_rows(inter, row_chunk(inter), [&](std::int64_t b, std::int64_t e) {
        matvec(l.gate, xn.data(), nullptr, b, e, h.data());
        matvec(l.up, xn.data(), nullptr, b, e, tmp.data());
        silu_mul(h.data() + b, tmp.data() + b, h.data() + b, e - b, silu_scratch.data() + b);
      });
      for_rows(hidden, row_chunk(hidden), [&](std::int64_t b, std::int64_t e) {
        matvec(l.down, h.data(), nullptr, b, e, tmp.data());
        for (std::int64_t r = b; r < e; ++r) x[r] += tmp[r];
      });
    }
    cache.commit(1);
    rms_norm(x.data(), w.final_norm.data(), hidden, cfg.rms_norm_eps, xn.data());
    unembed(xn.data(), logits.data());
    if (!stats.retained_mass.empty()) {
      stats.min_retained_mass =
          *std::min_element(stats.retained_mass.begin(), stats.retained_mass.end());
    }
  }

  void unembed(const float* normed, float* logits) {
    for_rows(vocab, row_chunk(vocab), [&](std::int64_t b, std::int64_t e) {
      matvec(w.lm_head, normed, nullptr, b, e, logits);
    });
  }

  /// Attention of the decode step's queries q [heads, head_dim] over positions [0, positions)
  /// of each KV head, into attn [heads, head_dim]: the sparse or dense operator per GQA group,
  /// and with retained mass the dense one as well, all groups (and both) in parallel.
  template <KvStorage S>
  void attend_decode(std::int64_t layer, std::int64_t positions) {
    const bool sparse_step = is_sparse(options.attention);
    const bool both = sparse_step && options.retained_mass;
    pool.parallel_for(kv_heads * (both ? 2 : 1), [&](std::int64_t i) {
      const std::int64_t g = i % kv_heads;
      const bool run_dense = !sparse_step || i >= kv_heads;
      const KvHead<KvView<S>> head{cache.view<S>(layer, g, positions), cache.summaries(layer, g)};
      const std::int64_t offset = g * group * head_dim;
      const auto queries = map_rows(q.data() + offset, group, head_dim, head_dim);
      float* out = (run_dense && sparse_step ? dense_attn : attn).data() + offset;
      const std::span<HeadResult> head_results =
          std::span(run_dense && sparse_step ? dense_results : results)
              .subspan(static_cast<std::size_t>(g * group), static_cast<std::size_t>(group));
      if (run_dense) {
        dense[static_cast<std::size_t>(g)].decode(
            queries, head, map_rows(out, group, head_dim, head_dim), head_results);
      } else {
        sparse[static_cast<std::size_t>(g)].decode(
            queries, head, map_rows(out, group, head_dim, head_dim), head_results);
      }
    });
    if (options.retained_mass) {
      for (std::int64_t hd = 0; hd < heads; ++hd) {
        const auto i = static_cast<std::size_t>(hd);
        // exp(L_S - L_all); exactly 1 when the step is dense.
        stats.retained_mass.push_back(sparse_step ? std::exp(results[i].lse - dense_results[i].lse)
                                                  : 1.0f);
      }
    }
    for (const HeadResult& r : results) stats.positions_read += r.positions_read;
    for (std::int64_t hd = 0; hd < heads; ++hd) {
      const auto i = static_cast<std::size_t>(hd);
      if (results[i].finite && (!both || dense_results[i].finite)) continue;
      if (stats.non_finite_heads++ == 0) {
        stats.first_non_finite_layer = layer;
        stats.first_non_finite_head = hd;
      }
    }
    if (options.on_layer) {
      LayerAttention a;
      a.layer = layer;
      a.positions = positions;
      a.group = group;
      a.queries = q.data();
      a.output = attn.data();
      a.results = results;
      if (both) {
        a.dense_output = dense_attn.data();
        a.dense_results = dense_results;
      }
      a.sparse_operators = sparse;
      options.on_layer(a);
    }
  }

  // ---- prefill -------------------------------------------------------------------------

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
      const bool last = begin + count == n;
      float* out = all_positions ? logits.data() + begin * vocab : (last ? logits.data() : nullptr);
      forward_batch(
          tokens.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(count)), out,
          all_positions);
    }
  }

  /// Y = X W^T (+ bias) for a stack of weights, in `tasks` tiles of consecutive rows run on the
  /// pool; after each tile, epilogue(begin, end) runs on the same thread for its columns.
  /// Tiles are fixed by the shape and `tasks` (never by the thread count), so every element
  /// is computed identically whatever the number of threads. Few large tiles keep Eigen from
  /// repacking X once per tile; multiples of 4 tasks balance 1, 2 and 4 threads.
  template <class Epilogue>
  void product(const std::vector<const Matrix*>& parts, std::int64_t tasks, const float* input,
               std::int64_t n, std::int64_t x_stride, const float* bias, float* y,
               std::int64_t y_stride, Epilogue&& epilogue) {
    const Stack stack{parts};
    const std::int64_t rows = stack.rows();
    const std::int64_t tile = ceil_div(ceil_div(rows, tasks), 16) * 16;
    for_rows(rows, tile, [&](std::int64_t b, std::int64_t e) {
      matmul(stack, b, e, input, n, x_stride, bias, y, y_stride);
      epilogue(b, e);
    });
  }

  void forward_batch(std::span<const std::int32_t> tokens, float* logits, bool all_positions) {
    const auto n = static_cast<std::int64_t>(tokens.size());
    const std::int64_t p0 = cache.positions();
    auto size = [n](std::vector<float>& b, std::int64_t width) {
      b.resize(static_cast<std::size_t>(n * width));
    };
    size(X, hidden);
    size(XN, hidden);
    size(QKV, qkv_dim);  // [Q | K | V] per token
    size(A, q_dim);
    size(GU, 2 * inter);  // [gate | up] per token; the gate half becomes silu(gate) * up
    size(T, hidden);
    size(COS, half);
    size(SIN, half);
    for (std::int64_t t = 0; t < n; ++t) {
      embed(tokens[static_cast<std::size_t>(t)], X.data() + t * hidden);
      angles(p0 + t, COS.data() + t * half, SIN.data() + t * half);
    }
    const auto no_epilogue = [](std::int64_t, std::int64_t) {};
    const auto residual = [&](std::int64_t b, std::int64_t e) { add_columns(n, b, e); };
    for (std::int64_t layer = 0; layer < cfg.num_hidden_layers; ++layer) {
      const LayerWeights& l = w.layers[static_cast<std::size_t>(layer)];
      const LayerStacks& st = stacks[static_cast<std::size_t>(layer)];
      norm_rows(n, l.input_norm.data());
      product(st.qkv, 8, XN.data(), n, hidden, optional_data(st.qkv_bias), QKV.data(), qkv_dim,
              no_epilogue);
      for_rows(n, kTokenRows, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t t = b; t < e; ++t) {
          const float* c = COS.data() + t * half;
          const float* s = SIN.data() + t * half;
          float* row = QKV.data() + t * qkv_dim;
          norm_heads(row, heads, head_dim, l.q_norm, cfg.rms_norm_eps);
          norm_heads(row + q_dim, kv_heads, head_dim, l.k_norm, cfg.rms_norm_eps);
          for (std::int64_t hd = 0; hd < heads + kv_heads; ++hd)
            apply_rope(row + hd * head_dim, half, c, s);
        }
      });
      cache.write(layer, QKV.data() + q_dim, QKV.data() + q_dim + kv_dim, n, qkv_dim);
      visit_storage<float, bf16>(cache.options().dtype, [&](auto type) {
        attend_prefill<typename decltype(type)::type>(layer, p0, n);
      });
      product(st.o, 8, A.data(), n, q_dim, optional_data(l.o_bias), T.data(), hidden, residual);
      norm_rows(n, l.post_norm.data());
      product(st.gate_up, 16, XN.data(), n, hidden, nullptr, GU.data(), 2 * inter, no_epilogue);
      for_rows(n, kTokenRows, [&](std::int64_t b, std::int64_t e) {
        thread_local std::vector<float> scratch;
        scratch.resize(static_cast<std::size_t>(inter));
        for (std::int64_t t = b; t < e; ++t) {
          float* g = GU.data() + t * 2 * inter;
          silu_mul(g, g + inter, g, inter, scratch.data());
        }
      });
      product(st.down, 4, GU.data(), n, 2 * inter, nullptr, T.data(), hidden, residual);
    }
    cache.commit(n);
    if (logits == nullptr) return;
    if (all_positions) {
      norm_rows(n, w.final_norm.data());
      const std::vector<const Matrix*> head{&w.lm_head};
      product(head, 4 * ceil_div(vocab, 4096), XN.data(), n, hidden, nullptr, logits, vocab,
              no_epilogue);
    } else {
      // The last token's logits through the decode path's unembedding.
      rms_norm(X.data() + (n - 1) * hidden, w.final_norm.data(), hidden, cfg.rms_norm_eps,
               xn.data());
      unembed(xn.data(), logits);
    }
  }

  /// XN = rmsnorm(X) * weight, row by row, rows spread over the pool.
  void norm_rows(std::int64_t n, const float* weight) {
    for_rows(n, kTokenRows, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t t = b; t < e; ++t) {
        rms_norm(X.data() + t * hidden, weight, hidden, cfg.rms_norm_eps, XN.data() + t * hidden);
      }
    });
  }

  /// X[:, b:e] += T[:, b:e] (the residual of a tile, by the task that computed it).
  void add_columns(std::int64_t n, std::int64_t b, std::int64_t e) {
    for (std::int64_t t = 0; t < n; ++t) {
      float* x_row = X.data() + t * hidden;
      const float* t_row = T.data() + t * hidden;
      for (std::int64_t r = b; r < e; ++r) x_row[r] += t_row[r];
    }
  }

  /// Causal attention of the chunk's queries over the cache (keys [0, p0 + t] for token t),
  /// flash-style per GQA group and block of kQueryRows positions (prefill_attention.hpp): no
  /// [n, n] score matrix, and matrix-product speed.
  template <KvStorage S>
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
      prefill_attention(cache.view<S>(layer, g, p0 + t0 + block.positions), block, attention_scale);
    });
  }
};

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

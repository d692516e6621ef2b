// amc-bench-qwen2: end-to-end speed of the Qwen2 reference transformer on a checkpoint of
// Qwen2-0.5B's shape (synthetic bf16 weights unless --model names a real one), with the
// machine's own ceilings measured in the same run:
//
//   read bandwidth   a plain multi-threaded SIMD read (amc's stream_sum kernel, each thread
//                    streaming its half of a 512 MiB buffer);
//   GEMM FLOP/s      Eigen's f32 matrix product (the variant the prefill uses), every thread on
//                    its own operands, the best of a square and the prefill's shapes;
//
// and the ratios it reports, with their targets:
//   decode, short context    tokens/s vs bandwidth / (weight bytes read per token), >= 0.92,
//                            with the weights in huge pages (the default)
//                            and, interleaved, mapped in place;
//   prefill at 512 and 2K    FLOP/s (matrix products and attention) vs Eigen's GEMM, >= 0.75;
//   decode at 16K            tokens/s vs bandwidth / (weight + KV bytes per token), dense, >= 0.8;
//   64K and 128K             sparse vs dense decode tokens/s (B 32, k 16, sinks 4, window 64,
//                            mean-pooled, per group as in amc-bench; per head too), >= 1.5x, 2x;
//   speculative decoding     at each of --verify-depths: a dense step, a sparse draft step (the
//                            same sparse settings) and a verify pass of --draft-tokens + 1
//                            positions, in dense steps, and the speed they give at acceptances
//                            a (docs/speculative.md: (1 - a^(g+1)) / (1 - a) tokens per
//                            cycle of g draft steps and one verify pass).
// Long contexts fill the KV cache with random values (Session::fill_random_cache) instead of a
// prefill.
//
// A shared VM's bandwidth and FLOP/s drift with its neighbours' load (by up to 2x here), so
// every ratio is taken between a measurement and its baseline measured right before it, over
// several rounds, and the median ratio is reported. Not a test: it prints, asserts nothing.
//
//   amc-bench-qwen2 [--model DIR] [--threads 2] [--steps 8] [--rounds 5] [--skip-long]
//                   [--synth-shape qwen2-0.5b|tiny] [--verify-depths 16384,32768
//                   [--draft-tokens 4] [--only-verify]]
//   (DIR defaults to build/bench-qwen2-0.5b, written by the synthetic writer when absent)
#include <CLI/CLI.hpp>
#include <amc/amc.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "transformer/checkpoint.hpp"
#include "transformer/linear.hpp"
#include "transformer/model.hpp"
#include "transformer/model_files.hpp"
#include "transformer/synth.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace amc::transformer;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <class F>
double time_of(F&& f) {
  const auto start = Clock::now();
  f();
  return seconds_since(start);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The plain multi-threaded SIMD read: each thread sums its half (third, ...) of a buffer
/// larger than any cache, in transparent huge pages as the weights are (a plain read measured
/// the same in 4 KiB and 2 MiB pages here; the decode did not). Returns bytes/s of the best of
/// `repeats` passes.
class ReadBaseline {
 public:
  explicit ReadBaseline(int threads)
      : pool_(threads), threads_(threads), buffer_(std::size_t{1} << 29) {
    // Distinct values: a VM may merge pages of identical contents, which would then be read
    // from cache.
    float* values = floats();
    for (std::int64_t i = 0; i < count(); ++i) values[i] = static_cast<float>(i % 1000003);
    sink_.resize(static_cast<std::size_t>(threads));
  }
  double measure(int repeats = 4) {
    const auto sum = amc::kernels::active().stream_sum;
    double best = 1e300;
    for (int r = 0; r < repeats; ++r) {
      best = std::min(best, time_of([&] {
                        pool_.parallel_for(threads_, [&](std::int64_t i) {
                          const std::int64_t part = count() / threads_;
                          sink_[static_cast<std::size_t>(i)] += sum(floats() + i * part, part);
                        });
                      }));
    }
    return static_cast<double>(count()) * 4.0 / best;
  }

 private:
  float* floats() { return reinterpret_cast<float*>(buffer_.data()); }
  std::int64_t count() const { return static_cast<std::int64_t>(buffer_.size() / 4); }

  amc::ThreadPool pool_;
  int threads_;
  amc::HugePageBuffer buffer_;
  std::vector<float> sink_;
};

/// Eigen's f32 GEMM (the prefill's variant), every thread multiplying its own operands: the
/// best FLOP/s over a square product and the prefill's shapes.
class GemmBaseline {
 public:
  explicit GemmBaseline(int threads) : pool_(threads), threads_(threads) {}
  double measure() {
    struct Shape {
      std::int64_t m, n, k;
    };
    double best = 0.0;
    for (const Shape s : {Shape{1024, 1024, 1024}, Shape{512, 4864, 896}, Shape{1024, 64, 896},
                          Shape{1024, 64, 4864}}) {
      std::vector<std::vector<float>> a, b, c;
      for (int i = 0; i < threads_; ++i) {
        a.emplace_back(static_cast<std::size_t>(s.m * s.k), 0.5f);
        b.emplace_back(static_cast<std::size_t>(s.n * s.k), 0.25f);
        c.emplace_back(static_cast<std::size_t>(s.m * s.n), 0.0f);
      }
      const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
      const int repeat = static_cast<int>(std::max(1.0, 1.5e10 / flops));  // ~0.05 s per pass
      for (int pass = 0; pass < 2; ++pass) {
        const double t = time_of([&] {
          pool_.parallel_for(threads_, [&](std::int64_t i) {
            const auto j = static_cast<std::size_t>(i);
            for (int r = 0; r < repeat; ++r) {
              gemm_f32(a[j].data(), s.k, b[j].data(), s.k, c[j].data(), s.n, s.m, s.n, s.k);
            }
          });
        });
        best = std::max(best, flops * threads_ * repeat / t);
      }
    }
    return best;
  }

 private:
  amc::ThreadPool pool_;
  int threads_;
};

std::vector<std::int32_t> random_tokens(std::int64_t n, std::int64_t vocab) {
  std::vector<std::int32_t> ids;
  std::uint64_t s = 12345;
  for (std::int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    ids.push_back(static_cast<std::int32_t>((s >> 33) % static_cast<std::uint64_t>(vocab)));
  }
  return ids;
}

/// Seconds per decode step over `steps` steps after whatever the session holds.
double decode_seconds(Session& session, int steps) {
  std::vector<float> logits(static_cast<std::size_t>(session.config().vocab_size));
  return time_of([&] {
           for (int i = 0; i < steps; ++i)
             session.decode(static_cast<std::int32_t>(100 + i), logits);
         }) /
         steps;
}

amc::SparseConfig perf_config(amc::SelectionScope scope) {
  amc::SparseConfig c;
  c.block_size = 32;
  c.top_k = 16;
  c.sinks = 4;
  c.window = 64;
  c.scope = scope;
  return c;
}

/// Speculative decoding's costs at each depth, in dense decode steps measured in the same
/// rounds: a sparse draft step (perf_config, per group), a verify pass of g + 1 positions with
/// the truncations of a cycle, and the speedup E / (g s + v) they give at a few acceptances.
/// Contexts are random caches (fill_random_cache); every cycle truncates back to the depth.
void speculative_costs(const Checkpoint& checkpoint, const SessionOptions& dense_options,
                       const std::vector<std::int64_t>& depths, std::int64_t g, int steps,
                       int rounds) {
  const std::int64_t vocab = checkpoint.config().vocab_size;
  for (const std::int64_t n : depths) {
    SessionOptions sparse_options = dense_options;
    sparse_options.attention = perf_config(amc::SelectionScope::per_group);
    Session dense(checkpoint, dense_options), sparse(checkpoint, sparse_options);
    for (Session* s : {&dense, &sparse}) {
      s->reserve(n + g + steps + 2);
      s->fill_random_cache(n, 99);
    }
    std::vector<float> logits(static_cast<std::size_t>(vocab));
    std::vector<float> verify_logits(static_cast<std::size_t>((g + 1) * vocab));
    std::vector<std::int32_t> verified(static_cast<std::size_t>(g + 1));
    for (std::int64_t i = 0; i <= g; ++i)
      verified[static_cast<std::size_t>(i)] = 100 + static_cast<std::int32_t>(i);
    // Each measurement returns to depth n, so every round sees the same context.
    const auto dense_step = [&] {
      const double t = time_of([&] {
        for (int i = 0; i < steps; ++i) dense.decode(100 + i, logits);
      });
      dense.truncate(n);
      return t / steps;
    };
    const auto draft_step = [&] {
      const double t = time_of([&] {
        for (int i = 0; i < steps; ++i) sparse.decode(100 + i, logits);
      });
      sparse.truncate(n);
      return t / steps;
    };
    const auto verify_pass = [&] {
      const double t = time_of([&] {
        for (int i = 0; i < steps; ++i) {
          sparse.verify(verified, verify_logits);
          sparse.truncate(n + 1);  // a cycle keeps what it accepted ...
          sparse.truncate(n);      // ... and the next one starts where this one did
        }
      });
      return t / steps;
    };
    dense_step(), draft_step(), verify_pass();  // warm-up
    std::vector<double> dense_ms, draft_ratio, verify_ratio;
    for (int r = 0; r < rounds; ++r) {
      const double d = dense_step();
      const double s = draft_step();
      const double v = verify_pass();
      dense_ms.push_back(d * 1e3);
      draft_ratio.push_back(s / d);
      verify_ratio.push_back(v / d);
    }
    const double s = median(draft_ratio), v = median(verify_ratio);
    std::printf(
        "speculative at %lld positions, %lld drafts: dense step %.2f ms; draft step %.3f of "
        "it, verify pass of %lld positions %.3f; speedup at acceptance",
        static_cast<long long>(n), static_cast<long long>(g), median(dense_ms), s,
        static_cast<long long>(g + 1), v);
    for (const double a : {0.80, 0.90, 0.95, 1.0}) {
      const double tokens = a == 1.0 ? static_cast<double>(g + 1)
                                     : (1.0 - std::pow(a, static_cast<double>(g + 1))) / (1.0 - a);
      std::printf(" %.2f: %.2fx", a, tokens / (static_cast<double>(g) * s + v));
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"amc-bench-qwen2: end-to-end speed of the Qwen2 reference transformer"};
  std::string model = "build/bench-qwen2-0.5b", shape = "qwen2-0.5b";
  int threads = 2, steps = 8, rounds = 5;
  bool skip_long = false, only_verify = false;
  std::string weight_dtype = "auto", activations = "f32";
  std::vector<std::int64_t> verify_depths;
  std::int64_t draft_tokens = 4;
  app.add_option("--model", model,
                 "checkpoint directory (written synthetically when absent) or GGUF file");
  app.add_option("--weight-dtype", weight_dtype,
                 "weight matrices in memory; auto: as a safetensors checkpoint stores them, bf16 "
                 "for GGUF; stored: a GGUF file's quantized blocks as they are")
      ->check(CLI::IsMember({"auto", "bf16", "f32", "stored"}));
  app.add_option("--threads", threads, "threads")->check(CLI::Range(1, 256));
  app.add_option("--steps", steps, "decode steps per measurement")->check(CLI::Range(1, 10000));
  app.add_option("--rounds", rounds, "measurement rounds (medians are reported)")
      ->check(CLI::Range(1, 100));
  app.add_flag("--skip-long", skip_long, "skip the 64K and 128K contexts");
  app.add_option("--verify-depths", verify_depths,
                 "contexts at which to time a draft step and a verify pass (none by default)")
      ->delimiter(',');
  app.add_option("--draft-tokens", draft_tokens, "drafted tokens per verify pass")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{64}));
  app.add_flag("--only-verify", only_verify, "only the speculative decoding measurements");
  app.add_option("--activations", activations, "with --weight-dtype stored: f32 or int8")
      ->check(CLI::IsMember({"f32", "int8"}));
  app.add_option("--synth-shape", shape,
                 "shape of the synthetic checkpoint written when DIR has none")
      ->check(CLI::IsMember({"tiny", "qwen2-0.5b"}));
  CLI11_PARSE(app, argc, argv);

  const LoadOptions load_options =
      weight_dtype == "stored"
          ? LoadOptions{.keep_blocks = true, .interleave_rows = activations == "int8"}
          : LoadOptions{.weight_dtype = parse_weight_dtype(weight_dtype)};
  if (!is_gguf_file(model) &&
      !std::filesystem::exists(std::filesystem::path(model) / "config.json")) {
    std::printf("writing a synthetic %s-shaped bf16 checkpoint to %s ...\n", shape.c_str(),
                model.c_str());
    SynthSpec spec;
    spec.config = synth_shape(shape);
    write_synthetic_checkpoint(model, spec);
  }
  const Checkpoint checkpoint = Checkpoint::load(model, load_options);
  const Config& cfg = checkpoint.config();
  const double weight_bytes = static_cast<double>(checkpoint.weights().decode_bytes());
  std::printf(
      "model %s: %lld layers, hidden %lld, vocab %lld; %.1f MB of matrices read per "
      "decode step; kernels %s, GEMM %s; %d threads on %u hardware threads; medians of "
      "%d rounds\n",
      model.c_str(), static_cast<long long>(cfg.num_hidden_layers),
      static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.vocab_size),
      weight_bytes / 1e6, std::string(amc::kernels::active().name).c_str(), gemm_isa(), threads,
      std::thread::hardware_concurrency(), rounds);
  ReadBaseline read(threads);
  GemmBaseline gemm(threads);
  std::fflush(stdout);

  SessionOptions dense_options;
  dense_options.threads = threads;
  dense_options.activations = parse_activations(activations, "--activations");
  std::vector<float> logits(static_cast<std::size_t>(cfg.vocab_size));
  if (only_verify) {
    speculative_costs(checkpoint, dense_options, verify_depths, draft_tokens, steps, rounds);
    return 0;
  }

  // Decode at short context: rounds of (read bandwidth, decode steps), with the weights as
  // loaded (huge pages unless the kernel refused them) and, interleaved, in place in the
  // mapped file.
  {
    LoadOptions mapped_options = load_options;
    mapped_options.weights = WeightMemory::mapped;
    const Checkpoint mapped = Checkpoint::load(model, mapped_options);
    Session session(checkpoint, dense_options);
    Session mapped_session(mapped, dense_options);
    std::vector<double> bandwidths, rates, ratios, mapped_rates, mapped_ratios, gains;
    for (Session* s : {&session, &mapped_session}) {
      s->reserve(16 + static_cast<std::int64_t>(rounds + 1) * steps * 2 + 1);
      s->prefill(random_tokens(16, cfg.vocab_size), logits);
      decode_seconds(*s, 2);  // warm-up: first touch of scratch and weights
    }
    for (int r = 0; r < rounds; ++r) {
      const double bandwidth = read.measure();
      const double rate = 1.0 / decode_seconds(session, 2 * steps);
      const double mapped_rate = 1.0 / decode_seconds(mapped_session, 2 * steps);
      bandwidths.push_back(bandwidth);
      rates.push_back(rate);
      ratios.push_back(rate * weight_bytes / bandwidth);
      mapped_rates.push_back(mapped_rate);
      mapped_ratios.push_back(mapped_rate * weight_bytes / bandwidth);
      gains.push_back(rate / mapped_rate);
    }
    std::printf(
        "decode, short context: %.2f tokens/s (%.1f GB/s of weights, %s); read bandwidth "
        "%.2f GB/s, bound %.2f tokens/s; ratio %.3f (target >= 0.92)\n",
        median(rates), median(rates) * weight_bytes / 1e9, to_string(checkpoint.weight_memory()),
        median(bandwidths) / 1e9, median(bandwidths) / weight_bytes, median(ratios));
    std::printf(
        "decode, short context, weights mapped: %.2f tokens/s; ratio %.3f; as loaded / mapped "
        "%.3f\n",
        median(mapped_rates), median(mapped_ratios), median(gains));
    std::fflush(stdout);
  }

  // Prefill: matrix products 2 * n * (layer parameters), attention 4 * head_dim * heads per
  // (query, key) pair; rounds of (GEMM FLOP/s, prefill).
  double layer_params = 0.0;
  for (const LayerWeights& l : checkpoint.weights().layers) {
    for (const Matrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
      layer_params += static_cast<double>(m->rows * m->cols);
    }
  }
  for (const std::int64_t n : {512, 2048}) {
    Session session(checkpoint, dense_options);
    const std::vector<std::int32_t> tokens = random_tokens(n, cfg.vocab_size);
    const double matmul = 2.0 * static_cast<double>(n) * layer_params;
    const double attention =
        4.0 * static_cast<double>(cfg.head_dim * cfg.num_attention_heads * cfg.num_hidden_layers) *
        static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
    std::vector<double> baselines, achieved, ratios, matmul_ratios;
    const int prefill_rounds = std::max(1, n == 512 ? rounds : rounds / 2 + 1);
    for (int r = 0; r < prefill_rounds; ++r) {
      const double flops = gemm.measure();
      session.reset();
      const double t = time_of([&] { session.prefill(tokens, logits); });
      baselines.push_back(flops);
      achieved.push_back((matmul + attention) / t);
      ratios.push_back((matmul + attention) / t / flops);
      matmul_ratios.push_back(matmul / t / flops);
    }
    const double rate = median(achieved) / (matmul + attention) * static_cast<double>(n);
    std::printf(
        "prefill %lld tokens: %.1f tokens/s, %.1f GFLOP/s (%.0f%% of the FLOPs in "
        "attention); Eigen GEMM %.1f GFLOP/s; ratio %.3f (target >= 0.75), matrix "
        "products alone %.3f\n",
        static_cast<long long>(n), rate, median(achieved) / 1e9,
        100.0 * attention / (matmul + attention), median(baselines) / 1e9, median(ratios),
        median(matmul_ratios));
    std::fflush(stdout);
  }

  auto long_session = [&](std::int64_t n, bool sparse, amc::SelectionScope scope,
                          amc::AttentionArithmetic arithmetic =
                              amc::AttentionArithmetic::exact_f32) {
    SessionOptions o = dense_options;
    o.attention = amc::transformer::DenseAttention{arithmetic};
    if (sparse) o.attention = perf_config(scope);
    auto session = std::make_unique<Session>(checkpoint, o);
    session->reserve(n + static_cast<std::int64_t>(rounds + 1) * steps + 2);
    session->fill_random_cache(n, 99);
    decode_seconds(*session, 1);  // warm-up
    return session;
  };

  // Decode at 16K, dense: rounds of (read bandwidth, decode steps).
  {
    const std::int64_t n = 16384;
    const auto session = long_session(n, false, amc::SelectionScope::per_group);
    const double kv_bytes = static_cast<double>(session->cache().bytes_per_position()) *
                            static_cast<double>(n + steps * rounds / 2);
    const double bytes = weight_bytes + kv_bytes;
    std::vector<double> bandwidths, rates, ratios;
    for (int r = 0; r < rounds; ++r) {
      const double bandwidth = read.measure();
      const double rate = 1.0 / decode_seconds(*session, steps);
      bandwidths.push_back(bandwidth);
      rates.push_back(rate);
      ratios.push_back(rate * bytes / bandwidth);
    }
    std::printf(
        "decode at 16K, dense: %.2f tokens/s; %.0f MB per token (KV %.0f MB); read "
        "bandwidth %.2f GB/s, bound %.2f tokens/s; ratio %.3f (target >= 0.8)\n",
        median(rates), bytes / 1e6, kv_bytes / 1e6, median(bandwidths) / 1e9,
        median(bandwidths) / bytes, median(ratios));
    std::fflush(stdout);
  }

  // 64K and 128K: rounds of (dense steps, sparse per group, sparse per head), same contexts.
  if (!skip_long) {
    for (const std::int64_t n : {65536, 131072}) {
      const auto dense = long_session(n, false, amc::SelectionScope::per_group);
      const auto group = long_session(n, true, amc::SelectionScope::per_group);
      const auto head = long_session(n, true, amc::SelectionScope::per_head);
      std::vector<double> dense_rates, group_rates, head_rates, group_speedups, head_speedups;
      for (int r = 0; r < rounds; ++r) {
        const double d = 1.0 / decode_seconds(*dense, steps);
        const double g = 1.0 / decode_seconds(*group, steps);
        const double h = 1.0 / decode_seconds(*head, steps);
        dense_rates.push_back(d);
        group_rates.push_back(g);
        head_rates.push_back(h);
        group_speedups.push_back(g / d);
        head_speedups.push_back(h / d);
      }
      std::printf(
          "decode at %lldK: dense %.2f tokens/s; sparse per group %.2f (%.2fx, target "
          ">= %s); sparse per head %.2f (%.2fx)\n",
          static_cast<long long>(n / 1024), median(dense_rates), median(group_rates),
          median(group_speedups), n == 65536 ? "1.5x" : "2x", median(head_rates),
          median(head_speedups));
      std::fflush(stdout);
    }
    // Dense decode in bf16_products against exact_f32, interleaved (a bf16 cache with
    // AVX512_BF16 only: elsewhere the mode would run exact_f32).
    if (amc::bf16_products_available(auto_kv_dtype(checkpoint), cfg.head_dim)) {
      for (const std::int64_t n : {65536, 131072}) {
        const auto exact = long_session(n, false, amc::SelectionScope::per_group);
        const auto fast = long_session(n, false, amc::SelectionScope::per_group,
                                       amc::AttentionArithmetic::bf16_products);
        std::vector<double> exact_rates, fast_rates, speedups;
        for (int r = 0; r < rounds; ++r) {
          const double e = 1.0 / decode_seconds(*exact, steps);
          const double f = 1.0 / decode_seconds(*fast, steps);
          exact_rates.push_back(e);
          fast_rates.push_back(f);
          speedups.push_back(f / e);
        }
        std::printf("decode at %lldK, dense: exact_f32 %.2f tokens/s; bf16_products %.2f (%.2fx)\n",
                    static_cast<long long>(n / 1024), median(exact_rates), median(fast_rates),
                    median(speedups));
        std::fflush(stdout);
      }
    }
  }
  speculative_costs(checkpoint, dense_options, verify_depths, draft_tokens, steps, rounds);
  return 0;
}

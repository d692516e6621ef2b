// The Qwen2 reference transformer on tiny synthetic checkpoints: against a naive double
// implementation, prefill against decode, sparse against dense, threads, dtypes.
#include <amc/amc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "catch.hpp"
#include "qwen2/checkpoint.hpp"
#include "qwen2/generate.hpp"
#include "qwen2/model.hpp"
#include "qwen2_test_support.hpp"

namespace {

using namespace amc::qwen2;
using amc::qwen2::test::NaiveQwen2;
using amc::qwen2::test::prompt_ids;
using amc::qwen2::test::relative_error;
using amc::qwen2::test::TempDir;

std::vector<float> prefill_all(Session& session, const std::vector<std::int32_t>& tokens) {
  std::vector<float> logits(tokens.size() * static_cast<std::size_t>(session.config().vocab_size));
  session.prefill(tokens, logits, true);
  return logits;
}

/// Greedy continuation: the tokens and every step's logits (first from the prefill).
struct Run {
  std::vector<std::int32_t> tokens;
  std::vector<float> logits;
  std::vector<float> min_mass;
};

Run greedy(const Checkpoint& c, const SessionOptions& o, const std::vector<std::int32_t>& prompt,
           std::int64_t n) {
  Session s(c, o);
  GenerationOptions g;
  g.max_tokens = n;
  g.keep_logits = true;
  const GenerationResult r = generate(s, prompt, g);
  Run run;
  for (const GeneratedToken& t : r.tokens) {
    run.tokens.push_back(t.token);
    run.min_mass.push_back(t.min_retained_mass);
  }
  run.logits = r.logits;
  return run;
}

SessionOptions sparse_options(amc::SparseConfig config, int threads = 1) {
  SessionOptions o;
  o.attention = AttentionMode::sparse;
  o.sparse = config;
  o.threads = threads;
  return o;
}

}  // namespace

TEST_CASE("prefill logits match a naive double-precision Qwen2 (f32 weights)", "[qwen2]") {
  for (const bool wide : {false, true}) {
    TempDir dir(wide ? "naive_wide" : "naive_tiny");
    write_synthetic_checkpoint(dir.path(),
                               wide ? amc::qwen2::test::wide_spec(amc::StorageType::f32)
                                    : amc::qwen2::test::tiny_spec(amc::StorageType::f32));
    const Checkpoint checkpoint = Checkpoint::load(dir.path());
    const NaiveQwen2 naive(dir.path());
    const std::vector<std::int32_t> tokens = prompt_ids(37, naive.vocab());
    const auto expected = naive.logits(tokens, false);

    SessionOptions o;
    o.kv_dtype = amc::StorageType::f32;
    Session session(checkpoint, o);
    const std::vector<float> logits = prefill_all(session, tokens);
    double worst = 0.0;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      worst = std::max(worst, relative_error(logits.data() + t * expected[t].size(), expected[t]));
    }
    INFO("shape " << (wide ? "wide" : "tiny") << ", max relative error " << worst);
    CHECK(worst < 1e-4);

    // The decode path (matrix-vector products, amc's operators) against the same reference.
    Session stepwise(checkpoint, o);
    std::vector<float> step(expected[0].size());
    stepwise.prefill(std::span(tokens.data(), 1), step);
    worst = relative_error(step.data(), expected[0]);
    for (std::size_t t = 1; t < tokens.size(); ++t) {
      stepwise.decode(tokens[t], step);
      worst = std::max(worst, relative_error(step.data(), expected[t]));
    }
    INFO("decode path: max relative error " << worst);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("bf16 checkpoints with a bf16 cache match the reference with bf16 keys and values",
          "[qwen2]") {
  TempDir dir("naive_bf16");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::tiny_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  CHECK(checkpoint.weights().embed.dtype == amc::StorageType::bf16);
  CHECK(checkpoint.weights().tied);
  const NaiveQwen2 naive(dir.path());
  const std::vector<std::int32_t> tokens = prompt_ids(29, naive.vocab());
  const auto expected = naive.logits(tokens, true);
  Session session(checkpoint);  // bf16 cache by default
  const std::vector<float> logits = prefill_all(session, tokens);
  double worst = 0.0;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    worst = std::max(worst, relative_error(logits.data() + t * expected[t].size(), expected[t]));
  }
  INFO("max relative error " << worst);
  // A key whose f32 value lies next to a bf16 rounding boundary may round the other way than
  // in the double reference: one bf16 step (2^-8 relative) in a few keys, hence 1e-3.
  CHECK(worst < 1e-3);
}

TEST_CASE("prefill equals token-by-token decode: logits and KV cache", "[qwen2]") {
  for (const auto kv : {amc::StorageType::f32, amc::StorageType::bf16}) {
    TempDir dir("prefill_decode");
    write_synthetic_checkpoint(dir.path(), amc::qwen2::test::wide_spec(amc::StorageType::bf16));
    const Checkpoint checkpoint = Checkpoint::load(dir.path());
    const std::int64_t vocab = checkpoint.config().vocab_size;
    const std::vector<std::int32_t> tokens = prompt_ids(41, vocab, 5);
    SessionOptions o;
    o.kv_dtype = kv;
    Session batched(checkpoint, o);
    const std::vector<float> all = prefill_all(batched, tokens);
    Session stepwise(checkpoint, o);
    std::vector<float> step(static_cast<std::size_t>(vocab));
    stepwise.prefill(std::span(tokens.data(), 1), step);
    double worst = 0.0;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      if (t > 0) stepwise.decode(tokens[t], step);
      const std::vector<double> reference(
          all.begin() + static_cast<std::ptrdiff_t>(t * vocab),
          all.begin() + static_cast<std::ptrdiff_t>((t + 1) * vocab));
      worst = std::max(worst, relative_error(step.data(), reference));
    }
    INFO("kv " << amc::to_string(kv) << ": max relative logit difference " << worst);
    // With a bf16 cache, a key or value that GEMM and dot products round to different sides
    // of a bf16 boundary differs by one bf16 step (2^-8 relative); a handful of those (5 of
    // 21000 entries here) move the logits by up to ~3e-4.
    CHECK(worst < (kv == amc::StorageType::f32 ? 1e-5 : 1e-3));

    REQUIRE(batched.positions() == stepwise.positions());
    const KvCache& a = batched.cache();
    const KvCache& b = stepwise.cache();
    std::int64_t mismatched = 0;
    double largest = 0.0;
    for (std::int64_t l = 0; l < a.layers(); ++l) {
      for (std::int64_t h = 0; h < a.kv_heads(); ++h) {
        auto compare = [&](auto va, auto vb) {
          for (std::int64_t p = 0; p < va.positions(); ++p) {
            for (std::int64_t i = 0; i < va.head_dim(); ++i) {
              for (const bool key : {true, false}) {
                const float x = amc::to_float((key ? va.key(p) : va.value(p))[i]);
                const float y = amc::to_float((key ? vb.key(p) : vb.value(p))[i]);
                largest = std::max(largest, static_cast<double>(std::abs(x - y)) /
                                                std::max(1.0, static_cast<double>(std::abs(y))));
                mismatched += x != y;
              }
            }
          }
        };
        if (kv == amc::StorageType::f32) {
          compare(a.view<float>(l, h, a.positions()), b.view<float>(l, h, b.positions()));
        } else {
          compare(a.view<amc::bf16>(l, h, a.positions()), b.view<amc::bf16>(l, h, b.positions()));
        }
      }
    }
    // GEMM and dot products sum in different orders: keys and values agree to f32 rounding,
    // and in bf16 a rare value next to a rounding boundary may land one bf16 step away.
    INFO("kv " << amc::to_string(kv) << ": " << mismatched << " entries differ, largest "
               << largest);
    CHECK(largest < (kv == amc::StorageType::f32 ? 1e-5 : 1.0 / 128));
    if (kv == amc::StorageType::bf16) {
      const std::int64_t entries = 2 * a.layers() * a.kv_heads() * a.positions() * a.head_dim();
      CHECK(mismatched * 100 < entries);
    }
  }
}

TEST_CASE("prefill longer than one batch equals prefill in pieces", "[qwen2]") {
  TempDir dir("long_prefill");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::tiny_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const std::vector<std::int32_t> tokens = prompt_ids(1500, vocab, 9);
  SessionOptions o;
  o.kv_dtype = amc::StorageType::f32;
  Session whole(checkpoint, o), pieces(checkpoint, o);
  std::vector<float> a(static_cast<std::size_t>(vocab)), b(a.size());
  whole.prefill(tokens, a);
  pieces.prefill(std::span(tokens).first(700), b);
  pieces.prefill(std::span(tokens).subspan(700), b);
  std::vector<double> reference(a.begin(), a.end());
  CHECK(relative_error(b.data(), reference) < 1e-5);
  CHECK(whole.positions() == 1500);
}

TEST_CASE("sparse decode whose support covers every position gives the dense tokens and logits",
          "[qwen2]") {
  TempDir dir("sparse_full");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::vector<std::int32_t> prompt = prompt_ids(50, checkpoint.config().vocab_size);
  const Run dense = greedy(checkpoint, SessionOptions{}, prompt, 24);
  for (const auto scope : {amc::SelectionScope::per_group, amc::SelectionScope::per_head}) {
    for (const auto score :
         {amc::ScoreRule::mean_pooled, amc::ScoreRule::channel_bound, amc::ScoreRule::oracle}) {
      amc::SparseConfig config;
      config.block_size = 8;
      config.top_k = 1000;  // more blocks than the context has: every position is read
      config.sinks = 0;
      config.window = 0;
      config.scope = scope;
      config.score = score;
      SessionOptions o = sparse_options(config);
      o.retained_mass = true;
      const Run sparse = greedy(checkpoint, o, prompt, 24);
      INFO("scope " << amc::to_string(scope) << ", score " << amc::to_string(score));
      CHECK(sparse.tokens == dense.tokens);
      std::vector<double> reference(dense.logits.begin(), dense.logits.end());
      // Per group reads the one range [0, n) for all heads exactly as dense decode does; per
      // head reads it head by head, which the kernel may round differently in the last bit.
      CHECK(relative_error(sparse.logits.data(), reference) <= 1e-6);
      if (scope == amc::SelectionScope::per_group) CHECK(sparse.logits == dense.logits);
      for (const float m : sparse.min_mass) CHECK(std::abs(m - 1.0f) < 1e-5f);
    }
  }
}

TEST_CASE("sparse decode with a small support runs per head and per group, every score rule",
          "[qwen2]") {
  TempDir dir("sparse_small");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const std::vector<std::int32_t> prompt = prompt_ids(90, vocab, 13);
  const std::int64_t layers = checkpoint.config().num_hidden_layers;
  const std::int64_t heads = checkpoint.config().num_attention_heads;
  std::vector<float> logits(static_cast<std::size_t>(vocab));

  // First decode step after the same prefill: layer 0 sees the same queries under every rule,
  // so the oracle's retained mass there bounds every other rule's from above (per head).
  std::vector<float> layer0_oracle;
  for (const auto scope : {amc::SelectionScope::per_head, amc::SelectionScope::per_group}) {
    for (const auto score :
         {amc::ScoreRule::oracle, amc::ScoreRule::mean_pooled, amc::ScoreRule::channel_bound}) {
      amc::SparseConfig config;
      config.block_size = 4;
      config.top_k = 3;
      config.sinks = 2;
      config.window = 8;
      config.scope = scope;
      config.score = score;
      SessionOptions o = sparse_options(config, 2);
      o.retained_mass = true;
      Session session(checkpoint, o);
      session.prefill(prompt, logits);
      const StepStats& stats = session.decode(prompt.back(), logits);
      INFO("scope " << amc::to_string(scope) << ", score " << amc::to_string(score));
      REQUIRE(stats.retained_mass.size() == static_cast<std::size_t>(layers * heads));
      for (const float m : stats.retained_mass) {
        CHECK(m > 0.0f);
        CHECK(m <= 1.0f + 1e-5f);
      }
      CHECK(stats.min_retained_mass < 1.0f);  // 91 positions, at most 22 read
      CHECK(stats.positions_read <= layers * heads * (2 + 8 + 3 * 4));
      for (const float x : logits) REQUIRE(std::isfinite(x));
      if (scope == amc::SelectionScope::per_head) {
        const std::vector<float> layer0(stats.retained_mass.begin(),
                                        stats.retained_mass.begin() + heads);
        if (score == amc::ScoreRule::oracle) {
          layer0_oracle = layer0;
        } else {
          for (std::int64_t h = 0; h < heads; ++h) CHECK(layer0[h] <= layer0_oracle[h] + 1e-5f);
        }
      }
      // Later steps select afresh; the session keeps going.
      for (int i = 0; i < 5; ++i) session.decode(3, logits);
      CHECK(session.positions() == 96);
    }
  }
}

TEST_CASE("results are identical for 1, 2 and 3 threads", "[qwen2]") {
  TempDir dir("threads");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::vector<std::int32_t> prompt = prompt_ids(70, checkpoint.config().vocab_size);
  amc::SparseConfig config;
  config.block_size = 8;
  config.top_k = 2;
  config.window = 16;
  for (const bool sparse : {false, true}) {
    std::vector<Run> runs;
    std::vector<std::vector<float>> prefills;
    for (const int threads : {1, 2, 3}) {
      SessionOptions o = sparse ? sparse_options(config, threads) : SessionOptions{};
      o.threads = threads;
      runs.push_back(greedy(checkpoint, o, prompt, 12));
      Session s(checkpoint, o);
      prefills.push_back(prefill_all(s, prompt));
    }
    INFO((sparse ? "sparse" : "dense"));
    for (std::size_t i = 1; i < runs.size(); ++i) {
      CHECK(runs[i].tokens == runs[0].tokens);
      CHECK(runs[i].logits == runs[0].logits);
      CHECK(prefills[i] == prefills[0]);
    }
  }
}

TEST_CASE("a sharded checkpoint loads and computes what the single file does", "[qwen2]") {
  TempDir single("single"), sharded("sharded");
  SynthSpec spec = amc::qwen2::test::tiny_spec(amc::StorageType::bf16, 21);
  write_synthetic_checkpoint(single.path(), spec);
  spec.shards = 3;
  write_synthetic_checkpoint(sharded.path(), spec);
  CHECK(std::filesystem::exists(sharded / "model.safetensors.index.json"));
  CHECK(std::filesystem::exists(sharded / "model-00003-of-00003.safetensors"));
  CHECK_FALSE(std::filesystem::exists(sharded / "model.safetensors"));
  const Checkpoint a = Checkpoint::load(single.path());
  const Checkpoint b = Checkpoint::load(sharded.path());
  CHECK(b.shard_count() == 3);
  const std::vector<std::int32_t> prompt = prompt_ids(20, a.config().vocab_size);
  const Run ra = greedy(a, SessionOptions{}, prompt, 6);
  const Run rb = greedy(b, SessionOptions{}, prompt, 6);
  CHECK(ra.logits == rb.logits);
}

TEST_CASE("generation stops at the stop token and validates its input", "[qwen2]") {
  TempDir dir("generate");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::tiny_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const std::vector<std::int32_t> prompt = prompt_ids(10, vocab);
  const Run free_run = greedy(checkpoint, SessionOptions{}, prompt, 8);
  Session session(checkpoint);
  GenerationOptions g;
  g.max_tokens = 8;
  g.stop_token = free_run.tokens[2];
  const GenerationResult r = generate(session, prompt, g);
  const auto first = std::find(free_run.tokens.begin(), free_run.tokens.end(), g.stop_token);
  CHECK(static_cast<std::ptrdiff_t>(r.tokens.size()) == first - free_run.tokens.begin() + 1);

  Session bad(checkpoint);
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  const std::vector<std::int32_t> out_of_range{1, static_cast<std::int32_t>(vocab)};
  REQUIRE_THROWS_WITH(bad.prefill(out_of_range, logits),
                      AMC_CONTAINS("token id 320 at index 1 is outside the vocabulary [0, 320)"));
  REQUIRE_THROWS_WITH(bad.prefill(std::vector<std::int32_t>{}, logits),
                      AMC_CONTAINS("tokens is empty"));
  REQUIRE_THROWS_WITH(bad.decode(-1, logits), AMC_CONTAINS("token id -1"));
  std::vector<float> short_logits(3);
  REQUIRE_THROWS_WITH(bad.decode(1, short_logits), AMC_CONTAINS("logits has 3 entries"));
  SessionOptions o;
  o.threads = 0;
  REQUIRE_THROWS_WITH(Session(checkpoint, o), AMC_CONTAINS("threads must be >= 1"));
  amc::SparseConfig config;
  config.block_size = 0;
  REQUIRE_THROWS_WITH(Session(checkpoint, sparse_options(config)),
                      AMC_CONTAINS("block_size must be positive"));
}

TEST_CASE("a random KV cache fill gives a long context to decode from", "[qwen2]") {
  TempDir dir("fill");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::tiny_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  amc::SparseConfig config;
  Session session(checkpoint, sparse_options(config));
  session.fill_random_cache(5000, 1);
  CHECK(session.positions() == 5000);
  const KvCache& cache = session.cache();
  CHECK(cache.summaries(1, 1)->positions() == 5000);
  // Each KV head's rows start on a cache line (the kernel's row loads then never split).
  for (std::int64_t head = 0; head < cache.kv_heads(); ++head) {
    const auto view = cache.view<amc::bf16>(1, head, 5000);
    CHECK(reinterpret_cast<std::uintptr_t>(view.key(0)) % amc::kCacheLine == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(view.value(0)) % amc::kCacheLine == 0);
  }
  std::vector<float> logits(static_cast<std::size_t>(checkpoint.config().vocab_size));
  const StepStats& stats = session.decode(5, logits);
  CHECK(session.positions() == 5001);
  CHECK(stats.positions_read == checkpoint.config().num_hidden_layers *
                                    checkpoint.config().num_attention_heads *
                                    config.nominal_support());
}

TEST_CASE("the layer observer sees every layer's queries, outputs and supports", "[qwen2]") {
  TempDir dir("observer");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const Config& cfg = checkpoint.config();
  amc::SparseConfig config;
  config.block_size = 4;
  config.top_k = 2;
  config.window = 8;
  config.scope = amc::SelectionScope::per_group;
  SessionOptions o = sparse_options(config, 2);
  o.retained_mass = true;
  std::vector<std::int64_t> layers;
  std::vector<float> masses;
  o.on_layer = [&](const LayerAttention& a) {
    layers.push_back(a.layer);
    CHECK(a.positions == 61);
    CHECK(a.group == 3);
    REQUIRE(a.sparse_operators.size() == 2);
    REQUIRE(a.dense_output != nullptr);
    for (std::int64_t h = 0; h < cfg.num_attention_heads; ++h) {
      const auto i = static_cast<std::size_t>(h);
      // Per group: every head of a group read its KV head's one support.
      CHECK(a.results[i].positions_read ==
            a.sparse_operators[static_cast<std::size_t>(h / a.group)].support(0).size());
      masses.push_back(std::exp(a.results[i].lse - a.dense_results[i].lse));
    }
  };
  Session session(checkpoint, o);
  std::vector<float> logits(static_cast<std::size_t>(cfg.vocab_size));
  session.prefill(prompt_ids(60, cfg.vocab_size), logits);
  const StepStats& stats = session.decode(7, logits);
  CHECK(layers == std::vector<std::int64_t>{0, 1});
  CHECK(masses == stats.retained_mass);
}

namespace {

/// Decodes `tokens` one by one; returns every step's logits, concatenated.
std::vector<float> decode_all(Session& session, const std::vector<std::int32_t>& tokens) {
  const auto vocab = static_cast<std::size_t>(session.config().vocab_size);
  std::vector<float> all, logits(vocab);
  for (const std::int32_t t : tokens) {
    session.decode(t, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace

TEST_CASE("truncate then decode equals decode on a fresh session with that prefix, bitwise",
          "[qwen2]") {
  TempDir dir("truncate");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const std::vector<std::int32_t> prompt = prompt_ids(61, vocab, 17);  // ends inside a block
  const std::vector<std::int32_t> first = prompt_ids(9, vocab, 23);
  const std::vector<std::int32_t> second = prompt_ids(7, vocab, 29);
  amc::SparseConfig config;
  config.block_size = 8;
  config.top_k = 2;
  config.sinks = 1;
  config.window = 16;
  for (const auto kv_dtype : {amc::StorageType::bf16, amc::StorageType::f32}) {
    for (const bool sparse : {false, true}) {
      SessionOptions o = sparse ? sparse_options(config, 2) : SessionOptions{};
      o.kv_dtype = kv_dtype;
      o.retained_mass = sparse;
      INFO((sparse ? "sparse" : "dense") << ", kv " << amc::to_string(kv_dtype));
      std::vector<float> logits(static_cast<std::size_t>(vocab));

      Session shared(checkpoint, o);
      shared.prefill(prompt, logits);
      decode_all(shared, first);
      // Back to the prefix, then a different continuation.
      shared.truncate(61);
      CHECK(shared.positions() == 61);
      if (sparse) CHECK(shared.cache().summaries(1, 1)->positions() == 61);
      const std::vector<float> after_truncate = decode_all(shared, second);
      // Into the middle of what was decoded: keep the prefix and two tokens of `second`.
      shared.truncate(63);
      const std::vector<float> after_second_truncate = decode_all(shared, first);

      Session fresh(checkpoint, o);
      fresh.prefill(prompt, logits);
      CHECK(decode_all(fresh, second) == after_truncate);
      Session fresh2(checkpoint, o);
      fresh2.prefill(prompt, logits);
      decode_all(fresh2, {second[0], second[1]});
      CHECK(decode_all(fresh2, first) == after_second_truncate);
    }
  }
}

TEST_CASE("set_decode switches decode attention without a new prefill", "[qwen2]") {
  TempDir dir("set_decode");
  write_synthetic_checkpoint(dir.path(), amc::qwen2::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const std::vector<std::int32_t> prompt = prompt_ids(75, vocab, 31);
  const std::vector<std::int32_t> tokens = prompt_ids(6, vocab, 37);
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  amc::SparseConfig mean;
  mean.block_size = 8;
  mean.top_k = 2;
  mean.window = 16;
  amc::SparseConfig bound = mean;
  bound.score = amc::ScoreRule::channel_bound;
  bound.block_size = 4;

  auto reference = [&](const SessionOptions& o) {
    Session s(checkpoint, o);
    s.prefill(prompt, logits);
    std::vector<float> steps = decode_all(s, tokens);
    return std::pair(steps, s.decode(tokens[0], logits).retained_mass);
  };
  auto switched = [&](const SessionOptions& start, const SessionOptions& target) {
    Session s(checkpoint, start);
    s.prefill(prompt, logits);
    s.set_decode(target.attention, target.sparse, target.retained_mass);
    CHECK(s.options().attention == target.attention);
    CHECK(s.options().retained_mass == target.retained_mass);
    std::vector<float> steps = decode_all(s, tokens);
    return std::pair(steps, s.decode(tokens[0], logits).retained_mass);
  };
  SessionOptions dense;
  SessionOptions sparse_mean = sparse_options(mean);
  sparse_mean.retained_mass = true;
  SessionOptions sparse_bound = sparse_options(bound);
  // Dense to sparse (the cache had no summaries: built from the cache), sparse to dense, mean
  // to channel bound (another block size and channel bounds: rebuilt), each bitwise what a
  // session created with the target options computes.
  CHECK(switched(dense, sparse_mean) == reference(sparse_mean));
  CHECK(switched(sparse_mean, dense) == reference(dense));
  CHECK(switched(sparse_mean, sparse_bound) == reference(sparse_bound));

  Session s(checkpoint, sparse_mean);
  s.prefill(prompt, logits);
  REQUIRE_THROWS_WITH(s.truncate(76), AMC_CONTAINS("amc::qwen2::Session::truncate"));
  REQUIRE_THROWS_WITH(s.truncate(76), AMC_CONTAINS("positions must lie in [0, 75]"));
  REQUIRE_THROWS_WITH(s.truncate(-1), AMC_CONTAINS("got -1"));
  amc::SparseConfig bad = mean;
  bad.block_size = 0;
  REQUIRE_THROWS_WITH(s.set_decode(AttentionMode::sparse, bad, false),
                      AMC_CONTAINS("block_size must be positive, got 0"));
  // A refused switch changes nothing.
  CHECK(s.options().sparse.block_size == 8);
  CHECK(s.options().retained_mass);
  CHECK(s.positions() == 75);
  s.truncate(0);
  CHECK(s.positions() == 0);
}

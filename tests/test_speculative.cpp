// Self-speculative decoding (generate.hpp, Speculation) and its verify pass (Session::verify) on
// tiny synthetic checkpoints of every family: the verify pass's logits are one-token decode's
// bit for bit, whatever the number of positions and threads, and speculative generation's tokens
// and logits are dense greedy decoding's, with drafts that are all kept, rejected where the
// draft itself goes wrong, and rejected by force at the first, a middle and the last drafted
// position.
#include <amc/amc.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "catch.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/generate.hpp"
#include "transformer/model.hpp"
#include "transformer_test_support.hpp"

// Tokens per generation and prompts per family: 128 and 3; fewer where every operation is
// slower and only repeats the same code (under the sanitizers and the aarch64 emulator:
// tests/CMakeLists.txt).
#ifdef AMC_TEST_SPECULATIVE_REDUCED
constexpr std::int64_t kTokens = 32;
constexpr std::uint64_t kPromptSeeds[] = {3u};
#else
constexpr std::int64_t kTokens = 128;
constexpr std::uint64_t kPromptSeeds[] = {3u, 9u, 27u};
#endif

namespace {

using namespace amc::transformer;
using amc::transformer::test::prompt_ids;
using amc::transformer::test::TempDir;

/// Bitwise equality of two float arrays (NaN payloads included; == would say NaN != NaN and
/// -0 == 0).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// A small support, so that drafts go wrong on a random model: one block of 8 besides a sink
/// and a window of 4.
amc::SparseConfig small_support() {
  amc::SparseConfig config;
  config.block_size = 8;
  config.top_k = 1;
  config.sinks = 1;
  config.window = 4;
  return config;
}

/// A support that covers every position of these contexts: sparse decode is dense decode.
amc::SparseConfig covering_support() {
  amc::SparseConfig config;
  config.block_size = 8;
  config.top_k = 1000;
  config.sinks = 0;
  config.window = 0;
  return config;
}

struct Run {
  std::vector<std::int32_t> tokens;
  std::vector<float> logits;
  GenerationResult result;
};

Run run(const Checkpoint& checkpoint, const SessionOptions& session_options,
        const std::vector<std::int32_t>& prompt, std::int64_t tokens,
        const Speculation* speculation = nullptr) {
  Session session(checkpoint, session_options);
  GenerationOptions g;
  g.max_tokens = tokens;
  g.keep_logits = true;
  if (speculation != nullptr) {
    g.decoding = Decoding::speculative;
    g.speculation = *speculation;
  }
  Run r;
  r.result = generate(session, prompt, g);
  for (const GeneratedToken& t : r.result.tokens) r.tokens.push_back(t.token);
  r.logits = r.result.logits;
  return r;
}

SessionOptions with(amc::SparseConfig config, int threads,
                    amc::StorageType kv = amc::StorageType::bf16) {
  SessionOptions o;
  o.attention = config;
  o.threads = threads;
  o.kv_dtype = kv;
  return o;
}

const char* family_name(Architecture a) {
  return a == Architecture::llama ? "llama" : a == Architecture::qwen2 ? "qwen2" : "qwen3";
}

}  // namespace

TEST_CASE("the verify pass's logits are one-token dense decode's, bit for bit", "[speculative]") {
  struct Shape {
    std::string name;
    SynthSpec spec;
  };
  std::vector<Shape> shapes;
  for (const Architecture family :
       {Architecture::qwen2, Architecture::qwen3, Architecture::llama}) {
    for (const amc::StorageType weights : {amc::StorageType::f32, amc::StorageType::bf16}) {
      shapes.push_back(
          {std::string(family_name(family)) + ", weights " + std::string(amc::to_string(weights)),
           amc::transformer::test::family_spec(family, weights, 31)});
    }
  }
  // head_dim 64 (the SIMD tables' own attention kernels), groups of 3, and a q8_0 cache.
  shapes.push_back(
      {"wide qwen2, bf16 weights", amc::transformer::test::wide_spec(amc::StorageType::bf16, 37)});
  for (const Shape& shape : shapes) {
    {
      TempDir dir("verify");
      write_synthetic_checkpoint(dir.path(), shape.spec);
      const Checkpoint checkpoint = Checkpoint::load(dir.path());
      const std::int64_t vocab = checkpoint.config().vocab_size;
      // 70 + 9 positions: the shared rows of the verify's attention end at 64, past two chunks.
      const std::vector<std::int32_t> prompt = prompt_ids(70, vocab, 5);
      const std::vector<std::int32_t> tokens = prompt_ids(9, vocab, 41);
      const bool q8_possible = checkpoint.config().head_dim % 32 == 0;
      for (const std::string kv_name : {"bf16", "f32", "q8_0"}) {
        if (kv_name == "q8_0" && !q8_possible) continue;
        const amc::StorageType kv =
            kv_name == "bf16" ? amc::StorageType::bf16 : amc::StorageType::f32;
        for (const int threads : {1, 2}) {
          SessionOptions o;
          o.kv_dtype = kv;
          if (kv_name == "q8_0") o.kv_quantization = KvQuantization::q8_0;
          o.threads = threads;
          INFO(shape.name << ", kv " << kv_name << ", threads " << threads);
          std::vector<float> first(static_cast<std::size_t>(vocab));
          // One position at a time, through decode().
          Session stepwise(checkpoint, o);
          stepwise.prefill(prompt, first);
          std::vector<float> expected, step(static_cast<std::size_t>(vocab));
          for (const std::int32_t t : tokens) {
            stepwise.decode(t, step);
            expected.insert(expected.end(), step.begin(), step.end());
          }
          // The same positions in verify passes of 1, 3 and 5 positions (9 = 1 + 3 + 5), on a
          // sparse session (verify is dense whatever the session's decode attention).
          SessionOptions sparse_session = with(small_support(), threads, kv);
          sparse_session.kv_quantization = o.kv_quantization;
          Session batched(checkpoint, sparse_session);
          batched.prefill(prompt, first);
          std::vector<float> got;
          std::size_t at = 0;
          for (const std::size_t n : {1u, 3u, 5u}) {
            std::vector<float> logits(n * static_cast<std::size_t>(vocab));
            batched.verify(std::span(tokens).subspan(at, n), logits);
            got.insert(got.end(), logits.begin(), logits.end());
            at += n;
          }
          CHECK(batched.positions() == stepwise.positions());
          CHECK(same_bits(got, expected));
          // The keys and values the verify passes wrote are decode's: the next step agrees.
          std::vector<float> a(static_cast<std::size_t>(vocab)), b(a.size());
          stepwise.decode(7, a);
          batched.set_decode(DenseAttention{}, false);
          batched.decode(7, b);
          CHECK(same_bits(a, b));
        }
      }
    }
  }
}

TEST_CASE("speculative tokens and logits are dense decoding's", "[speculative]") {
  for (const Architecture family :
       {Architecture::qwen2, Architecture::qwen3, Architecture::llama}) {
    TempDir dir(std::string("speculative_") + family_name(family));
    write_synthetic_checkpoint(
        dir.path(), amc::transformer::test::family_spec(family, amc::StorageType::bf16, 43));
    const Checkpoint checkpoint = Checkpoint::load(dir.path());
    const std::int64_t vocab = checkpoint.config().vocab_size;
    std::int64_t rejected = 0;  // drafts the verify passes rejected, over every run
    for (const std::uint64_t seed : kPromptSeeds) {
      const std::vector<std::int32_t> prompt = prompt_ids(29 + static_cast<int>(seed), vocab, seed);
      for (const amc::StorageType kv : {amc::StorageType::bf16, amc::StorageType::f32}) {
        SessionOptions dense_options;
        dense_options.kv_dtype = kv;
        const Run dense = run(checkpoint, dense_options, prompt, kTokens);
        for (const int threads : {1, 2}) {
          for (const std::int64_t draft : {1, 4, 7}) {
            INFO(family_name(family) << ", prompt seed " << seed << ", kv " << amc::to_string(kv)
                                     << ", threads " << threads << ", draft " << draft);
            Speculation speculation;
            speculation.draft_tokens = draft;
            const Run got =
                run(checkpoint, with(small_support(), threads, kv), prompt, kTokens, &speculation);
            REQUIRE(got.tokens.size() == static_cast<std::size_t>(kTokens));
            CHECK(got.tokens == dense.tokens);
            CHECK(same_bits(got.logits, dense.logits));
            CHECK(got.result.decode_steps == kTokens - 1);
            CHECK(got.result.accepted_drafts + got.result.verify_passes == kTokens - 1);
            CHECK(got.result.draft_steps >= got.result.accepted_drafts);
            rejected += got.result.draft_steps - got.result.accepted_drafts;
          }
        }
      }
    }
    // The small support's drafts do go wrong on this model over 3 prompts of 128 tokens: the
    // verify passes had work to do (the reduced run may see none; the forced rejections below
    // cover it there).
    INFO(family_name(family));
#ifndef AMC_TEST_SPECULATIVE_REDUCED
    CHECK(rejected > 0);
#else
    (void)rejected;
#endif
  }
}

TEST_CASE("drafts that dense decoding would write are all kept", "[speculative]") {
  TempDir dir("speculative_covering");
  write_synthetic_checkpoint(dir.path(), amc::transformer::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::vector<std::int32_t> prompt = prompt_ids(40, checkpoint.config().vocab_size, 13);
  const Run dense = run(checkpoint, SessionOptions{}, prompt, 41);
  Speculation speculation;
  speculation.draft_tokens = 4;
  const Run got = run(checkpoint, with(covering_support(), 2), prompt, 41, &speculation);
  CHECK(got.tokens == dense.tokens);
  CHECK(same_bits(got.logits, dense.logits));
  // 40 tokens after the prefill's in cycles of 4 drafts + 1: every draft kept.
  CHECK(got.result.verify_passes == 8);
  CHECK(got.result.accepted_drafts == 32);
  CHECK(got.result.draft_steps == 32);
  CHECK(got.result.tokens_per_verify() == 5.0);
}

TEST_CASE("rejections forced at the first, a middle and the last drafted position",
          "[speculative]") {
  TempDir dir("speculative_forced");
  write_synthetic_checkpoint(dir.path(), amc::transformer::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const std::vector<std::int32_t> prompt = prompt_ids(40, vocab, 19);
  const Run dense = run(checkpoint, SessionOptions{}, prompt, kTokens);
  constexpr std::int64_t kDraft = 5;
  for (const std::size_t wrong : {std::size_t{0}, std::size_t{2}, std::size_t{4}}) {
    for (const int threads : {1, 2}) {
      INFO("draft position " << wrong << " made wrong, threads " << threads);
      Speculation speculation;
      speculation.draft_tokens = kDraft;
      std::int64_t edited = 0;
      // The covering support drafts dense decoding's tokens; one made wrong at `wrong` in every
      // full cycle must be rejected there, and dense decoding's token taken instead.
      speculation.edit_draft = [&](std::span<std::int32_t> draft) {
        if (draft.size() <= wrong) return;
        draft[wrong] = static_cast<std::int32_t>((draft[wrong] + 1) % vocab);
        ++edited;
      };
      const Run got =
          run(checkpoint, with(covering_support(), threads), prompt, kTokens, &speculation);
      CHECK(got.tokens == dense.tokens);
      CHECK(same_bits(got.logits, dense.logits));
      CHECK(edited > 0);
      // Every edited cycle keeps exactly the drafts before the wrong one.
      CHECK(got.result.accepted_drafts <= (got.result.verify_passes - edited) * kDraft +
                                              edited * static_cast<std::int64_t>(wrong));
      CHECK(got.result.verify_passes >= (kTokens - 1) / static_cast<std::int64_t>(wrong + 1));
    }
  }
}

TEST_CASE("a draft length of 0 is dense decoding, one verified position per step",
          "[speculative]") {
  TempDir dir("speculative_zero");
  write_synthetic_checkpoint(dir.path(), amc::transformer::test::wide_spec(amc::StorageType::f32));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::vector<std::int32_t> prompt = prompt_ids(33, checkpoint.config().vocab_size, 23);
  SessionOptions dense_options;
  dense_options.threads = 2;
  const Run dense = run(checkpoint, dense_options, prompt, 64);
  Speculation speculation;
  speculation.draft_tokens = 0;
  // Draft length 0 needs no sparse attention: the session may be dense.
  for (const SessionOptions& o : {dense_options, with(small_support(), 2, amc::StorageType::f32)}) {
    const Run got = run(checkpoint, o, prompt, 64, &speculation);
    CHECK(got.tokens == dense.tokens);
    CHECK(same_bits(got.logits, dense.logits));
    CHECK(got.result.verify_passes == 63);
    CHECK(got.result.draft_steps == 0);
  }
}

TEST_CASE("the adaptive draft length stops at a small draft margin, and tokens stay dense",
          "[speculative]") {
  TempDir dir("speculative_margin");
  write_synthetic_checkpoint(dir.path(), amc::transformer::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::vector<std::int32_t> prompt = prompt_ids(50, checkpoint.config().vocab_size, 7);
  const Run dense = run(checkpoint, SessionOptions{}, prompt, 96);
  Speculation fixed;
  fixed.draft_tokens = 6;
  Speculation adaptive = fixed;
  adaptive.min_draft_margin = 1e30f;  // every draft's margin is below it: one draft per cycle
  const Run a = run(checkpoint, with(small_support(), 1), prompt, 96, &fixed);
  const Run b = run(checkpoint, with(small_support(), 1), prompt, 96, &adaptive);
  CHECK(a.tokens == dense.tokens);
  CHECK(b.tokens == dense.tokens);
  CHECK(same_bits(b.logits, dense.logits));
  // One draft per cycle, but none in a last cycle that has room for one token only.
  CHECK(b.result.draft_steps <= b.result.verify_passes);
  CHECK(b.result.draft_steps >= b.result.verify_passes - 1);
  CHECK(a.result.draft_steps > a.result.verify_passes);
}

TEST_CASE("speculation stops at the stop token and at max_tokens", "[speculative]") {
  TempDir dir("speculative_stop");
  write_synthetic_checkpoint(dir.path(), amc::transformer::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::vector<std::int32_t> prompt = prompt_ids(30, checkpoint.config().vocab_size, 11);
  const Run dense = run(checkpoint, SessionOptions{}, prompt, 40);
  const std::int32_t stop = dense.tokens[17];
  std::size_t first_stop = 0;
  while (dense.tokens[first_stop] != stop) ++first_stop;
  for (const std::int64_t max_tokens : {1, 2, 3, 7, 40}) {
    for (const std::int64_t draft : {1, 3, 6}) {
      INFO("max_tokens " << max_tokens << ", draft " << draft);
      Session session(checkpoint, with(covering_support(), 1));
      GenerationOptions g;
      g.max_tokens = max_tokens;
      g.stop_token = stop;
      g.decoding = Decoding::speculative;
      g.speculation.draft_tokens = draft;
      const GenerationResult r = generate(session, prompt, g);
      const std::size_t expected = std::min<std::size_t>(max_tokens, first_stop + 1);
      REQUIRE(r.tokens.size() == expected);
      for (std::size_t i = 0; i < expected; ++i) CHECK(r.tokens[i].token == dense.tokens[i]);
    }
  }
}

TEST_CASE("speculation and verify refuse what they cannot do", "[speculative]") {
  TempDir dir("speculative_errors");
  write_synthetic_checkpoint(dir.path(), amc::transformer::test::tiny_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const std::vector<std::int32_t> prompt = prompt_ids(12, vocab, 3);
  const auto refuses = [&](const SessionOptions& o, const Speculation& s, const std::string& what) {
    Session session(checkpoint, o);
    GenerationOptions g;
    g.max_tokens = 4;
    g.decoding = Decoding::speculative;
    g.speculation = s;
    CHECK_THROWS_WITH(generate(session, prompt, g), Catch::Matchers::Contains(what));
    CHECK(session.positions() == 0);  // refused before the prefill
  };
  Speculation drafting;
  drafting.draft_tokens = 3;
  refuses(SessionOptions{}, drafting, "decode attention is dense");
  SessionOptions mass = with(small_support(), 1);
  mass.retained_mass = true;
  refuses(mass, drafting, "retained_mass");
  Speculation negative;
  negative.draft_tokens = -1;
  refuses(with(small_support(), 1), negative, "draft_tokens must be >= 0, got -1");
  Speculation nan_margin = drafting;
  nan_margin.min_draft_margin = std::numeric_limits<float>::quiet_NaN();
  refuses(with(small_support(), 1), nan_margin, "min_draft_margin");

  Session session(checkpoint, SessionOptions{});
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  session.prefill(prompt, logits);
  const std::vector<std::int32_t> two{1, 2};
  std::vector<float> one_row(static_cast<std::size_t>(vocab));
  CHECK_THROWS_WITH(session.verify(two, one_row),
                    Catch::Matchers::Contains("amc::transformer::Session::verify") &&
                        Catch::Matchers::Contains("expected " + std::to_string(2 * vocab)));
  CHECK_THROWS_WITH(session.verify({}, one_row), Catch::Matchers::Contains("tokens is empty"));
  const std::vector<std::int32_t> outside{1, static_cast<std::int32_t>(vocab)};
  std::vector<float> two_rows(2 * static_cast<std::size_t>(vocab));
  CHECK_THROWS_WITH(session.verify(outside, two_rows),
                    Catch::Matchers::Contains("token id " + std::to_string(vocab) + " at index 1"));
  CHECK(session.positions() == 12);  // nothing appended by a refused call
}

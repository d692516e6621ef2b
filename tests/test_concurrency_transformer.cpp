// Thread safety of the Qwen2 reference transformer: one checkpoint (memory-mapped, read-only)
// shared by sessions generating in several threads at once, each session with a pool of its
// own; every run equals the single-threaded one bitwise. Part of test_concurrency (TSan too).
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/generate.hpp"
#include "transformer/model.hpp"
#include "transformer_test_support.hpp"

namespace {

using namespace amc::transformer;

struct Run {
  std::vector<std::int32_t> tokens;
  std::vector<float> logits;
  bool operator==(const Run&) const = default;
};

Run greedy(const Checkpoint& checkpoint, const SessionOptions& options,
           const std::vector<std::int32_t>& prompt) {
  Session session(checkpoint, options);
  GenerationOptions g;
  g.max_tokens = 6;
  g.keep_logits = true;
  const GenerationResult r = generate(session, prompt, g);
  Run run;
  for (const GeneratedToken& t : r.tokens) run.tokens.push_back(t.token);
  run.logits = r.logits;
  return run;
}

}  // namespace

TEST_CASE("Qwen2 sessions generate in several threads at once, each with its own pool",
          "[threads][qwen2]") {
  amc::transformer::test::TempDir dir("concurrency");
  write_synthetic_checkpoint(dir.path(), amc::transformer::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  std::vector<std::int32_t> prompt;
  for (std::int32_t i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 300);

  std::vector<SessionOptions> variants(3);
  amc::SparseConfig sparse;
  sparse.block_size = 8;
  sparse.top_k = 2;
  sparse.window = 8;
  variants[1].attention = sparse;
  sparse.scope = amc::SelectionScope::per_group;
  variants[2] = variants[1];
  variants[2].attention = sparse;
  variants[2].retained_mass = true;  // dense and sparse passes share the parallel sections
  variants[2].kv_dtype = amc::StorageType::f32;

  std::vector<Run> expected;
  for (const SessionOptions& o : variants) expected.push_back(greedy(checkpoint, o, prompt));

  constexpr int kCallers = 3;
  std::vector<std::vector<Run>> got(kCallers);
  std::vector<std::thread> threads;
  for (int t = 0; t < kCallers; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t v = 0; v < variants.size(); ++v) {
        SessionOptions o = variants[(v + static_cast<std::size_t>(t)) % variants.size()];
        o.threads = 2;
        got[static_cast<std::size_t>(t)].push_back(greedy(checkpoint, o, prompt));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kCallers; ++t) {
    for (std::size_t v = 0; v < variants.size(); ++v) {
      CAPTURE(t, v);
      REQUIRE(got[static_cast<std::size_t>(t)][v] ==
              expected[(v + static_cast<std::size_t>(t)) % variants.size()]);
    }
  }
}

// amc-eval's parts against independent references: support-size mapping, id parsing, medians,
// runs.jsonl handling, the layer probe against quantities recomputed in double from the cache
// (amc::analyse_omission, block masses summed position by position), and the paired runner
// against fresh sessions that decode without truncation.
#include <amc/amc.hpp>
#include <amc/math/omitted_mass.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <vector>

#include "catch.hpp"
#include "documents.hpp"
#include "layer_probe.hpp"
#include "paired_run.hpp"
#include "run_log.hpp"
#include "summary.hpp"
#include "support_sizes.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/generate.hpp"
#include "transformer_test_support.hpp"

namespace {

using namespace amc::eval;
using amc::transformer::Checkpoint;
using amc::transformer::test::prompt_ids;
using amc::transformer::test::TempDir;

}  // namespace

TEST_CASE("support sizes map to whole blocks or are refused naming the nearest", "[eval]") {
  const std::vector<SupportSize> study = map_supports({97, 193, 385, 769}, 16, 1, 64);
  REQUIRE(study.size() == 4);
  CHECK(study[0].k == 2);
  CHECK(study[1].k == 8);
  CHECK(study[2].k == 20);
  CHECK(study[3].k == 44);
  CHECK(map_supports({65}, 16, 1, 64)[0].k == 0);
  CHECK(map_supports({100}, 32, 4, 64)[0].k == 1);
  REQUIRE_THROWS_WITH(map_supports({97, 100}, 16, 1, 64),
                      "--supports 100 does not map to whole blocks (block size 16, sinks 1, "
                      "window 64): nearest valid sizes are 97 and 113");
  REQUIRE_THROWS_WITH(map_supports({64}, 16, 1, 64), AMC_CONTAINS("the smallest valid size is 65"));
  REQUIRE_THROWS_WITH(map_supports({97}, 0, 1, 64), AMC_CONTAINS("--block-size must be positive"));
}

TEST_CASE("id files: whitespace and commas separate ids; a bad entry names file, line, column",
          "[eval]") {
  CHECK(parse_id_text("1, 2\n 3,4\t5 ,, 6\r\n", "f", 10) ==
        std::vector<std::int32_t>{1, 2, 3, 4, 5, 6});
  CHECK(parse_id_text("", "f", 10).empty());
  REQUIRE_THROWS_WITH(parse_id_text("1 2\n  x3", "d.ids", 10),
                      AMC_CONTAINS("d.ids:2:3: 'x3' is not a decimal token id"));
  REQUIRE_THROWS_WITH(parse_id_text("1 -2", "d.ids", 10), AMC_CONTAINS("d.ids:1:3: '-2'"));
  REQUIRE_THROWS_WITH(parse_id_text("9 10", "d.ids", 10),
                      AMC_CONTAINS("d.ids:1:3: id 10 is outside the model's vocabulary [0, 10)"));
  REQUIRE_THROWS_WITH(parse_id_text("99999999999", "d.ids", 10),
                      AMC_CONTAINS("is not a decimal token id"));

  std::vector<Document> documents{
      {"a", prompt_ids(100, 10, 1)}, {"b", prompt_ids(30, 10, 2)}, {"c", prompt_ids(200, 10, 3)}};
  const std::vector<ContextPlan> plans = plan_prefixes(documents, {50, 150}, 5);
  CHECK(plans[0].documents == std::vector<std::size_t>{0, 2});
  CHECK(plans[0].skipped == 1);
  CHECK(plans[1].documents == std::vector<std::size_t>{2});
  CHECK(plan_prefixes(documents, {20}, 2)[0].documents == std::vector<std::size_t>{0, 1});
  REQUIRE_THROWS_WITH(plan_prefixes(documents, {50, 201}, 5),
                      AMC_CONTAINS("--contexts 201: no document has 201 tokens (the longest has "
                                   "200)"));
}

TEST_CASE("medians of odd and even counts", "[eval]") {
  CHECK(median({3.0}) == 3.0);
  CHECK(median({5.0, 1.0, 3.0}) == 3.0);
  CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
}

TEST_CASE("runs.jsonl: a partial last line is dropped, damage and other settings refused",
          "[eval]") {
  TempDir dir("eval_runlog");
  const Json settings{{"tokens", 8}, {"window", 64}};
  auto record = [&](std::int64_t support) {
    return Json{{"context", 64}, {"prefix", 0}, {"support", support}, {"settings", settings}};
  };
  {
    RunLog log(dir.path(), settings, false);
    log.append(record(65));
    log.append(record(81));
  }
  const std::filesystem::path runs = dir / "runs.jsonl";
  REQUIRE_THROWS_WITH(RunLog(dir.path(), settings, false), AMC_CONTAINS("pass --resume"));
  std::ofstream(runs, std::ios::app) << R"({"context":64,"prefix":0,"supp)";
  CHECK(read_run_file(runs).records.size() == 2);
  CHECK(read_run_file(runs).partial_bytes == 30);
  {
    RunLog log(dir.path(), settings, true);
    CHECK(log.has(64, 0, 81));
    CHECK(!log.has(64, 1, 81));
    CHECK(log.dropped_partial_bytes() == 30);
    log.append(record(97));
  }
  const RunFile file = read_run_file(runs);
  CHECK(file.records.size() == 3);
  CHECK(file.partial_bytes == 0);
  const Json other{{"tokens", 8}, {"window", 48}};
  REQUIRE_THROWS_WITH(RunLog(dir.path(), other, true),
                      AMC_CONTAINS("was recorded with window = 64 but this run has window = 48"));
  std::ofstream(runs, std::ios::app) << "not json\n" << record(129).dump() << "\n";
  REQUIRE_THROWS_WITH(read_run_file(runs), AMC_CONTAINS("runs.jsonl:4: not a run record"));
}

namespace {

/// In double, from the cache: per query head the retained mass and error norm of the support
/// the step used (amc::analyse_omission) and its recall against the top-k blocks by true mass.
struct Independent {
  std::vector<double> mass, error, recall;  // [layers * heads] sums over steps
  std::int64_t steps = 0;
};

void recompute(const amc::transformer::LayerAttention& a, const amc::transformer::KvCache& cache,
               const amc::SparseConfig& config, std::int64_t heads, Independent& out) {
  const std::int64_t d = cache.head_dim();
  const std::int64_t n = a.positions;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  if (a.layer == 0) ++out.steps;
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t g = h / a.group, j = h % a.group;
    const auto view = cache.view<float>(a.layer, g, n);
    Eigen::VectorXf scores(n);
    amc::RowMatrix values(n, d);
    for (std::int64_t p = 0; p < n; ++p) {
      double s = 0.0;
      for (std::int64_t c = 0; c < d; ++c) {
        s += static_cast<double>(a.queries[h * d + c]) * view.key(p)[c];
        values(p, c) = view.value(p)[c];
      }
      scores[p] = static_cast<float>(s * scale);
    }
    const auto& op = a.sparse_operators[static_cast<std::size_t>(g)];
    const amc::OmissionAnalysis x = amc::analyse_omission(
        scores, values, op.support(j), Eigen::Map<const Eigen::VectorXf>(a.dense_output + h * d, d),
        Eigen::Map<const Eigen::VectorXf>(a.output + h * d, d));
    // The error norm is what the identity says: eps * ||mu_O - o_S||, to f32 rounding.
    CHECK(x.relative_identity_residual < 1e-4);
    const auto i = static_cast<std::size_t>(a.layer * heads + h);
    out.mass[i] += x.retained_mass;
    out.error[i] += x.error_norm;
    // Candidate blocks: those with a position outside the sinks and the window.
    const std::int64_t kept_prefix = std::min(config.sinks, n);
    const std::int64_t kept_end = std::max(n - config.window, kept_prefix);
    std::vector<std::pair<double, std::int64_t>> blocks;  // (-mass, block)
    for (std::int64_t b = 0; b * config.block_size < n; ++b) {
      double mass = 0.0;
      bool candidate = false;
      for (std::int64_t p = b * config.block_size; p < std::min((b + 1) * config.block_size, n);
           ++p) {
        if (p >= kept_prefix && p < kept_end) {
          mass += std::exp(static_cast<double>(scores[p]));
          candidate = true;
        }
      }
      if (candidate) blocks.emplace_back(-mass, b);
    }
    std::sort(blocks.begin(), blocks.end());
    const auto k = std::min<std::size_t>(static_cast<std::size_t>(config.top_k), blocks.size());
    std::size_t hits = 0;
    for (std::size_t r = 0; r < k; ++r) {
      const auto chosen = op.selected_blocks(j);
      hits += std::count(chosen.begin(), chosen.end(), blocks[r].second);
    }
    out.recall[i] += k == 0 ? 1.0 : static_cast<double>(hits) / static_cast<double>(k);
  }
}

}  // namespace

TEST_CASE("the layer probe's mass, error norm and recall match a double recomputation", "[eval]") {
  TempDir dir("eval_probe");
  amc::transformer::write_synthetic_checkpoint(
      dir.path(), amc::transformer::test::wide_spec(amc::StorageType::f32));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const amc::transformer::Config& cfg = checkpoint.config();
  const std::int64_t cells = cfg.num_hidden_layers * cfg.num_attention_heads;
  for (const auto scope : {amc::SelectionScope::per_head, amc::SelectionScope::per_group}) {
    for (const auto score : {amc::RuleName::mean_pooled, amc::RuleName::channel_bound}) {
      amc::SparseConfig config;
      config.block_size = 4;
      config.top_k = 3;
      config.sinks = 1;
      config.window = 8;
      config.scope = scope;
      config.rule = score;
      INFO("scope " << amc::to_string(scope) << ", score " << amc::to_string(score));
      LayerProbe probe(cfg, config);
      Independent reference{std::vector<double>(static_cast<std::size_t>(cells), 0.0),
                            std::vector<double>(static_cast<std::size_t>(cells), 0.0),
                            std::vector<double>(static_cast<std::size_t>(cells), 0.0)};
      amc::transformer::SessionOptions o;
      o.attention = config;
      o.retained_mass = true;
      o.kv_dtype = amc::StorageType::f32;
      amc::transformer::Session* session = nullptr;
      o.on_layer = [&](const amc::transformer::LayerAttention& a) {
        probe.observe(a, session->cache());
        recompute(a, session->cache(), config, cfg.num_attention_heads, reference);
      };
      amc::transformer::Session s(checkpoint, o);
      session = &s;
      std::vector<float> logits(static_cast<std::size_t>(cfg.vocab_size));
      s.prefill(prompt_ids(80, cfg.vocab_size, 5), logits);
      for (const std::int32_t t : prompt_ids(4, cfg.vocab_size, 6)) s.decode(t, logits);
      const HeadStatistics& stats = probe.statistics();
      CHECK(stats.steps == 4);
      CHECK(reference.steps == 4);
      double recall_total = 0.0;
      for (std::size_t i = 0; i < static_cast<std::size_t>(cells); ++i) {
        CHECK(stats.count[i] == 4);
        CHECK(std::abs(stats.mass_sum[i] - reference.mass[i]) < 4e-5);
        CHECK(std::abs(stats.error_sum[i] - reference.error[i]) <= 1e-6 * (1 + reference.error[i]));
        CHECK(stats.recall_sum[i] == Approx(reference.recall[i]).margin(1e-12));
        CHECK(stats.mass_min[i] <= stats.mass_sum[i] / 4 + 1e-12);
        recall_total += stats.recall_sum[i];
      }
      // Mean pooling and the channel bound miss some of the oracle's blocks on these weights:
      // recall below 1 shows the comparison is not vacuous.
      CHECK(recall_total < 4.0 * static_cast<double>(cells));
    }
  }
}

TEST_CASE("the paired runner equals fresh sessions decoding without truncation", "[eval]") {
  TempDir dir("eval_runner");
  amc::transformer::write_synthetic_checkpoint(
      dir.path(), amc::transformer::test::wide_spec(amc::StorageType::bf16));
  const Checkpoint checkpoint = Checkpoint::load(dir.path());
  const std::int64_t vocab = checkpoint.config().vocab_size;
  const std::vector<std::int32_t> prefix = prompt_ids(200, vocab, 9);
  const std::int64_t T = 16;
  PairedRunOptions options;
  options.sparse.block_size = 8;
  options.sparse.sinks = 1;
  options.sparse.window = 8;
  options.threads = 2;
  PairedRunner runner(checkpoint, options);
  const DenseReference reference = runner.reference(prefix, T);

  // The dense reference is amc-generate's greedy generation.
  amc::transformer::GenerationOptions g;
  g.max_tokens = T;
  {
    amc::transformer::Session dense(checkpoint);
    const amc::transformer::GenerationResult r = amc::transformer::generate(dense, prefix, g);
    for (std::int64_t t = 0; t < T; ++t) CHECK(r.tokens[t].token == reference.tokens[t]);
  }
  bool diverged = false;
  for (const std::int64_t k : {0, 1, 3, 20}) {
    INFO("k " << k);
    const SupportRun run = runner.run(k, reference);
    amc::SparseConfig config = options.sparse;
    config.top_k = k;
    amc::transformer::SessionOptions o;
    o.attention = config;
    // Free-running sparse generation from a fresh prefill.
    amc::transformer::Session sparse(checkpoint, o);
    const amc::transformer::GenerationResult r = amc::transformer::generate(sparse, prefix, g);
    REQUIRE(run.tokens.size() == static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) CHECK(r.tokens[t].token == run.tokens[t]);
    std::int64_t first = T;
    for (std::int64_t t = 0; t < T && first == T; ++t) {
      if (run.tokens[t] != reference.tokens[t]) first = t;
    }
    CHECK(run.first_divergence == first);
    diverged = diverged || first < T;
    // Teacher forcing from a fresh prefill.
    amc::transformer::Session forced(checkpoint, o);
    std::vector<float> logits(static_cast<std::size_t>(vocab));
    forced.prefill(prefix, logits);
    for (std::int64_t t = 1; t < T; ++t) {
      forced.decode(reference.tokens[t - 1], logits);
      const auto top = std::max_element(logits.begin(), logits.end()) - logits.begin();
      CHECK(run.tf_argmax[t] == top);
      double max = -INFINITY, sum = 0.0;
      for (const float x : logits) max = std::max(max, static_cast<double>(x));
      for (const float x : logits) sum += std::exp(x - max);
      CHECK(run.tf_nll[t] ==
            Approx(max + std::log(sum) - logits[reference.tokens[t]]).epsilon(1e-12));
    }
    REQUIRE(run.heads.has_value());
    CHECK(run.heads->steps == T - 1);
  }
  CHECK(diverged);  // at least one support exercised the continuation after a divergence
  // A support covering every position, selected per group, is dense attention bitwise.
  PairedRunOptions group = options;
  group.sparse.scope = amc::SelectionScope::per_group;
  PairedRunner covering(checkpoint, group);
  const DenseReference again = covering.reference(prefix, T);
  CHECK(again.tokens == reference.tokens);
  CHECK(again.nll == reference.nll);
  const SupportRun full = covering.run(100, again);
  CHECK(full.first_divergence == T);
  CHECK(full.tf_nll == again.nll);
  CHECK(full.tokens == again.tokens);
}

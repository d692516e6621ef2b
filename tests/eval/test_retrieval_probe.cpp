// The retrieval probe of amc-eval (tools/eval/retrieval_probe.hpp): the oracle retrieves
// every strong needle, mean pooling loses needles as blocks grow (docs/theory.md section 6), one
// cell recomputed in double with plain loops, the outputs, and refusals that name the flag.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "catch.hpp"
#include "retrieval_command.hpp"
#include "retrieval_probe.hpp"
#include "transformer_test_support.hpp"

namespace {

using amc::RuleName;
using amc::eval::RetrievalProbeOptions;
using amc::eval::RetrievalProbeResult;
using amc::transformer::test::read_file;
using amc::transformer::test::TempDir;

/// Mean hit rate over depths of the rows of one (rule, block size), all else fixed.
double hit_rate(const std::vector<RetrievalProbeResult>& rows, RuleName rule,
                std::int64_t block_size) {
  double sum = 0.0;
  int count = 0;
  for (const auto& r : rows) {
    if (r.rule == rule && r.block_size == block_size) {
      sum += r.hit_rate;
      ++count;
    }
  }
  REQUIRE(count > 0);
  return sum / count;
}

}  // namespace

TEST_CASE("retrieval probe: the oracle retrieves every needle whose score beats all by > ln B") {
  RetrievalProbeOptions options;
  options.contexts = {2048};
  options.block_sizes = {8, 16, 32, 64};
  options.ks = {1, 4};
  options.depths = {0.2, 0.6};
  options.trials = 8;
  options.strength = 5.0;  // > ln 64: the needle's block outweighs any block of 64 distractors
  options.rules = {RuleName::oracle};
  const auto rows = amc::eval::run_retrieval_probe(options);
  REQUIRE(rows.size() == 4 * 2 * 2);
  for (const auto& r : rows) {
    INFO("B " << r.block_size << ", k " << r.k << ", depth " << r.depth);
    CHECK(r.hit_rate == 1.0);
    CHECK(r.mean_rank == 1.0);
    CHECK(r.hits == r.trials);
  }
}

TEST_CASE("retrieval probe: mean pooling dilutes the needle as blocks grow") {
  RetrievalProbeOptions options;
  // A long context and k = 2 keep k blocks a small share of the candidates at every block
  // size; with a large share, coverage alone lifts the hit rate and flattens the curve.
  options.contexts = {8192};
  options.block_sizes = {8, 16, 32, 64};
  options.ks = {2};
  options.trials = 32;  // x 5 depths: 160 needles per block size
  options.strength = 6.0;
  options.rules = {RuleName::mean_pooled};
  const auto rows = amc::eval::run_retrieval_probe(options);
  std::vector<double> rates;
  for (const std::int64_t b : options.block_sizes)
    rates.push_back(hit_rate(rows, RuleName::mean_pooled, b));
  INFO("mean-pooled hit rate at B = 8, 16, 32, 64: " << rates[0] << ", " << rates[1] << ", "
                                                     << rates[2] << ", " << rates[3]);
  // The lift (s_needle - s_rest)/B shrinks as 1/B, the noise of distractor block means only as
  // 1/sqrt(B): fixed seed, paired keys, so the order is deterministic.
  for (std::size_t i = 1; i < rates.size(); ++i) CHECK(rates[i] <= rates[i - 1]);
  CHECK(rates.back() < rates.front() - 0.3);
  // The lift column is docs/theory.md section 6's (s_needle - s_rest)/B: it falls with B.
  double previous_lift = 1e9;
  for (const std::int64_t b : options.block_sizes) {
    double lift = 0.0;
    for (const auto& r : rows)
      if (r.block_size == b) lift += r.needle_lift / static_cast<double>(options.depths.size());
    CHECK(lift < previous_lift);
    previous_lift = lift;
  }
}

TEST_CASE("retrieval probe: one cell against block means and channel bounds in double") {
  RetrievalProbeOptions options;
  options.contexts = {2048};
  options.block_sizes = {16};
  options.ks = {4};
  options.depths = {0.5};
  options.trials = 24;
  options.strength = 3.0;  // moderate: the mean rule both hits and misses
  options.rules = {RuleName::mean_pooled, RuleName::channel_bound};
  const auto rows = amc::eval::run_retrieval_probe(options);
  REQUIRE(rows.size() == 2);

  const std::int64_t n = 2048, d = options.head_dim, block_size = 16, k = 4;
  const std::int64_t position = n / 2;
  REQUIRE(amc::eval::needle_position(n, 0.5) == position);
  // Candidate blocks: those with a position outside the sinks [0, 1) and window [n - 64, n).
  const std::int64_t first = options.sinks / block_size;
  const std::int64_t last = (n - options.window + block_size - 1) / block_size;
  const std::int64_t needle_block = position / block_size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));

  for (const auto& row : rows) {
    int hits = 0, misses = 0, ambiguous = 0;
    for (std::int64_t t = 0; t < options.trials; ++t) {
      auto haystack = amc::eval::make_haystack(options, n, t);
      const double target = amc::eval::place_needle(haystack, position, options.strength);
      std::vector<double> scores(static_cast<std::size_t>(n));
      for (std::int64_t p = 0; p < n; ++p) {
        double s = 0.0;
        for (std::int64_t i = 0; i < d; ++i)
          s += static_cast<double>(haystack.query[i]) * haystack.keys[p * d + i];
        scores[p] = s * scale;
      }
      // The construction: the needle beats every distractor by the strength.
      REQUIRE(scores[position] == Approx(target).margin(1e-4));
      double largest_other = -1e300;
      for (std::int64_t p = 0; p < n; ++p)
        if (p != position) largest_other = std::max(largest_other, scores[p]);
      REQUIRE(scores[position] - largest_other == Approx(options.strength).margin(1e-4));

      std::vector<double> block_scores;  // [last - first]
      for (std::int64_t b = first; b < last; ++b) {
        if (row.rule == RuleName::mean_pooled) {
          double sum = 0.0;
          for (std::int64_t p = b * block_size; p < (b + 1) * block_size; ++p) sum += scores[p];
          block_scores.push_back(sum / block_size);
        } else {
          double bound = 0.0;
          for (std::int64_t i = 0; i < d; ++i) {
            double lo = 1e300, hi = -1e300;
            for (std::int64_t p = b * block_size; p < (b + 1) * block_size; ++p) {
              lo = std::min<double>(lo, haystack.keys[p * d + i]);
              hi = std::max<double>(hi, haystack.keys[p * d + i]);
            }
            const double q = haystack.query[i];
            bound += std::max(q * lo, q * hi);
          }
          block_scores.push_back(bound * scale);
        }
      }
      const double own = block_scores[needle_block - first];
      std::vector<double> others;
      for (std::int64_t b = first; b < last; ++b)
        if (b != needle_block) others.push_back(block_scores[b - first]);
      std::sort(others.begin(), others.end(), std::greater<>());
      const bool expected_hit = own > others[k - 1];  // above the k-th best other block
      // f32 scoring may order blocks closer than its rounding either way: skip those.
      if (std::abs(own - others[k - 1]) < 1e-4) {
        ++ambiguous;
        continue;
      }
      INFO(amc::to_string(row.rule) << " trial " << t);
      CHECK(static_cast<bool>(row.trial_hits[t]) == expected_hit);
      (expected_hit ? hits : misses) += 1;
    }
    INFO(amc::to_string(row.rule) << ": " << hits << " hits, " << misses << " misses, " << ambiguous
                                  << " ambiguous");
    CHECK(ambiguous <= 1);
    if (row.rule == RuleName::mean_pooled) {  // the cell discriminates
      CHECK(hits > 0);
      CHECK(misses > 0);
    }
  }
}

TEST_CASE("retrieval probe: a needle is retrieved exactly when its block ranks within k") {
  RetrievalProbeOptions options;
  options.contexts = {1024};
  options.block_sizes = {8, 32};
  options.ks = {1, 3, 10};
  options.depths = {0.1, 0.4, 0.8};
  options.trials = 1;  // mean_rank is then the rank itself
  options.strength = 2.0;
  const auto rows = amc::eval::run_retrieval_probe(options);
  REQUIRE(rows.size() == 3 * 2 * 3 * 3);
  for (const auto& r : rows) {
    INFO(amc::to_string(r.rule) << " B " << r.block_size << " k " << r.k << " depth " << r.depth
                                << " rank " << r.mean_rank);
    CHECK((r.hits == 1) == (r.mean_rank <= static_cast<double>(r.k)));
    CHECK(r.chance == Approx(std::min(1.0, static_cast<double>(r.k) /
                                               static_cast<double>(r.candidate_blocks))));
    CHECK(r.mean_support <=
          static_cast<double>(options.sinks + options.window + r.k * r.block_size));
    CHECK(r.mean_retained_mass > 0.0);
    CHECK(r.mean_retained_mass <= 1.0 + 1e-5);
  }
}

TEST_CASE("retrieval command: writes every output, atomically, from the flags") {
  TempDir dir("retrieval_command");
  const std::filesystem::path out = dir / "out";  // not there yet: the command creates it
  CLI::App app;
  std::function<int()> run;
  amc::eval::add_retrieval_command(app, run);
  app.parse(
      "retrieval --contexts 512,1024 --block-sizes 8,32 --ks 1,4 --depths 0.2,0.5 "
      "--trials 3 --out " +
      out.string());
  REQUIRE(run);
  REQUIRE(run() == 0);
  const std::string csv = read_file(out / "retrieval.csv");
  REQUIRE(csv.rfind("rule,block_size,k,context,depth,trials,hit_rate,", 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 3 * 2 * 2 * 2 * 2);
  const std::string md = read_file(out / "retrieval.md");
  CHECK_THAT(md, AMC_CONTAINS("| context | k | B | mean | bound | oracle | chance | lift |"));
  CHECK_THAT(md, AMC_CONTAINS("## Reading"));
  CHECK(std::filesystem::exists(out / "retrieval_plot.dat"));
  CHECK(std::filesystem::exists(out / "retrieval.gp"));
  const bool have_gnuplot = std::system("command -v gnuplot > /dev/null 2>&1") == 0;
  if (have_gnuplot) {
    CHECK(std::filesystem::file_size(out / "retrieval.png") > 0);
    CHECK_THAT(read_file(out / "retrieval.svg"), AMC_CONTAINS("<svg"));
  } else {
    WARN("gnuplot not on the PATH: plots not checked");
  }
  for (const auto& entry : std::filesystem::directory_iterator(out))
    CHECK(entry.path().string().find(".tmp") == std::string::npos);
}

TEST_CASE("retrieval command: bad flags are refused with the flag and the value") {
  struct Case {
    const char* arguments;
    const char* flag;
    const char* value;
  };
  const Case cases[] = {
      {"--ks 0", "--ks", "0"},
      {"--ks 2,x", "--ks", "'x'"},
      {"--ks 8,8", "--ks", "8"},
      {"--ks 8,", "--ks", "''"},
      {"--block-sizes 0", "--block-sizes", "0"},
      {"--block-sizes 4096", "--block-sizes", "4096"},
      {"--contexts 2048,-5", "--contexts", "-5"},
      {"--contexts 100", "--depths", "position 50 of context 100, inside the window (--window 64"},
      {"--depths 0.5,1.5", "--depths", "1.5"},
      {"--depths 1.0000001", "--depths", "1.0000001 is not in [0, 1)"},  // not rounded to "1"
      {"--depths 0.0001", "--depths", "inside the sinks"},
      {"--trials 0", "--trials", "0"},
      {"--trials 2.5", "--trials", "'2.5'"},
      {"--strength -1", "--strength", "-1"},
      {"--strength nan", "--strength", "nan"},
      {"--head-dim 0", "--head-dim", "0"},
      {"--rules mean,foo", "--rules", "'foo'"},
      {"--seed -1", "--seed", "'-1'"},
      // Sinks and window are the library's selection settings: the library's message.
      {"--window -1", "amc::SparseConfig: window must be an integer >= 0", "'-1'"},
      {"--sinks 5000", "--depths", "(--sinks 5000"},
  };
  for (const Case& c : cases) {
    CLI::App app;
    std::function<int()> run;
    amc::eval::add_retrieval_command(app, run);
    // Refused before anything is written: --out is never created.
    const std::string line = std::string("retrieval ") + c.arguments + " --out /nonexistent/x";
    INFO(line);
    app.parse(line);  // CLI11 takes every value as text; run() checks them
    REQUIRE(run);
    CHECK_THROWS_AS(run(), amc::error);
    const std::string where = std::string(c.flag).rfind("--", 0) == 0
                                  ? std::string("retrieval: ") + c.flag
                                  : std::string(c.flag);
    CHECK_THROWS_WITH(run(), AMC_CONTAINS(where) && AMC_CONTAINS(c.value));
  }
  CLI::App app;
  std::function<int()> run;
  amc::eval::add_retrieval_command(app, run);
  CHECK_THROWS_AS(app.parse("retrieval --ks 2"), CLI::RequiredError);  // --out is required
  CHECK_FALSE(run);
}

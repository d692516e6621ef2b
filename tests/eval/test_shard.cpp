// Sharded sweeps (tools/eval/shard.hpp, merge.hpp): --shard parsing and its refusals, shards
// partitioning the run list for many N, and on the trained tiny checkpoint (data/qwen2-tiny)
// three shards run in another order, one of them interrupted and resumed, merged into tables
// byte-identical to the unsharded sweep's; then merge's refusals (shards of other settings,
// other supports or another shard count, missing and unfinished shards, a shard given twice,
// records outside their shard, directories that are not sweep outputs, OUT among the DIRs) and
// --resume's (another shard, another sweep, a foreign record).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "catch.hpp"
#include "eval/code_text.hpp"
#include "merge.hpp"
#include "run_log.hpp"
#include "shard.hpp"
#include "sweep.hpp"
#include "transformer_test_support.hpp"

namespace {

using namespace amc::eval;
using amc::eval::test::code_text;
using amc::transformer::test::read_file;
using amc::transformer::test::TempDir;
namespace fs = std::filesystem;

const fs::path kTiny = AMC_TEST_TINY_MODEL_DIR;

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

/// The sweep of these tests: context 256, supports 81 and 97 (k = 1 and 2), 4 tokens, three
/// documents of which one is too short for 256 tokens: 2 prefixes, 4 runs. Three shards of 4
/// runs own runs {0}, {1} and {2, 3}: prefix 0's supports straddle shards 0 and 1.
SweepArguments sweep_arguments(const std::vector<fs::path>& documents, const fs::path& out) {
  SweepArguments a;
  a.common.model = kTiny.string();
  for (const fs::path& d : documents) a.common.text_files.push_back(d.string());
  a.common.contexts = {256};
  a.common.supports = {97, 81};  // in no order: the run list is canonical
  a.common.prefixes = 3;
  a.common.tokens = 4;
  a.common.session.threads = "2";
  a.common.out = out.string();
  return a;
}

SweepArguments shard_arguments(const SweepArguments& base, const std::string& shard,
                               const fs::path& out) {
  SweepArguments a = base;
  a.shard = shard;
  a.common.out = out.string();
  return a;
}

std::vector<Json> records(const fs::path& dir) { return read_run_file(dir / "runs.jsonl").records; }

/// A record without what depends on the machine and the moment (timings, threads).
Json comparable(Json record) {
  record.erase("seconds");
  record.erase("threads");
  record.erase("document");  // the path as given: the same here, but not part of the result
  return record;
}

/// The sweep run once unsharded and once as three shards, shared by the test cases (each
/// sweep of the tiny model takes a fraction of a second, but they add up on a 2-core machine).
struct Sweeps {
  TempDir dir{"shard_sweeps"};
  std::vector<fs::path> documents;
  SweepArguments base;
  fs::path whole, shards[3];

  Sweeps() {
    documents = {dir / "a.py", dir / "b.py", dir / "c.py"};
    write(documents[0], code_text(40, 1));
    write(documents[1], code_text(2, 2));  // shorter than 256 tokens: skipped
    write(documents[2], code_text(30, 3));
    REQUIRE(fs::file_size(documents[0]) > 300);
    REQUIRE(fs::file_size(documents[1]) < 256);
    REQUIRE(fs::file_size(documents[2]) > 300);
    base = sweep_arguments(documents, dir / "whole");
    whole = dir / "whole";
    REQUIRE(run_sweep(base) == 0);
    for (int i = 0; i < 3; ++i) shards[i] = dir / ("shard" + std::to_string(i));
    // In another order than 0, 1, 2: a shard's runs do not depend on what ran before.
    REQUIRE(run_sweep(shard_arguments(base, "2/3", shards[2])) == 0);
    REQUIRE(run_sweep(shard_arguments(base, "0/3", shards[0])) == 0);
    REQUIRE(run_sweep(shard_arguments(base, "1/3", shards[1])) == 0);
  }
};

const Sweeps& sweeps() {
  static const auto s = std::make_unique<Sweeps>();
  return *s;
}

fs::path copy_dir(const fs::path& from, const fs::path& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

void merge(const fs::path& out, const std::vector<fs::path>& dirs) {
  MergeArguments a;
  a.out = out.string();
  for (const fs::path& d : dirs) a.dirs.push_back(d.string());
  REQUIRE(run_merge(a) == 0);
}

/// merge's refusal of `dirs`: an amc::error holding every part of `expected`, OUT not created.
void check_merge_refused(const fs::path& out, const std::vector<fs::path>& dirs,
                         const std::vector<std::string>& expected) {
  MergeArguments a;
  a.out = out.string();
  for (const fs::path& d : dirs) a.dirs.push_back(d.string());
  const bool existed = fs::exists(out);
  try {
    run_merge(a);
    FAIL("merge accepted what it must refuse");
  } catch (const amc::error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.rfind("merge: ", 0) == 0);
    for (const std::string& part : expected) CHECK_THAT(message, AMC_CONTAINS(part));
  }
  if (!existed) CHECK_FALSE(fs::exists(out));  // refused before anything was written
}

}  // namespace

TEST_CASE("--shard I/N: parsed, or refused naming the value", "[shard]") {
  CHECK(parse_shard("0/1") == Shard{0, 1});
  CHECK(parse_shard("2/8") == Shard{2, 8});
  CHECK(parse_shard(" 7/8 ") == Shard{7, 8});
  CHECK(to_string(Shard{3, 4}) == "3/4");
  struct Case {
    const char* value;
    const char* expected;
  };
  const Case cases[] = {
      {"3/3",
       "the shard index 3 is not below the shard count 3 (shards are numbered 0 to 2), "
       "got '3/3'"},
      {"9/4", "got '9/4'"},
      {"0/0", "the shard count N must be at least 1, got '0/0'"},
      {"", "expected I/N, two integers with 0 <= I < N"},
      {"2", "got '2'"},
      {"1/", "got '1/'"},
      {"/3", "got '/3'"},
      {"a/3", "got 'a/3'"},
      {"1/b", "got '1/b'"},
      {"1/2/3", "got '1/2/3'"},
      {"-1/3", "got '-1/3'"},
      {"+1/3", "got '+1/3'"},
      {"1/-3", "got '1/-3'"},
      {"1.0/3", "got '1.0/3'"},
      {"1 /3", "got '1 /3'"},
      {"99999999999999999999/3", "got '99999999999999999999/3'"},
  };
  for (const Case& c : cases) {
    INFO("--shard '" << c.value << "'");
    CHECK_THROWS_AS(parse_shard(c.value), amc::error);
    CHECK_THROWS_WITH(parse_shard(c.value),
                      AMC_CONTAINS("sweep: --shard: ") && AMC_CONTAINS(c.expected));
  }
}

TEST_CASE("shards partition the runs: each run in exactly one shard, contiguous, equal sizes",
          "[shard]") {
  for (std::int64_t runs : {0, 1, 2, 3, 4, 5, 7, 12, 60, 61, 97, 1000}) {
    for (std::int64_t n : {1, 2, 3, 4, 5, 7, 8, 13, 64}) {
      INFO(runs << " runs in " << n << " shards");
      std::vector<int> owners(static_cast<std::size_t>(runs), 0);
      std::int64_t previous_end = 0, smallest = runs, largest = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const auto [begin, end] = shard_range(runs, Shard{i, n});
        CHECK(begin == previous_end);  // contiguous, in shard order
        CHECK(begin <= end);
        previous_end = end;
        smallest = std::min(smallest, end - begin);
        largest = std::max(largest, end - begin);
        for (std::int64_t r = begin; r < end && r < runs; ++r)
          ++owners[static_cast<std::size_t>(r)];
      }
      CHECK(previous_end == runs);
      CHECK(std::all_of(owners.begin(), owners.end(), [](int o) { return o == 1; }));
      CHECK(largest - smallest <= 1);
    }
  }
  // The run list is canonical (contexts, prefixes, supports ascending), whatever order the
  // lists were given in; a shard's runs are that list's range.
  std::vector<ContextPlan> plans(2);
  plans[0].context = 512;
  plans[0].documents = {0, 2};
  plans[1].context = 128;
  plans[1].documents = {0, 1, 2};
  const std::vector<SupportSize> supports{{97, 2}, {81, 1}, {193, 8}};
  const std::vector<RunId> runs = sweep_runs(plans, supports);
  REQUIRE(runs.size() == 15);
  CHECK(runs.front() == RunId{128, 0, 81});
  CHECK(runs[1] == RunId{128, 0, 97});
  CHECK(runs[3] == RunId{128, 1, 81});
  CHECK(runs.back() == RunId{512, 1, 193});
  CHECK(std::is_sorted(runs.begin(), runs.end()));
  for (std::int64_t n : {1, 2, 4, 6, 15, 16}) {
    std::multiset<RunId> all;
    for (std::int64_t i = 0; i < n; ++i) {
      SweepManifest m;
      m.runs = runs;
      m.shard = {i, n};
      for (const RunId& r : m.shard_runs()) all.insert(r);
    }
    CHECK(all == std::multiset<RunId>(runs.begin(), runs.end()));
  }
}

TEST_CASE("the reports do not depend on the order of the records", "[shard]") {
  // Three runs of one (context, support) whose support_read_mean sums to 1 or to 0 depending
  // on the order of the additions: (1e16 - 1e16) + 1 = 1, but 1 - 1e16 rounds to -1e16 (the
  // doubles there are 2 apart), so (1 - 1e16) + 1e16 = 0.
  TempDir dir("shard_order");
  SweepManifest manifest;
  manifest.settings = Json{{"tokens", 4}, {"decode", "sparse"}};
  manifest.runs = {{256, 0, 81}, {256, 1, 81}, {256, 2, 81}};
  const double reads[] = {1e16, -1e16, 1.0};
  std::vector<Json> in_order;
  for (std::int64_t p = 0; p < 3; ++p) {
    Json r;
    r["context"] = 256;
    r["prefix"] = p;
    r["support"] = 81;
    r["k"] = 1;
    r["settings"] = manifest.settings;
    r["exact_match"] = false;
    r["first_divergence"] = 1 + p;
    r["ppl_change_pct"] = 0.5 * static_cast<double>(p);
    r["tf_match_pct"] = 75.0;
    r["retained_mass_mean"] = 0.9;
    r["support_read_mean"] = reads[p];
    r["per_head"] = nullptr;
    in_order.push_back(r);
  }
  const std::vector<Json> reversed(in_order.rbegin(), in_order.rend());
  std::vector<Json> rotated = in_order;
  std::rotate(rotated.begin(), rotated.begin() + 1, rotated.end());
  write_sweep_reports(dir.path(), manifest, in_order);
  const std::string csv = read_file(dir / "summary.csv");
  const std::string markdown = read_file(dir / "summary.md");
  CHECK_THAT(csv, AMC_CONTAINS(",0.333333333333\n"));  // the canonical order's sum, over 3
  for (const std::vector<Json>& order : {reversed, rotated}) {
    write_sweep_reports(dir.path(), manifest, order);
    CHECK(read_file(dir / "summary.csv") == csv);
    CHECK(read_file(dir / "summary.md") == markdown);
  }
}

TEST_CASE("three shards merged equal the unsharded sweep byte for byte", "[shard]") {
  const Sweeps& s = sweeps();
  const fs::path out = s.dir / "merged";
  // One shard interrupted after its first run, with a half-written second, and resumed.
  const fs::path resumed = s.dir / "shard2-resumed";
  fs::create_directories(resumed);
  const std::string log = read_file(s.shards[2] / "runs.jsonl");
  const std::size_t first_line = log.find('\n') + 1;
  write(resumed / "runs.jsonl", log.substr(0, first_line + 100));
  SweepArguments again = shard_arguments(s.base, "2/3", resumed);
  again.resume = true;
  REQUIRE(run_sweep(again) == 0);
  REQUIRE(records(resumed).size() == 2);

  merge(out, {s.shards[1], resumed, s.shards[0]});  // any order
  for (const char* name : {"summary.csv", "summary.md", "ppl_change.dat", "first_divergence.dat",
                           "retained_mass_by_layer.dat", "plots.gp"}) {
    INFO(name);
    CHECK(read_file(out / name) == read_file(s.whole / name));
  }
  const std::string csv = read_file(out / "summary.csv");
  INFO(csv);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 3);  // header, supports 81 and 97
  CHECK_THAT(csv, AMC_CONTAINS("\n256,81,1,2,") && AMC_CONTAINS("\n256,97,2,2,"));
  // The comparison means something: some run differs from dense decoding.
  bool differs = false;
  for (const Json& r : records(s.whole)) differs |= r.at("ppl_change_pct").get<double>() != 0.0;
  CHECK(differs);

  // The merged runs.jsonl holds the unsharded sweep's records, in its order.
  const std::vector<Json> merged = records(out), whole = records(s.whole);
  REQUIRE(merged.size() == 4);
  REQUIRE(whole.size() == 4);
  for (std::size_t i = 0; i < merged.size(); ++i) {
    CHECK(comparable(merged[i]) == comparable(whole[i]));
  }
  // Each shard holds its own runs only; prefix 0's dense reference, computed by shards 0 and
  // 1 alike, is the same.
  const std::vector<Json> s0 = records(s.shards[0]), s1 = records(s.shards[1]);
  REQUIRE(s0.size() == 1);
  REQUIRE(s1.size() == 1);
  CHECK(run_id(s0[0]) == RunId{256, 0, 81});
  CHECK(run_id(s1[0]) == RunId{256, 0, 97});
  CHECK(s0[0].at("dense_tokens") == s1[0].at("dense_tokens"));
  CHECK(s0[0].at("dense_nll") == s1[0].at("dense_nll"));
  CHECK_THAT(read_file(s.shards[1] / "summary.md"),
             AMC_CONTAINS("**Shard 1/3 of a sharded sweep**: it owns run 2 of the sweep's 4"));
  CHECK(read_file(s.whole / "summary.md").find("Shard") == std::string::npos);

  // OUT is a sweep output of the whole sweep: it merges again, on its own.
  const SweepManifest m = read_manifest(out, "test");
  CHECK(m.shard == Shard{0, 1});
  CHECK(m.merged_from.size() == 3);
  CHECK(m.runs.size() == 4);
  merge(s.dir / "merged-again", {out});
  CHECK(read_file(s.dir / "merged-again" / "summary.csv") == read_file(s.whole / "summary.csv"));

  // More shards than runs: the extra ones own none and write an empty table.
  const fs::path empty = s.dir / "shard6of8";
  REQUIRE(run_sweep(shard_arguments(s.base, "6/8", empty)) == 0);
  CHECK(records(empty).empty());
  const std::string empty_csv = read_file(empty / "summary.csv");
  CHECK(std::count(empty_csv.begin(), empty_csv.end(), '\n') == 1);  // the header alone
}

TEST_CASE("merge refuses shards of other sweeps, missing, unfinished and repeated shards",
          "[shard]") {
  const Sweeps& s = sweeps();
  const fs::path out = s.dir / "refused";
  const fs::path s0 = s.shards[0], s1 = s.shards[1], s2 = s.shards[2];

  // Shards of other settings: another window (the same supports map to other k), other
  // supports, another shard count.
  SweepArguments window = shard_arguments(s.base, "1/3", s.dir / "window48");
  window.common.sparse.window = 48;
  REQUIRE(run_sweep(window) == 0);
  check_merge_refused(out, {s0, s.dir / "window48", s2},
                      {"not shards of one sweep", "window = 48 in " + (s.dir / "window48").string(),
                       "window = 64 in " + s0.string()});
  // Every selection setting is part of the sweep, not only those of the original six: a shard
  // with a top-p budget, another shortlist, shortlist rule or sub-block count is refused.
  struct Changed {
    const char* name;
    const char* value;
  };
  for (const Changed& c : {Changed{"top_p", "0.9"}, Changed{"shortlist", "2"},
                           Changed{"shortlist_rule", "bound"}, Changed{"sub_blocks", "2"}}) {
    INFO(c.name);
    const fs::path dir = s.dir / (std::string("changed-") + c.name);
    SweepArguments changed = shard_arguments(s.base, "1/3", dir);
    amc::sparse_setting(c.name).set(changed.common.sparse, c.value);
    REQUIRE(run_sweep(changed) == 0);
    const std::string shown = c.name == std::string("shortlist_rule")
                                  ? std::string("\"") + c.value + "\""
                                  : std::string(c.value);
    check_merge_refused(
        out, {s0, dir, s2},
        {"not shards of one sweep", std::string(c.name) + " = " + shown + " in " + dir.string(),
         std::string(c.name) + " = null in " + s0.string()});
  }
  SweepArguments supports = shard_arguments(s.base, "1/3", s.dir / "supports113");
  supports.common.supports = {81, 113};
  REQUIRE(run_sweep(supports) == 0);
  check_merge_refused(out, {s0, s.dir / "supports113", s2},
                      {"supports = [81,113] in", "supports = [81,97] in " + s0.string()});
  REQUIRE(run_sweep(shard_arguments(s.base, "1/2", s.dir / "half1")) == 0);
  check_merge_refused(out, {s0, s1, s2, s.dir / "half1"}, {"shard count = 2", "shard count = 3"});
  check_merge_refused(out, {s0, s1, s2, s.whole}, {"shard count = 1", "shard count = 3"});

  // A missing shard's runs, named.
  check_merge_refused(out, {s0, s2},
                      {"1 of the sweep's 4 runs are missing", "shard 1/3 is not among",
                       "context 256, prefix 0, support 97"});
  check_merge_refused(out, {s1},
                      {"3 of the sweep's 4 runs are missing", "shard 0/3 is not among",
                       "shard 2/3 is not among", "context 256, prefix 1, support 81"});
  // An unfinished shard: its last run cut short.
  const fs::path cut = copy_dir(s2, s.dir / "shard2-cut");
  const std::string log = read_file(s2 / "runs.jsonl");
  write(cut / "runs.jsonl", log.substr(0, log.find('\n') + 50));
  check_merge_refused(out, {s0, s1, cut},
                      {"1 of the sweep's 4 runs are missing",
                       cut.string() + " (shard 2/3) lacks context 256, prefix 1, support 97 (its "
                                      "runs.jsonl ends in a record cut short): it has not finished",
                       "--shard 2/3 --resume"});

  // A shard twice: the same directory, or a copy.
  check_merge_refused(out, {s0, s1, s2, s1},
                      {"are both shard 1/3 (the same directory, given twice)",
                       "overlap (context 256, prefix 0, support 97)"});
  const fs::path copy = copy_dir(s1, s.dir / "shard1-copy");
  check_merge_refused(out, {s0, s1, s2, copy},
                      {s1.string() + " and " + copy.string() + " are both shard 1/3",
                       "context 256, prefix 0, support 97"});
  // A record outside its shard (shard 1's run appended to shard 0's log).
  const fs::path foreign = copy_dir(s0, s.dir / "shard0-foreign");
  write(foreign / "runs.jsonl", read_file(s0 / "runs.jsonl") + read_file(s1 / "runs.jsonl"));
  check_merge_refused(out, {foreign, s1, s2},
                      {"runs.jsonl:2 holds context 256, prefix 0, support 97, which its shard 0/3 "
                       "does not own"});

  // Not sweep outputs: a missing directory, an empty one, one without sweep.json, a damaged
  // sweep.json.
  check_merge_refused(out, {s.dir / "nowhere", s1, s2},
                      {(s.dir / "nowhere").string() + ": not a sweep output (not a directory)"});
  fs::create_directories(s.dir / "empty");
  check_merge_refused(out, {s0, s.dir / "empty"},
                      {(s.dir / "empty").string() + ": not a sweep output (no sweep.json"});
  const fs::path old = copy_dir(s0, s.dir / "no-manifest");
  fs::remove(old / "sweep.json");
  check_merge_refused(out, {old, s1, s2}, {"no-manifest: not a sweep output (no sweep.json"});
  const fs::path damaged = copy_dir(s0, s.dir / "damaged");
  write(damaged / "sweep.json", "{\"format\": \"amc-eval-sweep/1\", \"shard\": ");
  check_merge_refused(out, {damaged, s1, s2}, {"damaged: not a sweep output", "is damaged"});
  const fs::path no_runs = copy_dir(s0, s.dir / "no-runs");
  fs::remove(no_runs / "runs.jsonl");
  check_merge_refused(out, {no_runs, s1, s2},
                      {"not a sweep output (sweep.json but no runs.jsonl)"});

  // OUT must be a directory of its own, without runs.
  check_merge_refused(s1, {s0, s1, s2}, {"is also one of the shards' directories"});
  check_merge_refused(s.whole, {s0, s1, s2}, {"already holds a runs.jsonl"});
}

TEST_CASE("--shard refused before the model is read; --resume keeps a shard's sweep", "[shard]") {
  const Sweeps& s = sweeps();
  SweepArguments bad = shard_arguments(s.base, "3/3", s.dir / "never");
  bad.common.model = (s.dir / "no-such-model").string();  // not read: --shard is checked first
  CHECK_THROWS_WITH(run_sweep(bad),
                    "sweep: --shard: the shard index 3 is not below the shard "
                    "count 3 (shards are numbered 0 to 2), got '3/3'");
  bad.shard = "";  // given empty: refused, not taken for the whole sweep
  CHECK_THROWS_WITH(run_sweep(bad),
                    AMC_CONTAINS("sweep: --shard: expected I/N") && AMC_CONTAINS("got ''"));
  CHECK_FALSE(fs::exists(s.dir / "never"));

  auto resume = [&](const std::string& shard, const fs::path& dir) {
    SweepArguments a = shard_arguments(s.base, shard, dir);
    a.resume = true;
    return a;
  };
  const fs::path s0 = copy_dir(s.shards[0], s.dir / "resume0");
  CHECK_THROWS_WITH(run_sweep(resume("1/3", s0)),
                    AMC_CONTAINS("sweep: --shard: " + s0.string() + " holds shard 0/3") &&
                        AMC_CONTAINS("not shard 1/3; resume it with --shard 0/3"));
  SweepArguments whole = resume("0/3", s0);
  whole.shard.reset();
  CHECK_THROWS_WITH(run_sweep(whole),
                    AMC_CONTAINS("holds shard 0/3") && AMC_CONTAINS("not the whole sweep"));
  const fs::path w = copy_dir(s.whole, s.dir / "resume-whole");
  CHECK_THROWS_WITH(run_sweep(resume("0/3", w)),
                    AMC_CONTAINS("holds the whole sweep") && AMC_CONTAINS("without --shard"));
  SweepArguments other = resume("0/3", s0);
  other.common.supports = {81, 113};
  CHECK_THROWS_WITH(run_sweep(other),
                    AMC_CONTAINS("sweep: --resume: ") &&
                        AMC_CONTAINS("written with supports = [81,97] but this run has "
                                     "supports = [81,113]"));
  // A record of another shard, with sweep.json gone (an older version's output): refused too.
  write(s0 / "runs.jsonl",
        read_file(s.shards[0] / "runs.jsonl") + read_file(s.shards[1] / "runs.jsonl"));
  fs::remove(s0 / "sweep.json");
  CHECK_THROWS_WITH(run_sweep(resume("0/3", s0)),
                    AMC_CONTAINS("holds context 256, prefix 0, support 97, which shard 0/3 does "
                                 "not own"));
  // The same shard resumes, with nothing left to do: its tables are rewritten alike.
  const fs::path done = copy_dir(s.shards[0], s.dir / "resume-done");
  REQUIRE(run_sweep(resume("0/3", done)) == 0);
  CHECK(read_file(done / "summary.csv") == read_file(s.shards[0] / "summary.csv"));
}

TEST_CASE("settings recorded under former names read as the names now", "[shard]") {
  // Records written when the rule setting was called "score" (and two-stage's first stage
  // "shortlist_score") must still resume and merge with records written since.
  const Json old = Json::parse(
      R"({"block_size": 16, "score": "twostage", "shortlist_score": "bound", "sinks": 1})");
  const Json now = with_current_setting_names(old);
  REQUIRE(now.dump() ==
          R"({"block_size":16,"rule":"twostage","shortlist_rule":"bound","sinks":1})");
  REQUIRE(with_current_setting_names(now) == now);  // current names are left as they are
  TempDir dir("former_setting_names");
  write(dir.path() / "runs.jsonl",
        R"({"context": 256, "prefix": 0, "support": 81, "settings": {"score": "mean"}})"
        "\n");
  const RunFile file = read_run_file(dir.path() / "runs.jsonl");
  REQUIRE(file.records.size() == 1);
  REQUIRE(file.records[0].at("settings").dump() == R"({"rule":"mean"})");
}

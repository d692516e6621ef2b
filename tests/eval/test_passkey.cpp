// The passkey probe of amc-eval (tools/eval/passkey_*.hpp): prompts against a plain byte
// computation, the draws, refusals that name the flag, the command end to end on the trained
// tiny checkpoint (data/qwen2-tiny) with a covering support that must equal dense, and the
// "planted in support" count at its two extremes (the value in the window: 1; a value longer
// than a support's one block: 0).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "eval/code_text.hpp"
#include "passkey_command.hpp"
#include "passkey_probe.hpp"
#include "passkey_prompt.hpp"
#include "transformer/checkpoint.hpp"
#include "transformer/model.hpp"
#include "transformer/synth_tokenizer.hpp"
#include "transformer/tokenizer.hpp"
#include "transformer_test_support.hpp"

namespace {

using namespace amc::eval;
using amc::eval::test::code_text;
using amc::transformer::Tokenizer;
using amc::transformer::test::read_file;
using amc::transformer::test::TempDir;

const std::filesystem::path kTiny = AMC_TEST_TINY_MODEL_DIR;

const Tokenizer& tiny_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(kTiny / "tokenizer.json");
  return tokenizer;
}

PasskeyDocument byte_document(const std::string& text, const std::string& path = "doc.py") {
  const std::vector<std::int32_t> ids = tiny_tokenizer().encode(text);
  return make_passkey_document(path, ids, tiny_tokenizer());
}

/// The prompt computed from the definition, one byte per token: the record goes at the first
/// line start at or after start + floor(depth x body) within the body, else at the last line
/// start before that offset; code_after fills the body to `body` bytes.
struct PlainPrompt {
  std::string bytes;
  std::int64_t record = 0;
};
PlainPrompt plain_prompt(const std::string& text, std::int64_t start, std::int64_t context,
                         double depth, const std::string& digits) {
  const std::string record = "PASSKEY = \"" + digits + "\"\n";
  const std::string question = "\nPASSKEY = \"";
  const auto body = context - static_cast<std::int64_t>(record.size() + question.size());
  const auto offset =
      start + static_cast<std::int64_t>(std::floor(depth * static_cast<double>(body)));
  auto line_start = [&](std::int64_t p) { return p == 0 || text[p - 1] == '\n'; };
  std::int64_t split = -1;
  for (std::int64_t p = offset; p < start + body && split < 0; ++p) {
    if (line_start(p)) split = p;
  }
  for (std::int64_t p = offset - 1; p >= start && split < 0; --p) {
    if (line_start(p)) split = p;
  }
  REQUIRE(split >= 0);
  const std::int64_t before = split - start;
  return {text.substr(start, before) + record + text.substr(split, body - before) + question,
          before};
}

/// Runs `amc-eval passkey ARGUMENTS` through the command's own registration.
int run_command(const std::string& arguments) {
  CLI::App app;
  std::function<int()> run;
  add_passkey_command(app, run);
  app.parse("passkey " + arguments);
  REQUIRE(run);
  return run();
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(field);
      field.clear();
    } else {
      field += c;
    }
  }
  fields.push_back(field);
  return fields;
}

/// A CSV file as rows of named fields.
std::vector<std::map<std::string, std::string>> read_csv(const std::filesystem::path& path) {
  std::istringstream in(read_file(path));
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split_csv_line(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const std::vector<std::string> fields = split_csv_line(line);
    REQUIRE(fields.size() == header.size());
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size(); ++i) row[header[i]] = fields[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

TEST_CASE(
    "passkey prompt: the record at the line start the definition names, every position "
    "known, exactly the context long",
    "[passkey]") {
  const std::string text = code_text(400, 5);
  const PasskeyDocument document = byte_document(text);
  REQUIRE(document.text == text);  // byte-level: the model sees the file's bytes
  REQUIRE(document.tokens() == static_cast<std::int64_t>(text.size()));

  std::vector<std::int64_t> line_starts{0};
  for (std::size_t i = 0; i + 1 < text.size(); ++i)
    if (text[i] == '\n') line_starts.push_back(static_cast<std::int64_t>(i + 1));
  int checked = 0, at_offset = 0;
  for (const std::int64_t context : {96, 256, 1000}) {
    for (const double depth : {0.05, 0.3, 0.5, 0.77, 0.9}) {
      for (const std::size_t line : {std::size_t{0}, std::size_t{7}, std::size_t{55}}) {
        const std::int64_t start = line_starts[line];
        const std::string digits = std::string("0123456789").substr(depth > 0.5 ? 3 : 0, 5);
        const PasskeyPrompt p =
            make_passkey_prompt(tiny_tokenizer(), document, start, context, depth, digits);
        const PlainPrompt expected = plain_prompt(text, start, context, depth, digits);
        INFO("context " << context << ", depth " << depth << ", start " << start);
        REQUIRE(static_cast<std::int64_t>(p.ids.size()) == context);
        CHECK(std::string(p.ids.begin(), p.ids.end()) == expected.bytes);
        CHECK(p.record_begin == expected.record);
        CHECK(p.split_byte == start + expected.record);
        CHECK(p.value_begin == p.record_begin + 11);
        CHECK(p.value_end == p.value_begin + 5);
        CHECK(p.record_end == p.value_end + 2);
        CHECK(p.body_tokens == context - 18 - 12);
        // The value's positions hold the digits, the record starts a line.
        CHECK(std::string(p.ids.begin() + p.value_begin, p.ids.begin() + p.value_end) == digits);
        CHECK((p.record_begin == 0 || p.ids[p.record_begin - 1] == '\n'));
        at_offset += p.split_byte == start + static_cast<std::int64_t>(std::floor(
                                                 depth * static_cast<double>(p.body_tokens)))
                         ? 1
                         : 0;
        ++checked;
      }
    }
  }
  CHECK(checked == 45);
  CHECK(at_offset < checked);  // most offsets fall inside a line: the search is exercised

  // One long line where the offset falls: the last line start before the offset.
  const std::string long_line =
      "a = 1\nb = 2\n" + std::string(300, 'z') + "\nc = 3\n" + std::string(200, 'y') + "\n";
  const PasskeyDocument one_line = byte_document(long_line);
  const PasskeyPrompt p = make_passkey_prompt(tiny_tokenizer(), one_line, 0, 200, 0.5, "42");
  CHECK(p.record_begin == 12);  // "b = 2\n" ends at byte 12; the next line start is beyond
  CHECK(std::string(p.ids.begin(), p.ids.end()) ==
        plain_prompt(long_line, 0, 200, 0.5, "42").bytes);
}

TEST_CASE("passkey prompt: with a BPE tokenizer each part is encoded on its own", "[passkey]") {
  const Tokenizer bpe = Tokenizer::from_json(amc::transformer::synthetic_tokenizer_json(600));
  const std::string text = code_text(300, 9);
  const std::vector<std::int32_t> ids = bpe.encode(text);
  const PasskeyDocument document = make_passkey_document("doc.py", ids, bpe);
  REQUIRE(document.text == text);
  REQUIRE(document.tokens() < static_cast<std::int64_t>(text.size()));  // merges happened
  for (const double depth : {0.2, 0.6}) {
    const PasskeyPrompt p = make_passkey_prompt(bpe, document, 0, 512, depth, "90210");
    REQUIRE(p.ids.size() == 512);
    const std::vector<std::int32_t> value = bpe.encode("90210");
    CHECK(std::vector<std::int32_t>(p.ids.begin() + p.value_begin, p.ids.begin() + p.value_end) ==
          value);
    CHECK(bpe.decode(std::span(p.ids).subspan(p.record_begin, p.record_end - p.record_begin)) ==
          "PASSKEY = \"90210\"\n");
    CHECK(bpe.decode(std::span(p.ids).subspan(0, p.record_begin)) == text.substr(0, p.split_byte));
    const std::string prompt = bpe.decode(p.ids);
    CHECK(prompt.size() >= 12);
    CHECK(prompt.substr(prompt.size() - 12) == "\nPASSKEY = \"");
  }
}

TEST_CASE("passkey draws: seeded by (seed, context, trial), a line start, one document",
          "[passkey]") {
  std::vector<PasskeyDocument> documents{byte_document(code_text(20, 1), "short.py"),
                                         byte_document(code_text(300, 2), "a.py"),
                                         byte_document(code_text(500, 3), "b.py")};
  const std::int64_t context = 2000;
  REQUIRE(documents[0].tokens() < context);
  std::vector<std::string> seen;
  for (std::int64_t trial = 0; trial < 20; ++trial) {
    const PasskeyDraw d = draw_passkey(documents, context, trial, 7, 6);
    const PasskeyDraw again = draw_passkey(documents, context, trial, 7, 6);
    CHECK(d.document == again.document);
    CHECK(d.start_byte == again.start_byte);
    CHECK(d.digits == again.digits);
    REQUIRE(d.document != 0);  // too short for the context
    const PasskeyDocument& doc = documents[d.document];
    CHECK((d.start_byte == 0 || doc.text[d.start_byte - 1] == '\n'));
    CHECK(d.start_byte + context <= doc.tokens());  // byte-level: the window fits the document
    CHECK(d.digits.size() == 6);
    CHECK(
        std::all_of(d.digits.begin(), d.digits.end(), [](char c) { return c >= '0' && c <= '9'; }));
    seen.push_back(d.digits + "@" + std::to_string(d.document) + ":" +
                   std::to_string(d.start_byte));
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::unique(seen.begin(), seen.end()) - seen.begin() >= 18);  // trials differ
  CHECK(draw_passkey(documents, context, 0, 8, 6).digits !=
        draw_passkey(documents, context, 0, 7, 6).digits);
  REQUIRE_THROWS_WITH(draw_passkey(documents, 1'000'000, 0, 7, 6),
                      AMC_CONTAINS("no document holds 1000000 tokens"));
}

TEST_CASE("passkey command: bad settings are refused naming the flag and the value", "[passkey]") {
  TempDir dir("passkey_refusals");
  const std::filesystem::path doc = dir / "doc.py";
  const std::string text = code_text(60, 4);
  REQUIRE(text.size() >= 600);  // room for contexts 256 and 512, not for 3000
  REQUIRE(text.size() < 3000);
  std::ofstream(doc) << text;
  const std::filesystem::path out = dir / "never";
  struct Case {
    std::string arguments;
    const char* flag;
    const char* value;
  };
  const std::string model = "--model " + kTiny.string() + " --text " + doc.string();
  const Case cases[] = {
      // Checked before the model is read.
      {"--depths 0", "passkey: --depths", "0 is not in (0, 1)"},
      {"--depths 0.5,1", "passkey: --depths", "1 is not in (0, 1)"},
      {"--depths 0.5,x", "passkey: --depths", "'x'"},
      {"--depths 0.5,0.5", "passkey: --depths", "0.5 is listed twice"},
      {"--contexts 32", "passkey: --contexts", "32 is not in [64"},
      {"--contexts 256,abc", "passkey: --contexts", "'abc'"},
      {"--digits 0", "passkey: --digits", "got 0"},
      {"--digits 17", "passkey: --digits", "got 17"},
      {"--trials 0", "passkey: --trials", "got 0"},
      {"--supports 65", "passkey: --supports", "65 is only the sinks and the window"},
      {"--supports 100", "passkey: --supports 100", "does not map to whole blocks"},
      {"--supports 60", "passkey: --supports 60", "smaller than sinks + window"},
      {"--supports 97,97", "passkey: --supports", "97 is listed twice"},
      {"--rules mean,foo", "passkey: --rules", "'foo'"},
      {"--rules mean,mean", "passkey: --rules", "'mean' is listed twice"},
      {"--rules submean --block-size 6 --supports 71", "passkey: --rules",
       "must divide block_size 6"},
      {"--threads 0", "passkey: --threads", "got 0"},
      {"--kv-dtype f16", "passkey: --kv-dtype", "'f16'"},
      {"--rope-angles x", "passkey: --rope-angles", "'x'"},
      {"--seed -1", "passkey: --seed", "'-1'"},
      {"--window -1", "amc::SparseConfig: window must be an integer >= 0", "'-1'"},
      // Checked against the model and the documents.
      {"--contexts 4093", "passkey: --contexts", "4093 with a 5-token answer needs 4097 positions"},
      {"--contexts 3000", "passkey: --contexts",
       "no --text document holds 3000 tokens (the longest, "},
      {"--contexts 256 --depths 0.95", "passkey: --depths", "inside the window (--window 64"},
      {"--contexts 512 --depths 0.1 --sinks 120 --supports 200", "passkey: --depths",
       "inside the sinks (--sinks 120"},
  };
  for (const Case& c : cases) {
    const std::string line = model + " " + c.arguments + " --out " + out.string();
    INFO(line);
    CHECK_THROWS_AS(run_command(line), amc::error);
    CHECK_THROWS_WITH(run_command(line), AMC_CONTAINS(c.flag) && AMC_CONTAINS(c.value));
    CHECK_FALSE(std::filesystem::exists(out));  // refused before anything is written
  }
  // --model, --text and --out are required; an empty --out is refused by name.
  CLI::App app;
  std::function<int()> run;
  add_passkey_command(app, run);
  CHECK_THROWS_AS(app.parse("passkey " + model), CLI::RequiredError);
  CHECK_FALSE(run);
  PasskeyFlags flags;
  flags.model = kTiny.string();
  flags.text_files = {doc.string()};
  CHECK_THROWS_WITH(passkey_options_from_flags(flags), AMC_CONTAINS("passkey: --out"));
}

TEST_CASE(
    "passkey command end to end: a covering support answers as dense, keeps all the mass "
    "and the planted value; a small one does not",
    "[passkey]") {
  TempDir dir("passkey_e2e");
  const std::filesystem::path doc = dir / "doc.py";
  std::ofstream(doc) << code_text(120, 6);
  const std::filesystem::path out = dir / "out";
  // Context 256 and 5 answer tokens: the cache holds at most 260 positions, and
  // 1 + 64 + 13 x 16 = 273 covers them all; 1 + 64 + 1 x 16 = 81 does not.
  REQUIRE(run_command("--model " + kTiny.string() + " --text " + doc.string() +
                      " --contexts 256 --depths 0.25,0.6 --trials 2 --supports 81,273 "
                      "--rules mean,bound --threads 2 --out " +
                      out.string()) == 0);
  for (const char* name :
       {"passkey.csv", "trials.csv", "passkey.md", "passkey_plot.dat", "passkey.gp"}) {
    CHECK(std::filesystem::exists(out / name));
  }
  if (std::system("command -v gnuplot > /dev/null 2>&1") == 0) {
    CHECK(std::filesystem::file_size(out / "passkey.png") > 0);
    CHECK_THAT(read_file(out / "passkey.svg"), AMC_CONTAINS("<svg"));
  } else {
    WARN("gnuplot not on the PATH: plots not checked");
  }
  CHECK_THAT(
      read_file(out / "passkey.md"),
      AMC_CONTAINS("| context | depth | dense | mean 81 | mean 273 | bound 81 | bound 273 |"));

  const auto cells = read_csv(out / "passkey.csv");
  REQUIRE(cells.size() == 2 * (1 + 2 * 2));  // depths x (dense + rules x supports)
  int dense_rows = 0;
  double small_mass = 0.0, small_planted = 0.0;
  for (const auto& c : cells) {
    INFO(c.at("rule") << " " << c.at("support") << " depth " << c.at("depth"));
    CHECK(c.at("context") == "256");
    CHECK(c.at("trials") == "2");
    CHECK(c.at("block_size") == "16");
    CHECK(c.at("window") == "64");
    CHECK(c.at("digits") == "5");
    if (c.at("rule") == "dense") {
      ++dense_rows;
      CHECK(c.at("support").empty());
      CHECK(std::stod(c.at("mean_retained_mass")) == 1.0);
      CHECK(std::stod(c.at("planted_in_support")) == 1.0);
    } else if (c.at("support") == "273") {
      CHECK(std::stod(c.at("mean_retained_mass")) == Approx(1.0).margin(1e-5));
      CHECK(std::stod(c.at("planted_in_support")) == 1.0);
      CHECK(c.at("planted_in_support_by_layer") == "1.0000 1.0000 1.0000 1.0000");
    } else {
      REQUIRE(c.at("support") == "81");
      CHECK(c.at("k") == "1");
      small_mass = std::max(small_mass, std::stod(c.at("mean_retained_mass")));
      small_planted = std::max(small_planted, std::stod(c.at("planted_in_support")));
    }
  }
  CHECK(dense_rows == 2);
  // The measures are measured: one block of 16 cannot hold the context's mass, nor, at every
  // step, layer and head, the planted value.
  CHECK(small_mass < 0.99);
  CHECK(small_planted < 1.0);

  // Per trial: the covering runs answer exactly as dense (same digits, same text).
  const auto trials = read_csv(out / "trials.csv");
  REQUIRE(trials.size() == 2 * 2 * 5);  // depths x trials x runs
  std::map<std::string, std::string> dense_answers;
  for (const auto& t : trials) {
    CHECK(t.at("digits").size() == 5);
    CHECK(t.at("context") == "256");
    if (t.at("rule") == "dense")
      dense_answers[t.at("depth") + "/" + t.at("trial")] = t.at("answer");
  }
  REQUIRE(dense_answers.size() == 4);
  int covering = 0;
  for (const auto& t : trials) {
    if (t.at("support") != "273") continue;
    ++covering;
    CHECK(t.at("answer") == dense_answers.at(t.at("depth") + "/" + t.at("trial")));
    CHECK(t.at("planted_in_support") == "1.0000");
  }
  CHECK(covering == 2 * 2 * 2);
  // Paired: both depths of a trial plant the same digits in the same document's code.
  for (const auto& a : trials) {
    for (const auto& b : trials) {
      if (a.at("trial") != b.at("trial")) continue;
      CHECK(a.at("digits") == b.at("digits"));
      CHECK(a.at("start_byte") == b.at("start_byte"));
    }
  }
}

TEST_CASE(
    "passkey: planted in support is 1 with the value in the window, 0 when no support "
    "can hold it",
    "[passkey]") {
  const amc::transformer::Checkpoint checkpoint = amc::transformer::Checkpoint::load(kTiny);
  const PasskeyDocument document = byte_document(code_text(120, 8));
  // 16 digits: 16 positions, more than one block of 8 can hold.
  const std::string digits = "3141592653589793";
  amc::SparseConfig base;
  base.block_size = 8;
  base.sinks = 1;
  base.window = 16;
  base.top_k = 1;
  PasskeyRunner runner(checkpoint, tiny_tokenizer(), base, amc::StorageType::bf16,
                       amc::transformer::KvQuantization::none, amc::transformer::RopeAngles::exact,
                       2);

  // Record near the end: inside a window of 128, whatever is selected.
  const PasskeyPrompt late = make_passkey_prompt(tiny_tokenizer(), document, 0, 256, 0.8, digits);
  // In the window at every answering step: the cache grows to 256 + 15 positions.
  REQUIRE(late.value_begin >= 256 + 15 - 128);
  runner.prefill(late);
  amc::SparseConfig in_window = base;
  in_window.window = 128;
  for (const amc::RuleName rule : {amc::RuleName::mean_pooled, amc::RuleName::oracle}) {
    for (const amc::SelectionScope scope :
         {amc::SelectionScope::per_head, amc::SelectionScope::per_group}) {
      in_window.rule = rule;
      in_window.scope = scope;
      const PasskeyAnswer a = runner.answer(digits, in_window);
      INFO(amc::to_string(rule) << " " << amc::to_string(scope));
      CHECK(a.text.size() >= digits.size());
      CHECK(a.planted_in_support == 1.0);
      CHECK(a.planted_by_layer == std::vector<double>(4, 1.0));
      CHECK(a.retained_mass > 0.0);
      CHECK(a.retained_mass < 1.0);  // 1 + 128 + 8 of up to 271 positions
    }
  }

  // Record in the middle, outside sinks and window: one block of 8 never holds 16 positions.
  const PasskeyPrompt middle = make_passkey_prompt(tiny_tokenizer(), document, 0, 256, 0.4, digits);
  REQUIRE(middle.value_begin >= base.sinks);
  REQUIRE(middle.value_end <= 256 - base.window);
  runner.prefill(middle);
  const PasskeyAnswer dense = runner.answer(digits, std::nullopt);
  CHECK(dense.planted_in_support == 1.0);
  CHECK(dense.retained_mass == 1.0);
  CHECK(dense.planted_by_layer.empty());
  for (const amc::RuleName rule : {amc::RuleName::mean_pooled, amc::RuleName::oracle}) {
    amc::SparseConfig small = base;
    small.rule = rule;
    const PasskeyAnswer a = runner.answer(digits, small);
    CHECK(a.planted_in_support == 0.0);
    CHECK(a.planted_by_layer == std::vector<double>(4, 0.0));
  }
  // Two blocks of 8 can: the oracle, ranking by true mass, need not choose them, but the
  // count is no longer forced to 0; a covering support (k = 40) holds it everywhere.
  amc::SparseConfig covering = base;
  covering.top_k = 40;
  const PasskeyAnswer all = runner.answer(digits, covering);
  CHECK(all.planted_in_support == 1.0);
  CHECK(all.text == dense.text);

  // The same through the command: --digits 16 with one block of 8 plants nothing, in every cell.
  TempDir dir("passkey_zero");
  const std::filesystem::path doc = dir / "doc.py";
  std::ofstream(doc) << code_text(120, 8);
  REQUIRE(run_command("--model " + kTiny.string() + " --text " + doc.string() +
                      " --contexts 256 --depths 0.3,0.5 --trials 2 --digits 16 --block-size 8 "
                      "--window 16 --supports 25 --rules mean,oracle --threads 2 --out " +
                      (dir / "out").string()) == 0);
  int sparse_cells = 0;
  for (const auto& c : read_csv(dir / "out" / "passkey.csv")) {
    if (c.at("rule") == "dense") continue;
    ++sparse_cells;
    CHECK(c.at("k") == "1");
    CHECK(std::stod(c.at("planted_in_support")) == 0.0);
  }
  CHECK(sparse_cells == 2 * 2);
}

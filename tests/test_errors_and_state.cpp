// Views, the online-softmax state, and every invalid config or view: amc::error naming the field.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "amc/amc.hpp"
#include "test_cache.hpp"

using namespace amc;

namespace {

// Runs `fn`, requires amc::error whose message contains every one of `words`.
template <class Fn>
void require_error(Fn&& fn, std::initializer_list<std::string> words) {
  try {
    fn();
  } catch (const amc::error& e) {
    const std::string message = e.what();
    CAPTURE(message);
    for (const auto& word : words) REQUIRE(message.find(word) != std::string::npos);
    return;
  }
  FAIL("expected amc::error");
}

}  // namespace

TEST_CASE("paged runs split at page boundaries and address the pool", "[views]") {
  const test::TestCache<float> cache(70, 4, 16);  // pages of 16: last page holds 6
  const auto paged = cache.paged();
  REQUIRE(paged.positions() == 70);
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  paged.for_each_run(
      10, 50, [&](const float* k, const float* v, std::int64_t first, std::int64_t rows) {
        runs.emplace_back(first, rows);
        for (std::int64_t r = 0; r < rows; ++r) {
          REQUIRE(k[r * cache.stride] == cache.keys[(first + r) * cache.stride]);
          REQUIRE(v[r * cache.stride + 3] == cache.values[(first + r) * cache.stride + 3]);
        }
      });
  REQUIRE(runs ==
          std::vector<std::pair<std::int64_t, std::int64_t>>{{10, 6}, {16, 16}, {32, 16}, {48, 2}});
  const auto view = cache.view();
  int calls = 0;
  view.for_each_run(3, 3, [&](auto...) { ++calls; });
  REQUIRE(calls == 0);
}

TEST_CASE("softmax state: empty, add, merge and normalise", "[state]") {
  SoftmaxState empty(2, 3);
  std::vector<float> out(3, 5.0f);
  empty.normalize(0, out);
  REQUIRE(out == std::vector<float>{0, 0, 0});
  REQUIRE(std::isinf(empty.lse(1)));
  REQUIRE(empty.lse(1) < 0);

  // Split a set of positions in two, merge, compare with one pass and with a double reference.
  const std::vector<float> scores = {0.5f, 30.0f, -4.0f, 2.0f, 29.0f};
  const std::vector<std::vector<float>> values = {
      {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 1}, {-1, 2, 0}};
  SoftmaxState whole(1, 3), left(1, 3), right(1, 3);
  for (std::size_t j = 0; j < scores.size(); ++j) {
    whole.add(0, scores[j], values[j]);
    (j < 2 ? left : right).add(0, scores[j], values[j]);
  }
  SoftmaxState merged(1, 3);
  merged.merge(right);  // into an empty state
  merged.merge(left);
  merged.merge(SoftmaxState(1, 3));  // merging an empty state is a no-op
  double max = 30.0, sum = 0.0, ref[3] = {0, 0, 0};
  for (std::size_t j = 0; j < scores.size(); ++j) {
    const double w = std::exp(scores[j] - max);
    sum += w;
    for (int i = 0; i < 3; ++i) ref[i] += w * values[j][i];
  }
  std::vector<float> a(3), b(3);
  whole.normalize(0, a);
  merged.normalize(0, b);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(a[i] == Approx(ref[i] / sum).epsilon(1e-6).margin(1e-7));
    REQUIRE(b[i] == Approx(ref[i] / sum).epsilon(1e-6).margin(1e-7));
  }
  REQUIRE(merged.lse(0) == Approx(max + std::log(sum)).epsilon(1e-7));
  REQUIRE(whole.lse(0) == Approx(max + std::log(sum)).epsilon(1e-7));

  require_error([] { SoftmaxState(0, 3); }, {"amc::SoftmaxState", "heads", "0"});
  require_error([&] { merged.merge(SoftmaxState(2, 3)); }, {"merge", "shape mismatch"});
  require_error([&] { merged.normalize(0, std::span(a).first(2)); }, {"normalize", "out has 2"});
}

TEST_CASE("softmax state: blocks of scores folded in, values mixed by the caller", "[state]") {
  // Two heads, blocks of 2 and 3 positions as a flash-attention prefill sees them: fold_scores
  // turns the block's scores into weights, the caller adds weights x values to the accumulator.
  const std::vector<std::vector<float>> scores = {{0.5f, 30.0f, -4.0f, 2.0f, 29.0f},
                                                  {-1.0f, -2.0f, 60.0f, 3.0f, -70.0f}};
  const std::vector<std::vector<float>> values = {
      {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 1}, {-1, 2, 0}};
  SoftmaxState folded(2, 3), added(2, 3);
  for (const auto& [first, count] : {std::pair<std::size_t, std::size_t>{0, 2}, {2, 3}}) {
    for (std::int64_t h = 0; h < 2; ++h) {
      const std::vector<float>& row = scores[static_cast<std::size_t>(h)];
      std::vector<float> block(row.begin() + first, row.begin() + first + count);
      folded.fold_scores(h, block.data(), static_cast<std::int64_t>(count), kernels::active());
      float* acc = folded.accumulator_data() + h * 3;
      for (std::size_t j = 0; j < count; ++j) {
        for (int i = 0; i < 3; ++i) acc[i] += block[j] * values[first + j][i];
        added.add(h, row[first + j], values[first + j]);
      }
    }
  }
  for (std::int64_t h = 0; h < 2; ++h) {
    std::vector<float> a(3), b(3);
    folded.normalize(h, a);
    added.normalize(h, b);
    for (int i = 0; i < 3; ++i) REQUIRE(a[i] == Approx(b[i]).epsilon(1e-6).margin(1e-7));
    REQUIRE(folded.max(h) == added.max(h));
    REQUIRE(folded.lse(h) == Approx(added.lse(h)).epsilon(1e-7));
  }
}

TEST_CASE("invalid configs name the field and value", "[errors]") {
  auto with = [](auto edit) {
    SparseConfig c;
    edit(c);
    return c;
  };
  require_error([&] { with([](SparseConfig& c) { c.block_size = 0; }).validate(); },
                {"SparseConfig", "block_size", "0"});
  require_error([&] { with([](SparseConfig& c) { c.top_k = -1; }).validate(); }, {"top_k", "-1"});
  require_error([&] { with([](SparseConfig& c) { c.sinks = -2; }).validate(); }, {"sinks", "-2"});
  require_error([&] { with([](SparseConfig& c) { c.window = -3; }).validate(); }, {"window", "-3"});
  require_error([&] { with([](SparseConfig& c) { c.scale = -1.0f; }).validate(); },
                {"scale", "-1"});
  require_error([&] { with([](SparseConfig& c) { c.scale = std::nanf(""); }).validate(); },
                {"scale"});
  require_error(
      [&] { with([](SparseConfig& c) { c.scope = static_cast<SelectionScope>(7); }).validate(); },
      {"scope", "7"});
  require_error([&] { BlockSparseDecode<> op(with([](SparseConfig& c) { c.block_size = -4; })); },
                {"block_size", "-4"});
  require_error([] { parse_scope("heads"); }, {"scope", "heads"});
  require_error([] { parse_rule("max"); }, {"rule", "max"});
  require_error([] { DenseDecode op(0.0f); }, {"DenseDecode", "scale"});
  require_error([] { BlockSummaries(0, 4); }, {"BlockSummaries", "block_size", "0"});
  require_error([] { BlockSummaries(4, -1); }, {"BlockSummaries", "head_dim", "-1"});
}

TEST_CASE("invalid views name the field and value", "[errors]") {
  std::vector<float> data(64);
  require_error([&] { KvView<float>(data.data(), data.data(), 4, 0); },
                {"KvView", "head_dim", "0"});
  require_error([&] { KvView<float>(data.data(), data.data(), -1, 4); }, {"positions", "-1"});
  require_error([&] { KvView<float>(data.data(), data.data(), 4, 8, 4); },
                {"key_stride", "4", "head_dim 8"});
  require_error([&] { KvView<float>(data.data(), data.data(), 4, 8, 8, 2); },
                {"value_stride", "2"});
  require_error([&] { KvView<float>(nullptr, data.data(), 4, 8); }, {"non-null"});
  const std::vector<std::int32_t> table = {0, 3};
  // Pool of 4 pages of 4 rows: page 3 ends at row 16, fine; page 4 would end at 20 > 16.
  REQUIRE(PagedKvView<float>(data.data(), data.data(), 16, 4, table, 4, 2).positions() == 6);
  const std::vector<std::int32_t> bad = {0, 4};
  require_error([&] { PagedKvView<float>(data.data(), data.data(), 16, 4, bad, 4, 2); },
                {"PagedKvView", "page_table[1] = 4", "out of range", "pool_rows 16"});
  const std::vector<std::int32_t> negative = {-1};
  require_error([&] { PagedKvView<float>(data.data(), data.data(), 16, 4, negative, 4, 2); },
                {"page_table[0] = -1"});
  require_error([&] { PagedKvView<float>(data.data(), data.data(), 16, 4, table, 0, 2); },
                {"page_size", "0"});
  require_error([&] { PagedKvView<float>(data.data(), data.data(), 16, 4, table, 4, 5); },
                {"last_page_length", "5"});
  require_error([&] { PagedKvView<float>(data.data(), data.data(), 16, 4, table, 4, 0); },
                {"last_page_length", "0"});
}

TEST_CASE("operators reject mismatched inputs", "[errors]") {
  const test::TestCache<float> cache(100, 16);
  const auto summaries = BlockSummaries::build(cache.view(), 16);
  RowMatrix queries = RowMatrix::Random(2, 16), out(2, 16), wide(2, 8);
  std::vector<HeadResult> results(2), short_results(1);
  const KvHead<KvView<float>> head{cache.view(), &summaries};
  DenseDecode dense;
  require_error([&] { dense.decode(RowMatrix::Random(2, 8), head, wide, results); },
                {"DenseDecode::decode", "head_dim 8", "head_dim 16"});
  require_error([&] { dense.decode(queries, head, wide, results); },
                {"out is [2, 8]", "expected [2, 16]"});
  require_error([&] { dense.decode(queries, head, out, short_results); }, {"results has 1"});
  SparseConfig config;
  BlockSparseDecode<> sparse(config);  // block_size 16
  require_error(
      [&] {
        sparse.decode(queries, KvHead<KvView<float>>{cache.view(), nullptr}, out, results);
      },
      {"BlockSparseDecode::select", "summaries is null"});
  const auto other = BlockSummaries::build(cache.view(), 8);
  require_error(
      [&] {
        sparse.decode(queries, KvHead<KvView<float>>{cache.view(), &other}, out, results);
      },
      {"block_size 8", "config.block_size is 16"});
  const test::TestCache<float> longer(120, 16);
  require_error(
      [&] {
        sparse.decode(queries, KvHead<KvView<float>>{longer.view(), &summaries}, out, results);
      },
      {"summaries cover 100 positions", "KV view has 120"});
  config.rule = RuleName::channel_bound;  // needs channel bounds the summaries do not have
  BlockSparseDecode<> bound(config);
  require_error(
      [&] { bound.decode(queries, head, out, results); },
      {"rule bound reads summaries with channel_bounds=1", "built with channel_bounds=0"});
  Support beyond;
  beyond.add(90, 110, 200);
  beyond.normalize();
  require_error([&] { decode_support(queries, cache.view(), beyond, 0.25f, out, results); },
                {"decode_support", "position 109", "100 positions"});
  BlockSummaries appendable(4, 16, {.value_norms = true});
  std::vector<float> key(16), value(15);
  require_error(
      [&] { appendable.append(std::span<const float>(key), std::span<const float>(value)); },
      {"append", "value has 15"});
  require_error([&] { appendable.append(std::span<const float>(key).first(3)); }, {"key has 3"});
}

// amc-demo: dense and block-sparse decode attention on one generated KV head.
//
// The demo builds a synthetic cache shaped like one KV head of a long-context decode step
// (8192 positions, head_dim 64, bf16, a GQA group of 7 query heads), runs the dense operator
// once as the reference and the block-sparse operator under several configurations, and prints
// for each what it read, how much softmax mass it kept, how far its output moved and how long
// a call took. It uses amc only through its public header.
//
// The cache has the structure that makes sparse decoding interesting:
//   - attention sinks: the first positions have large keys aligned with the queries, so they
//     take much of the softmax mass (their values are small, as in trained models);
//   - topical segments: a few runs of positions whose keys lean towards the queries, the kind
//     of region mean pooling is good at finding;
//   - needles: single positions with a high score and distinctive values, inside blocks of
//     ordinary keys; some are wanted by all heads, some by one head only;
//   - everything else: random keys and values.
//
// Reading the table (docs/theory.md sections 1 and 2):
//   retained  P_S = exp(L_S - L_all), the share of the dense softmax mass the support kept
//             (the minimum over the 7 query heads). eps = 1 - P_S is the omitted mass.
//   max err   max over heads of ||o - o_S||, the distance between dense and sparse outputs.
//             By the exact identity o - o_S = eps * (mu_O - o_S) it depends on eps *and* on
//             how far the omitted values' mean mu_O lies from o_S, so a high retained mass is
//             not a guarantee: a few omitted needles with unusual values can move the output
//             more than a larger omitted mass of ordinary positions.
//   read/head positions read by each query head (|S|); rows loaded is the number of KV rows
//             the call streamed: per-group scope reads one support for the whole group, per-head
//             scope reads each head's support separately.
//   us/call   median wall time of one decode call for the whole group, selection included.
//   speedup   dense time / this time. The oracle scores blocks by their true mass, which means
//             reading every key: it is an evaluation tool (the best any selector could keep),
//             never a fast path.

#include <amc/amc.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr std::int64_t kPositions = 8192;
constexpr std::int64_t kHeadDim = 64;
constexpr std::int64_t kKvHeads = 2;     // the engine's cache holds 2 KV heads; we use head 0
constexpr std::int64_t kGroupHeads = 7;  // query heads sharing KV head 0 (as in Qwen2-0.5B)
constexpr std::int64_t kSinks = 4;
constexpr std::int64_t kWindow = 64;
constexpr int kRepetitions = 9;

using Rng = std::mt19937_64;

std::vector<float> random_vector(Rng& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(kHeadDim));
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<float> random_unit(Rng& rng) {
  std::vector<float> v = random_vector(rng, 1.0f);
  float norm = 0.0f;
  for (float x : v) norm += x * x;
  norm = std::sqrt(norm);
  for (float& x : v) x /= norm;
  return v;
}

/// x += alpha * y
void add_scaled(std::vector<float>& x, float alpha, const std::vector<float>& y) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += alpha * y[i];
}

/// An engine-style cache [positions, kv_heads, head_dim] in bf16, plus the group's queries.
struct Synthetic {
  std::vector<amc::bf16> keys;
  std::vector<amc::bf16> values;
  amc::RowMatrix queries;  // [kGroupHeads, kHeadDim] f32
};

Synthetic generate() {
  Rng rng(2026);
  Synthetic s;
  const auto row_elems = static_cast<std::size_t>(kKvHeads * kHeadDim);
  s.keys.resize(static_cast<std::size_t>(kPositions) * row_elems);
  s.values.resize(s.keys.size());

  // Queries: a direction all heads of the group share, one of their own, and noise. With the
  // scale c = 1/8 an ordinary key (entries of sd 0.8) scores about N(0, 1).
  const std::vector<float> shared = random_unit(rng);
  std::vector<std::vector<float>> own(kGroupHeads);
  s.queries.resize(kGroupHeads, kHeadDim);
  for (std::int64_t h = 0; h < kGroupHeads; ++h) {
    own[static_cast<std::size_t>(h)] = random_unit(rng);
    std::vector<float> q = random_vector(rng, 0.5f);
    add_scaled(q, 6.0f, shared);
    add_scaled(q, 3.0f, own[static_cast<std::size_t>(h)]);
    for (std::int64_t i = 0; i < kHeadDim; ++i) s.queries(h, i) = q[static_cast<std::size_t>(i)];
  }

  std::vector<std::vector<float>> key_rows(kPositions), value_rows(kPositions);
  for (std::int64_t p = 0; p < kPositions; ++p) {
    key_rows[static_cast<std::size_t>(p)] = random_vector(rng, 0.6f);
    value_rows[static_cast<std::size_t>(p)] = random_vector(rng, 1.0f);
  }
  // Sinks: scores around 9, small values.
  for (std::int64_t p = 0; p < kSinks; ++p) {
    key_rows[static_cast<std::size_t>(p)] = random_vector(rng, 0.3f);
    add_scaled(key_rows[static_cast<std::size_t>(p)], 14.0f, shared);
    value_rows[static_cast<std::size_t>(p)] = random_vector(rng, 0.1f);
  }
  // Positions away from the sinks and the recent window, where selection has to find things.
  std::uniform_int_distribution<std::int64_t> middle(256, kPositions - 4 * kWindow);
  // Topical segments: 48 positions whose scores are lifted by about 2, with a shared value.
  for (int segment = 0; segment < 6; ++segment) {
    const std::int64_t begin = middle(rng);
    const std::vector<float> topic_value = random_vector(rng, 1.0f);
    for (std::int64_t p = begin; p < begin + 48; ++p) {
      add_scaled(key_rows[static_cast<std::size_t>(p)], 4.0f, shared);
      value_rows[static_cast<std::size_t>(p)] = random_vector(rng, 0.5f);
      add_scaled(value_rows[static_cast<std::size_t>(p)], 1.0f, topic_value);
    }
  }
  // Needles: one position scoring about 6-7 in a block of ordinary ones, with large values.
  // Four are wanted by every head (aligned with the shared direction), and one per head by
  // that head only (aligned with its own direction).
  for (int needle = 0; needle < 4; ++needle) {
    const auto p = static_cast<std::size_t>(middle(rng));
    add_scaled(key_rows[p], 10.0f, shared);
    value_rows[p] = random_vector(rng, 3.0f);
  }
  for (std::int64_t h = 0; h < kGroupHeads; ++h) {
    const auto p = static_cast<std::size_t>(middle(rng));
    add_scaled(key_rows[p], 16.0f, own[static_cast<std::size_t>(h)]);
    value_rows[p] = random_vector(rng, 3.0f);
  }

  // Store as bf16 in KV head 0 of the interleaved cache; KV head 1 gets unrelated data.
  for (std::int64_t p = 0; p < kPositions; ++p) {
    const std::size_t row = static_cast<std::size_t>(p) * row_elems;
    const std::vector<float> other_key = random_vector(rng, 1.0f);
    const std::vector<float> other_value = random_vector(rng, 1.0f);
    for (std::size_t i = 0; i < static_cast<std::size_t>(kHeadDim); ++i) {
      s.keys[row + i] = amc::to_bf16(key_rows[static_cast<std::size_t>(p)][i]);
      s.values[row + i] = amc::to_bf16(value_rows[static_cast<std::size_t>(p)][i]);
      s.keys[row + static_cast<std::size_t>(kHeadDim) + i] = amc::to_bf16(other_key[i]);
      s.values[row + static_cast<std::size_t>(kHeadDim) + i] = amc::to_bf16(other_value[i]);
    }
  }
  return s;
}

/// Median wall time of `call` in microseconds, after one warm-up call.
template <class Fn>
double median_microseconds(Fn&& call) {
  call();
  std::vector<double> times;
  for (int r = 0; r < kRepetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    call();
    const auto stop = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  std::nth_element(times.begin(), times.begin() + kRepetitions / 2, times.end());
  return times[kRepetitions / 2];
}

/// One decode call's outputs: [heads, head_dim] and one HeadResult per head.
struct Outputs {
  amc::RowMatrix out = amc::RowMatrix::Zero(kGroupHeads, kHeadDim);
  std::vector<amc::HeadResult> results = std::vector<amc::HeadResult>(kGroupHeads);
};

}  // namespace

int main() {
  const Synthetic data = generate();

  // KV head 0 of a [positions, kv_heads, head_dim] cache: starts at element 0, one row every
  // kv_heads * head_dim elements. No copy is made.
  const amc::KvView<amc::bf16> kv(data.keys.data(), data.values.data(), kPositions, kHeadDim,
                                  kKvHeads * kHeadDim);

  // Block summaries, as an engine would keep them while appending keys. Channel bounds are
  // kept for the channel-bound (Quest-style) selector.
  std::map<std::int64_t, amc::BlockSummaries> summaries;
  for (const std::int64_t block_size : {16, 32}) {
    summaries.emplace(block_size,
                      amc::BlockSummaries::build(kv, block_size, {.channel_bounds = true}));
  }

  // The dense reference: the output o and L_all per head.
  amc::DenseDecode dense;
  Outputs reference;
  const amc::KvHead<amc::KvView<amc::bf16>> dense_head{kv, nullptr};
  const double dense_us = median_microseconds(
      [&] { dense.decode(data.queries, dense_head, reference.out, reference.results); });
  double norm_min = std::numeric_limits<double>::infinity(), norm_max = 0.0;
  for (std::int64_t h = 0; h < kGroupHeads; ++h) {
    norm_min = std::min(norm_min, static_cast<double>(reference.out.row(h).norm()));
    norm_max = std::max(norm_max, static_cast<double>(reference.out.row(h).norm()));
  }

  std::printf(
      "amc %.*s demo: one KV head, %lld positions, head_dim %lld, bf16, %lld query heads, "
      "kernels: %.*s\n",
      static_cast<int>(amc::version().size()), amc::version().data(),
      static_cast<long long>(kPositions), static_cast<long long>(kHeadDim),
      static_cast<long long>(kGroupHeads), static_cast<int>(amc::kernels::active().name.size()),
      amc::kernels::active().name.data());
  std::printf(
      "support = %lld sinks + %lld recent positions + top-k blocks; dense ||o|| per head "
      "in [%.2f, %.2f]\n\n",
      static_cast<long long>(kSinks), static_cast<long long>(kWindow), norm_min, norm_max);
  std::printf("%-22s %9s %11s %9s %13s %9s %8s\n", "config", "read/head", "rows loaded", "retained",
              "max ||o-o_S||", "us/call", "speedup");
  std::printf("%-22s %9lld %11lld %9.4f %13.4f %9.1f %8.2f\n", "dense",
              static_cast<long long>(kPositions), static_cast<long long>(kPositions), 1.0, 0.0,
              dense_us, 1.0);

  for (const amc::RuleName rule :
       {amc::RuleName::mean_pooled, amc::RuleName::channel_bound, amc::RuleName::oracle}) {
    for (const amc::SelectionScope scope :
         {amc::SelectionScope::per_head, amc::SelectionScope::per_group}) {
      for (const auto& [block_size, top_k] :
           {std::pair<std::int64_t, std::int64_t>{16, 8}, {16, 16}, {32, 8}, {32, 16}}) {
        amc::SparseConfig config;
        config.block_size = block_size;
        config.top_k = top_k;
        config.sinks = kSinks;
        config.window = kWindow;
        config.scope = scope;
        config.rule = rule;
        config.combine = amc::GroupCombine::sum;  // per-group: sum of per-head softmaxed scores

        amc::BlockSparseDecode<> sparse(config);  // the selector follows config.rule
        const amc::KvHead<amc::KvView<amc::bf16>> head{kv, &summaries.at(block_size)};
        Outputs got;
        const double us =
            median_microseconds([&] { sparse.decode(data.queries, head, got.out, got.results); });

        double retained_min = 1.0, error_max = 0.0;
        std::int64_t read_max = 0, rows_loaded = 0;
        for (std::int64_t h = 0; h < kGroupHeads; ++h) {
          const auto& r = got.results[static_cast<std::size_t>(h)];
          // Omitted mass from two log-sum-exps, no second pass: eps = -expm1(L_S - L_all).
          const double eps =
              -std::expm1(static_cast<double>(r.lse) -
                          static_cast<double>(reference.results[static_cast<std::size_t>(h)].lse));
          retained_min = std::min(retained_min, 1.0 - eps);
          error_max = std::max(error_max,
                               static_cast<double>((reference.out.row(h) - got.out.row(h)).norm()));
          read_max = std::max(read_max, r.positions_read);
          rows_loaded += r.positions_read;
        }
        if (scope == amc::SelectionScope::per_group) rows_loaded = read_max;

        const std::string name = std::string(amc::to_string(rule)) + " " +
                                 std::string(amc::to_string(scope)) +
                                 " B=" + std::to_string(block_size) + " k=" + std::to_string(top_k);
        std::printf("%-22s %9lld %11lld %9.4f %13.4f %9.1f %8.2f\n", name.c_str(),
                    static_cast<long long>(read_max), static_cast<long long>(rows_loaded),
                    retained_min, error_max, us, dense_us / us);
      }
    }
  }

  std::printf(
      "\nretained: min over heads of exp(L_S - L_all); max ||o-o_S||: max over heads. By the "
      "identity\no - o_S = eps (mu_O - o_S) the error also depends on where the omitted values "
      "lie: mean pooling\ndilutes single high-scoring positions (needles) and misses some, and "
      "a missed needle with\nunusual values costs more than its share of mass suggests. Retained "
      "mass alone is not a\nguarantee. The oracle reads every key (evaluation only). Times are "
      "for this machine and run.\n");
  return 0;
}

// The retrieval probe: the options' checks, the synthetic keys, and selection through amc's
// operators, counted per cell. The files it writes are retrieval_report.cpp's. See
// retrieval_probe.hpp.
#include "retrieval_probe.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <type_traits>
#include <utility>

#include "amc/attention/block_summaries.hpp"
#include "amc/attention/decode.hpp"
#include "amc/attention/registered_rule.hpp"
#include "amc/error.hpp"
#include "amc/kv_view.hpp"
#include "amc/tensor.hpp"
#include "text.hpp"

namespace amc::eval {
namespace {

constexpr const char* kWhere = "retrieval";

// Bounds that keep a run's memory and time sane; far above any useful setting.
constexpr std::int64_t kMaxHeadDim = 1024;
constexpr std::int64_t kMaxContext = std::int64_t{1} << 20;
constexpr std::int64_t kMaxKeyFloats = std::int64_t{1} << 27;  // 512 MiB of f32 keys
constexpr std::int64_t kMaxTrials = 1'000'000;
constexpr double kMaxStrength = 100.0;

// --- validation -------------------------------------------------------------------------------

template <class T>
void require_distinct(const std::vector<T>& values, const char* flag) {
  std::vector<T> ordered = values;
  std::sort(ordered.begin(), ordered.end());
  const auto repeated = std::adjacent_find(ordered.begin(), ordered.end());
  if (repeated != ordered.end()) {
    if constexpr (std::is_same_v<T, RuleName>) {
      detail::throw_error(kWhere, flag, ": '", to_string(*repeated), "' is listed twice");
    } else if constexpr (std::is_floating_point_v<T>) {
      detail::throw_error(kWhere, flag, ": ", round_trip(*repeated), " is listed twice");
    } else {
      detail::throw_error(kWhere, flag, ": ", *repeated, " is listed twice");
    }
  }
}

template <class T>
void require_nonempty(const std::vector<T>& values, const char* flag) {
  AMC_CHECK(!values.empty(), kWhere, flag, ": the list is empty; give at least one value");
}

// --- synthetic keys ---------------------------------------------------------------------------

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// Standard normal values from a seeded mt19937_64 by Box-Muller. std::normal_distribution's
/// algorithm differs between standard libraries; this one is the same everywhere (up to the
/// last bits of log and cos). The tails are real Gaussian tails, which matters here: the
/// largest of thousands of distractor scores sets the needle's score.
class GaussianSource {
 public:
  explicit GaussianSource(std::uint64_t seed) : rng_(seed) {}

  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 6.283185307179586 * uniform();
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  double uniform() {  // in (0, 1]: log never sees 0
    return (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53;
  }

  std::mt19937_64 rng_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

double dot(const float* a, const std::vector<double>& b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < b.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

std::vector<double> unit_query(const RetrievalHaystack& haystack) {
  std::vector<double> unit(haystack.query.begin(), haystack.query.end());
  double norm = 0.0;
  for (const double x : unit) norm += x * x;
  norm = std::sqrt(norm);
  for (double& x : unit) x /= norm;
  return unit;
}

// --- selection --------------------------------------------------------------------------------

/// 1 + the number of candidate blocks that select_top_k ranks before `block`: higher score, or
/// the same score and a lower index; NaN ranks last.
std::int64_t rank_of(std::span<const float> scores, const CandidateBlocks& candidates,
                     std::int64_t block) {
  auto key = [&](std::int64_t b) {
    const float s = scores[static_cast<std::size_t>(b)];
    return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
  };
  const float own = key(block);
  std::int64_t rank = 1;
  for (std::int64_t b = candidates.first; b < candidates.last; ++b) {
    const float other = key(b);
    if (other > own || (other == own && b < block)) ++rank;
  }
  return rank;
}

/// Sums of one cell over its trials.
struct CellTotals {
  std::int64_t hits = 0;
  double rank = 0.0;
  double support = 0.0;
  double retained_mass = 0.0;
  double lift = 0.0;
  std::int64_t candidates = 0;  // the same in every trial
  std::vector<std::uint8_t> trial_hits;
};

template <class T>
std::vector<T> sorted(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values;
}

}  // namespace

// --- options ----------------------------------------------------------------------------------

void RetrievalProbeOptions::validate() const {
  AMC_CHECK(head_dim >= 1 && head_dim <= kMaxHeadDim, kWhere, "--head-dim: must be in [1, ",
            kMaxHeadDim, "], got ", head_dim);
  AMC_CHECK(sinks >= 0 && sinks <= kMaxContext, kWhere, "--sinks: must be in [0, ", kMaxContext,
            "], got ", sinks);
  AMC_CHECK(window >= 0 && window <= kMaxContext, kWhere, "--window: must be in [0, ", kMaxContext,
            "], got ", window);
  AMC_CHECK(trials >= 1 && trials <= kMaxTrials, kWhere, "--trials: must be in [1, ", kMaxTrials,
            "], got ", trials);
  AMC_CHECK(std::isfinite(strength) && strength >= 0.0 && strength <= kMaxStrength, kWhere,
            "--strength: must be a number in [0, ", kMaxStrength, "], got ", round_trip(strength));

  require_nonempty(contexts, "--contexts");
  require_distinct(contexts, "--contexts");
  for (const std::int64_t context : contexts) {
    AMC_CHECK(context >= 1 && context <= kMaxContext, kWhere, "--contexts: ", context,
              " is not in [1, ", kMaxContext, "]");
    AMC_CHECK(context * head_dim <= kMaxKeyFloats, kWhere, "--contexts: ", context,
              " positions of head_dim ", head_dim, " need more than ", kMaxKeyFloats,
              " floats of keys");
  }
  const std::int64_t shortest = *std::min_element(contexts.begin(), contexts.end());

  require_nonempty(block_sizes, "--block-sizes");
  require_distinct(block_sizes, "--block-sizes");
  for (const std::int64_t b : block_sizes) {
    AMC_CHECK(b >= 1 && b <= shortest, kWhere, "--block-sizes: ", b,
              " is not in [1, shortest context ", shortest, "]");
  }

  require_nonempty(ks, "--ks");
  require_distinct(ks, "--ks");
  for (const std::int64_t k : ks) {
    AMC_CHECK(k >= 1 && k <= kMaxContext, kWhere, "--ks: ", k, " is not in [1, ", kMaxContext, "]");
  }

  require_nonempty(depths, "--depths");
  require_distinct(depths, "--depths");
  for (const double depth : depths) {
    // round_trip, not the stream's 6 digits: "1.0000001 is not in [0, 1)", never "1 is not".
    AMC_CHECK(std::isfinite(depth) && depth >= 0.0 && depth < 1.0, kWhere,
              "--depths: ", round_trip(depth), " is not in [0, 1)");
    for (const std::int64_t context : contexts) {
      // A needle in the sinks or window is in every support: such a cell measures nothing.
      const std::int64_t position = needle_position(context, depth);
      AMC_CHECK(position >= sinks, kWhere, "--depths: depth ", round_trip(depth),
                " puts the needle at position ", position, " of context ", context,
                ", inside the sinks (--sinks ", sinks,
                ": the first positions, always kept); use a larger depth or fewer sinks");
      AMC_CHECK(position < context - window, kWhere, "--depths: depth ", round_trip(depth),
                " puts the needle at position ", position, " of context ", context,
                ", inside the window (--window ", window,
                ": the last positions, always kept); use a smaller depth or a longer context");
    }
  }

  require_nonempty(rules, "--rules");
  require_distinct(rules, "--rules");
}

// --- synthetic keys ---------------------------------------------------------------------------

RetrievalHaystack make_haystack(const RetrievalProbeOptions& options, std::int64_t context,
                                std::int64_t trial) {
  AMC_CHECK(context >= 1 && options.head_dim >= 1 && trial >= 0, "amc::eval::make_haystack",
            "context ", context, ", head_dim ", options.head_dim, " and trial ", trial,
            " must be positive (trial >= 0)");
  RetrievalHaystack h;
  h.context = context;
  h.head_dim = options.head_dim;
  GaussianSource normal(
      splitmix64(splitmix64(options.seed ^ splitmix64(static_cast<std::uint64_t>(context))) +
                 static_cast<std::uint64_t>(trial)));
  h.query.resize(static_cast<std::size_t>(h.head_dim));
  double norm = 0.0;
  for (float& x : h.query) {
    const double v = normal();
    x = static_cast<float>(v);
    norm += v * v;
  }
  // Norm sqrt(d): with the scale c = 1/sqrt(d), scores are <q/|q|, k>, N(0, 1) for N(0, I) keys.
  const double rescale = std::sqrt(static_cast<double>(h.head_dim) / norm);
  for (float& x : h.query) x = static_cast<float>(x * rescale);
  h.keys.resize(static_cast<std::size_t>(context * h.head_dim));
  for (float& x : h.keys) x = static_cast<float>(normal());
  return h;
}

std::int64_t needle_position(std::int64_t context, double depth) {
  const auto position = static_cast<std::int64_t>(std::floor(depth * static_cast<double>(context)));
  return std::clamp<std::int64_t>(position, 0, context - 1);
}

double place_needle(RetrievalHaystack& haystack, std::int64_t position, double strength) {
  AMC_CHECK(position >= 0 && position < haystack.context, "amc::eval::place_needle", "position ",
            position, " is outside the context of ", haystack.context);
  const std::vector<double> unit = unit_query(haystack);
  const auto d = static_cast<std::size_t>(haystack.head_dim);
  double largest = -std::numeric_limits<double>::infinity();
  for (std::int64_t p = 0; p < haystack.context; ++p) {
    if (p != position) largest = std::max(largest, dot(&haystack.keys[p * d], unit));
  }
  if (haystack.context == 1) largest = 0.0;  // no distractors: the distractors' mean
  const double target = largest + strength;
  // Replace the key's component along the query, keep the rest: a needle that differs from a
  // distractor only in its score, so key norms and channel ranges stay realistic.
  float* key = &haystack.keys[static_cast<std::size_t>(position) * d];
  const double along = dot(key, unit);
  for (std::size_t i = 0; i < d; ++i) {
    key[i] = static_cast<float>(static_cast<double>(key[i]) + (target - along) * unit[i]);
  }
  return target;
}

// --- the probe --------------------------------------------------------------------------------

std::vector<RetrievalProbeResult> run_retrieval_probe(const RetrievalProbeOptions& options) {
  options.validate();
  const auto contexts = sorted(options.contexts);
  const auto block_sizes = sorted(options.block_sizes);
  const auto ks = sorted(options.ks);
  const auto depths = sorted(options.depths);
  const auto& rules = options.rules;
  const std::size_t n_c = contexts.size(), n_b = block_sizes.size(), n_k = ks.size(),
                    n_d = depths.size(), n_s = rules.size();
  auto cell_index = [&](std::size_t s, std::size_t c, std::size_t b, std::size_t k, std::size_t d) {
    return (((s * n_c + c) * n_b + b) * n_k + k) * n_d + d;
  };
  std::vector<CellTotals> totals(n_s * n_c * n_b * n_k * n_d);
  for (auto& t : totals) t.trial_hits.assign(static_cast<std::size_t>(options.trials), 0);

  // One operator per (block size, k, rule), reused across trials (they own their scratch).
  std::vector<BlockSparseDecode<RegisteredRule>> operators;
  operators.reserve(n_b * n_k * n_s);
  for (const std::int64_t b : block_sizes) {
    for (const std::int64_t k : ks) {
      for (const RuleName s : rules) {
        SparseConfig config;
        config.block_size = b;
        config.top_k = k;
        config.sinks = options.sinks;
        config.window = options.window;
        config.rule_settings = options.rule_settings;
        config.rule = s;
        operators.emplace_back(config);
      }
    }
  }
  // The summaries every rule of the probe needs (a rule's own requirements).
  SummaryOptions summary_options;
  for (const auto& op : operators) {
    summary_options = summary_options.merged(required_summaries(op.config()));
  }
  DenseDecode dense;
  const std::int64_t d = options.head_dim;
  RowMatrix query(1, d), out(1, d);
  std::vector<HeadResult> dense_result(1), sparse_result(1);
  std::vector<float> saved(static_cast<std::size_t>(d));

  for (std::size_t ci = 0; ci < n_c; ++ci) {
    const std::int64_t context = contexts[ci];
    for (std::int64_t trial = 0; trial < options.trials; ++trial) {
      RetrievalHaystack haystack = make_haystack(options, context, trial);
      const std::vector<double> unit = unit_query(haystack);
      for (std::int64_t i = 0; i < d; ++i)
        query(0, i) = haystack.query[static_cast<std::size_t>(i)];
      for (std::size_t di = 0; di < n_d; ++di) {
        const std::int64_t position = needle_position(context, depths[di]);
        float* row = &haystack.keys[static_cast<std::size_t>(position * d)];
        std::copy(row, row + d, saved.begin());
        const double needle_score = place_needle(haystack, position, options.strength);

        // The values are irrelevant to selection and to mass; the keys stand in for them.
        const KvView<float> kv(haystack.keys.data(), haystack.keys.data(), context, d);
        dense.decode(query, KvHead<KvView<float>>{kv, nullptr}, out, dense_result);
        const double lse_all = dense_result[0].lse;

        for (std::size_t bi = 0; bi < n_b; ++bi) {
          const std::int64_t b = block_sizes[bi];
          const BlockSummaries summaries = BlockSummaries::build(kv, b, summary_options);
          const std::int64_t block = position / b;
          const std::int64_t begin = block * b, end = std::min(begin + b, context);
          double rest = 0.0;
          for (std::int64_t p = begin; p < end; ++p) {
            if (p != position) rest += dot(&haystack.keys[static_cast<std::size_t>(p * d)], unit);
          }
          const double rest_mean =
              end - begin > 1 ? rest / static_cast<double>(end - begin - 1) : 0.0;
          const double lift = (needle_score - rest_mean) / static_cast<double>(end - begin);

          for (std::size_t ki = 0; ki < n_k; ++ki) {
            for (std::size_t si = 0; si < n_s; ++si) {
              auto& op = operators[(bi * n_k + ki) * n_s + si];
              op.decode(query, KvHead<KvView<float>>{kv, &summaries}, out, sparse_result);
              const CandidateBlocks candidates = candidate_blocks(context, op.config());
              CellTotals& cell = totals[cell_index(si, ci, bi, ki, di)];
              const bool hit = op.support(0).contains(position);
              cell.hits += hit ? 1 : 0;
              cell.trial_hits[static_cast<std::size_t>(trial)] = hit ? 1 : 0;
              cell.rank += static_cast<double>(rank_of(op.block_scores(), candidates, block));
              cell.support += static_cast<double>(sparse_result[0].positions_read);
              cell.retained_mass += std::exp(static_cast<double>(sparse_result[0].lse) - lse_all);
              cell.lift += lift;
              cell.candidates = candidates.count();
            }
          }
        }
        std::copy(saved.begin(), saved.end(), row);  // the next depth starts from the distractor
      }
    }
  }

  std::vector<RetrievalProbeResult> rows;
  rows.reserve(totals.size());
  const auto trials = static_cast<double>(options.trials);
  for (std::size_t si = 0; si < n_s; ++si)
    for (std::size_t ci = 0; ci < n_c; ++ci)
      for (std::size_t bi = 0; bi < n_b; ++bi)
        for (std::size_t ki = 0; ki < n_k; ++ki)
          for (std::size_t di = 0; di < n_d; ++di) {
            CellTotals& cell = totals[cell_index(si, ci, bi, ki, di)];
            RetrievalProbeResult r;
            r.rule = rules[si];
            r.block_size = block_sizes[bi];
            r.k = ks[ki];
            r.context = contexts[ci];
            r.depth = depths[di];
            r.needle_position = needle_position(r.context, r.depth);
            r.trials = options.trials;
            r.hits = cell.hits;
            r.hit_rate = static_cast<double>(cell.hits) / trials;
            r.mean_rank = cell.rank / trials;
            r.candidate_blocks = cell.candidates;
            r.chance =
                cell.candidates > 0
                    ? std::min(1.0, static_cast<double>(r.k) / static_cast<double>(cell.candidates))
                    : 1.0;
            r.needle_lift = cell.lift / trials;
            r.mean_support = cell.support / trials;
            r.mean_retained_mass = cell.retained_mass / trials;
            r.strength = options.strength;
            r.head_dim = options.head_dim;
            r.sinks = options.sinks;
            r.window = options.window;
            r.seed = options.seed;
            r.trial_hits = std::move(cell.trial_hits);
            rows.push_back(std::move(r));
          }
  return rows;
}

}  // namespace amc::eval

// The retrieval probe: synthetic keys, selection through amc's operators, and the outputs
// (CSV, Markdown, gnuplot data, script and plots). See retrieval_probe.hpp.
#include "retrieval_probe.hpp"

#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <string_view>
#include <type_traits>

#include "amc/attention/block_summaries.hpp"
#include "amc/attention/decode.hpp"
#include "amc/attention/selectors.hpp"
#include "amc/error.hpp"
#include "amc/kv_view.hpp"
#include "amc/tensor.hpp"

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
    if constexpr (std::is_same_v<T, ScoreRule>) {
      detail::throw_error(kWhere, flag, ": '", to_string(*repeated), "' is listed twice");
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

// --- output helpers ---------------------------------------------------------------------------

/// printf into a std::string (GCC 12's library has no std::format).
[[gnu::format(printf, 1, 2)]] std::string format(const char* pattern, ...) {
  va_list args;
  va_start(args, pattern);
  va_list copy;
  va_copy(copy, args);
  const int size = std::vsnprintf(nullptr, 0, pattern, copy);
  va_end(copy);
  std::string out(static_cast<std::size_t>(std::max(size, 0)), '\0');
  std::vsnprintf(out.data(), out.size() + 1, pattern, args);
  va_end(args);
  return out;
}

/// Flushes a directory entry to the disk (after a rename); best effort: the data are already
/// safe in the file.
void sync_directory(const std::filesystem::path& directory) {
  const int fd =
      ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

/// Writes `text` to a temporary file next to `path`, flushes it to the disk, renames it over
/// `path` and flushes the directory: readers, and the disk after a crash, see the old file or
/// the new one, never a partial one.
void write_atomically(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::path temporary = path;
  temporary += format(".tmp-%ld", static_cast<long>(::getpid()));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  AMC_CHECK(fd >= 0, kWhere, "cannot create ", temporary.string(), ": ", std::strerror(errno));
  std::size_t written = 0;
  int error = 0;
  while (error == 0 && written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n > 0) {
      written += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      error = errno;
    }
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  ::close(fd);
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    detail::throw_error(kWhere, "cannot write ", path.string(), ": ", std::strerror(error));
  }
  sync_directory(path.parent_path());
}

template <class T>
std::string join(const std::vector<T>& values, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += separator;
    if constexpr (std::is_floating_point_v<T>) {
      out += format("%g", values[i]);
    } else {
      out += std::to_string(values[i]);
    }
  }
  return out;
}

/// The grid the rows span, recovered from the rows themselves (so the writers need no options).
struct Grid {
  std::vector<ScoreRule> selectors;  // in row order
  std::vector<std::int64_t> contexts, block_sizes, ks;
  std::vector<double> depths;
};

Grid grid_of(const std::vector<RetrievalProbeResult>& rows) {
  Grid grid;
  std::set<std::int64_t> contexts, block_sizes, ks;
  std::set<double> depths;
  for (const auto& row : rows) {
    if (std::find(grid.selectors.begin(), grid.selectors.end(), row.selector) ==
        grid.selectors.end()) {
      grid.selectors.push_back(row.selector);
    }
    contexts.insert(row.context);
    block_sizes.insert(row.block_size);
    ks.insert(row.k);
    depths.insert(row.depth);
  }
  grid.contexts.assign(contexts.begin(), contexts.end());
  grid.block_sizes.assign(block_sizes.begin(), block_sizes.end());
  grid.ks.assign(ks.begin(), ks.end());
  grid.depths.assign(depths.begin(), depths.end());
  return grid;
}

/// Mean over depths (and optionally over contexts and ks) of a per-cell quantity; rows that
/// match every given filter count. A negative filter matches everything.
template <class Field>
double average(const std::vector<RetrievalProbeResult>& rows, ScoreRule selector,
               std::int64_t context, std::int64_t block_size, std::int64_t k, Field field) {
  double sum = 0.0;
  std::int64_t count = 0;
  for (const auto& row : rows) {
    if (row.selector != selector) continue;
    if (context >= 0 && row.context != context) continue;
    if (block_size >= 0 && row.block_size != block_size) continue;
    if (k >= 0 && row.k != k) continue;
    sum += field(row);
    ++count;
  }
  return count > 0 ? sum / static_cast<double>(count) : std::nan("");
}

const char* selector_description(ScoreRule rule) {
  switch (rule) {
    case ScoreRule::mean_pooled:
      return "`mean`: c <q, mean key of the block> (the method under study)";
    case ScoreRule::channel_bound:
      return "`bound`: the channel bound c sum_i max(q_i kmin_i, q_i kmax_i) >= the block's "
             "largest score (Quest-style comparison)";
    case ScoreRule::oracle:
      return "`oracle`: the log of the block's true softmax mass (reads every key; the best "
             "any rule can do for retained mass)";
  }
  return "?";
}

std::string csv_text(const std::vector<RetrievalProbeResult>& rows) {
  std::string out =
      "selector,block_size,k,context,depth,trials,hit_rate,hits,mean_rank,candidate_blocks,chance,"
      "needle_position,needle_lift,mean_support,mean_retained_mass,strength,head_dim,sinks,"
      "window,seed\n";
  for (const auto& r : rows) {
    out += format(
        "%s,%lld,%lld,%lld,%g,%lld,%.4f,%lld,%.3f,%lld,%.4f,%lld,%.4f,%.1f,%.6f,%g,%lld,%lld,"
        "%lld,%llu\n",
        std::string(to_string(r.selector)).c_str(), static_cast<long long>(r.block_size),
        static_cast<long long>(r.k), static_cast<long long>(r.context), r.depth,
        static_cast<long long>(r.trials), r.hit_rate, static_cast<long long>(r.hits), r.mean_rank,
        static_cast<long long>(r.candidate_blocks), r.chance,
        static_cast<long long>(r.needle_position), r.needle_lift, r.mean_support,
        r.mean_retained_mass, r.strength, static_cast<long long>(r.head_dim),
        static_cast<long long>(r.sinks), static_cast<long long>(r.window),
        static_cast<unsigned long long>(r.seed));
  }
  return out;
}

std::string describe_change(double from, double to) {
  if (to < from - 0.05) return "falls";
  if (to > from + 0.05) return "rises";
  return "stays about the same";
}

std::string markdown_text(const std::vector<RetrievalProbeResult>& rows) {
  const Grid grid = grid_of(rows);
  const RetrievalProbeResult& first = rows.front();
  const std::int64_t b_min = grid.block_sizes.front(), b_max = grid.block_sizes.back();
  std::string md = "# Retrieval probe\n\n";
  md += format(
      "Is the needle inside the support a selector chooses? One needle key among Gaussian "
      "distractor keys (N(0, 1) per channel), head_dim %lld, a fresh query and fresh keys in "
      "each of %lld trials per cell, seed %llu. The query has norm sqrt(head_dim), so a "
      "distractor's score s = q.k / sqrt(d) is N(0, 1); the needle's score exceeds the largest "
      "distractor score by the strength, %g. The needle sits at position floor(depth * context) "
      "and never in the always-kept parts (the first %lld position(s) and the last %lld); "
      "support = those U the k selected blocks of the block size, chosen by amc's "
      "BlockSparseDecode. A hit: the support contains the needle.\n\n",
      static_cast<long long>(first.head_dim), static_cast<long long>(first.trials),
      static_cast<unsigned long long>(first.seed), first.strength,
      static_cast<long long>(first.sinks), static_cast<long long>(first.window));
  md += "Selectors:\n\n";
  for (const ScoreRule s : grid.selectors) md += std::string("- ") + selector_description(s) + "\n";
  md +=
      "\n`chance` is k / candidate blocks, the hit rate of k blocks picked at random; "
      "`lift` is (s_needle - s_rest) / B, what the needle adds to its block's mean score "
      "(THEORY.md section 4). All depths, block sizes, ks and selectors of a trial share its "
      "keys and query.\n\n";

  // Hit rate by (context, k, block size), averaged over depths.
  md += "## Hit rate by block size (mean over depths " + join(grid.depths, ", ") + ")\n\n";
  md += "| context | k | B |";
  for (const ScoreRule s : grid.selectors) md += format(" %s |", std::string(to_string(s)).c_str());
  md += " chance | lift |\n|--:|--:|--:|";
  for (std::size_t i = 0; i < grid.selectors.size(); ++i) md += "--:|";
  md += "--:|--:|\n";
  const ScoreRule any = grid.selectors.front();
  for (const std::int64_t context : grid.contexts) {
    for (const std::int64_t k : grid.ks) {
      for (const std::int64_t b : grid.block_sizes) {
        md += format("| %lld | %lld | %lld |", static_cast<long long>(context),
                     static_cast<long long>(k), static_cast<long long>(b));
        for (const ScoreRule s : grid.selectors) {
          md += format(" %.3f |",
                       average(rows, s, context, b, k, [](const auto& r) { return r.hit_rate; }));
        }
        md +=
            format(" %.3f | %.3f |\n",
                   average(rows, any, context, b, k, [](const auto& r) { return r.chance; }),
                   average(rows, any, context, b, k, [](const auto& r) { return r.needle_lift; }));
      }
    }
  }

  // The needle block's rank does not depend on k: one table per (context, block size).
  md += "\n## Mean rank of the needle's block (1 = first; retrieved iff rank <= k)\n\n";
  md += "| context | B | candidate blocks |";
  for (const ScoreRule s : grid.selectors) md += format(" %s |", std::string(to_string(s)).c_str());
  md += "\n|--:|--:|--:|";
  for (std::size_t i = 0; i < grid.selectors.size(); ++i) md += "--:|";
  md += "\n";
  const std::int64_t k0 = grid.ks.front();
  for (const std::int64_t context : grid.contexts) {
    for (const std::int64_t b : grid.block_sizes) {
      const double candidates = average(rows, any, context, b, k0, [](const auto& r) {
        return static_cast<double>(r.candidate_blocks);
      });
      md += format("| %lld | %lld | %.0f |", static_cast<long long>(context),
                   static_cast<long long>(b), candidates);
      for (const ScoreRule s : grid.selectors) {
        md += format(" %.1f |",
                     average(rows, s, context, b, k0, [](const auto& r) { return r.mean_rank; }));
      }
      md += "\n";
    }
  }

  // Depth: the keys have no positional structure, so this is a check that nothing does.
  const std::int64_t context_last = grid.contexts.back();
  const std::int64_t k_mid = grid.ks[grid.ks.size() / 2];
  md += format("\n## Hit rate by depth (context %lld, k %lld)\n\n| selector | depth |",
               static_cast<long long>(context_last), static_cast<long long>(k_mid));
  for (const std::int64_t b : grid.block_sizes)
    md += format(" B=%lld |", static_cast<long long>(b));
  md += "\n|---|--:|";
  for (std::size_t i = 0; i < grid.block_sizes.size(); ++i) md += "--:|";
  md += "\n";
  for (const ScoreRule s : grid.selectors) {
    for (const double depth : grid.depths) {
      md += format("| %s | %g |", std::string(to_string(s)).c_str(), depth);
      for (const std::int64_t b : grid.block_sizes) {
        for (const auto& r : rows) {
          if (r.selector == s && r.context == context_last && r.k == k_mid && r.block_size == b &&
              r.depth == depth) {
            md += format(" %.3f |", r.hit_rate);
          }
        }
      }
      md += "\n";
    }
  }

  // The reading: every statement is computed from the rows above.
  md += "\n## Reading\n\n";
  for (const ScoreRule s : grid.selectors) {
    auto hit = [](const auto& r) { return r.hit_rate; };
    const double at_min = average(rows, s, -1, b_min, -1, hit);
    const double at_max = average(rows, s, -1, b_max, -1, hit);
    int monotone = 0, settings = 0;
    double lowest = 1.0;
    for (const std::int64_t context : grid.contexts) {
      for (const std::int64_t k : grid.ks) {
        ++settings;
        bool non_increasing = true;
        double previous = 2.0;
        for (const std::int64_t b : grid.block_sizes) {
          const double rate = average(rows, s, context, b, k, hit);
          lowest = std::min(lowest, rate);
          non_increasing = non_increasing && rate <= previous;
          previous = rate;
        }
        monotone += non_increasing ? 1 : 0;
      }
    }
    md += format(
        "- `%s`: the hit rate (mean over contexts, ks and depths) %s from %.3f at B = %lld "
        "to %.3f at B = %lld; it is non-increasing in the block size in %d of %d "
        "(context, k) settings; its lowest (context, k, B) hit rate is %.3f.\n",
        std::string(to_string(s)).c_str(), describe_change(at_min, at_max).c_str(), at_min,
        static_cast<long long>(b_min), at_max, static_cast<long long>(b_max), monotone, settings,
        lowest);
  }
  auto lift = [](const auto& r) { return r.needle_lift; };
  md += format(
      "- Dilution (THEORY.md section 4): the needle lifts its block's mean score by "
      "(s_needle - s_rest) / B = %.3f at B = %lld but only %.3f at B = %lld (mean over cells), "
      "while the distractor blocks' mean scores spread as 1/sqrt(B) (standard deviation %.3f "
      "and %.3f): the lift shrinks faster than the noise it must beat, so mean pooling, which "
      "ranks blocks by log|b| + shat_b, a lower bound on their log-mass, loses the needle as "
      "blocks grow. The oracle ranks by the mass itself, log M_b >= s_needle.\n",
      average(rows, any, -1, b_min, -1, lift), static_cast<long long>(b_min),
      average(rows, any, -1, b_max, -1, lift), static_cast<long long>(b_max),
      1.0 / std::sqrt(static_cast<double>(b_min)), 1.0 / std::sqrt(static_cast<double>(b_max)));
  if (first.strength > std::log(static_cast<double>(b_max))) {
    md += format(
        "- With strength %g > ln %lld, the needle's block has more mass than any "
        "other block can (at most B exp(largest distractor score)), so an oracle that "
        "selects at least one block always retrieves it.\n",
        first.strength, static_cast<long long>(b_max));
  } else {
    md += format(
        "- With strength %g <= ln %lld, a block of B distractors can outweigh the "
        "needle's block, so even the oracle may miss it at the larger block sizes.\n",
        first.strength, static_cast<long long>(b_max));
  }
  int easy = 0, settings = 0;
  for (const auto& r : rows) {
    if (r.selector != any || r.depth != grid.depths.front()) continue;
    ++settings;
    easy += r.chance >= 0.5 ? 1 : 0;
  }
  md += format(
      "- Where k blocks are at least half the candidates (chance >= 0.5) the hit rate "
      "says little about ranking: %d of %d (context, k, B) settings.\n",
      easy, settings);
  md += format(
      "- Sampling: a cell's hit rate over %lld trials has a standard error of at most "
      "%.3f (sqrt(0.25 / trials)); the block-size table averages %zu depths, whose needles "
      "share each trial's distractors and query.\n",
      static_cast<long long>(first.trials), std::sqrt(0.25 / static_cast<double>(first.trials)),
      grid.depths.size());
  md +=
      "- These are independent Gaussian keys with no positional structure, so depth should "
      "not matter: differences between the rows of the depth table are sampling noise. Real "
      "keys are correlated across positions and channels; the probe isolates the ranking "
      "rule and does not predict retrieval in a trained model.\n";
  return md;
}

/// Gnuplot data: one data set (separated by two blank lines, selected with `index`) per
/// (context, k, series), series = the selectors in order, then chance.
std::string plot_data_text(const std::vector<RetrievalProbeResult>& rows, const Grid& grid) {
  std::string out =
      "# Hit rate (mean over depths) vs block size, written by amc-eval retrieval.\n"
      "# One data set per (context, k, series), in the order below; gnuplot selects them with "
      "`index`.\n";
  int index = 0;
  for (const std::int64_t context : grid.contexts) {
    for (const std::int64_t k : grid.ks) {
      for (std::size_t series = 0; series <= grid.selectors.size(); ++series) {
        const bool is_chance = series == grid.selectors.size();
        const ScoreRule s = is_chance ? grid.selectors.front() : grid.selectors[series];
        out += format("# index %d: context %lld, k %lld, %s\nblock_size hit_rate\n", index++,
                      static_cast<long long>(context), static_cast<long long>(k),
                      is_chance ? "chance" : std::string(to_string(s)).c_str());
        for (const std::int64_t b : grid.block_sizes) {
          const double value =
              average(rows, s, context, b, k, [is_chance](const RetrievalProbeResult& r) {
                return is_chance ? r.chance : r.hit_rate;
              });
          out += format("%lld %.4f\n", static_cast<long long>(b), value);
        }
        out += "\n\n";
      }
    }
  }
  return out;
}

std::string plot_script_text(const Grid& grid) {
  const auto rows = static_cast<long long>(grid.contexts.size());
  const auto cols = static_cast<long long>(grid.ks.size());
  std::string xtics;
  for (const std::int64_t b : grid.block_sizes) {
    xtics += (xtics.empty() ? "" : ", ") + std::to_string(b);
  }
  std::string out = format(
      "# Draws hit rate vs block size per selector, one panel per (context, k), from\n"
      "# retrieval_plot.dat. Written by amc-eval retrieval; run in this directory:\n"
      "#   gnuplot retrieval.gp\n"
      "if (!exists(\"png_out\")) png_out = 'retrieval.png'\n"
      "if (!exists(\"svg_out\")) svg_out = 'retrieval.svg'\n"
      "set logscale x 2\n"
      "set xrange [%g:%g]\n"
      "set xtics (%s)\n"
      "set yrange [0:1.05]\n"
      "set grid\n"
      "set xlabel 'block size B'\n"
      "set ylabel 'hit rate'\n"
      "set key bottom left font ',8'\n"
      "set datafile commentschars '#'\n",
      static_cast<double>(grid.block_sizes.front()) / 1.25,
      static_cast<double>(grid.block_sizes.back()) * 1.25, xtics.c_str());
  static constexpr const char* kStyles[] = {"lw 2 pt 7", "lw 2 pt 5", "lw 2 pt 9", "lw 2 pt 11"};
  auto panels = [&]() {
    std::string text = format(
        "set multiplot layout %lld,%lld title 'Retrieval probe: needle in the support "
        "(mean over depths)'\n",
        rows, cols);
    int index = 0;
    for (const std::int64_t context : grid.contexts) {
      for (const std::int64_t k : grid.ks) {
        text += format("set title 'context %lld, k = %lld'\nplot ", static_cast<long long>(context),
                       static_cast<long long>(k));
        for (std::size_t series = 0; series <= grid.selectors.size(); ++series) {
          const bool is_chance = series == grid.selectors.size();
          const std::string name =
              is_chance ? "chance" : std::string(to_string(grid.selectors[series]));
          const char* style = is_chance ? "dt 2 lw 1 lc rgb 'gray40' pt 0" : kStyles[series % 4];
          text += format("%s'retrieval_plot.dat' index %d using 1:2 with linespoints %s title '%s'",
                         series == 0 ? "" : ", \\\n     ", index++, style, name.c_str());
        }
        text += "\n";
      }
    }
    return text + "unset multiplot\nset output\n";
  };
  // pngcairo when this gnuplot has it (gnuplot-nox does), libgd's png otherwise.
  out += "png_terminal = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'\n";
  out += format(
      "eval 'set terminal ' . png_terminal . ' size %lld,%lld font \",10\"'\n"
      "set output png_out\n",
      380 * cols + 40, 300 * rows + 60);
  out += panels();
  out += format("set terminal svg size %lld,%lld dynamic font ',10'\nset output svg_out\n",
                380 * cols + 40, 300 * rows + 60);
  out += panels();
  return out;
}

/// Runs `gnuplot -e SETTINGS SCRIPT` in `directory`, its messages going to the file `log`
/// there. Returns an empty string when it drew, otherwise why not, for a note: the tables are
/// the result and the plots a view of them, so a missing or failing gnuplot fails nothing.
std::string run_gnuplot(const std::filesystem::path& directory, const std::string& settings,
                        const std::string& script, const std::string& log) {
  int report[2];  // the child sends errno here if it cannot exec; closed by a successful exec
  if (::pipe(report) != 0) return std::string("cannot start gnuplot: ") + std::strerror(errno);
  const pid_t child = ::fork();
  if (child < 0) {
    const int error = errno;
    ::close(report[0]);
    ::close(report[1]);
    return std::string("cannot start gnuplot: ") + std::strerror(error);
  }
  if (child == 0) {  // only async-signal-safe calls until exec
    ::close(report[0]);
    ::fcntl(report[1], F_SETFD, FD_CLOEXEC);
    int error = 0;
    if (::chdir(directory.c_str()) != 0) {
      error = errno;
    } else {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
      }
      const char* argv[] = {"gnuplot", "-e", settings.c_str(), script.c_str(), nullptr};
      ::execvp("gnuplot", const_cast<char* const*>(argv));
      error = errno;
    }
    [[maybe_unused]] const auto sent = ::write(report[1], &error, sizeof error);
    ::_exit(127);
  }
  ::close(report[1]);
  int exec_error = 0;
  ssize_t got = 0;
  do {
    got = ::read(report[0], &exec_error, sizeof exec_error);
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const std::filesystem::path log_path = directory / log;
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    std::error_code ignored;
    std::filesystem::remove(log_path, ignored);
    if (exec_error == ENOENT) {
      return "gnuplot not found on the PATH (Debian: apt-get install gnuplot-nox); then run "
             "`gnuplot " +
             script + "` in " + directory.string() + " to draw the plots";
    }
    return std::string("cannot run gnuplot: ") + std::strerror(exec_error);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return format("gnuplot failed (%s %d) drawing %s: see %s",
                  WIFEXITED(status) ? "exit status" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), script.c_str(),
                  log_path.string().c_str());
  }
  std::error_code ignored;
  if (std::filesystem::file_size(log_path, ignored) == 0)
    std::filesystem::remove(log_path, ignored);
  return {};
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
            "--strength: must be a number in [0, ", kMaxStrength, "], got ", strength);

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
    AMC_CHECK(std::isfinite(depth) && depth >= 0.0 && depth < 1.0, kWhere, "--depths: ", depth,
              " is not in [0, 1)");
    for (const std::int64_t context : contexts) {
      // A needle in the sinks or window is in every support: such a cell measures nothing.
      const std::int64_t position = needle_position(context, depth);
      AMC_CHECK(position >= sinks, kWhere, "--depths: depth ", depth,
                " puts the needle at position ", position, " of context ", context,
                ", inside the sinks (--sinks ", sinks,
                ": the first positions, always kept); use a larger depth or fewer sinks");
      AMC_CHECK(position < context - window, kWhere, "--depths: depth ", depth,
                " puts the needle at position ", position, " of context ", context,
                ", inside the window (--window ", window,
                ": the last positions, always kept); use a smaller depth or a longer context");
    }
  }

  require_nonempty(selectors, "--selectors");
  require_distinct(selectors, "--selectors");
  for (const ScoreRule s : selectors) {
    AMC_CHECK(
        s == ScoreRule::mean_pooled || s == ScoreRule::channel_bound || s == ScoreRule::oracle,
        kWhere, "--selectors: invalid selector value ", static_cast<int>(s));
  }
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
  const auto& selectors = options.selectors;
  const std::size_t n_c = contexts.size(), n_b = block_sizes.size(), n_k = ks.size(),
                    n_d = depths.size(), n_s = selectors.size();
  auto cell_index = [&](std::size_t s, std::size_t c, std::size_t b, std::size_t k, std::size_t d) {
    return (((s * n_c + c) * n_b + b) * n_k + k) * n_d + d;
  };
  std::vector<CellTotals> totals(n_s * n_c * n_b * n_k * n_d);
  for (auto& t : totals) t.trial_hits.assign(static_cast<std::size_t>(options.trials), 0);

  // One operator per (block size, k, selector), reused across trials (they own their scratch).
  std::vector<BlockSparseDecode<RuleSelector>> operators;
  operators.reserve(n_b * n_k * n_s);
  for (const std::int64_t b : block_sizes) {
    for (const std::int64_t k : ks) {
      for (const ScoreRule s : selectors) {
        SparseConfig config;
        config.block_size = b;
        config.top_k = k;
        config.sinks = options.sinks;
        config.window = options.window;
        config.score = s;
        operators.emplace_back(config);
      }
    }
  }
  const bool needs_bounds =
      std::find(selectors.begin(), selectors.end(), ScoreRule::channel_bound) != selectors.end();
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
          const BlockSummaries summaries =
              BlockSummaries::build(kv, b, SummaryOptions{.channel_bounds = needs_bounds});
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
            r.selector = selectors[si];
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

// --- outputs ----------------------------------------------------------------------------------

RetrievalOutputs write_retrieval_outputs(const std::vector<RetrievalProbeResult>& rows,
                                         const std::filesystem::path& out_dir) {
  AMC_CHECK(!rows.empty(), "amc::eval::write_retrieval_outputs", "no rows to write");
  std::error_code failed;
  std::filesystem::create_directories(out_dir, failed);
  AMC_CHECK(!failed, kWhere, "--out: cannot create directory ", out_dir.string(), ": ",
            failed.message());
  AMC_CHECK(std::filesystem::is_directory(out_dir), kWhere, "--out: ", out_dir.string(),
            " is not a directory");

  RetrievalOutputs outputs;
  auto write = [&](const char* name, const std::string& text) {
    write_atomically(out_dir / name, text);
    outputs.files.push_back(out_dir / name);
  };
  const Grid grid = grid_of(rows);
  write("retrieval.csv", csv_text(rows));
  write("retrieval.md", markdown_text(rows));
  write("retrieval_plot.dat", plot_data_text(rows, grid));
  write("retrieval.gp", plot_script_text(grid));

  // gnuplot draws to temporary names, renamed into place only once it has succeeded.
  const std::string suffix = format(".tmp-%ld", static_cast<long>(::getpid()));
  const std::string png_tmp = "retrieval.png" + suffix, svg_tmp = "retrieval.svg" + suffix;
  const std::string settings = "png_out='" + png_tmp + "'; svg_out='" + svg_tmp + "'";
  const std::string why_not =
      run_gnuplot(out_dir, settings, "retrieval.gp", "retrieval_gnuplot.log");
  if (!why_not.empty()) {
    std::error_code ignored;
    std::filesystem::remove(out_dir / png_tmp, ignored);
    std::filesystem::remove(out_dir / svg_tmp, ignored);
    outputs.notes.push_back("plots not drawn: " + why_not);
    return outputs;
  }
  for (const std::string& name : {std::string("retrieval.png"), std::string("retrieval.svg")}) {
    std::filesystem::rename(out_dir / (name + suffix), out_dir / name, failed);
    AMC_CHECK(!failed, kWhere, "cannot rename the plot to ", (out_dir / name).string(), ": ",
              failed.message());
    outputs.files.push_back(out_dir / name);
  }
  sync_directory(out_dir);
  return outputs;
}

}  // namespace amc::eval

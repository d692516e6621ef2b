// Every kernel of every instruction set this CPU runs, against plain double loops, for every
// length from 0 to three vector widths (plus a few longer) and four misalignments.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "amc/kernels/kernel_table.hpp"
#include "test_helpers.hpp"

using namespace amc;
using amc::kernels::KernelTable;

namespace {

constexpr std::int64_t kMaxLanes = 16;
constexpr std::int64_t kMisalignments = 4;

std::vector<std::int64_t> lengths() {
  std::vector<std::int64_t> out;
  for (std::int64_t n = 0; n <= 3 * kMaxLanes; ++n) out.push_back(n);
  for (std::int64_t n : {63, 64, 65, 127, 200, 257}) out.push_back(n);
  return out;
}

bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// Absolute tolerance for a sum of n products in f32: a few ulps of the sum of magnitudes.
double sum_tolerance(double magnitude_sum, std::int64_t n) {
  return 4e-7 * static_cast<double>(n + 1) * magnitude_sum + 1e-30;
}

template <KvStorage T>
void check_storage_kernels(const KernelTable& table) {
  const auto s = kernels::index_of(storage_type_of<T>);
  for (std::int64_t offset = 0; offset < kMisalignments; ++offset) {
    for (std::int64_t n : lengths()) {
      CAPTURE(table.name, test::storage_name<T>(), offset, n);
      std::vector<float> stored;
      const auto raw = test::random_floats(static_cast<std::size_t>(n + offset));
      const auto x_buffer = test::to_storage<T>(raw, &stored);
      const auto q_buffer = test::random_floats(static_cast<std::size_t>(n + offset));
      const T* x = x_buffer.data() + offset;
      const float* q = q_buffer.data() + offset;
      const float* xs = stored.data() + offset;

      double dot = 0.0, magnitude = 0.0;
      for (std::int64_t i = 0; i < n; ++i) {
        dot += static_cast<double>(q[i]) * xs[i];
        magnitude += std::abs(static_cast<double>(q[i]) * xs[i]);
      }
      const float product = table.dot[s](q, x, n);
      REQUIRE(std::abs(product - dot) <= sum_tolerance(magnitude, n));
      // dot_ahead only adds requests for another row's lines: the same bits, with or without
      // one (a row at a misaligned start).
      const std::vector<float> other_row(static_cast<std::size_t>(n + 2));
      REQUIRE(same_bits(table.dot_ahead[s](q, x, n, other_row.data() + 1), product));
      REQUIRE(same_bits(table.dot_ahead[s](q, x, n, nullptr), product));
      // dot_positions: the same x against several q vectors, each product dot's bit for bit
      // (every group size of its kernels, and groups of unequal size).
      for (const std::int64_t count : {1, 2, 3, 4, 5, 6, 7, 8, 13}) {
        CAPTURE(count);
        const std::int64_t q_stride = n + 3;
        const auto qs = test::random_floats(static_cast<std::size_t>(count * q_stride + offset));
        std::vector<float> products(static_cast<std::size_t>(count), std::nanf(""));
        table.dot_positions[s](qs.data() + offset, q_stride, count, x, n, other_row.data() + 1,
                               products.data());
        for (std::int64_t t = 0; t < count; ++t) {
          const float* qt = qs.data() + offset + t * q_stride;
          REQUIRE(same_bits(products[static_cast<std::size_t>(t)], table.dot[s](qt, x, n)));
        }
      }

      std::vector<float> y_buffer = test::random_floats(static_cast<std::size_t>(n + offset));
      std::vector<float> y_before(y_buffer);
      const float alpha = 0.75f;
      table.axpy[s](alpha, x, y_buffer.data() + offset, n);
      for (std::int64_t i = 0; i < n; ++i) {
        const double want = y_before[offset + i] + static_cast<double>(alpha) * xs[i];
        REQUIRE(std::abs(y_buffer[offset + i] - want) <= 2e-7 * (std::abs(want) + 1.0));
      }
      for (std::int64_t i = 0; i < offset; ++i) REQUIRE(y_buffer[i] == y_before[i]);  // untouched

      std::vector<float> loaded(static_cast<std::size_t>(n + offset), -1.0f);
      table.load[s](x, loaded.data() + offset, n);
      for (std::int64_t i = 0; i < n; ++i) REQUIRE(loaded[offset + i] == xs[i]);  // exact
    }
  }
}

/// out[h * out_stride + r] against <queries[h], rows[r]> in double, for queries [heads, head_dim]
/// and the rows as stored, [count, stride].
void require_scores_match(const std::vector<float>& queries, std::int64_t heads,
                          std::int64_t head_dim, const std::vector<float>& rows,
                          std::int64_t stride, std::int64_t count, const float* out,
                          std::int64_t out_stride) {
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t r = 0; r < count; ++r) {
      double want = 0.0, magnitude = 0.0;
      for (std::int64_t i = 0; i < head_dim; ++i) {
        const double term = static_cast<double>(queries[h * head_dim + i]) * rows[r * stride + i];
        want += term;
        magnitude += std::abs(term);
      }
      REQUIRE(std::abs(out[h * out_stride + r] - want) <= sum_tolerance(magnitude, head_dim));
    }
  }
}

/// The running softmax state of the fused attend kernel for `heads` heads of `head_dim`, fed
/// by calls over runs of rows.
struct AttendState {
  std::int64_t heads, head_dim;
  std::vector<float> max, sum, acc, scratch;

  AttendState(std::int64_t heads_, std::int64_t head_dim_)
      : heads(heads_),
        head_dim(head_dim_),
        max(static_cast<std::size_t>(heads_), -INFINITY),
        sum(static_cast<std::size_t>(heads_), 0.0f),
        acc(static_cast<std::size_t>(heads_ * head_dim_), 0.0f),
        scratch(static_cast<std::size_t>(kernels::attend_scratch_floats(heads_, head_dim_))) {}

  /// Folds `rows` rows (keys and values `stride` elements apart) into the state, asking for
  /// `next_rows` rows at next_keys, next_values meanwhile (AttendArgs::next_keys).
  template <KvStorage T>
  void attend(const KernelTable& table, const float* queries, const T* keys, const T* values,
              std::ptrdiff_t stride, std::int64_t rows, const T* next_keys = nullptr,
              const T* next_values = nullptr, std::int64_t next_rows = 0) {
    kernels::AttendArgs args;
    args.queries = queries;
    args.heads = heads;
    args.head_dim = head_dim;
    args.keys = keys;
    args.key_stride = stride;
    args.values = values;
    args.value_stride = stride;
    args.rows = rows;
    args.running_max = max.data();
    args.running_sum = sum.data();
    args.accumulator = acc.data();
    args.scratch = scratch.data();
    args.next_keys = next_keys;
    args.next_values = next_values;
    args.next_rows = next_rows;
    table.attend[kernels::index_of(storage_type_of<T>)](args);
  }
};

}  // namespace

TEST_CASE("kernel tables: the scalar one is always there; names are unique", "[kernels]") {
  const auto tables = kernels::available();
  REQUIRE(!tables.empty());
  REQUIRE(tables.front()->name == "scalar");
  for (std::size_t i = 0; i < tables.size(); ++i) {
    REQUIRE(kernels::find(tables[i]->name) == tables[i]);
    for (std::size_t j = i + 1; j < tables.size(); ++j) REQUIRE(tables[i]->name != tables[j]->name);
  }
  REQUIRE(kernels::find("no-such-isa") == nullptr);
  INFO("active kernels: " << kernels::active().name);
  REQUIRE(kernels::find(kernels::active().name) == &kernels::active());
  // Without AMC_KERNELS the default is the last available table (the widest instruction set;
  // NEON on aarch64), which the ctest runs without AMC_KERNELS rely on (tests/CMakeLists.txt).
  const char* requested = std::getenv("AMC_KERNELS");
  if (requested == nullptr || *requested == '\0') REQUIRE(&kernels::active() == tables.back());
}

TEST_CASE("storage-typed kernels match double loops", "[kernels]") {
  for (const KernelTable* table : kernels::available()) {
    check_storage_kernels<float>(*table);
    check_storage_kernels<bf16>(*table);
    check_storage_kernels<f16>(*table);
  }
}

TEST_CASE("max, exp_sum, stream_sum and scale match double loops", "[kernels]") {
  for (const KernelTable* table : kernels::available()) {
    for (std::int64_t offset = 0; offset < kMisalignments; ++offset) {
      for (std::int64_t n : lengths()) {
        CAPTURE(table->name, offset, n);
        auto buffer = test::random_floats(static_cast<std::size_t>(n + offset), 3.0f);
        float* x = buffer.data() + offset;
        double want_max = -INFINITY;
        for (std::int64_t i = 0; i < n; ++i) want_max = std::max<double>(want_max, x[i]);
        REQUIRE(static_cast<double>(table->max(x, n)) == want_max);

        const std::vector<float> before(buffer);
        const float shift = n > 0 ? static_cast<float>(want_max) : 0.0f;
        double want_sum = 0.0;
        for (std::int64_t i = 0; i < n; ++i)
          want_sum += std::exp(static_cast<double>(x[i]) - shift);
        const float got_sum = table->exp_sum(x, n, shift);
        REQUIRE(std::abs(got_sum - want_sum) <= 2e-6 * want_sum + 1e-30);
        for (std::int64_t i = 0; i < n; ++i) {
          // The kernels' exp (xsimd's on SIMD tables, libm's on scalar) is documented to stay
          // within 2.5e-7 relative (about 2 ulp) of exp of its f32 argument x - shift.
          const float argument = before[offset + i] - shift;
          const double want = std::exp(static_cast<double>(argument));
          REQUIRE(std::abs(x[i] - want) <= 2.5e-7 * want);
        }

        double want_stream = 0.0, stream_magnitude = 0.0;
        for (std::int64_t i = 0; i < n; ++i) {
          want_stream += x[i];
          stream_magnitude += std::abs(x[i]);
        }
        REQUIRE(std::abs(table->stream_sum(x, n) - want_stream) <=
                sum_tolerance(stream_magnitude, n));

        auto y = test::random_floats(static_cast<std::size_t>(n));
        const auto y_before = y;
        table->scale(y.data(), -1.5f, n);
        for (std::int64_t i = 0; i < n; ++i) REQUIRE(y[i] == y_before[i] * -1.5f);  // exact
      }
    }
  }
}

TEST_CASE("first_above finds the first element above a threshold", "[kernels]") {
  // A single element above the threshold placed at every index (or none), amid values at or
  // below it, NaNs and -inf; thresholds -inf and +inf too.
  for (const KernelTable* table : kernels::available()) {
    for (std::int64_t offset = 0; offset < kMisalignments; ++offset) {
      for (std::int64_t n : lengths()) {
        for (std::int64_t hit = 0; hit <= n; ++hit) {
          CAPTURE(table->name, offset, n, hit);
          std::vector<float> buffer(static_cast<std::size_t>(n + offset));
          float* x = buffer.data() + offset;
          for (std::int64_t i = 0; i < n; ++i) {
            x[i] = i % 3 == 0 ? NAN : (i % 3 == 1 ? 1.0f : -INFINITY);  // none above 1
          }
          if (hit < n) x[hit] = std::nextafter(1.0f, 2.0f);
          std::int64_t want = n;
          for (std::int64_t i = 0; i < n; ++i) {
            if (x[i] > 1.0f) {
              want = i;
              break;
            }
          }
          REQUIRE(want == hit);  // the setup does what it says
          REQUIRE(table->first_above(x, n, 1.0f) == want);
          if (hit == n) continue;
          std::int64_t want_any = n;  // everything but NaN is above -inf
          for (std::int64_t i = 0; i < n; ++i) {
            if (x[i] > -INFINITY) {
              want_any = i;
              break;
            }
          }
          REQUIRE(table->first_above(x, n, -INFINITY) == want_any);
          REQUIRE(table->first_above(x, n, INFINITY) == n);
        }
      }
    }
  }
}

TEST_CASE("list_above lists every element above a threshold; exp_sum_listed has exp_sum's bits",
          "[kernels]") {
  // Rows that are -inf (or NaN, for the listing) but at a few places, every density from none
  // to all: the listing against a plain loop, cut short at every capacity below its length; and
  // the listed exps and their sum, bit for bit, against exp_sum over the whole row (the sum a
  // per-group combination of a two-stage rule's rescored rows depends on).
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (const KernelTable* table : kernels::available()) {
    for (std::int64_t offset = 0; offset < kMisalignments; ++offset) {
      for (std::int64_t n : lengths()) {
        for (const float density : {0.0f, 0.05f, 0.3f, 1.0f}) {
          CAPTURE(table->name, offset, n, density);
          std::vector<float> buffer(static_cast<std::size_t>(n + offset));
          float* x = buffer.data() + offset;
          std::vector<std::int64_t> want;
          for (std::int64_t i = 0; i < n; ++i) {
            if (uniform(rng) < density) {
              want.push_back(i);
              // Mostly moderate, sometimes low enough that the exp underflows, or a signed 0.
              const float u = uniform(rng);
              x[i] = u < 0.1f ? -200.0f * u : (u < 0.15f ? -0.0f : 8.0f * (u - 0.5f));
            } else {
              x[i] = i % 5 == 0 ? NAN : -INFINITY;
            }
          }
          const auto found = static_cast<std::int64_t>(want.size());
          std::vector<std::int64_t> listed(want.size() + 1, -1);
          REQUIRE(table->list_above(x, n, -INFINITY, listed.data(), found) == found);
          REQUIRE(std::equal(want.begin(), want.end(), listed.begin()));
          for (std::int64_t capacity = 0; capacity < found; ++capacity) {
            std::vector<std::int64_t> short_list(static_cast<std::size_t>(capacity) + 1, -1);
            REQUIRE(table->list_above(x, n, -INFINITY, short_list.data(), capacity) ==
                    capacity + 1);
            REQUIRE(std::equal(short_list.begin(), short_list.begin() + capacity, want.begin()));
            REQUIRE(short_list[static_cast<std::size_t>(capacity)] == -1);  // nothing past it
          }

          for (std::int64_t i = 0; i < n; ++i) {
            if (x[i] != x[i]) x[i] = -INFINITY;  // exp_sum's rows: no NaN
          }
          float shift = -INFINITY;
          for (const std::int64_t i : want) shift = std::max(shift, x[i]);
          if (found == 0) shift = 0.0f;
          std::vector<float> whole(x, x + n), in_place(x, x + n);
          const float want_sum = table->exp_sum(whole.data(), n, shift);
          const float got_sum =
              table->exp_sum_listed(in_place.data(), n, shift, want.data(), found);
          REQUIRE(std::bit_cast<std::uint32_t>(got_sum) == std::bit_cast<std::uint32_t>(want_sum));
          for (std::int64_t i = 0; i < n; ++i) {
            const bool is_listed = std::binary_search(want.begin(), want.end(), i);
            const float expected = is_listed ? whole[static_cast<std::size_t>(i)] : -INFINITY;
            REQUIRE(std::bit_cast<std::uint32_t>(in_place[static_cast<std::size_t>(i)]) ==
                    std::bit_cast<std::uint32_t>(expected));
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("fused attend and score_rows match a double reference", "[kernels]", float,
                   amc::bf16, amc::f16) {
  using T = TestType;
  const auto s = kernels::index_of(storage_type_of<T>);
  for (const KernelTable* table : kernels::available()) {
    // head_dim 32, 64 and 128 take the AVX-512 table's bf16 word kernel (attend_bf16_words)
    // at every head count: up to 8 heads in one group of registers, 9, 16 and 17 in groups of
    // 8; packed rows (even row counts) its fixed-stride path. Other widths: the general one.
    for (std::int64_t head_dim : {1, 7, 16, 32, 64, 67, 128}) {
      for (std::int64_t rows : {0, 1, 5, 63, 64, 65, 200}) {
        for (std::int64_t heads : {1, 2, 3, 7, 8, 9, 16, 17}) {
          const std::int64_t stride = rows % 2 == 0 ? head_dim : head_dim + 3;  // packed, strided
          CAPTURE(table->name, test::storage_name<T>(), head_dim, rows, heads, stride);
          std::vector<float> keys_f, values_f;
          const auto keys = test::to_storage<T>(
              test::random_floats(static_cast<std::size_t>(rows * stride + 1)), &keys_f);
          const auto values = test::to_storage<T>(
              test::random_floats(static_cast<std::size_t>(rows * stride + 1)), &values_f);
          const auto queries =
              test::random_floats(static_cast<std::size_t>(heads * head_dim), 0.4f);

          std::vector<float> scores(static_cast<std::size_t>(heads * (rows + 1)));
          table->score_rows[s](queries.data(), heads, head_dim, keys.data(), stride, rows,
                               scores.data(), rows + 1);
          require_scores_match(queries, heads, head_dim, keys_f, stride, rows, scores.data(),
                               rows + 1);

          // Attend in two runs (split inside a chunk) to exercise the running state.
          AttendState state(heads, head_dim);
          const std::int64_t split = rows / 3;
          for (auto [first, count] :
               {std::pair{std::int64_t{0}, split}, std::pair{split, rows - split}}) {
            state.attend(*table, queries.data(), keys.data() + first * stride,
                         values.data() + first * stride, stride, count);
          }
          // The first run asking for the second's rows, as a sparse support's ranges do: the
          // same bits.
          AttendState asking(heads, head_dim);
          asking.attend(*table, queries.data(), keys.data(), values.data(), stride, split,
                        keys.data() + split * stride, values.data() + split * stride, rows - split);
          asking.attend(*table, queries.data(), keys.data() + split * stride,
                        values.data() + split * stride, stride, rows - split);
          for (std::int64_t h = 0; h < heads; ++h) {
            REQUIRE(same_bits(asking.max[h], state.max[h]));
            REQUIRE(same_bits(asking.sum[h], state.sum[h]));
          }
          for (std::size_t i = 0; i < state.acc.size(); ++i)
            REQUIRE(same_bits(asking.acc[i], state.acc[i]));
          const auto& max = state.max;
          const auto& sum = state.sum;
          const auto& acc = state.acc;
          std::vector<std::int64_t> all(static_cast<std::size_t>(rows));
          for (std::int64_t r = 0; r < rows; ++r) all[r] = r;
          for (std::int64_t h = 0; h < heads; ++h) {
            const auto ref = test::reference_attention(queries.data() + h * head_dim, head_dim,
                                                       keys_f, values_f, stride, all, 1.0);
            if (rows == 0) {
              REQUIRE(sum[h] == 0.0f);
              REQUIRE(std::isinf(max[h]));
              continue;
            }
            std::vector<float> out(static_cast<std::size_t>(head_dim));
            for (std::int64_t i = 0; i < head_dim; ++i) out[i] = acc[h * head_dim + i] / sum[h];
            // Relative to the summed terms' size, which f32 rounding error scales with (at
            // head_dim 1 the single output channel is a weighted mean of random values that can
            // cancel to near zero, so error relative to the output itself is no measure). Largest
            // seen over all tables, types and shapes: 1.9e-6.
            REQUIRE(test::max_error_per_term_magnitude(out.data(), ref) < 5e-6);
            REQUIRE(std::abs(max[h] + std::log(sum[h]) - ref.lse) <
                    2e-5 * (1.0 + std::abs(ref.lse)));
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("log_sum_exp_rows matches a double reference and is score_rows + log_sum_exp",
                   "[kernels]", float, amc::bf16, amc::f16) {
  // The block log-mass of the oracle and of the two-stage rule: every head's log-sum-exp of its
  // scores over a run of rows. Row counts around the AVX-512 reduction's 16 lanes and the
  // block sizes in use (16, 32, 64); head counts around its group of 16.
  using T = TestType;
  const auto s = kernels::index_of(storage_type_of<T>);
  for (const KernelTable* table : kernels::available()) {
    for (std::int64_t head_dim : {7, 16, 64, 128}) {
      for (std::int64_t rows : {0, 1, 5, 16, 31, 32, 33, 64, 100}) {
        for (std::int64_t heads : {1, 3, 7, 16, 17}) {
          CAPTURE(table->name, test::storage_name<T>(), head_dim, rows, heads);
          const std::int64_t stride = head_dim + 3;  // strided rows
          std::vector<float> keys_f;
          const auto keys = test::to_storage<T>(
              test::random_floats(static_cast<std::size_t>(rows * stride + 1)), &keys_f);
          const auto values = std::vector<float>(keys_f.size(), 0.0f);  // unused by the reference
          const auto queries =
              test::random_floats(static_cast<std::size_t>(heads * head_dim), 0.4f);
          const auto n = static_cast<std::size_t>(heads * rows);
          std::vector<float> scratch(n + 1), lse(static_cast<std::size_t>(2 * heads), 7.0f);
          table->log_sum_exp_rows[s](queries.data(), heads, head_dim, keys.data(), stride, rows,
                                     scratch.data(), lse.data(), 2, kernels::RowsAhead{});
          // Rows asked for ahead (the caller's next block: here a copy of these, strided) change
          // no bit.
          const auto next = keys;
          std::vector<float> scratch_ahead(n + 1), lse_ahead(static_cast<std::size_t>(heads));
          table->log_sum_exp_rows[s](
              queries.data(), heads, head_dim, keys.data(), stride, rows, scratch_ahead.data(),
              lse_ahead.data(), 1,
              kernels::RowsAhead{next.data(), stride * static_cast<std::ptrdiff_t>(sizeof(T)), rows,
                                 head_dim * static_cast<std::int64_t>(sizeof(T))});
          for (std::int64_t h = 0; h < heads; ++h) REQUIRE(same_bits(lse_ahead[h], lse[2 * h]));
          std::vector<std::int64_t> all(static_cast<std::size_t>(rows));
          for (std::int64_t r = 0; r < rows; ++r) all[r] = r;
          for (std::int64_t h = 0; h < heads; ++h) {
            CAPTURE(h);
            REQUIRE(lse[2 * h + 1] == 7.0f);  // out_stride respected: the gaps untouched
            if (rows == 0) {
              REQUIRE(lse[2 * h] == -std::numeric_limits<float>::infinity());
              continue;
            }
            const auto ref = test::reference_attention(queries.data() + h * head_dim, head_dim,
                                                       keys_f, values, stride, all, 1.0);
            REQUIRE(std::abs(lse[2 * h] - ref.lse) < 2e-5 * (1.0 + std::abs(ref.lse)));
          }
          // Bit for bit score_rows into [heads, rows] and then log_sum_exp, and each head's
          // result independent of the others (log_sum_exp of one head at a time): what lets
          // the oracle score a group's heads together with the scores of head by head.
          std::vector<float> scores(n + 1), composed(static_cast<std::size_t>(heads));
          table->score_rows[s](queries.data(), heads, head_dim, keys.data(), stride, rows,
                               scores.data(), rows);
          std::vector<float> one_by_one(scores);
          table->log_sum_exp(scores.data(), heads, rows, composed.data(), 1);
          for (std::int64_t h = 0; h < heads; ++h) {
            float alone = 0.0f;
            table->log_sum_exp(one_by_one.data() + h * rows, 1, rows, &alone, 1);
            REQUIRE(same_bits(composed[h], lse[2 * h]));
            REQUIRE(same_bits(alone, lse[2 * h]));
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("score_rows over long scans (streamed ahead) matches a double reference",
                   "[kernels]", float, amc::bf16, amc::f16) {
  // 1024 rows and more take the streaming path of the blocked kernels (the rule's scan of
  // the mean keys of a long cache), and 256 and more that of AVX-512's bf16 word kernel (the
  // channel bound's rows); contiguous and strided rows, whole and partial last groups.
  using T = TestType;
  const auto s = kernels::index_of(storage_type_of<T>);
  for (const KernelTable* table : kernels::available()) {
    for (std::int64_t head_dim : {16, 64, 128}) {
      for (std::int64_t count : {255, 256, 300, 1024, 1300, 2049}) {
        for (std::int64_t extra : {0, 16}) {
          const std::int64_t heads = 7, stride = head_dim + extra;
          CAPTURE(table->name, test::storage_name<T>(), head_dim, count, stride);
          std::vector<float> rows_f;
          const auto rows = test::to_storage<T>(
              test::random_floats(static_cast<std::size_t>(count * stride)), &rows_f);
          const auto queries = test::random_floats(static_cast<std::size_t>(heads * head_dim));
          std::vector<float> out(static_cast<std::size_t>(heads * count));
          table->score_rows[s](queries.data(), heads, head_dim, rows.data(), stride, count,
                               out.data(), count);
          require_scores_match(queries, heads, head_dim, rows_f, stride, count, out.data(), count);
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("attend rescales the running state when later chunks raise the max", "[kernels]",
                   float, amc::bf16) {
  // Keys grow along the rows, so (almost) every chunk of the fused kernel raises each head's
  // max and the accumulators are rescaled by factors far from 1; scores reach about 40, so a
  // missed or doubled rescale changes the result by orders of magnitude. 16 and 17 heads fill
  // one and two lane groups of the AVX-512 fold; 45 rows leave a partial chunk.
  using T = TestType;
  const std::int64_t head_dim = 64;
  for (const KernelTable* table : kernels::available()) {
    for (std::int64_t rows : {45, 200}) {
      for (std::int64_t heads : {7, 16, 17}) {
        CAPTURE(table->name, test::storage_name<T>(), rows, heads);
        auto raw_keys = test::random_floats(static_cast<std::size_t>(rows * head_dim), 0.3f);
        const auto queries = test::random_floats(static_cast<std::size_t>(heads * head_dim), 0.3f);
        // Row r gains 0.2 r mean_q / |mean_q|^2, which adds about 0.2 r to each head's score
        // (exactly 0.2 r on average over the heads).
        std::vector<double> mean_q(static_cast<std::size_t>(head_dim), 0.0);
        double mean_q_squared = 0.0;
        for (std::int64_t i = 0; i < head_dim; ++i) {
          for (std::int64_t h = 0; h < heads; ++h) mean_q[i] += queries[h * head_dim + i];
          mean_q[i] /= static_cast<double>(heads);
          mean_q_squared += mean_q[i] * mean_q[i];
        }
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t i = 0; i < head_dim; ++i) {
            raw_keys[r * head_dim + i] +=
                static_cast<float>(0.2 * static_cast<double>(r) * mean_q[i] / mean_q_squared);
          }
        }
        std::vector<float> keys_f, values_f;
        const auto keys = test::to_storage<T>(raw_keys, &keys_f);
        const auto values = test::to_storage<T>(
            test::random_floats(static_cast<std::size_t>(rows * head_dim)), &values_f);

        AttendState state(heads, head_dim);
        state.attend(*table, queries.data(), keys.data(), values.data(), head_dim, rows);
        const auto& sum = state.sum;
        const auto& max = state.max;
        const auto& acc = state.acc;

        std::vector<std::int64_t> all(static_cast<std::size_t>(rows));
        for (std::int64_t r = 0; r < rows; ++r) all[r] = r;
        double largest_lse = 0.0;
        for (std::int64_t h = 0; h < heads; ++h) {
          const auto ref = test::reference_attention(queries.data() + h * head_dim, head_dim,
                                                     keys_f, values_f, head_dim, all, 1.0);
          largest_lse = std::max(largest_lse, ref.lse);
          std::vector<float> out(static_cast<std::size_t>(head_dim));
          for (std::int64_t i = 0; i < head_dim; ++i) out[i] = acc[h * head_dim + i] / sum[h];
          REQUIRE(test::max_relative_error(out.data(), ref.out) < 2e-5);
          REQUIRE(std::abs(max[h] + std::log(sum[h]) - ref.lse) < 2e-5 * (1.0 + std::abs(ref.lse)));
        }
        if (rows == 200) REQUIRE(largest_lse > 20.0);  // the scores really did grow
      }
    }
  }
}

TEMPLATE_TEST_CASE("score_rows gives bitwise-equal scores to equal rows, wherever they fall",
                   "[kernels]", float, amc::bf16) {
  // Selection breaks ties by block index; that only works if equal blocks score exactly equal,
  // including rows in a partial last group of a blocked kernel (for bf16 on AVX-512, the word
  // kernel's zero-padded last 16 rows) and heads in a second group of 8.
  using T = TestType;
  const auto s = kernels::index_of(storage_type_of<T>);
  for (const KernelTable* table : kernels::available()) {
    for (std::int64_t head_dim : {8, 16, 64}) {
      for (std::int64_t heads : {2, 9}) {
        const auto row =
            test::to_storage<T>(test::random_floats(static_cast<std::size_t>(head_dim)));
        const auto q = test::random_floats(static_cast<std::size_t>(heads * head_dim));
        for (std::int64_t count = 1; count <= 50; ++count) {
          CAPTURE(table->name, test::storage_name<T>(), head_dim, heads, count);
          std::vector<T> rows;
          for (std::int64_t r = 0; r < count; ++r) rows.insert(rows.end(), row.begin(), row.end());
          std::vector<float> out(static_cast<std::size_t>(heads * count));
          table->score_rows[s](q.data(), heads, head_dim, rows.data(), head_dim, count, out.data(),
                               count);
          for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t r = 1; r < count; ++r) REQUIRE(out[h * count + r] == out[h * count]);
        }
      }
    }
  }
}

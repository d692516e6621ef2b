// The q8_0 KV cache (amc/q8_kv.hpp): quantization as ggml defines it, within its error bound;
// the view's rows exactly d * q; and every operator on a Q8KvView bitwise equal to the same
// operator on an f32 view of the values it stores (the certified bounds included).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "amc/amc.hpp"
#include "amc/math/certified_bounds.hpp"
#include "catch.hpp"
#include "test_helpers.hpp"

using namespace amc;

namespace {

/// A KV head stored in q8_0 (rows padded to `stride` quants and `scale_stride` scales, so the
/// strides are exercised), with the values it holds widened independently (in double, then
/// stored as f32: exact) for an f32 view to compare with.
struct Q8Head {
  std::int64_t positions, head_dim, stride, scale_stride;
  std::vector<std::int8_t> key_q, value_q;
  std::vector<f16> key_d, value_d;
  std::vector<float> keys, values;  // [positions, head_dim], the stored values

  /// packed: rows and scales without padding (a cache's usual layout, which the kernels read
  /// differently)
  Q8Head(std::int64_t n, std::int64_t d, float key_scale = 1.0f, bool packed = false)
      : positions(n),
        head_dim(d),
        stride(packed ? d : d + 32),
        scale_stride(packed ? d / 32 : d / 32 + 1) {
    key_q.assign(static_cast<std::size_t>(n * stride), 0);
    value_q = key_q;
    key_d.assign(static_cast<std::size_t>(n * scale_stride), f16{0});
    value_d = key_d;
    const std::vector<float> k = test::random_floats(static_cast<std::size_t>(n * d), key_scale);
    const std::vector<float> v = test::random_floats(static_cast<std::size_t>(n * d));
    for (std::int64_t p = 0; p < n; ++p) {
      quantize_q8_0_row(std::span(k.data() + p * d, static_cast<std::size_t>(d)),
                        key_q.data() + p * stride, key_d.data() + p * scale_stride);
      quantize_q8_0_row(std::span(v.data() + p * d, static_cast<std::size_t>(d)),
                        value_q.data() + p * stride, value_d.data() + p * scale_stride);
    }
    keys = widen(key_q, key_d);
    values = widen(value_q, value_d);
  }

  std::vector<float> widen(const std::vector<std::int8_t>& q, const std::vector<f16>& s) const {
    std::vector<float> out(static_cast<std::size_t>(positions * head_dim));
    for (std::int64_t p = 0; p < positions; ++p)
      for (std::int64_t c = 0; c < head_dim; ++c)
        out[static_cast<std::size_t>(p * head_dim + c)] = static_cast<float>(
            static_cast<double>(to_float(s[static_cast<std::size_t>(p * scale_stride + c / 32)])) *
            q[static_cast<std::size_t>(p * stride + c)]);
    return out;
  }

  Q8KvView view() const {
    return Q8KvView({key_q.data(), key_d.data(), stride, scale_stride},
                    {value_q.data(), value_d.data(), stride, scale_stride}, positions, head_dim);
  }
  KvView<float> f32_view() const {
    return KvView<float>(keys.data(), values.data(), positions, head_dim);
  }
};

RowMatrix random_queries(std::int64_t heads, std::int64_t head_dim) {
  const std::vector<float> q = test::random_floats(static_cast<std::size_t>(heads * head_dim));
  RowMatrix out(heads, head_dim);
  std::copy(q.begin(), q.end(), out.data());
  return out;
}

void require_same_bits(const RowMatrix& a, const RowMatrix& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    CAPTURE(i, a.data()[i], b.data()[i]);
    REQUIRE(std::bit_cast<std::uint32_t>(a.data()[i]) == std::bit_cast<std::uint32_t>(b.data()[i]));
  }
}

}  // namespace

TEST_CASE("quantize_q8_0_row follows ggml's q8_0 and stays within its error bound", "[q8_kv]") {
  double worst_share = 0.0;  // the largest error seen, as a share of the bound
  for (const float magnitude : {1e-6f, 1e-3f, 1.0f, 30.0f, 5000.0f}) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> row = test::random_floats(128, magnitude);
      if (trial == 0) std::fill(row.begin() + 32, row.begin() + 64, 0.0f);  // an all-zero block
      std::vector<std::int8_t> q(128);
      std::vector<f16> d(4);
      quantize_q8_0_row(row, q.data(), d.data());
      for (std::size_t b = 0; b < 4; ++b) {
        // ggml's quantize_row_q8_0_ref, in f32 as it is written there.
        float amax = 0.0f;
        for (std::size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(row[32 * b + j]));
        const float scale = amax / 127.0f;
        const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
        REQUIRE(d[b].bits == to_f16(scale).bits);
        const double bound = q8_0_error_bound(amax);
        for (std::size_t j = 0; j < 32; ++j) {
          CAPTURE(magnitude, trial, b, j, row[32 * b + j]);
          REQUIRE(q[32 * b + j] ==
                  static_cast<std::int8_t>(std::roundf(row[32 * b + j] * inverse)));
          REQUIRE(std::abs(q[32 * b + j]) <= 127);
          const double stored = static_cast<double>(to_float(d[b])) * q[32 * b + j];
          const double error = std::abs(stored - static_cast<double>(row[32 * b + j]));
          REQUIRE(error <= bound);
          if (bound > 0) worst_share = std::max(worst_share, error / bound);
        }
      }
    }
  }
  // The bound is not vacuous: some value comes close to half a step.
  REQUIRE(worst_share > 0.8);
}

TEST_CASE("quantize_q8_0_row: non-finite blocks read NaN, bad lengths throw", "[q8_kv]") {
  std::vector<float> row(64, 1.0f);
  row[5] = std::numeric_limits<float>::infinity();
  row[40] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::int8_t> q(64);
  std::vector<f16> d(2);
  quantize_q8_0_row(row, q.data(), d.data());
  REQUIRE(std::isnan(to_float(d[0])));
  REQUIRE(std::isnan(to_float(d[1])));
  std::vector<float> one(64, 1.0f);
  quantize_q8_0_row(one, q.data(), d.data());
  REQUIRE(to_float(d[0]) * q[0] == to_float(to_f16(1.0f / 127.0f)) * 127.0f);
  REQUIRE_THROWS_WITH(quantize_q8_0_row(std::span(one.data(), 40), q.data(), d.data()),
                      Catch::Matchers::Contains("amc::quantize_q8_0_row") &&
                          Catch::Matchers::Contains("multiple of 32, got 40"));
}

TEST_CASE("Q8KvView hands out the stored values exactly, by row and by run", "[q8_kv]") {
  const Q8Head head(150, 64);
  const Q8KvView view = head.view();
  REQUIRE(view.positions() == 150);
  REQUIRE(view.head_dim() == 64);
  for (std::int64_t p = 0; p < 150; ++p) {
    const float* k = view.key(p);
    const float* v = view.value(p);  // both pointers valid at once: two buffers
    for (std::int64_t c = 0; c < 64; ++c) {
      REQUIRE(k[c] == head.keys[static_cast<std::size_t>(p * 64 + c)]);
      REQUIRE(v[c] == head.values[static_cast<std::size_t>(p * 64 + c)]);
    }
  }
  for (const auto& [begin, end] :
       {std::pair<std::int64_t, std::int64_t>{0, 150}, {7, 7}, {5, 77}}) {
    std::int64_t next = begin;
    view.for_each_run(begin, end,
                      [&](const float* k, const float* v, std::int64_t first, std::int64_t rows) {
                        REQUIRE(first == next);
                        REQUIRE(rows >= 1);
                        REQUIRE(rows <= kernels::kAttendChunk);
                        for (std::int64_t r = 0; r < rows; ++r)
                          for (std::int64_t c = 0; c < 64; ++c) {
                            REQUIRE(k[r * view.key_stride() + c] ==
                                    head.keys[static_cast<std::size_t>((first + r) * 64 + c)]);
                            REQUIRE(v[r * view.value_stride() + c] ==
                                    head.values[static_cast<std::size_t>((first + r) * 64 + c)]);
                          }
                        next = first + rows;
                      });
    REQUIRE(next == end);
  }
}

TEST_CASE("Q8KvView refuses shapes it cannot read", "[q8_kv]") {
  const Q8Head head(4, 64);
  const Q8Rows k{head.key_q.data(), head.key_d.data(), head.stride, head.scale_stride};
  REQUIRE_THROWS_WITH(Q8KvView(k, k, 4, 48),
                      Catch::Matchers::Contains("amc::Q8KvView") &&
                          Catch::Matchers::Contains("multiple of 32, got 48"));
  REQUIRE_THROWS_WITH(Q8KvView(k, Q8Rows{nullptr, nullptr, 64, 2}, 4, 64),
                      Catch::Matchers::Contains("values: null quants or scales for 4 positions"));
  REQUIRE_THROWS_WITH(
      Q8KvView(Q8Rows{head.key_q.data(), head.key_d.data(), 32, 2}, k, 4, 64),
      Catch::Matchers::Contains("keys.quant_stride must be >= head_dim (64), got 32"));
  REQUIRE_THROWS_WITH(
      Q8KvView(k, Q8Rows{head.key_q.data(), head.key_d.data(), 64, 1}, 4, 64),
      Catch::Matchers::Contains("values.scale_stride must be >= head_dim / 32 (2), got 1"));
  REQUIRE_NOTHROW(Q8KvView(Q8Rows{}, Q8Rows{}, 0, 64));
}

TEST_CASE("every kernel table widens q8_0 rows exactly", "[q8_kv]") {
  // 300 rows of 128 channels: more scales than the SIMD tables convert in one pass (256); rows
  // of 8192 (one row a pass) and 8224 channels (wider than a pass: the plain loop); both
  // layouts of the scales.
  for (const auto& [rows, head_dim] :
       {std::pair<std::int64_t, std::int64_t>{300, 128}, {40, 8192}, {20, 8224}}) {
    for (const bool packed : {false, true}) {
      const Q8Head head(rows, head_dim, 50.0f, packed);
      for (const kernels::KernelTable* table : kernels::available()) {
        CAPTURE(rows, head_dim, packed, table->name);
        std::vector<float> out(static_cast<std::size_t>(rows * head_dim), -1.0f);
        table->load_q8_0_rows(head.key_q.data(), head.stride, head.key_d.data(), head.scale_stride,
                              rows, head_dim, out.data());
        REQUIRE(out == head.keys);
      }
    }
  }
}

namespace {

/// One head's online-softmax state as the attend kernels update it.
struct AttendState {
  std::vector<float> max, sum, accumulator, scratch;
  AttendState(std::int64_t heads, std::int64_t head_dim)
      : max(static_cast<std::size_t>(heads), -std::numeric_limits<float>::infinity()),
        sum(static_cast<std::size_t>(heads), 0.0f),
        accumulator(static_cast<std::size_t>(heads * head_dim), 0.0f),
        scratch(static_cast<std::size_t>(kernels::attend_scratch_floats(heads, head_dim))) {}
  kernels::AttendArgs args(const RowMatrix& queries) {
    kernels::AttendArgs a;
    a.queries = queries.data();
    a.heads = queries.rows();
    a.head_dim = queries.cols();
    a.running_max = max.data();
    a.running_sum = sum.data();
    a.accumulator = accumulator.data();
    a.scratch = scratch.data();
    return a;
  }
};

}  // namespace

TEST_CASE("every kernel table's attend_q8_0 is its attend[f32] on the stored values", "[q8_kv]") {
  for (const kernels::KernelTable* table : kernels::available()) {
    for (const std::int64_t head_dim : {32, 64, 96, 128}) {
      for (const bool packed : {false, true}) {
        const std::int64_t n = 100;
        const Q8Head head(n, head_dim, 3.0f, packed);
        for (const std::int64_t heads : {1, 3, 9}) {
          CAPTURE(table->name, head_dim, packed, heads);
          const RowMatrix queries = random_queries(heads, head_dim);
          AttendState q8(heads, head_dim), f32(heads, head_dim);
          // Two calls, the second starting mid-chunk, so the rescale of a running state is
          // exercised; rows 0..36 then 37..99.
          for (const auto& [first, rows] :
               {std::pair<std::int64_t, std::int64_t>{0, 37}, {37, 63}}) {
            kernels::AttendArgs a = q8.args(queries);
            a.keys = head.key_q.data() + first * head.stride;
            a.key_stride = head.stride;
            a.key_scales = head.key_d.data() + first * head.scale_stride;
            a.key_scale_stride = head.scale_stride;
            a.values = head.value_q.data() + first * head.stride;
            a.value_stride = head.stride;
            a.value_scales = head.value_d.data() + first * head.scale_stride;
            a.value_scale_stride = head.scale_stride;
            a.rows = rows;
            table->attend_q8_0(a);
            kernels::AttendArgs b = f32.args(queries);
            b.keys = head.keys.data() + first * head_dim;
            b.key_stride = head_dim;
            b.values = head.values.data() + first * head_dim;
            b.value_stride = head_dim;
            b.rows = rows;
            table->attend[kernels::index_of(StorageType::f32)](b);
          }
          REQUIRE(q8.max == f32.max);
          REQUIRE(q8.sum == f32.sum);
          for (std::size_t i = 0; i < q8.accumulator.size(); ++i) {
            CAPTURE(i);
            REQUIRE(std::bit_cast<std::uint32_t>(q8.accumulator[i]) ==
                    std::bit_cast<std::uint32_t>(f32.accumulator[i]));
          }
          // And the softmax itself, in double with plain loops over the stored values.
          for (std::int64_t h = 0; h < heads; ++h) {
            std::vector<double> scores(static_cast<std::size_t>(n));
            for (std::int64_t p = 0; p < n; ++p) {
              double s = 0;
              for (std::int64_t c = 0; c < head_dim; ++c)
                s += static_cast<double>(queries(h, c)) *
                     head.keys[static_cast<std::size_t>(p * head_dim + c)];
              scores[static_cast<std::size_t>(p)] = s;
            }
            const double m = *std::max_element(scores.begin(), scores.end());
            double sum = 0;
            std::vector<double> out(static_cast<std::size_t>(head_dim), 0.0);
            for (std::int64_t p = 0; p < n; ++p) {
              const double w = std::exp(scores[static_cast<std::size_t>(p)] - m);
              sum += w;
              for (std::int64_t c = 0; c < head_dim; ++c)
                out[static_cast<std::size_t>(c)] +=
                    w * head.values[static_cast<std::size_t>(p * head_dim + c)];
            }
            const auto hh = static_cast<std::size_t>(h);
            REQUIRE(std::fabs(q8.max[hh] - m) <= 1e-5 * (1 + std::fabs(m)));
            for (std::int64_t c = 0; c < head_dim; ++c) {
              const double got = q8.accumulator[static_cast<std::size_t>(h * head_dim + c)] /
                                 static_cast<double>(q8.sum[hh]);
              REQUIRE(std::fabs(got - out[static_cast<std::size_t>(c)] / sum) < 1e-4);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("operators on a Q8KvView equal them on the stored values in f32, bit for bit",
          "[q8_kv]") {
  for (const std::int64_t n : {1, 31, 32, 33, 700, 2100}) {
    const bool packed = n % 2 == 1;  // both layouts of the rows and scales
    CAPTURE(n, packed);
    const Q8Head head(n, 64, 2.0f, packed);
    const Q8KvView q8 = head.view();
    const KvView<float> f32 = head.f32_view();
    const RowMatrix queries = random_queries(7, 64);
    RowMatrix out_q8(7, 64), out_f32(7, 64);
    std::vector<HeadResult> results_q8(7), results_f32(7);

    DenseDecode dense;
    dense.decode(queries, KvHead<Q8KvView>{q8, nullptr}, out_q8, results_q8);
    dense.decode(queries, KvHead<KvView<float>>{f32, nullptr}, out_f32, results_f32);
    require_same_bits(out_q8, out_f32);
    for (std::size_t h = 0; h < 7; ++h) REQUIRE(results_q8[h].lse == results_f32[h].lse);

    // Summaries built from the view: the same as from the f32 values.
    const SummaryOptions options{.channel_bounds = true, .value_norms = true};
    const BlockSummaries summaries_q8 = BlockSummaries::build(q8, 16, options);
    const BlockSummaries summaries_f32 = BlockSummaries::build(f32, 16, options);
    for (const RuleName rule : {RuleName::mean_pooled, RuleName::channel_bound, RuleName::oracle,
                                RuleName::named("twostage")}) {
      CAPTURE(to_string(rule));
      SparseConfig config;
      config.block_size = 16;
      config.top_k = 6;
      config.sinks = 2;
      config.window = 24;
      config.scope = SelectionScope::per_group;
      config.rule = rule;
      BlockSparseDecode<> sparse_q8(config), sparse_f32(config);
      sparse_q8.decode(queries, KvHead<Q8KvView>{q8, &summaries_q8}, out_q8, results_q8);
      sparse_f32.decode(queries, KvHead<KvView<float>>{f32, &summaries_f32}, out_f32, results_f32);
      REQUIRE(sparse_q8.support(0).positions() == sparse_f32.support(0).positions());
      require_same_bits(out_q8, out_f32);

      // The certified bounds hold for the stored values: the same numbers on either view.
      const float scale = 1.0f / 8.0f;
      const std::span<const float> query(queries.data(), 64);
      const CertifiedBounds a =
          certified_bounds(query, scale, q8, summaries_q8, sparse_q8.support(0));
      const CertifiedBounds b =
          certified_bounds(query, scale, f32, summaries_f32, sparse_f32.support(0));
      REQUIRE(a.omitted_mass_bound == b.omitted_mass_bound);
      REQUIRE(a.error_bound == b.error_bound);
      REQUIRE(a.lse_support_lower == b.lse_support_lower);
    }
  }
}

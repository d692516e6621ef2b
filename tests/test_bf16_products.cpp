// AttentionArithmetic::bf16_products (amc/attention/arithmetic.hpp): dense decode on AVX512_BF16
// dot products, against two double-precision references over contiguous and paged views:
//  - the exact attention, within the error bound arithmetic.hpp documents for users;
//  - the attention of the query rounded to bf16 as the mode specifies (rounded here by integer
//    arithmetic, independently of the kernel), within f32 rounding for the lse and the bf16
//    rounding of the weights for the output: tight enough that a kernel which paired the wrong
//    rows, channels or weights fails.
// Where the mode is not available (no AVX512_BF16, another kernel table, keys not bf16,
// head_dim not a multiple of 32) the operator must give exact_f32's results bit for bit.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "amc/amc.hpp"
#include "test_cache.hpp"

using namespace amc;

namespace {

constexpr double kUnit = 1.0 / 256.0;      // bf16's unit roundoff, 2^-8
constexpr double kF32 = 1.0 / 16777216.0;  // f32's, 2^-24

/// x rounded to bf16, to nearest with ties to even, as a float (x finite and not subnormal).
float round_to_bf16(float x) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xffff0000u);
}

bool cpu_has_avx512_bf16() {
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

RowMatrix random_queries(std::int64_t heads, std::int64_t head_dim) {
  const auto q = test::random_floats(static_cast<std::size_t>(heads * head_dim));
  return Eigen::Map<const RowMatrix>(q.data(), heads, head_dim);
}

template <class View>
void run(DenseDecode& op, const RowMatrix& queries, const View& kv, RowMatrix& out,
         std::vector<HeadResult>& results) {
  out.setConstant(queries.rows(), queries.cols(), std::nanf(""));
  results.assign(static_cast<std::size_t>(queries.rows()), HeadResult{});
  op.decode(queries, KvHead<View>{kv, nullptr}, out, results);
}

/// Checks one head of a bf16_products result against both references.
void check_head(const test::TestCache<bf16>& cache, const float* query, const float* got,
                const HeadResult& result) {
  const std::int64_t d = cache.head_dim, n = cache.positions;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // The query as the operator scales it (f32) and as the kernel rounds it.
  std::vector<float> scaled(static_cast<std::size_t>(d)), rounded(static_cast<std::size_t>(d));
  for (std::int64_t i = 0; i < d; ++i) {
    scaled[static_cast<std::size_t>(i)] = query[i] * scale;
    rounded[static_cast<std::size_t>(i)] = round_to_bf16(scaled[static_cast<std::size_t>(i)]);
  }
  const auto positions = cache.all_positions();
  const auto exact = test::reference_attention(query, d, cache.keys_f, cache.values_f, cache.stride,
                                               positions, scale);
  const auto of_rounded = test::reference_attention(rounded.data(), d, cache.keys_f, cache.values_f,
                                                    cache.stride, positions, 1.0);
  // delta: the largest error of a score from the query's rounding, sum_i 2^-8 |q_i k_ji|, and
  // sigma: the largest f32 error of a score (a sum of d products).
  double delta = 0.0, sigma = 0.0;
  for (std::int64_t p = 0; p < n; ++p) {
    double magnitude = 0.0;
    for (std::int64_t i = 0; i < d; ++i) {
      magnitude += std::abs(static_cast<double>(scaled[static_cast<std::size_t>(i)]) *
                            cache.keys_f[static_cast<std::size_t>(p * cache.stride + i)]);
    }
    delta = std::max(delta, kUnit * magnitude);
    sigma = std::max(sigma, (static_cast<double>(d) + 16.0) * kF32 * (1.0 + kUnit) * magnitude);
  }
  // f32 error of the softmax sums and normalisation over n terms (exp, adds, rescales).
  const double sums = (static_cast<double>(n) + 64.0) * kF32;

  REQUIRE(result.finite);
  REQUIRE(result.positions_read == n);
  const double lse_scale = 1.0 + std::abs(exact.lse);
  // Tight: against the rounded query's attention, only f32 rounding moves the lse, and the
  // weights' rounding to bf16 (plus f32 rounding) moves the output.
  CAPTURE(result.lse, of_rounded.lse, exact.lse, delta, sigma);
  REQUIRE(std::abs(result.lse - of_rounded.lse) <= sigma + sums * lse_scale);
  const double tight = std::exp(2.0 * (sigma + sums)) * (1.0 + kUnit) - 1.0 + sums;
  REQUIRE(test::max_error_per_term_magnitude(got, of_rounded) <= tight);
  // The documented bound, against the exact attention.
  REQUIRE(std::abs(result.lse - exact.lse) <= delta + sigma + sums * lse_scale);
  const double bound = std::exp(2.0 * (delta + sigma + sums)) * (1.0 + kUnit) - 1.0 + sums;
  REQUIRE(test::max_error_per_term_magnitude(got, exact) <= bound);
}

}  // namespace

TEST_CASE("bf16_products is available exactly where the CPU and kernels have AVX512_BF16",
          "[bf16_products]") {
  const bool expected = cpu_has_avx512_bf16() && kernels::active().name == "avx512";
  CAPTURE(kernels::active().name, cpu_has_avx512_bf16());
  REQUIRE(bf16_products_available(StorageType::bf16, 64) == expected);
  REQUIRE(bf16_products_available(StorageType::bf16, 128) == expected);
  REQUIRE(bf16_products_available(StorageType::bf16, 32) == expected);
  REQUIRE_FALSE(bf16_products_available(StorageType::bf16, 48));
  REQUIRE_FALSE(bf16_products_available(StorageType::bf16, 0));
  REQUIRE_FALSE(bf16_products_available(StorageType::f32, 64));
  REQUIRE_FALSE(bf16_products_available(StorageType::f16, 64));
  if (!expected) WARN("no AVX512_BF16 here: only the fallback to exact_f32 is tested");
}

TEST_CASE("bf16_products dense decode is within its error bounds", "[bf16_products]") {
  if (!bf16_products_available(StorageType::bf16, 64)) {
    WARN("no AVX512_BF16 here: bf16_products runs exact_f32 (tested below)");
    return;
  }
  DenseDecode fast({}, AttentionArithmetic::bf16_products), exact;
  REQUIRE(fast.arithmetic() == AttentionArithmetic::bf16_products);
  RowMatrix out, out_exact;
  std::vector<HeadResult> results, results_exact;
  std::int64_t differing = 0;
  for (std::int64_t heads : {1, 2, 7, 8, 9, 17}) {
    for (std::int64_t head_dim : {32, 64, 96, 128}) {
      for (std::int64_t n : {1, 2, 31, 33, 300, 1029}) {
        // Pages of 7 rows: the paged view hands the kernel odd runs that end mid-chunk.
        const test::TestCache<bf16> cache(n, head_dim, /*page=*/7);
        const RowMatrix queries = random_queries(heads, head_dim);
        for (const bool paged : {false, true}) {
          CAPTURE(heads, head_dim, n, paged);
          if (paged) {
            run(fast, queries, cache.paged(), out, results);
            run(exact, queries, cache.paged(), out_exact, results_exact);
          } else {
            run(fast, queries, cache.view(), out, results);
            run(exact, queries, cache.view(), out_exact, results_exact);
          }
          for (std::int64_t h = 0; h < heads; ++h) {
            CAPTURE(h);
            check_head(cache, queries.row(h).data(), out.row(h).data(),
                       results[static_cast<std::size_t>(h)]);
          }
          differing += (out.array() != out_exact.array()).count();
        }
      }
    }
  }
  // The mode really ran: rounding the query and the weights changes some outputs.
  REQUIRE(differing > 0);
}

namespace {

/// Dense decode of 7 heads over a random cache in both arithmetics: outputs and lse bit for bit
/// equal.
template <KvStorage T>
void require_same_as_exact(std::int64_t head_dim) {
  DenseDecode fast({}, AttentionArithmetic::bf16_products), exact;
  const test::TestCache<T> cache(300, head_dim);
  const RowMatrix queries = random_queries(7, head_dim);
  RowMatrix out, out_exact;
  std::vector<HeadResult> results, results_exact;
  run(fast, queries, cache.view(), out, results);
  run(exact, queries, cache.view(), out_exact, results_exact);
  REQUIRE(std::memcmp(out.data(), out_exact.data(),
                      sizeof(float) * static_cast<std::size_t>(out.size())) == 0);
  for (std::size_t h = 0; h < results.size(); ++h)
    REQUIRE(std::bit_cast<std::uint32_t>(results[h].lse) ==
            std::bit_cast<std::uint32_t>(results_exact[h].lse));
}

}  // namespace

TEST_CASE("bf16_products falls back to exact_f32 bit for bit where it does not apply",
          "[bf16_products]") {
  SECTION("f32 keys and values") { require_same_as_exact<float>(64); }
  SECTION("head_dim not a multiple of 32") { require_same_as_exact<bf16>(48); }
  SECTION("the mode is not available on this CPU or kernel table") {
    if (bf16_products_available(StorageType::bf16, 64)) return;  // covered above
    require_same_as_exact<bf16>(64);
  }
}

TEST_CASE("AttentionArithmetic names and bad values", "[bf16_products]") {
  for (const auto a : {AttentionArithmetic::exact_f32, AttentionArithmetic::bf16_products})
    REQUIRE(parse_attention_arithmetic(to_string(a)) == a);
  REQUIRE_THROWS_WITH(parse_attention_arithmetic("bf16"),
                      AMC_CONTAINS("amc::parse_attention_arithmetic: arithmetic 'bf16'"));
  REQUIRE_THROWS_WITH(
      DenseDecode({}, static_cast<AttentionArithmetic>(7)),
      AMC_CONTAINS("amc::DenseDecode: arithmetic has no AttentionArithmetic value (7)"));
}

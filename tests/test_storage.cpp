// Storage conversions checked against independent arithmetic definitions.
#include <bit>
#include <cmath>
#include <cstdint>

#include "amc/storage.hpp"
#include "test_helpers.hpp"

using namespace amc;

namespace {

// binary16 decoded by its definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024.
double f16_by_definition(std::uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(mantissa / 1024.0, -14);
  } else if (exponent == 31) {
    magnitude = mantissa ? std::nan("") : INFINITY;
  } else {
    magnitude = std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  }
  return sign ? -magnitude : magnitude;
}

}  // namespace

TEST_CASE("f16 to f32 is exact for all 65536 encodings", "[storage]") {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const double want = f16_by_definition(static_cast<std::uint16_t>(bits));
    const float got = to_float(f16{static_cast<std::uint16_t>(bits)});
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(static_cast<double>(got) == want);
      REQUIRE(std::signbit(got) == ((bits & 0x8000u) != 0));
    }
  }
}

TEST_CASE("f32 to f16 rounds to nearest even and round-trips", "[storage]") {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const f16 h{static_cast<std::uint16_t>(bits)};
    const float x = to_float(h);
    if (std::isnan(x)) {
      REQUIRE(std::isnan(to_float(to_f16(x))));
      continue;
    }
    REQUIRE(to_f16(x).bits == h.bits);
  }
  // Against a brute-force nearest search on random floats in the f16 range.
  std::uniform_real_distribution<float> exponent(-26.0f, 16.5f);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int trial = 0; trial < 20000; ++trial) {
    const float x = (sign(test::rng()) ? -1.0f : 1.0f) * std::exp2(exponent(test::rng()));
    const f16 got = to_f16(x);
    const double got_value = to_float(got);
    if (std::isinf(got_value)) {
      REQUIRE(std::abs(x) >= 65520.0f);
      continue;
    }
    // No other finite f16 of the same sign is strictly closer; on a tie the mantissa is even.
    const double err = std::abs(got_value - x);
    for (int delta : {-1, 1}) {
      const std::uint16_t neighbour_bits = static_cast<std::uint16_t>(got.bits + delta);
      const double neighbour = f16_by_definition(neighbour_bits);
      if (std::isnan(neighbour) || std::isinf(neighbour) ||
          std::signbit(neighbour) != std::signbit(got_value))
        continue;
      const double other = std::abs(neighbour - x);
      REQUIRE(err <= other);
      if (err == other) REQUIRE((got.bits & 1u) == 0u);
    }
  }
  REQUIRE(std::isinf(to_float(to_f16(1e6f))));
  REQUIRE(to_f16(1e-9f).bits == 0);
}

TEST_CASE("bf16 conversions", "[storage]") {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const bf16 b{static_cast<std::uint16_t>(bits)};
    const float x = to_float(b);
    REQUIRE(std::bit_cast<std::uint32_t>(x) == (bits << 16));
    if (!std::isnan(x)) REQUIRE(to_bf16(x).bits == b.bits);
  }
  // Round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  REQUIRE(to_float(to_bf16(1.0f + std::exp2(-8.0f))) == 1.0f);
  REQUIRE(to_float(to_bf16(1.0f + 3 * std::exp2(-8.0f))) == 1.0f + std::exp2(-6.0f));
  REQUIRE(std::isnan(to_float(to_bf16(std::nanf("")))));
}

// Small helpers shared by the math property tests (test_math_identity.cpp, test_margin.cpp).
#pragma once

#include <cmath>
#include <string>

#include "amc/error.hpp"
#include "catch.hpp"

/// Counts failures of a property in a local `int failures` and reports only the first few in
/// full, so a broken property prints a handful of cases instead of thousands of assertions.
#define PROPERTY_CHECK(condition, message)         \
  do {                                             \
    if (!(condition)) {                            \
      ++failures;                                  \
      if (failures <= 5) {                         \
        FAIL_CHECK(#condition << ": " << message); \
      }                                            \
    }                                              \
  } while (false)

namespace amc_test {

/// Runs `call` and requires an amc::error whose message contains `needle` (the argument name).
template <class Call>
void require_error_naming(Call&& call, const std::string& needle) {
  try {
    call();
  } catch (const amc::error& e) {
    const std::string message = e.what();
    INFO("message: " << message << "\nexpected to name: " << needle);
    CHECK(message.find(needle) != std::string::npos);
    return;
  }
  FAIL("expected amc::error naming " << needle);
}

/// |actual - expected| <= relative * |expected| + absolute.
inline bool close(double actual, double expected, double relative, double absolute) {
  return std::abs(actual - expected) <= relative * std::abs(expected) + absolute;
}

}  // namespace amc_test

// Catch2 v2 (Debian 12) and v3 behind one include.
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
using Catch::Approx;
/// Substring matcher under one name for both versions (v2: Contains, v3: ContainsSubstring).
#define AMC_CONTAINS(text) Catch::Matchers::ContainsSubstring(text)
#else
#include <catch2/catch.hpp>
#define AMC_CONTAINS(text) Catch::Contains(text)
#endif

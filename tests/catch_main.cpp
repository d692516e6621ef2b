// Catch2 v2 needs one translation unit that defines main; v3 links Catch2WithMain instead.
#if !__has_include(<catch2/catch_test_macros.hpp>)
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif

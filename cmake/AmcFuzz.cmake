# Instrumentation for the libFuzzer targets of fuzz/ (AMC_BUILD_FUZZERS; scripts/ci-fuzz
# configures build/fuzz with it). Included before any target is defined, so the library, the
# Qwen2 code and the fuzzers are all compiled with coverage feedback for libFuzzer
# (fuzzer-no-link), AddressSanitizer and UndefinedBehaviorSanitizer; any UBSan report aborts.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "AMC_BUILD_FUZZERS needs clang (libFuzzer); this build uses "
    "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER}. Configure a separate build directory with "
    "CC=clang CXX=clang++ (Debian: clang libclang-rt-dev), as scripts/ci-fuzz does.")
endif()
set(AMC_FUZZ_SANITIZERS "address,undefined" CACHE STRING
  "Sanitizers the fuzzing build is instrumented with (-fsanitize=...)")
add_compile_options(-fsanitize=fuzzer-no-link,${AMC_FUZZ_SANITIZERS}
                    -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
add_link_options(-fsanitize=${AMC_FUZZ_SANITIZERS})
message(STATUS "amc: fuzzing build (-fsanitize=fuzzer-no-link,${AMC_FUZZ_SANITIZERS})")

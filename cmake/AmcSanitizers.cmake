# Sanitizer builds (presets asan and tsan, scripts/ci-sanitizers; see docs/reliability.md).
#
# AMC_SANITIZE lists the sanitizers, as -fsanitize names: "address;undefined" or "thread" (GCC
# and Clang). The flags are added to the directory's compile and link options, so every target
# configured after amc_setup_sanitizers() is built with them: the library, the tests, the tools
# and examples, and the per-file SIMD kernel and Eigen GEMM variants (their per-source
# COMPILE_OPTIONS add the instruction-set flags on top of these). Empty (the default) means no
# sanitizer. A sanitized static libamc needs the sanitizer runtime wherever it is linked, so
# amc::amc also carries the link flag (AMC_SANITIZE_LINK_OPTIONS), installed package included.
set(AMC_SANITIZE "" CACHE STRING
  "Sanitizers for every amc target, e.g. address;undefined or thread (empty: none)")

macro(amc_setup_sanitizers)
  set(AMC_SANITIZE_LINK_OPTIONS "")
  if(AMC_SANITIZE)
    if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
      message(FATAL_ERROR "amc: AMC_SANITIZE needs GCC or Clang, not ${CMAKE_CXX_COMPILER_ID}")
    endif()
    foreach(amc_sanitizer IN LISTS AMC_SANITIZE)
      if(NOT amc_sanitizer MATCHES "^(address|undefined|thread|leak)$")
        message(FATAL_ERROR "amc: AMC_SANITIZE: unknown sanitizer '${amc_sanitizer}' "
                            "(expected address, undefined, leak or thread)")
      endif()
    endforeach()
    if("thread" IN_LIST AMC_SANITIZE AND ("address" IN_LIST AMC_SANITIZE OR
                                          "leak" IN_LIST AMC_SANITIZE))
      message(FATAL_ERROR "amc: AMC_SANITIZE: thread cannot be combined with address or leak")
    endif()
    list(JOIN AMC_SANITIZE "," amc_sanitize_joined)
    set(amc_sanitize_compile -fsanitize=${amc_sanitize_joined} -fno-omit-frame-pointer)
    if("undefined" IN_LIST AMC_SANITIZE)
      # float-cast-overflow (a float converted to an integer type that cannot hold it, NaN
      # included) is undefined behaviour that GCC's -fsanitize=undefined leaves out. Any
      # report aborts: no run continues past undefined behaviour.
      list(APPEND amc_sanitize_compile -fsanitize=float-cast-overflow
                                       -fno-sanitize-recover=undefined,float-cast-overflow)
    endif()
    add_compile_options(${amc_sanitize_compile})
    set(AMC_SANITIZE_LINK_OPTIONS -fsanitize=${amc_sanitize_joined})
    if("undefined" IN_LIST AMC_SANITIZE)
      list(APPEND AMC_SANITIZE_LINK_OPTIONS -fsanitize=float-cast-overflow)
    endif()
    add_link_options(${AMC_SANITIZE_LINK_OPTIONS})
    message(STATUS "amc: sanitizers ${amc_sanitize_joined} (${amc_sanitize_compile})")
  endif()
endmacro()

# amc_sanitizer_optimize(TARGET): in a sanitized Debug build (the asan preset: Debug, so that
# AMC_DASSERTs run), compiles TARGET at -O1, the level AddressSanitizer's documentation
# recommends: the same reports, and code that runs several times faster than at -O0. Given to
# the two libraries the slow tests spend their time in (amc's kernels and I/O, the reference
# transformer with its Eigen GEMMs) and to test_certified, which computes in its own templates;
# the other tests and the tools stay at -O0, where Catch2's long test functions compile 2-3
# times faster than at -O1 under ASan (docs/reliability.md has the measurements).
function(amc_sanitizer_optimize target)
  if(AMC_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<CONFIG:Debug>:-O1>)
  endif()
endfunction()

# SIMD kernel variants: one translation unit per instruction set, each compiled with its own
# flags, chosen at run time from what the CPU reports (src/kernel_dispatch.cpp). The portable
# scalar variant is always built, so amc builds and runs where no SIMD is available.
include(CheckCXXCompilerFlag)

# amc_simd_variants(OUT): the table of architectures, "name|source|flags" per kernel variant
# for the target processor (empty where amc has none). The GEMM variants of the Qwen2 example
# (examples/transformer/CMakeLists.txt) are built from the same table. NEON is baseline on AArch64,
# so its flags are empty.
function(amc_simd_variants out)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
    set(variants
      "sse2|src/kernels_sse2.cpp|-msse2"
      "avx2|src/kernels_avx2.cpp|-mavx2 -mfma -mf16c"
      "avx512|src/kernels_avx512.cpp|-mavx512f -mavx512bw -mavx512dq -mavx512cd -mavx2 -mfma -mf16c")
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64|ARM64")
    set(variants "neon|src/kernels_neon.cpp|")
  else()
    set(variants "")
  endif()
  set(${out} "${variants}" PARENT_SCOPE)
endfunction()

# Flags of every weight-kernel translation unit (src/weight_kernels_*.cpp): without trapping
# math GCC if-converts the loops' selects and vectorises them (the F16 loop ran 10x slower
# without). No result changes: the kernels never read the floating-point exception flags.
set(AMC_WEIGHT_KERNEL_FLAGS -fno-trapping-math)

# amc_simd_variant_flags(VARIANT NAME FLAGS): the name and compile options of one entry of
# amc_simd_variants, or an empty name when the compiler does not take its flags.
function(amc_simd_variant_flags variant out_name out_flags)
  string(REPLACE "|" ";" fields "${variant}")
  list(GET fields 0 name)
  list(GET fields 2 flags)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  string(MAKE_C_IDENTIFIER "AMC_HAS_FLAGS_${name}" check_var)
  check_cxx_compiler_flag("${flags}" ${check_var})
  if(NOT ${check_var})
    set(name "")
  elseif(name STREQUAL "avx512" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_*
    # placeholders (a known false positive in the compiler's headers, not in amc).
    list(APPEND flag_list -Wno-maybe-uninitialized -Wno-uninitialized)
  endif()
  # Every kernel function starts on a cache line, so that where its hot loop falls against the
  # instruction fetch blocks depends on its own code only, not on what else the unit holds: left
  # to 16-byte alignment, unrelated changes moved the bf16 matrix-vector kernel's loop and the
  # decode of SmolLM2 by about 5% (records/house-ab-2026-12-07).
  if(name AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    list(APPEND flag_list -falign-functions=64)
  endif()
  set(${out_name} "${name}" PARENT_SCOPE)
  set(${out_flags} "${flag_list}" PARENT_SCOPE)
endfunction()

# amc_add_weight_kernels(TARGET DIR): the GGUF weight kernels, DIR/weight_kernels_<set>.cpp, added
# to TARGET: the scalar table always, and each instruction set of amc_simd_variants that the
# compiler takes and that has a table (src/weight_kernels.hpp), with that set's flags;
# AMC_KERNELS_<SET>=1 tells gguf_quants.cpp which tables exist. DIR is src/ for the library and a
# copy of it for tests/test_ggml_type_extension.cpp.
function(amc_add_weight_kernels target dir)
  target_sources(${target} PRIVATE ${dir}/weight_kernels_scalar.cpp)
  set_source_files_properties(${dir}/weight_kernels_scalar.cpp PROPERTIES
    COMPILE_OPTIONS "${AMC_WEIGHT_KERNEL_FLAGS}")
  if(NOT AMC_ENABLE_SIMD)
    return()
  endif()
  amc_simd_variants(variants)
  foreach(variant IN LISTS variants)
    amc_simd_variant_flags("${variant}" name flag_list)
    if(name AND EXISTS ${PROJECT_SOURCE_DIR}/src/weight_kernels_${name}.cpp)
      set(source ${dir}/weight_kernels_${name}.cpp)
      target_sources(${target} PRIVATE ${source})
      set_source_files_properties(${source} PROPERTIES
        COMPILE_OPTIONS "${flag_list};${AMC_WEIGHT_KERNEL_FLAGS}")
      string(TOUPPER ${name} upper)
      target_compile_definitions(${target} PRIVATE AMC_KERNELS_${upper}=1)
    endif()
  endforeach()
endfunction()

function(amc_add_simd_kernels target)
  if(NOT AMC_ENABLE_SIMD)
    message(STATUS "amc: SIMD kernels disabled; scalar kernels only")
    return()
  endif()
  amc_simd_variants(variants)
  if(NOT variants)
    message(STATUS "amc: no SIMD kernel variants for ${CMAKE_SYSTEM_PROCESSOR}; scalar kernels only")
    return()
  endif()
  foreach(variant IN LISTS variants)
    amc_simd_variant_flags("${variant}" name flag_list)
    string(REPLACE "|" ";" fields "${variant}")
    list(GET fields 1 source)
    list(GET fields 2 flags)
    if(name)
      target_sources(${target} PRIVATE ${source})
      set_source_files_properties(${source} PROPERTIES COMPILE_OPTIONS "${flag_list}")
      # Kernels of the same set kept in units of their own (src/kernels_avx512_words.cpp,
      # src/kernels_avx512_word_scans.cpp).
      foreach(part words word_scans)
        set(part_source src/kernels_${name}_${part}.cpp)
        if(EXISTS ${PROJECT_SOURCE_DIR}/${part_source})
          target_sources(${target} PRIVATE ${part_source})
          set_source_files_properties(${part_source} PROPERTIES COMPILE_OPTIONS "${flag_list}")
        endif()
      endforeach()
      string(TOUPPER ${name} upper)
      target_compile_definitions(${target} PRIVATE AMC_KERNELS_${upper}=1)
      message(STATUS "amc: kernel variant ${name} (${flags})")
    endif()
  endforeach()
endfunction()

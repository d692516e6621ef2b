// The avx512 variant of the prefill GEMM (compile flags set in CMakeLists.txt).
#define AMC_TRANSFORMER_GEMM_FUNCTION gemm_avx512
#define AMC_QWEN2_EIGEN_NAMESPACE amc_transformer_eigen_avx512
#include "gemm_variant.inc"

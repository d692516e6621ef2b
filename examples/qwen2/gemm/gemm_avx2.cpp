// The avx2 variant of the prefill GEMM (compile flags set in CMakeLists.txt).
#define AMC_QWEN2_GEMM_FUNCTION gemm_avx2
#define AMC_QWEN2_EIGEN_NAMESPACE amc_qwen2_eigen_avx2
#include "gemm_variant.inc"

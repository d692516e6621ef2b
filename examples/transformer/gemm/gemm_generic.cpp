// The generic variant of the prefill GEMM (compile flags set in CMakeLists.txt).
#define AMC_TRANSFORMER_GEMM_FUNCTION gemm_generic
#define AMC_QWEN2_EIGEN_NAMESPACE amc_transformer_eigen_generic
#include "gemm_variant.inc"

// The arithmetic of decode attention: exact f32 (the default), or an opt-in reduced-precision
// mode on the CPU's bf16 dot products.
#pragma once

#include <cstdint>
#include <string_view>

#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/storage.hpp"

namespace amc {

/// How an operator computes scores and the weighted sum of values.
///
/// - exact_f32: every product and sum in f32, keys and values widened from their storage type.
///   The default, and the only mode the study's measurements, the omitted-mass identity and the
///   certified bounds (docs/theory.md section 3) are stated for.
/// - bf16_products: for bf16 keys and values, AVX512_BF16 dot products (VDPBF16PS): the scaled
///   query is rounded to bf16 before the scores and each softmax weight to bf16 before the
///   values (round to nearest even, relative error at most 2^-8 each); products are exact and
///   sums, the running max and the normaliser stay f32. A score then errs by at most
///   2^-8 sum_i |q_i k_i| (plus f32 rounding), the lse by the largest such error, and an output
///   channel by (exp(2 delta)(1 + 2^-8) - 1) sum_j w_j |v_j| with delta that largest score
///   error. Subnormal inputs and results are flushed to zero. Twice the multiply-adds per
///   instruction of exact_f32; measured 1.5x faster on cached KV and 0.95-1.25x on KV streamed
///   from memory, where the memory time dominates (docs/performance.md, "Dense decode in
///   bf16_products", with measured errors). Where it is not available (no AVX512_BF16, another
///   kernel table, keys not bf16, head_dim not a multiple of 32) the operator runs exact_f32
///   instead, which bf16_products_available() tells in advance.
enum class AttentionArithmetic : std::uint8_t { exact_f32, bf16_products };

constexpr std::string_view to_string(AttentionArithmetic arithmetic) {
  switch (arithmetic) {
    case AttentionArithmetic::exact_f32:
      return "exact_f32";
    case AttentionArithmetic::bf16_products:
      return "bf16_products";
  }
  return "unknown";
}

/// The AttentionArithmetic whose to_string is `name`. Throws amc::error naming the value.
inline AttentionArithmetic parse_attention_arithmetic(std::string_view name) {
  for (const auto a : {AttentionArithmetic::exact_f32, AttentionArithmetic::bf16_products}) {
    if (to_string(a) == name) return a;
  }
  detail::throw_error("amc::parse_attention_arithmetic", "arithmetic '", name,
                      "' is not one of exact_f32, bf16_products");
}

/// Whether AttentionArithmetic::bf16_products runs as such for KV of `storage` and this
/// head_dim with the active kernel table (else the operators run exact_f32).
inline bool bf16_products_available(StorageType storage, std::int64_t head_dim) {
  return storage == StorageType::bf16 && head_dim > 0 && head_dim % 32 == 0 &&
         kernels::active().attend_bf16_products != nullptr;
}

}  // namespace amc

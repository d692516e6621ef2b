// Storage element types for keys and values (f32, bf16, f16) and their scalar conversions.
// All arithmetic in amc is done in f32; these types only describe how an engine stores its cache.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "amc/error.hpp"

namespace amc {

/// bfloat16: the upper 16 bits of an IEEE-754 binary32. Trivial, 2 bytes, layout-compatible
/// with what PyTorch and safetensors store.
struct bf16 {
  std::uint16_t bits;
};

/// IEEE-754 binary16 (half precision).
struct f16 {
  std::uint16_t bits;
};

static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2);

/// The storage types a KV view may hold.
template <class T>
concept KvStorage = std::same_as<T, float> || std::same_as<T, bf16> || std::same_as<T, f16>;

enum class StorageType : std::uint8_t { f32, bf16, f16 };

/// The number of StorageType values: the size of tables indexed by storage type.
inline constexpr std::size_t kStorageTypes = 3;
static_assert(static_cast<std::size_t>(StorageType::f16) + 1 == kStorageTypes,
              "kStorageTypes must count every StorageType value (the last is f16)");

template <KvStorage T>
inline constexpr StorageType storage_type_of = std::same_as<T, float>  ? StorageType::f32
                                               : std::same_as<T, bf16> ? StorageType::bf16
                                                                       : StorageType::f16;

constexpr std::string_view to_string(StorageType type) {
  switch (type) {
    case StorageType::f32:
      return "f32";
    case StorageType::bf16:
      return "bf16";
    case StorageType::f16:
      return "f16";
  }
  return "?";
}

/// The StorageType whose to_string is `name` ("f32", "bf16", "f16"). Throws amc::error naming
/// the text otherwise.
constexpr StorageType parse_storage_type(std::string_view name) {
  for (std::size_t i = 0; i < kStorageTypes; ++i) {
    if (to_string(static_cast<StorageType>(i)) == name) return static_cast<StorageType>(i);
  }
  detail::throw_error("amc::parse_storage_type", "unknown storage type '", name,
                      "' (expected f32, bf16 or f16)");
}

namespace detail {

/// Whether visit_storage<Ts...> visits T: every storage type when Ts is empty.
template <class T, class... Ts>
inline constexpr bool visits_storage = sizeof...(Ts) == 0 || (std::same_as<T, Ts> || ...);

template <KvStorage... Ts>
[[noreturn]] void throw_storage_type(StorageType type) {
  const auto value = static_cast<unsigned>(type);
  if (value >= kStorageTypes) {
    throw_error("amc::visit_storage", "invalid StorageType value ", value);
  }
  std::string supported;
  ((supported += supported.empty() ? "" : ", ", supported += to_string(storage_type_of<Ts>)), ...);
  throw_error("amc::visit_storage", "storage type ", to_string(type), " is not one of ", supported);
}

}  // namespace detail

/// Calls f(std::type_identity<T>{}) with T the element type `type` names (float, bf16 or f16)
/// and returns what it returns (the same type for every T): the one place where a run-time
/// storage type picks a template instantiation.
///
///     amc::visit_storage(dtype, [&](auto t) { run<typename decltype(t)::type>(args); });
///
/// visit_storage<float, bf16>(type, f) instantiates f for the named types only, for code that
/// supports a subset; another type throws amc::error ("amc::visit_storage: storage type f16 is
/// not one of f32, bf16"), and so does a value that is no StorageType, naming the value.
template <KvStorage... Ts, class F>
constexpr decltype(auto) visit_storage(StorageType type, F&& f) {
  switch (type) {
    case StorageType::f32:
      if constexpr (detail::visits_storage<float, Ts...>) {
        return std::forward<F>(f)(std::type_identity<float>{});
      }
      break;
    case StorageType::bf16:
      if constexpr (detail::visits_storage<bf16, Ts...>) {
        return std::forward<F>(f)(std::type_identity<bf16>{});
      }
      break;
    case StorageType::f16:
      if constexpr (detail::visits_storage<f16, Ts...>) {
        return std::forward<F>(f)(std::type_identity<f16>{});
      }
      break;
  }
  if constexpr (sizeof...(Ts) == 0) {
    detail::throw_storage_type<float, bf16, f16>(type);
  } else {
    detail::throw_storage_type<Ts...>(type);
  }
}

/// Bytes of one element of `type`.
constexpr std::size_t storage_size(StorageType type) {
  return visit_storage(type, [](auto t) { return sizeof(typename decltype(t)::type); });
}

constexpr float to_float(float x) { return x; }

/// Exact: every bf16 is an f32 with 16 zero low bits.
constexpr float to_float(bf16 x) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(x.bits) << 16);
}

/// Exact conversion of a binary16 to binary32 (normals, subnormals, zeros, inf and NaN).
constexpr float to_float(f16 x) {
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x8000u) << 16;
  std::uint32_t exponent = (x.bits >> 10) & 0x1Fu;
  std::uint32_t mantissa = x.bits & 0x3FFu;
  if (exponent == 0x1F) {  // inf or NaN: keep the payload
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal: normalise the mantissa into an f32 normal.
    exponent = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3FFu;
    return std::bit_cast<float>(sign | (exponent << 23) | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

/// Round-to-nearest-even f32 -> bf16; NaN stays NaN (quiet).
constexpr bf16 to_bf16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    return bf16{static_cast<std::uint16_t>((bits >> 16) | 0x40u)};
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>((bits + rounding) >> 16)};
}

/// The smallest bf16 >= x (rounded toward +inf); NaN stays NaN. With to_bf16_downward, an interval
/// [lo, hi] rounded outward, [to_bf16_downward(lo), to_bf16_upward(hi)], contains it exactly.
constexpr bf16 to_bf16_upward(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    return bf16{static_cast<std::uint16_t>((bits >> 16) | 0x40u)};
  // Dropping the low 16 bits rounds toward zero: up for a negative x, down for a positive one,
  // which then moves up one bf16 step (to inf past the largest finite bf16).
  const bool positive_and_inexact = (bits & 0x80000000u) == 0 && (bits & 0xFFFFu) != 0;
  return bf16{static_cast<std::uint16_t>((bits >> 16) + (positive_and_inexact ? 1u : 0u))};
}

/// The largest bf16 <= x (rounded toward -inf); NaN stays NaN.
constexpr bf16 to_bf16_downward(float x) {
  const bf16 negated = to_bf16_upward(-x);
  return bf16{static_cast<std::uint16_t>(negated.bits ^ 0x8000u)};
}

/// Round-to-nearest-even f32 -> f16, with overflow to inf, gradual underflow and NaN kept.
constexpr f16 to_f16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return f16{static_cast<std::uint16_t>(sign | 0x7E00u)};
  if (magnitude >= 0x477FF000u)
    return f16{static_cast<std::uint16_t>(sign | 0x7C00u)};  // rounds to inf
  if (magnitude < 0x38800000u) {  // below the smallest f16 normal: subnormal or zero
    if (magnitude < 0x33000000u)
      return f16{sign};  // rounds to zero (below half the smallest subnormal)
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent;  // 14..24 fraction bits dropped
    const std::uint32_t halfway = 1u << (shift - 1);
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return f16{static_cast<std::uint16_t>(sign | result)};
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  const std::uint32_t rebiased = magnitude - (static_cast<std::uint32_t>(127 - 15) << 23);
  const std::uint32_t rounded = rebiased + 0xFFFu + ((rebiased >> 13) & 1u);
  return f16{static_cast<std::uint16_t>(sign | (rounded >> 13))};
}

template <KvStorage T>
constexpr T from_float(float x) {
  if constexpr (std::same_as<T, float>) {
    return x;
  } else if constexpr (std::same_as<T, bf16>) {
    return to_bf16(x);
  } else {
    return to_f16(x);
  }
}

}  // namespace amc

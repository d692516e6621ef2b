// Storage element types for keys and values (f32, bf16, f16) and their scalar conversions.
// All arithmetic in amc is done in f32; these types only describe how an engine stores its cache.
#pragma once

#include <bit>
#include <concepts>
#include <cstdint>
#include <string_view>

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

// amc-bounds input handling: q, k and v read from a validated safetensors file, their names,
// ranks, dtypes, shapes and values checked, converted to f32. Split out of amc_bounds.cpp so
// that fuzz/fuzz_bounds_input.cpp runs exactly the tool's checks on in-memory images.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "amc/error.hpp"
#include "amc/io/safetensors.hpp"

namespace amc::bounds {

/// q, k, v converted to f32, with their shapes checked.
struct Inputs {
  std::int64_t query_heads = 0, kv_heads = 0, positions = 0, head_dim = 0;
  std::vector<float> q, k, v;  // [Hq, d], [Hkv, n, d], [Hkv, n, d]
};

/// Throws amc::error "amc-bounds: <message>" (the tool prints it and exits with status 2).
[[noreturn]] inline void fail(const std::string& message) {
  throw amc::error("amc-bounds: " + message);
}

inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

/// The inputs held by `file`: q [Hq, d], k [Hkv, n, d], v [Hkv, n, d], each F32, BF16 or F16,
/// with d, n, Hkv, Hq >= 1, Hkv dividing Hq and every value finite. `path` names the file in
/// messages. Throws amc::error "amc-bounds: ..." naming the tensor and the problem.
inline Inputs load_inputs(const SafetensorsFile& file, const std::string& path) {
  auto tensor = [&](const char* name, std::size_t rank) -> const TensorInfo& {
    const TensorInfo* info = file.find(name);
    if (info == nullptr)
      fail(path + ": missing tensor '" + name + "' (need q [Hq, d], k [Hkv, n, d], v [Hkv, n, d])");
    if (info->shape.size() != rank) {
      fail(path + ": tensor '" + name + "' has shape " + shape_string(info->shape) +
           ", expected rank " + std::to_string(rank));
    }
    if (info->dtype != Dtype::F32 && info->dtype != Dtype::BF16 && info->dtype != Dtype::F16) {
      fail(path + ": tensor '" + name + "' has dtype " + std::string(to_string(info->dtype)) +
           ", expected F32, BF16 or F16");
    }
    return *info;
  };
  const TensorInfo& q = tensor("q", 2);
  const TensorInfo& k = tensor("k", 3);
  const TensorInfo& v = tensor("v", 3);
  Inputs in;
  in.query_heads = q.shape[0];
  in.head_dim = q.shape[1];
  in.kv_heads = k.shape[0];
  in.positions = k.shape[1];
  if (k.shape != v.shape)
    fail("k " + shape_string(k.shape) + " and v " + shape_string(v.shape) +
         " must have the same shape");
  if (k.shape[2] != in.head_dim)
    fail("k has head_dim " + std::to_string(k.shape[2]) + " but q has " +
         std::to_string(in.head_dim));
  if (in.head_dim == 0) fail("head_dim is 0");
  if (in.positions == 0) fail("k and v hold n = 0 positions; nothing to analyse");
  if (in.kv_heads == 0 || in.query_heads == 0)
    fail("q has " + std::to_string(in.query_heads) + " heads and k " + std::to_string(in.kv_heads) +
         "; both must be >= 1");
  if (in.query_heads % in.kv_heads != 0) {
    fail("query heads (" + std::to_string(in.query_heads) + ") are not a multiple of KV heads (" +
         std::to_string(in.kv_heads) + ")");
  }
  in.q = file.to_f32("q");
  in.k = file.to_f32("k");
  in.v = file.to_f32("v");
  for (const auto* values : {&in.q, &in.k, &in.v}) {
    if (!std::all_of(values->begin(), values->end(), [](float x) { return std::isfinite(x); })) {
      fail(path + ": tensor '" +
           std::string(values == &in.q   ? "q"
                       : values == &in.k ? "k"
                                         : "v") +
           "' holds a non-finite value");
    }
  }
  return in;
}

/// Opens, validates and loads the file at `path` (SafetensorsFile::open, then load_inputs).
inline Inputs load_inputs(const std::string& path) {
  return load_inputs(SafetensorsFile::open(path), path);
}

}  // namespace amc::bounds

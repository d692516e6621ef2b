// What the bindings read: checks of imported arrays (tensor_import.hpp) with messages that name
// the function, the argument and the value, and the views amc's operators take of them (f32 rows
// of queries, a layer's keys and values as one KvView per KV head, the summaries given for them).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "amc/amc.hpp"
#include "tensor_import.hpp"

namespace amc::python {

[[noreturn]] inline void fail(const std::string& message) { throw amc::error(message); }

inline void check_dim(const Tensor& t, std::int64_t dim, const char* layout) {
  if (t.dim() != dim) {
    fail(t.name() + " has shape " + t.shape_string() + "; expected " + std::to_string(dim) +
         " dimensions " + layout);
  }
}

inline bool is_storage_type(ElementType type) {
  return type == ElementType::f32 || type == ElementType::f16 || type == ElementType::bf16;
}

inline void check_storage_type(const Tensor& t) {
  if (!is_storage_type(t.type)) {
    fail(t.name() + " has dtype " + to_string(t.type) +
         "; amc reads float32, float16 or bfloat16 (convert with .float() or .astype(np.float32))");
  }
}

inline void check_aligned(const Tensor& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % element_size(t.type) != 0) {
    fail(t.name() + ": its data are not aligned to its " + std::to_string(element_size(t.type)) +
         "-byte elements; pass a copy");
  }
}

inline StorageType storage_of(ElementType type) {
  return type == ElementType::f32   ? StorageType::f32
         : type == ElementType::f16 ? StorageType::f16
                                    : StorageType::bf16;
}

inline float element_as_float(const Tensor& t, std::int64_t offset) {
  switch (t.type) {
    case ElementType::f32:
      return t.as<float>()[offset];
    case ElementType::f16:
      return to_float(t.as<f16>()[offset]);
    case ElementType::bf16:
      return to_float(t.as<bf16>()[offset]);
    default:
      fail(t.name() + " has dtype " + to_string(t.type) +
           "; expected float32, float16 or bfloat16");
  }
}

/// A 1- or 2-dimensional float input as f32 rows: the caller's memory when it is f32 with
/// contiguous channels, otherwise an f32 copy (f16 and bf16 convert exactly). A 1-dimensional
/// input is one row.
struct F32Rows {
  const float* data = nullptr;
  std::int64_t rows = 0, cols = 0, stride = 0;
  std::vector<float> owned;

  Eigen::Map<const RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>> matrix() const {
    return map_rows(data, rows, cols, stride);
  }
  Eigen::Map<const Vector> vector() const { return {data, cols}; }
};

inline F32Rows f32_rows(const Tensor& t) {
  check_storage_type(t);
  check_aligned(t);
  F32Rows out;
  const bool one = t.dim() == 1;
  out.rows = one ? 1 : t.shape[0];
  out.cols = one ? t.shape[0] : t.shape[1];
  const std::int64_t row_stride = one ? 0 : t.strides[0];
  const std::int64_t col_stride = one ? t.strides[0] : t.strides[1];
  if (t.type == ElementType::f32 && (col_stride == 1 || out.cols <= 1) &&
      (row_stride >= out.cols || out.rows <= 1)) {
    out.data = t.as<float>();
    out.stride = out.rows <= 1 ? out.cols : row_stride;
    return out;
  }
  out.owned.resize(static_cast<std::size_t>(out.rows * out.cols));
  for (std::int64_t r = 0; r < out.rows; ++r)
    for (std::int64_t c = 0; c < out.cols; ++c)
      out.owned[static_cast<std::size_t>(r * out.cols + c)] =
          element_as_float(t, r * row_stride + c * col_stride);
  out.data = out.owned.data();
  out.stride = out.cols;
  return out;
}

/// Contiguous f32 copy (or the caller's memory when already so) of any float input.
struct F32Flat {
  std::span<const float> values;
  std::vector<float> owned;
};

inline F32Flat f32_flat(const Tensor& t) {
  check_storage_type(t);
  check_aligned(t);
  F32Flat out;
  const auto n = static_cast<std::size_t>(t.numel());
  if (t.type == ElementType::f32 && t.contiguous()) {
    out.values = {t.as<float>(), n};
    return out;
  }
  out.owned.resize(n);
  std::vector<std::int64_t> index(t.shape.size(), 0);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t offset = 0;
    for (std::size_t a = 0; a < index.size(); ++a) offset += index[a] * t.strides[a];
    out.owned[i] = element_as_float(t, offset);
    for (std::size_t a = index.size(); a-- > 0;) {
      if (++index[a] < t.shape[a]) break;
      index[a] = 0;
    }
  }
  out.values = out.owned;
  return out;
}

/// Queries [heads, head_dim]: f32 rows read in place, other float types converted.
inline F32Rows import_queries(py::handle q, const char* fn) {
  const Tensor t = import_tensor(q, fn, "q");
  check_dim(t, 2, "[query heads, head_dim]");
  if (t.shape[0] < 1 || t.shape[1] < 1)
    fail(t.name() + " has shape " + t.shape_string() +
         "; it needs at least one head and one channel");
  F32Rows rows = f32_rows(t);
  return rows;
}

/// Keys and values of a layer, [KV heads, positions, head_dim] each, read in place: each KV
/// head is a KvView with the tensor's row stride, so any head and row strides work as long as
/// the channels of a row are contiguous.
struct LayerKv {
  Tensor k, v;
  std::int64_t heads = 0, positions = 0, head_dim = 0;

  template <KvStorage T>
  KvView<T> view(std::int64_t h) const {
    const auto row_stride = [&](const Tensor& t) {
      return positions <= 1 ? head_dim : t.strides[1];
    };
    return KvView<T>(k.as<T>() + h * k.strides[0], v.as<T>() + h * v.strides[0], positions,
                     head_dim, row_stride(k), row_stride(v));
  }
};

inline void check_kv_strides(const Tensor& t, std::int64_t positions, std::int64_t head_dim) {
  if (head_dim > 1 && t.strides[2] != 1) {
    fail(t.name() + " has strides " + t.strides_string() + " (elements) for shape " +
         t.shape_string() +
         ": its channels are not contiguous; amc reads each position's head_dim channels as one "
         "row (row and head strides may be anything else): pass .contiguous()");
  }
  if (positions > 1 && t.strides[1] < head_dim) {
    fail(t.name() + " has strides " + t.strides_string() + " (elements) for shape " +
         t.shape_string() + ": its rows are " + std::to_string(t.strides[1]) +
         " elements apart, fewer than head_dim " + std::to_string(head_dim) +
         " (overlapping, broadcast or reversed rows); pass .contiguous()");
  }
}

inline LayerKv import_kv(py::handle k, py::handle v, const char* fn) {
  LayerKv kv{import_tensor(k, fn, "k"), import_tensor(v, fn, "v")};
  for (const Tensor* t : {&kv.k, &kv.v}) {
    check_dim(*t, 3, "[KV heads, positions, head_dim]");
    check_storage_type(*t);
    check_aligned(*t);
  }
  if (kv.k.type != kv.v.type) {
    fail(std::string(fn) + ": k has dtype " + to_string(kv.k.type) + " but v has " +
         to_string(kv.v.type) + "; keys and values must share one storage type");
  }
  if (kv.k.shape != kv.v.shape) {
    fail(std::string(fn) + ": k has shape " + kv.k.shape_string() + " but v has " +
         kv.v.shape_string() + "; they must be equal");
  }
  kv.heads = kv.k.shape[0];
  kv.positions = kv.k.shape[1];
  kv.head_dim = kv.k.shape[2];
  if (kv.heads < 1 || kv.head_dim < 1) {
    fail(std::string(fn) + ": k has shape " + kv.k.shape_string() +
         "; it needs at least one KV head and one channel");
  }
  check_kv_strides(kv.k, kv.positions, kv.head_dim);
  check_kv_strides(kv.v, kv.positions, kv.head_dim);
  return kv;
}

inline void check_group(const F32Rows& q, const LayerKv& kv, const char* fn) {
  if (q.cols != kv.head_dim) {
    fail(std::string(fn) + ": q has head_dim " + std::to_string(q.cols) + " but k has head_dim " +
         std::to_string(kv.head_dim));
  }
  if (q.rows % kv.heads != 0) {
    fail(std::string(fn) + ": query heads (" + std::to_string(q.rows) +
         ") are not a multiple of KV heads (" + std::to_string(kv.heads) + ")");
  }
}

/// `list` (a sequence of amc.BlockSummaries, one per KV head) as pointers, checked.
inline std::vector<BlockSummaries*> summaries_list(const py::object& list, std::int64_t heads,
                                                   const char* fn) {
  std::vector<BlockSummaries*> out;
  const auto sequence = py::reinterpret_borrow<py::sequence>(list);
  if (static_cast<std::int64_t>(py::len(sequence)) != heads) {
    fail(std::string(fn) + ": summaries has " + std::to_string(py::len(sequence)) +
         " entries, expected one amc.BlockSummaries per KV head (" + std::to_string(heads) + ")");
  }
  for (const py::handle item : sequence) {
    if (!py::isinstance<BlockSummaries>(item)) {
      fail(std::string(fn) + ": summaries holds a " + detail::type_name(item) +
           ", expected amc.BlockSummaries");
    }
    out.push_back(&item.cast<BlockSummaries&>());
  }
  return out;
}

/// Summaries of every KV head of `kv`, of storage type T.
template <KvStorage T>
inline std::vector<BlockSummaries> build_for(const LayerKv& kv, std::int64_t block_size,
                                             const SummaryOptions& options) {
  std::vector<BlockSummaries> out;
  for (std::int64_t h = 0; h < kv.heads; ++h) {
    out.push_back(BlockSummaries::build(kv.view<T>(h), block_size, options));
  }
  return out;
}

}  // namespace amc::python

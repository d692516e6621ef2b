// amc._amc: the Python bindings of amc (pybind11). The Python package `amc` (python/amc)
// re-exports these and adds the pure-Python parts (the analysis as amc-bounds' JSON, the
// PyTorch attention function).
//
// Inputs are NumPy arrays or PyTorch tensors read in place (tensor_import.hpp); outputs are
// NumPy arrays owned by Python. Every error the library or these bindings detect is an
// amc::error, raised in Python as amc.Error with the same message. Heavy calls release the GIL.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "amc/amc.hpp"
#include "amc/io/safetensors.hpp"
#include "amc/math/margin.hpp"
#include "amc/math/omitted_mass.hpp"
#include "amc/math/step_analysis.hpp"
#include "tensor_import.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace amc::python {
namespace {

// --- input checks ---------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& message) { throw amc::error(message); }

void check_dim(const Tensor& t, std::int64_t dim, const char* layout) {
  if (t.dim() != dim) {
    fail(t.name() + " has shape " + t.shape_string() + "; expected " + std::to_string(dim) +
         " dimensions " + layout);
  }
}

bool is_storage_type(ElementType type) {
  return type == ElementType::f32 || type == ElementType::f16 || type == ElementType::bf16;
}

void check_storage_type(const Tensor& t) {
  if (!is_storage_type(t.type)) {
    fail(t.name() + " has dtype " + to_string(t.type) +
         "; amc reads float32, float16 or bfloat16 (convert with .float() or .astype(np.float32))");
  }
}

void check_aligned(const Tensor& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % element_size(t.type) != 0) {
    fail(t.name() + ": its data are not aligned to its " + std::to_string(element_size(t.type)) +
         "-byte elements; pass a copy");
  }
}

StorageType storage_of(ElementType type) {
  return type == ElementType::f32   ? StorageType::f32
         : type == ElementType::f16 ? StorageType::f16
                                    : StorageType::bf16;
}

float element_as_float(const Tensor& t, std::int64_t offset) {
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

F32Rows f32_rows(const Tensor& t) {
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

F32Flat f32_flat(const Tensor& t) {
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
F32Rows import_queries(py::handle q, const char* fn) {
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

void check_kv_strides(const Tensor& t, std::int64_t positions, std::int64_t head_dim) {
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

LayerKv import_kv(py::handle k, py::handle v, const char* fn) {
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

void check_group(const F32Rows& q, const LayerKv& kv, const char* fn) {
  if (q.cols != kv.head_dim) {
    fail(std::string(fn) + ": q has head_dim " + std::to_string(q.cols) + " but k has head_dim " +
         std::to_string(kv.head_dim));
  }
  if (q.rows % kv.heads != 0) {
    fail(std::string(fn) + ": query heads (" + std::to_string(q.rows) +
         ") are not a multiple of KV heads (" + std::to_string(kv.heads) + ")");
  }
}

// --- configuration --------------------------------------------------------------------------

/// The text the settings table parses for a Python value: str as is, int and float as Python
/// writes them (repr: the shortest text that reads back as the same float), None as unset.
std::string setting_text(const SparseSetting& setting, py::handle value) {
  if (value.is_none()) {
    if (!setting.optional) {
      fail("amc::SparseConfig: " + std::string(setting.name) +
           " cannot be unset (None); it always has a value");
    }
    return "";
  }
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (PyFloat_Check(value.ptr())) return py::repr(value).cast<std::string>();
  return py::str(value).cast<std::string>();
}

py::object setting_value(const SparseSetting& setting, const SparseConfig& config) {
  const std::string text = setting.get(config);
  if (setting.optional && text.empty()) return py::none();
  switch (setting.kind) {
    case SettingKind::integer:
      return py::int_(std::stoll(text));
    case SettingKind::real:
      return py::float_(std::stod(text));
    case SettingKind::name:
      break;
  }
  return py::str(text);
}

void apply_settings(SparseConfig& config, const py::kwargs& settings) {
  for (const auto& [key, value] : settings) {
    const SparseSetting& setting = sparse_setting(key.cast<std::string>());
    setting.set(config, setting_text(setting, value));
  }
}

/// `config` (an amc.SparseConfig or None: the defaults) with `settings` applied, validated.
SparseConfig make_config(const std::optional<SparseConfig>& config, const py::kwargs& settings) {
  SparseConfig out = config.value_or(SparseConfig{});
  apply_settings(out, settings);
  out.validate();
  return out;
}

py::dict summary_options_dict(const SummaryOptions& o) {
  return py::dict("channel_bounds"_a = o.channel_bounds, "value_norms"_a = o.value_norms,
                  "sub_blocks"_a = o.sub_blocks);
}

// --- decode ---------------------------------------------------------------------------------

/// What one decode call returns (amc.DecodeResult).
struct DecodeResult {
  py::array_t<float> output;  // [query heads, head_dim]
  std::vector<HeadResult> heads;
  bool sparse = false;
  bool adaptive = false;
  std::vector<std::vector<std::int64_t>> selected;  // [query heads][blocks]
  std::vector<Support> supports;                    // [query heads]
  std::vector<float> block_scores;                  // [query heads, blocks]
  std::int64_t blocks = 0;
  std::vector<std::int64_t> needed_k;
  std::vector<double> omitted_mass_bound;
  std::vector<bool> target_met;
  // Where the operator's views of KV head h start: base + h * head stride (bytes); what
  // _key_addresses and _value_addresses report (the zero-copy test).
  std::uintptr_t key_base = 0, value_base = 0;
  std::int64_t key_head_bytes = 0, value_head_bytes = 0, kv_heads = 0;
};

template <class T>
py::array_t<T> vector_array(const std::vector<T>& values) {
  py::array_t<T> out(static_cast<py::ssize_t>(values.size()));
  if (!values.empty()) std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(T));
  return out;
}

py::array_t<std::int64_t> ranges_array(const Support& support) {
  py::array_t<std::int64_t> out(
      {static_cast<py::ssize_t>(support.ranges().size()), static_cast<py::ssize_t>(2)});
  auto w = out.mutable_unchecked<2>();
  for (std::size_t i = 0; i < support.ranges().size(); ++i) {
    w(static_cast<py::ssize_t>(i), 0) = support.ranges()[i].begin;
    w(static_cast<py::ssize_t>(i), 1) = support.ranges()[i].end;
  }
  return out;
}

py::array_t<std::int64_t> positions_array(const Support& support) {
  return vector_array(support.positions());
}

/// Runs `layer` (a LayerDecode) over q and the KV views of storage type T.
template <KvStorage T, class Layer>
void run_layer(Layer& layer, const F32Rows& q, const LayerKv& kv,
               const std::vector<BlockSummaries*>& summaries, DecodeResult& result) {
  // Reused between calls (the per-call overhead is what bench/python_overhead.py measures).
  thread_local std::vector<KvHead<KvView<T>>> heads;
  heads.clear();
  for (std::int64_t h = 0; h < kv.heads; ++h) {
    heads.push_back(
        {kv.view<T>(h), summaries.empty() ? nullptr : summaries[static_cast<std::size_t>(h)]});
  }
  result.key_base = reinterpret_cast<std::uintptr_t>(heads[0].kv.key(0));
  result.value_base = reinterpret_cast<std::uintptr_t>(heads[0].kv.value(0));
  result.key_head_bytes = kv.k.strides[0] * static_cast<std::int64_t>(sizeof(T));
  result.value_head_bytes = kv.v.strides[0] * static_cast<std::int64_t>(sizeof(T));
  result.kv_heads = kv.heads;
  float* out = result.output.mutable_data();
  py::gil_scoped_release release;
  layer.decode(q.matrix(), std::span<const KvHead<KvView<T>>>(heads),
               map_rows(out, q.rows, q.cols, q.cols), result.heads);
}

DecodeResult start_result(const F32Rows& q) {
  DecodeResult result;
  result.output =
      py::array_t<float>({static_cast<py::ssize_t>(q.rows), static_cast<py::ssize_t>(q.cols)});
  result.heads.resize(static_cast<std::size_t>(q.rows));
  return result;
}

/// amc.DenseDecoder: DenseDecode for every GQA group of a layer (LayerDecode), its scratch and
/// thread pool kept between calls.
class DenseDecoder {
 public:
  DenseDecoder(std::optional<float> scale, int threads)
      : scale_(scale), layer_(DenseDecode(scale), threads) {}

  DecodeResult decode(py::handle q_obj, py::handle k_obj, py::handle v_obj) {
    constexpr const char* fn = "amc.dense_decode";
    const F32Rows q = import_queries(q_obj, fn);
    const LayerKv kv = import_kv(k_obj, v_obj, fn);
    check_group(q, kv, fn);
    DecodeResult result = start_result(q);
    visit_storage(storage_of(kv.k.type), [&](auto t) {
      run_layer<typename decltype(t)::type>(layer_, q, kv, {}, result);
    });
    return result;
  }

  /// Seconds per call of `iterations` decodes of the same imported inputs, looped in C++:
  /// the C++ side of bench/python_overhead.py.
  double time_decode(py::handle q_obj, py::handle k_obj, py::handle v_obj, int iterations) {
    constexpr const char* fn = "amc.DenseDecoder.time_decode";
    const F32Rows q = import_queries(q_obj, fn);
    const LayerKv kv = import_kv(k_obj, v_obj, fn);
    check_group(q, kv, fn);
    DecodeResult result = start_result(q);
    double seconds = 0.0;
    visit_storage(storage_of(kv.k.type), [&](auto t) {
      using T = typename decltype(t)::type;
      std::vector<KvHead<KvView<T>>> heads;
      for (std::int64_t h = 0; h < kv.heads; ++h) heads.push_back({kv.view<T>(h), nullptr});
      RowMatrix out(q.rows, q.cols);
      py::gil_scoped_release release;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) {
        layer_.decode(q.matrix(), std::span<const KvHead<KvView<T>>>(heads), out, result.heads);
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
    return seconds / iterations;
  }

  std::optional<float> scale() const { return scale_; }
  int threads() const { return layer_.threads(); }

 private:
  std::optional<float> scale_;
  LayerDecode<DenseDecode> layer_;
};

std::vector<BlockSummaries*> summaries_list(const py::object& list, std::int64_t heads,
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

template <KvStorage T>
std::vector<BlockSummaries> build_for(const LayerKv& kv, std::int64_t block_size,
                                      const SummaryOptions& options) {
  std::vector<BlockSummaries> out;
  for (std::int64_t h = 0; h < kv.heads; ++h) {
    out.push_back(BlockSummaries::build(kv.view<T>(h), block_size, options));
  }
  return out;
}

/// amc.SparseDecoder: BlockSparseDecode<RuleSelector> for every GQA group of a layer.
class SparseDecoder {
 public:
  SparseDecoder(const SparseConfig& config, int threads)
      : config_(config), layer_(BlockSparseDecode<>(config), threads) {}

  DecodeResult decode(py::handle q_obj, py::handle k_obj, py::handle v_obj,
                      const py::object& summaries_obj) {
    constexpr const char* fn = "amc.sparse_decode";
    const F32Rows q = import_queries(q_obj, fn);
    const LayerKv kv = import_kv(k_obj, v_obj, fn);
    check_group(q, kv, fn);
    DecodeResult result = start_result(q);
    std::vector<BlockSummaries> built;  // when the caller brings none
    std::vector<BlockSummaries*> summaries;
    if (summaries_obj.is_none()) {
      visit_storage(storage_of(kv.k.type), [&](auto t) {
        built = build_for<typename decltype(t)::type>(kv, config_.block_size,
                                                      required_summaries(config_));
      });
      for (BlockSummaries& s : built) summaries.push_back(&s);
    } else {
      summaries = summaries_list(summaries_obj, kv.heads, fn);
    }
    visit_storage(storage_of(kv.k.type), [&](auto t) {
      run_layer<typename decltype(t)::type>(layer_, q, kv, summaries, result);
    });
    collect(q.rows, kv.heads, result);
    return result;
  }

  const SparseConfig& config() const { return config_; }
  int threads() const { return layer_.threads(); }

 private:
  void collect(std::int64_t query_heads, std::int64_t kv_heads, DecodeResult& result) const {
    result.sparse = true;
    result.adaptive = config_.adaptive();
    const std::int64_t group = query_heads / kv_heads;
    for (std::int64_t g = 0; g < kv_heads; ++g) {
      const BlockSparseDecode<>& op = layer_.group_operator(g);
      const std::span<const float> scores = op.block_scores();
      result.blocks = static_cast<std::int64_t>(scores.size()) / group;
      result.block_scores.insert(result.block_scores.end(), scores.begin(), scores.end());
      for (std::int64_t h = 0; h < group; ++h) {
        const std::span<const std::int64_t> blocks = op.selected_blocks(h);
        result.selected.emplace_back(blocks.begin(), blocks.end());
        result.supports.push_back(op.support(h));
        if (result.adaptive) {
          result.needed_k.push_back(op.needed_k(h));
          result.omitted_mass_bound.push_back(op.omitted_mass_bound(h));
          result.target_met.push_back(op.target_met(h));
        }
      }
    }
  }

  SparseConfig config_;
  LayerDecode<BlockSparseDecode<>> layer_;
};

// --- block summaries ------------------------------------------------------------------------

/// Appends the rows of `key` ([head_dim] or [rows, head_dim]) and `value` (same, or None) to
/// `summaries`.
void append_rows(BlockSummaries& summaries, py::handle key_obj, py::handle value_obj) {
  constexpr const char* fn = "amc.BlockSummaries.append";
  const Tensor key = import_tensor(key_obj, fn, "key");
  std::optional<Tensor> value;
  if (!value_obj.is_none()) value = import_tensor(value_obj, fn, "value");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&key, value ? &*value : nullptr}) {
    if (t == nullptr) continue;
    if (t->dim() != 1 && t->dim() != 2) {
      fail(t->name() + " has shape " + t->shape_string() +
           "; expected [head_dim] or [rows, head_dim]");
    }
    check_storage_type(*t);
    check_aligned(*t);
    if (t->shape.back() > 1 && t->strides.back() != 1) {
      fail(t->name() + " has strides " + t->strides_string() +
           ": its channels are not contiguous; pass .contiguous()");
    }
  }
  if (value && (value->shape != key.shape || value->type != key.type)) {
    fail(std::string(fn) + ": value (" + to_string(value->type) + " " + value->shape_string() +
         ") must have key's dtype and shape (" + to_string(key.type) + " " + key.shape_string() +
         ")");
  }
  const std::int64_t rows = key.dim() == 1 ? 1 : key.shape[0];
  const std::int64_t d = key.shape.back();
  visit_storage(storage_of(key.type), [&](auto t) {
    using T = typename decltype(t)::type;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t key_offset = key.dim() == 1 ? 0 : r * key.strides[0];
      const std::span<const T> k(key.as<T>() + key_offset, static_cast<std::size_t>(d));
      std::span<const T> v;
      if (value) {
        const std::int64_t value_offset = value->dim() == 1 ? 0 : r * value->strides[0];
        v = std::span<const T>(value->as<T>() + value_offset, static_cast<std::size_t>(d));
      }
      summaries.append<T>(k, v);
    }
  });
}

py::array_t<float> matrix_array(
    const Eigen::Map<const RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>>& m) {
  py::array_t<float> out({static_cast<py::ssize_t>(m.rows()), static_cast<py::ssize_t>(m.cols())});
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    std::memcpy(out.mutable_data(r, 0), m.row(r).data(), static_cast<std::size_t>(m.cols()) * 4);
  return out;
}

/// Brings each KV head's summaries up to the positions of k and v ([KV heads, n, head_dim]) by
/// appending the positions they do not cover yet.
void update_summaries(const py::object& list, py::handle k_obj, py::handle v_obj) {
  constexpr const char* fn = "amc.update_summaries";
  const LayerKv kv = import_kv(k_obj, v_obj, fn);
  const std::vector<BlockSummaries*> summaries = summaries_list(list, kv.heads, fn);
  for (std::int64_t h = 0; h < kv.heads; ++h) {
    BlockSummaries& s = *summaries[static_cast<std::size_t>(h)];
    if (s.head_dim() != kv.head_dim) {
      fail(std::string(fn) + ": summaries[" + std::to_string(h) + "] have head_dim " +
           std::to_string(s.head_dim()) + " but k has head_dim " + std::to_string(kv.head_dim));
    }
    if (s.positions() > kv.positions) {
      fail(std::string(fn) + ": summaries[" + std::to_string(h) + "] cover " +
           std::to_string(s.positions()) + " positions, more than k's " +
           std::to_string(kv.positions) + " (a new sequence needs new summaries)");
    }
  }
  visit_storage(storage_of(kv.k.type), [&](auto t) {
    using T = typename decltype(t)::type;
    const auto d = static_cast<std::size_t>(kv.head_dim);
    for (std::int64_t h = 0; h < kv.heads; ++h) {
      BlockSummaries& s = *summaries[static_cast<std::size_t>(h)];
      const KvView<T> view = kv.view<T>(h);
      for (std::int64_t p = s.positions(); p < kv.positions; ++p) {
        s.append<T>(std::span<const T>(view.key(p), d), std::span<const T>(view.value(p), d));
      }
    }
  });
}

// --- analysis -------------------------------------------------------------------------------

py::tuple analyse(py::handle q_obj, py::handle k_obj, py::handle v_obj,
                  const SparseConfig& config) {
  constexpr const char* fn = "amc.analyse";
  const Tensor q = import_tensor(q_obj, fn, "q");
  const Tensor k = import_tensor(k_obj, fn, "k");
  const Tensor v = import_tensor(v_obj, fn, "v");
  check_dim(q, 2, "[query heads, head_dim]");
  check_dim(k, 3, "[KV heads, positions, head_dim]");
  check_dim(v, 3, "[KV heads, positions, head_dim]");
  if (k.shape != v.shape) {
    fail(std::string(fn) + ": k " + k.shape_string() + " and v " + v.shape_string() +
         " must have the same shape");
  }
  if (k.shape[2] != q.shape[1]) {
    fail(std::string(fn) + ": k has head_dim " + std::to_string(k.shape[2]) + " but q has " +
         std::to_string(q.shape[1]));
  }
  // As amc-bounds: every input converted to f32 (exact for f16 and bf16); f32 contiguous inputs
  // are read in place.
  const F32Flat qf = f32_flat(q), kf = f32_flat(k), vf = f32_flat(v);
  const StepInputs in{q.shape[0], k.shape[0], k.shape[1], k.shape[2],
                      qf.values,  kf.values,  vf.values};
  StepAnalysis analysis;
  {
    py::gil_scoped_release release;
    analysis = analyse_step(in, config);
  }
  return py::make_tuple(analysis, in.query_heads, in.kv_heads, in.positions, in.head_dim);
}

// --- safetensors ----------------------------------------------------------------------------

py::dtype numpy_dtype(Dtype dtype, const std::string& name, const std::string& bf16) {
  switch (dtype) {
    case Dtype::F32:
      return py::dtype::of<float>();
    case Dtype::F64:
      return py::dtype::of<double>();
    case Dtype::F16:
      return py::dtype("float16");
    case Dtype::BF16:
      return bf16 == "uint16" ? py::dtype::of<std::uint16_t>() : py::dtype::of<float>();
    case Dtype::BOOL:
      return py::dtype::of<bool>();
    case Dtype::U8:
      return py::dtype::of<std::uint8_t>();
    case Dtype::I8:
      return py::dtype::of<std::int8_t>();
    case Dtype::I16:
      return py::dtype::of<std::int16_t>();
    case Dtype::U16:
      return py::dtype::of<std::uint16_t>();
    case Dtype::I32:
      return py::dtype::of<std::int32_t>();
    case Dtype::U32:
      return py::dtype::of<std::uint32_t>();
    case Dtype::I64:
      return py::dtype::of<std::int64_t>();
    case Dtype::U64:
      return py::dtype::of<std::uint64_t>();
    default:
      fail("amc.load_safetensors: tensor '" + name + "' has dtype " +
           std::string(to_string(dtype)) + ", which NumPy has no type for");
  }
}

py::dict load_safetensors(const std::filesystem::path& path, const std::string& bf16) {
  if (bf16 != "float32" && bf16 != "uint16") {
    fail(
        "amc.load_safetensors: bf16 must be 'float32' (converted exactly) or 'uint16' (the raw "
        "bits), got '" +
        bf16 + "'");
  }
  const SafetensorsFile file = SafetensorsFile::open(path);
  py::dict out;
  for (const TensorInfo& info : file.tensors()) {
    std::vector<py::ssize_t> shape(info.shape.begin(), info.shape.end());
    py::array array(numpy_dtype(info.dtype, info.name, bf16), shape);
    const std::span<const std::byte> bytes = file.bytes(info);
    if (info.dtype == Dtype::BF16 && bf16 == "float32") {
      file.to_f32(info.name, std::span<float>(static_cast<float*>(array.mutable_data()),
                                              static_cast<std::size_t>(info.numel())));
    } else if (!bytes.empty()) {
      std::memcpy(array.mutable_data(), bytes.data(), bytes.size());
    }
    out[py::str(info.name)] = array;
  }
  return out;
}

std::map<std::string, std::string> safetensors_metadata(const std::filesystem::path& path) {
  return SafetensorsFile::open(path).metadata();
}

Dtype safetensors_dtype(const Tensor& t) {
  switch (t.type) {
    case ElementType::f32:
      return Dtype::F32;
    case ElementType::f16:
      return Dtype::F16;
    case ElementType::bf16:
      return Dtype::BF16;
    case ElementType::f64:
      return Dtype::F64;
    case ElementType::i8:
      return Dtype::I8;
    case ElementType::i16:
      return Dtype::I16;
    case ElementType::i32:
      return Dtype::I32;
    case ElementType::i64:
      return Dtype::I64;
    case ElementType::u8:
      return Dtype::U8;
    case ElementType::u16:
      return Dtype::U16;
    case ElementType::u32:
      return Dtype::U32;
    case ElementType::u64:
      return Dtype::U64;
    case ElementType::boolean:
      return Dtype::BOOL;
    default:
      fail(t.name() + " has an unsupported dtype");
  }
}

void save_safetensors(const std::filesystem::path& path, const py::dict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> imported;
  std::vector<TensorToWrite> writes;
  imported.reserve(tensors.size());
  for (const auto& [key, value] : tensors) {
    if (!py::isinstance<py::str>(key)) {
      fail("amc.save_safetensors: tensor names must be str, got " + detail::type_name(key));
    }
    const std::string name = key.cast<std::string>();
    Tensor t = import_tensor(value, "amc.save_safetensors", "tensor '" + name + "'");
    if (!t.contiguous()) {
      fail(t.name() + " has strides " + t.strides_string() + " for shape " + t.shape_string() +
           ": it is not contiguous; pass .contiguous() or np.ascontiguousarray()");
    }
    writes.push_back(
        {name, safetensors_dtype(t), t.shape.vector(),
         std::span<const std::byte>(static_cast<const std::byte*>(t.data),
                                    static_cast<std::size_t>(t.numel()) * element_size(t.type))});
    imported.push_back(std::move(t));
  }
  write_safetensors(path, writes, metadata);
}

py::dict inspect_input(py::handle obj) {
  const Tensor t = import_tensor(obj, "amc._inspect_input", "x");
  return py::dict("address"_a = reinterpret_cast<std::uintptr_t>(t.data),
                  "dtype"_a = to_string(t.type), "shape"_a = t.shape.vector(),
                  "strides"_a = t.strides.vector(), "via"_a = t.via);
}

}  // namespace
}  // namespace amc::python

PYBIND11_MODULE(_amc, m) {
  using namespace amc;
  using namespace amc::python;
  m.doc() = "amc: attention-mass-aware sparse decoding (C++ core; see the amc package)";
  m.attr("__version__") = std::string(version());
  // amc.Error: every amc::error, with its message (a RuntimeError, as amc::error is a
  // std::runtime_error).
  py::register_exception<amc::error>(m, "Error", PyExc_RuntimeError);

  // --- SparseConfig ---
  py::class_<SparseConfig> config_class(
      m, "SparseConfig",
      "Block-sparse selection settings (amc::SparseConfig): the same "
      "names, defaults and validation. SparseConfig(**settings).");
  config_class
      .def(py::init([](const py::kwargs& settings) { return make_config(std::nullopt, settings); }))
      .def("validate", &SparseConfig::validate, "Raises amc.Error naming the first bad field.")
      .def("nominal_support", &SparseConfig::nominal_support)
      .def_property_readonly("adaptive", &SparseConfig::adaptive)
      .def(
          "required_summaries",
          [](const SparseConfig& c) { return summary_options_dict(required_summaries(c)); },
          "The block summaries the configured rule (and adaptive selection) read.")
      .def(
          "replace",
          [](const SparseConfig& c, const py::kwargs& settings) {
            return make_config(c, settings);
          },
          "A copy with `settings` applied, validated.")
      .def("to_text", [](const SparseConfig& c) { return to_text(c); })
      .def_static(
          "parse", [](const std::string& text) { return parse_sparse_config(text); },
          "From 'name=value' settings separated by spaces or commas.")
      .def("to_dict",
           [](const SparseConfig& c) {
             py::dict out;
             for (const SparseSetting& s : sparse_settings())
               out[py::str(std::string(s.name))] = setting_value(s, c);
             return out;
           })
      .def("__copy__", [](const SparseConfig& c) { return c; })
      .def("__deepcopy__", [](const SparseConfig& c, py::dict) { return c; })
      .def(py::self == py::self)
      .def("__str__", [](const SparseConfig& c) { return to_text(c); })
      .def("__repr__", [](const SparseConfig& c) {
        std::string out = "amc.SparseConfig(";
        bool first = true;
        for (const SparseSetting& s : sparse_settings()) {
          const std::string text = s.get(c);
          if (s.optional && text.empty()) continue;
          out += (first ? "" : ", ") + std::string(s.name) + "=" +
                 (s.kind == SettingKind::name ? "'" + text + "'" : text);
          first = false;
        }
        return out + ")";
      });
  for (const SparseSetting& s : sparse_settings()) {
    const std::string name(s.name);
    config_class.def_property(
        name.c_str(), [&s](const SparseConfig& c) { return setting_value(s, c); },
        [&s](SparseConfig& c, py::handle value) {
          // On a copy: the table's setters store before they check, and a refused value must
          // leave the configuration as it was.
          SparseConfig changed = c;
          s.set(changed, setting_text(s, value));
          c = changed;
        },
        std::string(s.help).c_str());
  }
  m.def(
      "settings",
      [] {
        py::list out;
        for (const SparseSetting& s : sparse_settings()) {
          const char* kind = s.kind == SettingKind::integer ? "integer"
                             : s.kind == SettingKind::real  ? "real"
                                                            : "name";
          out.append(py::dict("name"_a = std::string(s.name), "help"_a = std::string(s.help),
                              "kind"_a = kind, "optional"_a = s.optional,
                              "default"_a = setting_value(s, SparseConfig{})));
        }
        return out;
      },
      "Every selection setting: name, help, kind, optional, default.");
  m.def(
      "rules",
      [] {
        py::list out;
        for (const RuleInfo& r : registered_rules()) {
          out.append(py::dict("name"_a = std::string(r.name),
                              "description"_a = std::string(r.description),
                              "reads_keys"_a = r.reads_keys));
        }
        return out;
      },
      "The registered block scoring rules.");
  m.def("_make_config", &make_config, py::arg("config") = py::none());

  // --- decode ---
  py::class_<DecodeResult>(m, "DecodeResult", "What a decode call returned, per query head.")
      .def_readonly("output", &DecodeResult::output, "[query heads, head_dim] float32")
      .def_property_readonly(
          "lse",
          [](const DecodeResult& r) {
            std::vector<float> v;
            for (const HeadResult& h : r.heads) v.push_back(h.lse);
            return vector_array(v);
          },
          "[query heads] float32: log-sum-exp of the scores read")
      .def_property_readonly("positions_read",
                             [](const DecodeResult& r) {
                               std::vector<std::int64_t> v;
                               for (const HeadResult& h : r.heads) v.push_back(h.positions_read);
                               return vector_array(v);
                             })
      .def_property_readonly("finite",
                             [](const DecodeResult& r) {
                               py::array_t<bool> out(static_cast<py::ssize_t>(r.heads.size()));
                               for (std::size_t i = 0; i < r.heads.size(); ++i)
                                 out.mutable_data()[i] = r.heads[i].finite;
                               return out;
                             })
      .def_readonly("sparse", &DecodeResult::sparse)
      .def_property_readonly(
          "selected_blocks",
          [](const DecodeResult& r) {
            py::list out;
            for (const auto& s : r.selected) out.append(vector_array(s));
            return out;
          },
          "per query head: int64 block indices, increasing (sparse only)")
      .def_property_readonly(
          "support",
          [](const DecodeResult& r) {
            py::list out;
            for (const Support& s : r.supports) out.append(ranges_array(s));
            return out;
          },
          "per query head: [ranges, 2] int64 [begin, end) (sparse only)")
      .def("support_positions",
           [](const DecodeResult& r, std::int64_t head) {
             if (head < 0 || head >= static_cast<std::int64_t>(r.supports.size())) {
               fail("amc.DecodeResult.support_positions: head " + std::to_string(head) +
                    " is outside [0, " + std::to_string(r.supports.size()) + ")");
             }
             return positions_array(r.supports[static_cast<std::size_t>(head)]);
           })
      .def_property_readonly("block_scores",
                             [](const DecodeResult& r) -> py::object {
                               if (!r.sparse) return py::none();
                               py::array_t<float> out({static_cast<py::ssize_t>(r.heads.size()),
                                                       static_cast<py::ssize_t>(r.blocks)});
                               if (!r.block_scores.empty())
                                 std::memcpy(out.mutable_data(), r.block_scores.data(),
                                             r.block_scores.size() * sizeof(float));
                               return out;
                             })
      .def_property_readonly("needed_k",
                             [](const DecodeResult& r) -> py::object {
                               if (!r.adaptive) return py::none();
                               return vector_array(r.needed_k);
                             })
      .def_property_readonly("omitted_mass_bound",
                             [](const DecodeResult& r) -> py::object {
                               if (!r.adaptive) return py::none();
                               return vector_array(r.omitted_mass_bound);
                             })
      .def_property_readonly("target_met",
                             [](const DecodeResult& r) -> py::object {
                               if (!r.adaptive) return py::none();
                               py::array_t<bool> out(static_cast<py::ssize_t>(r.target_met.size()));
                               for (std::size_t i = 0; i < r.target_met.size(); ++i)
                                 out.mutable_data()[i] = r.target_met[i];
                               return out;
                             })
      .def_property_readonly(
          "_key_addresses",
          [](const DecodeResult& r) {
            std::vector<std::uintptr_t> out;
            for (std::int64_t h = 0; h < r.kv_heads; ++h)
              out.push_back(r.key_base + static_cast<std::uintptr_t>(h * r.key_head_bytes));
            return out;
          },
          "[KV heads]: address of position 0's key the operator read (zero-copy proof)")
      .def_property_readonly("_value_addresses", [](const DecodeResult& r) {
        std::vector<std::uintptr_t> out;
        for (std::int64_t h = 0; h < r.kv_heads; ++h)
          out.push_back(r.value_base + static_cast<std::uintptr_t>(h * r.value_head_bytes));
        return out;
      });

  py::class_<DenseDecoder>(m, "DenseDecoder",
                           "Dense decode of every GQA group of a layer; keeps its scratch and "
                           "threads between calls.")
      .def(py::init<std::optional<float>, int>(), py::arg("scale") = py::none(),
           py::arg("threads") = 1)
      .def("decode", &DenseDecoder::decode, py::arg("q"), py::arg("k"), py::arg("v"))
      .def("time_decode", &DenseDecoder::time_decode, py::arg("q"), py::arg("k"), py::arg("v"),
           py::arg("iterations"))
      .def_property_readonly("scale", &DenseDecoder::scale)
      .def_property_readonly("threads", &DenseDecoder::threads);

  py::class_<SparseDecoder>(m, "SparseDecoder",
                            "Block-sparse decode of every GQA group of a layer.")
      .def(py::init([](std::optional<SparseConfig> config, int threads, const py::kwargs& s) {
             // Held by pointer: its thread pool cannot move.
             return std::make_unique<SparseDecoder>(make_config(config, s), threads);
           }),
           py::arg("config") = py::none(), py::arg("threads") = 1)
      .def("decode", &SparseDecoder::decode, py::arg("q"), py::arg("k"), py::arg("v"),
           py::arg("summaries") = py::none())
      .def_property_readonly("config", &SparseDecoder::config)
      .def_property_readonly("threads", &SparseDecoder::threads);

  // --- summaries ---
  py::class_<BlockSummaries>(m, "BlockSummaries",
                             "Block summaries of one KV head's keys (amc::BlockSummaries).")
      .def(py::init([](std::int64_t block_size, std::int64_t head_dim, bool channel_bounds,
                       bool value_norms, std::int64_t sub_blocks) {
             return BlockSummaries(block_size, head_dim,
                                   SummaryOptions{channel_bounds, value_norms, sub_blocks});
           }),
           py::arg("block_size"), py::arg("head_dim"), py::arg("channel_bounds") = false,
           py::arg("value_norms") = false, py::arg("sub_blocks") = 0)
      .def("append", &append_rows, py::arg("key"), py::arg("value") = py::none(),
           "Appends one position ([head_dim]) or several ([rows, head_dim]).")
      .def("clear", &BlockSummaries::clear)
      .def_property_readonly("positions", &BlockSummaries::positions)
      .def_property_readonly("blocks", &BlockSummaries::blocks)
      .def_property_readonly("block_size", &BlockSummaries::block_size)
      .def_property_readonly("head_dim", &BlockSummaries::head_dim)
      .def_property_readonly(
          "options", [](const BlockSummaries& s) { return summary_options_dict(s.options()); })
      .def_property_readonly("memory_bytes", &BlockSummaries::memory_bytes)
      .def_property_readonly("mean_keys",
                             [](const BlockSummaries& s) { return matrix_array(s.mean_keys()); })
      .def_property_readonly("channel_min",
                             [](const BlockSummaries& s) { return matrix_array(s.channel_min()); })
      .def_property_readonly("channel_max",
                             [](const BlockSummaries& s) { return matrix_array(s.channel_max()); })
      .def_property_readonly(
          "sub_block_means",
          [](const BlockSummaries& s) { return matrix_array(s.sub_block_means()); })
      .def_property_readonly("value_norm_max", [](const BlockSummaries& s) {
        const auto v = s.value_norm_max();
        return vector_array(std::vector<float>(v.begin(), v.end()));
      });
  m.def(
      "build_summaries",
      [](py::handle k, py::handle v, std::optional<SparseConfig> config, const py::kwargs& s) {
        const SparseConfig c = make_config(config, s);
        const LayerKv kv = import_kv(k, v, "amc.build_summaries");
        std::vector<BlockSummaries> built;
        visit_storage(storage_of(kv.k.type), [&](auto t) {
          built = build_for<typename decltype(t)::type>(kv, c.block_size, required_summaries(c));
        });
        py::list out;
        for (BlockSummaries& b : built) out.append(py::cast(std::move(b)));
        return out;
      },
      py::arg("k"), py::arg("v"), py::arg("config") = py::none(),
      "Summaries of every KV head of k, v [KV heads, n, head_dim], with what config's rule reads.");
  m.def("update_summaries", &update_summaries, py::arg("summaries"), py::arg("k"), py::arg("v"));

  // --- analysis ---
  py::class_<HeadAnalysis>(m, "HeadAnalysis", "amc-bounds' per-head record")
      .def_readonly("head", &HeadAnalysis::head)
      .def_readonly("kv_head", &HeadAnalysis::kv_head)
      .def_readonly("n", &HeadAnalysis::positions)
      .def_readonly("support_size", &HeadAnalysis::support_size)
      .def_readonly("selected_blocks", &HeadAnalysis::selected_blocks)
      .def_property_readonly("support",
                             [](const HeadAnalysis& a) { return ranges_array(a.support); })
      .def_readonly("lse_support", &HeadAnalysis::lse_support)
      .def_readonly("lse_all", &HeadAnalysis::lse_all)
      .def_readonly("retained_mass", &HeadAnalysis::retained_mass)
      .def_readonly("omitted_mass", &HeadAnalysis::omitted_mass)
      .def_readonly("error_norm", &HeadAnalysis::error_norm)
      .def_readonly("identity_residual", &HeadAnalysis::identity_residual)
      .def_readonly("relative_identity_residual", &HeadAnalysis::relative_identity_residual)
      .def_readonly("dense_operator_error", &HeadAnalysis::dense_operator_error)
      .def_readonly("sparse_operator_error", &HeadAnalysis::sparse_operator_error)
      .def_readonly("value_bound", &HeadAnalysis::value_bound)
      .def_readonly("loose_value_bound", &HeadAnalysis::loose_value_bound)
      .def_readonly("direction_cosine", &HeadAnalysis::direction_cosine)
      .def_readonly("certified_omitted_mass_bound", &HeadAnalysis::certified_omitted_mass_bound)
      .def_readonly("certified_log_omitted_mass_bound",
                    &HeadAnalysis::certified_log_omitted_mass_bound)
      .def_readonly("certified_error_bound", &HeadAnalysis::certified_error_bound)
      .def_readonly("needed_k", &HeadAnalysis::needed_k);
  py::class_<StepSummary>(m, "AnalysisSummary", "amc-bounds' summary: extremes over the heads")
      .def_readonly("max_omitted_mass", &StepSummary::max_omitted_mass)
      .def_readonly("min_retained_mass", &StepSummary::min_retained_mass)
      .def_readonly("max_error_norm", &StepSummary::max_error_norm)
      .def_readonly("max_identity_residual", &StepSummary::max_identity_residual)
      .def_readonly("max_relative_identity_residual", &StepSummary::max_relative_identity_residual)
      .def_readonly("max_operator_error", &StepSummary::max_operator_error)
      .def_readonly("max_certified_omitted_mass_bound",
                    &StepSummary::max_certified_omitted_mass_bound)
      .def_readonly("max_certified_error_bound", &StepSummary::max_certified_error_bound)
      .def_readonly("max_needed_k", &StepSummary::max_needed_k);
  py::class_<StepAnalysis>(m, "StepAnalysis")
      .def_readonly("scale", &StepAnalysis::scale)
      .def_readonly("heads", &StepAnalysis::heads)
      .def_readonly("summary", &StepAnalysis::summary);
  m.def("_analyse", &analyse, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("config"));
  m.def(
      "kernels", [] { return std::string(kernels::active().name); },
      "The SIMD kernel table in use (scalar, sse2, avx2, avx512).");

  // --- margins and omitted mass ---
  py::class_<LogitMargin>(m, "LogitMargin")
      .def_readonly("top", &LogitMargin::top)
      .def_readonly("runner_up", &LogitMargin::runner_up)
      .def_readonly("top_logit", &LogitMargin::top_logit)
      .def_readonly("runner_up_logit", &LogitMargin::runner_up_logit)
      .def_readonly("margin", &LogitMargin::margin)
      .def("__repr__", [](const LogitMargin& l) {
        return "amc.LogitMargin(top=" + std::to_string(l.top) +
               ", runner_up=" + std::to_string(l.runner_up) +
               ", margin=" + py::repr(py::float_(l.margin)).cast<std::string>() + ")";
      });
  const auto vector_input = [](py::handle obj, const char* fn, const char* arg) {
    const Tensor t = import_tensor(obj, fn, arg);
    check_dim(t, 1, "[size]");
    return f32_rows(t);
  };
  const auto matrix_input = [](py::handle obj, const char* fn, const char* arg) {
    const Tensor t = import_tensor(obj, fn, arg);
    check_dim(t, 2, "[vocab, hidden]");
    return f32_rows(t);
  };
  m.def("logit_margin", [vector_input](py::handle logits) {
    const F32Rows z = vector_input(logits, "amc.logit_margin", "logits");
    return logit_margin(z.vector());
  });
  m.def(
      "greedy_token_kept",
      [vector_input, matrix_input](py::handle unembedding, py::handle logits, py::handle delta,
                                   std::int64_t top) {
        const F32Rows w = matrix_input(unembedding, "amc.greedy_token_kept", "unembedding");
        const F32Rows z = vector_input(logits, "amc.greedy_token_kept", "logits");
        const F32Rows e = vector_input(delta, "amc.greedy_token_kept", "delta");
        return greedy_token_kept(w.matrix(), z.vector(), e.vector(), top);
      },
      py::arg("unembedding"), py::arg("logits"), py::arg("delta"), py::arg("top"));
  m.def(
      "sufficient_radius",
      [matrix_input](py::handle unembedding, std::int64_t top, double margin) {
        const F32Rows w = matrix_input(unembedding, "amc.sufficient_radius", "unembedding");
        return sufficient_radius(w.matrix(), top, margin);
      },
      py::arg("unembedding"), py::arg("top"), py::arg("margin"));
  m.def(
      "unembedding_row_norms",
      [matrix_input](py::handle unembedding) {
        const F32Rows w = matrix_input(unembedding, "amc.unembedding_row_norms", "unembedding");
        const Eigen::VectorXd norms = unembedding_row_norms(w.matrix());
        return vector_array(std::vector<double>(norms.data(), norms.data() + norms.size()));
      },
      py::arg("unembedding"));
  m.def(
      "sufficient_radius_from_norms",
      [](py::handle row_norms, std::int64_t top, double margin) {
        const Tensor t = import_tensor(row_norms, "amc.sufficient_radius_from_norms", "row_norms");
        check_dim(t, 1, "[vocab]");
        Eigen::VectorXd norms(t.shape[0]);
        for (std::int64_t i = 0; i < t.shape[0]; ++i) {
          norms[i] = t.type == ElementType::f64 ? t.as<double>()[i * t.strides[0]]
                                                : element_as_float(t, i * t.strides[0]);
        }
        return sufficient_radius_from_norms(norms, top, margin);
      },
      py::arg("row_norms"), py::arg("top"), py::arg("margin"));
  m.def("attention_error_keeps_token", &attention_error_keeps_token, py::arg("omitted_mass"),
        py::arg("omitted_gap_norm"), py::arg("lipschitz"), py::arg("radius"));
  m.def("retained_mass", &retained_mass, py::arg("lse_support"), py::arg("lse_all"));
  m.def("omitted_mass", &omitted_mass, py::arg("lse_support"), py::arg("lse_all"));

  // --- safetensors ---
  m.def("load_safetensors", &load_safetensors, py::arg("path"), py::arg("bf16") = "float32",
        "Every tensor of a safetensors file as a NumPy array (copies), in file order.");
  m.def("safetensors_metadata", &safetensors_metadata, py::arg("path"));
  m.def(
      "safetensors_dtypes",
      [](const std::filesystem::path& path) {
        std::map<std::string, std::string> out;
        const SafetensorsFile file = SafetensorsFile::open(path);
        for (const TensorInfo& info : file.tensors())
          out[info.name] = std::string(to_string(info.dtype));
        return out;
      },
      py::arg("path"), "{name: dtype as the file spells it, e.g. 'BF16'}");
  m.def("save_safetensors", &save_safetensors, py::arg("path"), py::arg("tensors"),
        py::arg("metadata") = std::map<std::string, std::string>{},
        "Writes contiguous arrays or tensors (read in place) atomically.");
  m.def("_inspect_input", &inspect_input, "What the module reads for x: address, dtype, ...");
}

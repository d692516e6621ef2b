// amc.BlockSummaries, amc.build_summaries and amc.update_summaries: block summaries of a KV
// head's keys, built from or appended with arrays read in place.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "amc/amc.hpp"
#include "bindings.hpp"
#include "inputs.hpp"
#include "outputs.hpp"

namespace amc::python {
namespace {

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

/// Brings each KV head's summaries down to the positions of k and v ([KV heads, n, head_dim]):
/// the summaries of a cache cropped to its first n positions (BlockSummaries::truncate).
void truncate_summaries(const py::object& list, py::handle k_obj, py::handle v_obj) {
  constexpr const char* fn = "amc.truncate_summaries";
  const LayerKv kv = import_kv(k_obj, v_obj, fn);
  const std::vector<BlockSummaries*> summaries = summaries_list(list, kv.heads, fn);
  for (std::int64_t h = 0; h < kv.heads; ++h) {
    const BlockSummaries& s = *summaries[static_cast<std::size_t>(h)];
    if (s.positions() < kv.positions) {
      fail(std::string(fn) + ": summaries[" + std::to_string(h) + "] cover " +
           std::to_string(s.positions()) + " positions, fewer than k's " +
           std::to_string(kv.positions) + " (append with amc.update_summaries)");
    }
  }
  visit_storage(storage_of(kv.k.type), [&](auto t) {
    using T = typename decltype(t)::type;
    for (std::int64_t h = 0; h < kv.heads; ++h)
      summaries[static_cast<std::size_t>(h)]->truncate(kv.view<T>(h), kv.positions);
  });
}

}  // namespace

void bind_summaries(py::module_& m) {
  py::class_<BlockSummaries>(m, "BlockSummaries",
                             "Block summaries of one KV head's keys (amc::BlockSummaries).")
      .def(py::init([](std::int64_t block_size, std::int64_t head_dim, bool channel_bounds,
                       bool value_norms, std::int64_t sub_blocks, bool bf16_copies) {
             return BlockSummaries(block_size, head_dim,
                                   SummaryOptions{.channel_bounds = channel_bounds,
                                                  .value_norms = value_norms,
                                                  .sub_blocks = sub_blocks,
                                                  .bf16_copies = bf16_copies});
           }),
           py::arg("block_size"), py::arg("head_dim"), py::arg("channel_bounds") = false,
           py::arg("value_norms") = false, py::arg("sub_blocks") = 0,
           py::arg("bf16_copies") = false)
      .def("append", &append_rows, py::arg("key"), py::arg("value") = py::none(),
           "Appends one position ([head_dim]) or several ([rows, head_dim]).")
      .def("clear", &BlockSummaries::clear)
      .def(
          "copy", [](const BlockSummaries& s) { return BlockSummaries(s); },
          "An independent copy (a beam that forks a sequence gets its own summaries).")
      .def("__copy__", [](const BlockSummaries& s) { return BlockSummaries(s); })
      .def(
          "__deepcopy__",
          [](const BlockSummaries& s, const py::dict&) { return BlockSummaries(s); },
          py::arg("memo"))
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
  m.def("truncate_summaries", &truncate_summaries, py::arg("summaries"), py::arg("k"), py::arg("v"),
        "Summaries cut down to k's n positions (a cropped cache), reading at most block_size - 1 "
        "positions per KV head again.");
}

}  // namespace amc::python

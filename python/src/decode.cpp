// amc.DenseDecoder, amc.SparseDecoder and amc.DecodeResult: a layer's decode (LayerDecode) over
// queries and keys/values read in place, with the GIL released while it runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "amc/amc.hpp"
#include "bindings.hpp"
#include "inputs.hpp"
#include "outputs.hpp"

namespace amc::python {
namespace {

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
  DenseDecoder(std::optional<float> scale, int threads, AttentionArithmetic arithmetic)
      : scale_(scale), arithmetic_(arithmetic), layer_(DenseDecode(scale, arithmetic), threads) {}

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
  std::string arithmetic() const { return std::string(to_string(arithmetic_)); }

 private:
  std::optional<float> scale_;
  AttentionArithmetic arithmetic_;
  LayerDecode<DenseDecode> layer_;
};

/// amc.CausalDenseDecoder: CausalDenseDecode for every GQA group of a layer, over `positions`
/// consecutive query positions (a verify pass of speculative decoding).
class CausalDenseDecoder {
 public:
  explicit CausalDenseDecoder(std::optional<float> scale) : scale_(scale), op_(scale) {}

  /// q [positions * query heads, head_dim], position-major; k, v [KV heads, n, head_dim]:
  /// position t attends over the first n - (positions - 1 - t) rows.
  DecodeResult decode(py::handle q_obj, py::handle k_obj, py::handle v_obj,
                      std::int64_t positions) {
    constexpr const char* fn = "amc.CausalDenseDecoder.decode";
    const F32Rows q = import_queries(q_obj, fn);
    const LayerKv kv = import_kv(k_obj, v_obj, fn);
    if (positions < 1 || q.rows % positions != 0) {
      fail(std::string(fn) + ": positions must be >= 1 and divide q's " + std::to_string(q.rows) +
           " rows, got " + std::to_string(positions));
    }
    const std::int64_t query_heads = q.rows / positions;
    F32Rows one_position = q;  // the group check on one position's heads
    one_position.rows = query_heads;
    check_group(one_position, kv, fn);
    if (kv.positions < positions) {
      fail(std::string(fn) + ": k holds " + std::to_string(kv.positions) +
           " positions, fewer than " + "the " + std::to_string(positions) +
           " query positions (each attends to itself)");
    }
    DecodeResult result = start_result(q);
    const std::int64_t group = query_heads / kv.heads, d = q.cols;
    float* out = result.output.mutable_data();
    visit_storage(storage_of(kv.k.type), [&](auto type) {
      using T = typename decltype(type)::type;
      py::gil_scoped_release release;
      // Group g's rows of every position, gathered position-major as the operator takes them.
      RowMatrix queries(positions * group, d), attended(positions * group, d);
      std::vector<HeadResult> heads(static_cast<std::size_t>(positions * group));
      const auto q_rows = q.matrix();
      for (std::int64_t g = 0; g < kv.heads; ++g) {
        for (std::int64_t t = 0; t < positions; ++t)
          queries.middleRows(t * group, group) =
              q_rows.middleRows(t * query_heads + g * group, group);
        op_.decode(queries, positions, KvHead<KvView<T>>{kv.view<T>(g), nullptr}, attended, heads);
        for (std::int64_t t = 0; t < positions; ++t) {
          for (std::int64_t j = 0; j < group; ++j) {
            const std::int64_t row = t * query_heads + g * group + j;
            std::copy_n(attended.row(t * group + j).data(), d, out + row * d);
            result.heads[static_cast<std::size_t>(row)] =
                heads[static_cast<std::size_t>(t * group + j)];
          }
        }
      }
    });
    return result;
  }

  std::optional<float> scale() const { return scale_; }

 private:
  std::optional<float> scale_;
  CausalDenseDecode op_;
};

/// amc.SparseDecoder: BlockSparseDecode<RegisteredRule> for every GQA group of a layer.
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

}  // namespace

void bind_decode(py::module_& m) {
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
      .def(py::init([](std::optional<float> scale, int threads, const std::string& arithmetic) {
             return std::make_unique<DenseDecoder>(scale, threads,
                                                   parse_attention_arithmetic(arithmetic));
           }),
           py::arg("scale") = py::none(), py::arg("threads") = 1,
           py::arg("arithmetic") = "exact_f32",
           "arithmetic: 'exact_f32' (default) or the opt-in 'bf16_products' (AVX512_BF16 dot "
           "products on bf16 KV; exact_f32 where amc.bf16_products_available() is false)")
      .def("decode", &DenseDecoder::decode, py::arg("q"), py::arg("k"), py::arg("v"))
      .def("time_decode", &DenseDecoder::time_decode, py::arg("q"), py::arg("k"), py::arg("v"),
           py::arg("iterations"))
      .def_property_readonly("scale", &DenseDecoder::scale)
      .def_property_readonly("threads", &DenseDecoder::threads)
      .def_property_readonly("arithmetic", &DenseDecoder::arithmetic);

  py::class_<CausalDenseDecoder>(
      m, "CausalDenseDecoder",
      "Dense decode of several consecutive query positions at once, each over its own prefix, "
      "each head's result bit for bit DenseDecoder's over that prefix (the verify pass of "
      "speculative decoding; docs/speculative.md).")
      .def(py::init<std::optional<float>>(), py::arg("scale") = py::none())
      .def("decode", &CausalDenseDecoder::decode, py::arg("q"), py::arg("k"), py::arg("v"),
           py::arg("positions"),
           "q [positions * query heads, head_dim], position-major; k, v [KV heads, n, head_dim]; "
           "position t attends over the first n - (positions - 1 - t) rows")
      .def_property_readonly("scale", &CausalDenseDecoder::scale);

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
}

}  // namespace amc::python

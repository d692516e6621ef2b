// amc-bench-gguf: speed of amc::dequantize per ggml type, to f32 and to bf16, on one thread.
//
//   amc-bench-gguf [benchmark flags]     synthetic blocks, 2^20 elements per call (the output,
//                                        4 MiB of f32, stays in the last-level cache)
//   amc-bench-gguf --file MODEL.gguf     every dequantizable tensor of a real file, each into
//                                        a buffer touched beforehand (no page faults timed);
//                                        prints elements/s per type and the whole file's time
//
// Items per second are elements (dequantized values) per second; for Matvec/*, weights
// multiplied per second (one thread, the matrix in L2).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "amc/io/gguf.hpp"
#include "amc/io/gguf_quants.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/storage.hpp"

namespace {

constexpr std::int64_t kElements = std::int64_t{1} << 20;

/// Random blocks of `type` whose f16 scales are finite and moderate (the values of a real
/// model; the speed does not depend on them, but NaNs would make the comparison pointless).
std::vector<std::byte> random_blocks(amc::GgmlType type, std::int64_t elements) {
  const amc::GgmlTypeLayout layout = *amc::ggml_type_layout(static_cast<std::uint32_t>(type));
  const std::size_t blocks = static_cast<std::size_t>(elements / layout.block_elements);
  std::vector<std::byte> bytes(blocks * static_cast<std::size_t>(layout.block_bytes));
  std::mt19937 rng(42);
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0xFFu);
  if (type == amc::GgmlType::F32) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (std::size_t i = 0; i < bytes.size() / 4; ++i) {
      const float x = uniform(rng);
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    }
  } else if (type == amc::GgmlType::F16 || type == amc::GgmlType::BF16) {
    for (std::size_t i = 0; i < bytes.size() / 2; ++i) {  // clear the top exponent bit: finite
      bytes[2 * i + 1] &= std::byte{0xBF};
    }
  } else {
    // Every f16 scale field of these layouts (d, m, dmin) gets exponent bits 01xxx (finite).
    std::vector<std::size_t> scales;
    switch (type) {
      case amc::GgmlType::Q4_0:
      case amc::GgmlType::Q5_0:
      case amc::GgmlType::Q8_0:
        scales = {0};
        break;
      case amc::GgmlType::Q4_1:
      case amc::GgmlType::Q5_1:
      case amc::GgmlType::Q4_K:
      case amc::GgmlType::Q5_K:
        scales = {0, 2};
        break;
      case amc::GgmlType::Q6_K:
        scales = {208};
        break;
      default:
        break;
    }
    for (std::size_t b = 0; b < blocks; ++b) {
      for (const std::size_t s : scales) {
        std::byte& high = bytes[b * static_cast<std::size_t>(layout.block_bytes) + s + 1];
        high = (high & std::byte{0x83}) | std::byte{0x20};
      }
    }
  }
  return bytes;
}

template <class Out>
void BM_Dequantize(benchmark::State& state, amc::GgmlType type) {
  const std::vector<std::byte> blocks = random_blocks(type, kElements);
  std::vector<Out> out(static_cast<std::size_t>(kElements));
  for (auto _ : state) {
    amc::dequantize(type, blocks, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
  state.SetBytesProcessed(state.iterations() *
                          static_cast<std::int64_t>(blocks.size() + out.size() * sizeof(Out)));
}

/// A matrix-vector product on stored blocks, as the decode runs it (--weight-dtype stored): every
/// row of a [1536, 576] matrix (SmolLM2's gate projection; 0.9 M weights, in L2 for the block
/// types) through amc::quantized_dot's kernel. Items are weights; the bf16 row is the same
/// product on bf16 weights through the operators' dot kernel, the widened layout's baseline.
/// The k-quants' rows are whole super-blocks of 256, so theirs are [1536, 512] (0.8 M weights).
constexpr std::int64_t kRows = 1536, kCols = 576;

std::int64_t matvec_cols(amc::GgmlType type) {
  const amc::GgmlTypeLayout layout = *amc::ggml_type_layout(static_cast<std::uint32_t>(type));
  return kCols / layout.block_elements * layout.block_elements;
}

void BM_QuantizedMatvec(benchmark::State& state, amc::GgmlType type) {
  const amc::GgmlTypeLayout layout = *amc::ggml_type_layout(static_cast<std::uint32_t>(type));
  const std::int64_t cols = matvec_cols(type);
  const std::vector<std::byte> blocks = random_blocks(type, kRows * cols);
  const std::size_t row_bytes = blocks.size() / static_cast<std::size_t>(kRows);
  const auto per_row = static_cast<std::size_t>(cols / layout.block_elements);
  const std::vector<float> x(static_cast<std::size_t>(cols), 0.25f);
  std::vector<float> y(static_cast<std::size_t>(kRows));
  const amc::QuantizedDotKernel dot = amc::quantized_dot_kernel(type);
  for (auto _ : state) {
    for (std::int64_t r = 0; r < kRows; ++r) {
      y[static_cast<std::size_t>(r)] =
          dot(x.data(), blocks.data() + static_cast<std::size_t>(r) * row_bytes, per_row);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows * cols);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(blocks.size()));
}

/// The int8 matvecs' activations: `cols` values of both signs, so every block's quants vary.
std::vector<float> int8_matvec_input(std::int64_t cols) {
  std::vector<float> x(static_cast<std::size_t>(cols));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  return x;
}

/// The same with the activations quantized to int8 once per product (--activations int8).
void BM_Int8Matvec(benchmark::State& state, amc::GgmlType type) {
  const amc::GgmlTypeLayout layout = *amc::ggml_type_layout(static_cast<std::uint32_t>(type));
  const std::int64_t cols = matvec_cols(type);
  const auto per_row = static_cast<std::size_t>(cols / layout.block_elements);
  const std::vector<std::byte> blocks = random_blocks(type, kRows * cols);
  const std::size_t row_bytes = blocks.size() / static_cast<std::size_t>(kRows);
  const std::vector<float> x = int8_matvec_input(cols);
  std::vector<float> y(static_cast<std::size_t>(kRows));
  const amc::Int8DotKernel dot = amc::int8_dot_kernel(type);
  amc::Int8Activations xq;
  for (auto _ : state) {
    amc::quantize_activations(x, xq);
    for (std::int64_t r = 0; r < kRows; ++r) {
      y[static_cast<std::size_t>(r)] =
          dot(xq, blocks.data() + static_cast<std::size_t>(r) * row_bytes, per_row);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows * cols);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(blocks.size()));
}

/// BM_Int8Matvec on the rows interleaved 16 to a group (amc::interleave_rows, LoadOptions::
/// interleave_rows): one amc::int8_interleaved_kernel call per 16 rows. The label names the
/// kernel: "avx512vnni" where the CPU has it, else "plain loops" (slower than row by row there,
/// which is why the transformer interleaves only with VNNI).
void BM_Int8InterleavedMatvec(benchmark::State& state, amc::GgmlType type) {
  const std::int64_t cols = matvec_cols(type);
  const auto per_row = static_cast<std::size_t>(cols / 32);
  const std::vector<std::byte> blocks = random_blocks(type, kRows * cols);
  std::vector<std::byte> groups(amc::interleaved_bytes(type, kRows, cols));
  amc::interleave_rows(type, kRows, cols, blocks, groups);
  const std::size_t group_bytes = groups.size() / static_cast<std::size_t>(kRows / 16);
  const std::vector<float> x = int8_matvec_input(cols);
  std::vector<float> y(static_cast<std::size_t>(kRows));
  const amc::Int8InterleavedKernel kernel = amc::int8_interleaved_kernel(type);
  amc::Int8Activations xq;
  for (auto _ : state) {
    amc::quantize_activations(x, xq);
    for (std::int64_t g = 0; g < kRows / 16; ++g) {
      kernel(xq, groups.data() + static_cast<std::size_t>(g) * group_bytes, per_row,
             y.data() + 16 * g);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows * cols);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(groups.size()));
  state.SetLabel(amc::int8_interleaved_accelerated() ? "avx512vnni" : "plain loops");
}

void BM_Bf16Matvec(benchmark::State& state) {
  std::vector<amc::bf16> w(static_cast<std::size_t>(kRows * kCols), amc::to_bf16(0.5f));
  const std::vector<float> x(static_cast<std::size_t>(kCols), 0.25f);
  std::vector<float> y(static_cast<std::size_t>(kRows));
  const auto dot = amc::kernels::active().dot[amc::kernels::index_of(amc::StorageType::bf16)];
  for (auto _ : state) {
    for (std::int64_t r = 0; r < kRows; ++r) {
      y[static_cast<std::size_t>(r)] = dot(x.data(), w.data() + r * kCols, kCols);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows * kCols);
  state.SetBytesProcessed(state.iterations() * kRows * kCols * 2);
}

/// Every type with the kernel each benchmark measures, as amc's table of types says.
void register_benchmarks() {
  using amc::GgmlType;
  const auto blocks = [](GgmlType type) {
    return amc::ggml_type_layout(static_cast<std::uint32_t>(type))->block_elements > 1;
  };
  for (const GgmlType type : amc::ggml_types()) {
    if (!amc::can_dequantize(type)) continue;
    const std::string name(amc::to_string(type));
    benchmark::RegisterBenchmark(("Dequantize/f32/" + name).c_str(), BM_Dequantize<float>, type);
    benchmark::RegisterBenchmark(("Dequantize/bf16/" + name).c_str(), BM_Dequantize<amc::bf16>,
                                 type);
  }
  benchmark::RegisterBenchmark("Matvec/bf16-widened", BM_Bf16Matvec);
  for (const GgmlType type : amc::ggml_types()) {
    if (!amc::can_dequantize(type) || !blocks(type)) continue;
    benchmark::RegisterBenchmark(("Matvec/stored/" + std::string(amc::to_string(type))).c_str(),
                                 BM_QuantizedMatvec, type);
  }
  for (const GgmlType type : amc::ggml_types()) {
    if (!amc::has_int8_dot_kernel(type)) continue;
    benchmark::RegisterBenchmark(
        ("Matvec/stored-int8/" + std::string(amc::to_string(type))).c_str(), BM_Int8Matvec, type);
  }
  for (const GgmlType type : amc::ggml_types()) {
    if (!amc::can_interleave(type)) continue;
    benchmark::RegisterBenchmark(
        ("Matvec/interleaved-int8/" + std::string(amc::to_string(type))).c_str(),
        BM_Int8InterleavedMatvec, type);
  }
}

/// The --file mode: each tensor dequantized `rounds` times into one buffer of the largest
/// tensor's size (touched before timing); the fastest round of each tensor counts.
template <class Out>
void time_file(const amc::GgufFile& file, const char* out_name, int rounds) {
  std::uint64_t largest = 0;
  for (const amc::GgufTensorInfo& info : file.tensors()) {
    if (amc::can_dequantize(info.type)) largest = std::max(largest, info.numel());
  }
  std::vector<Out> out(static_cast<std::size_t>(largest));
  std::fill(out.begin(), out.end(), Out{});
  struct Total {
    std::uint64_t elements = 0;
    std::uint64_t tensors = 0;
    double seconds = 0;
  };
  std::map<std::string, Total> per_type;
  Total all;
  for (const amc::GgufTensorInfo& info : file.tensors()) {
    if (!amc::can_dequantize(info.type)) continue;
    const std::span<const std::byte> bytes = file.bytes(info);
    const std::span<Out> view(out.data(), static_cast<std::size_t>(info.numel()));
    double best = 1e30;
    for (int r = 0; r < rounds; ++r) {
      const auto start = std::chrono::steady_clock::now();
      amc::dequantize(info.type, bytes, view);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    Total& total = per_type[std::string(amc::to_string(info.type))];
    total.elements += info.numel();
    total.tensors += 1;
    total.seconds += best;
    all.elements += info.numel();
    all.tensors += 1;
    all.seconds += best;
  }
  for (const auto& [type, total] : per_type) {
    std::printf("%s  %-5s %4llu tensors %11llu elements  %8.2f ms  %6.2f G elements/s\n", out_name,
                type.c_str(), static_cast<unsigned long long>(total.tensors),
                static_cast<unsigned long long>(total.elements), total.seconds * 1e3,
                static_cast<double>(total.elements) / total.seconds * 1e-9);
  }
  std::printf("%s  whole file: %llu tensors, %llu elements in %.2f ms (%.2f G elements/s)\n",
              out_name, static_cast<unsigned long long>(all.tensors),
              static_cast<unsigned long long>(all.elements), all.seconds * 1e3,
              static_cast<double>(all.elements) / all.seconds * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--file") == 0) {
      try {
        const amc::GgufFile file = amc::GgufFile::open(argv[i + 1]);
        std::printf("%s (best of 5 rounds per tensor, one thread)\n", argv[i + 1]);
        time_file<float>(file, "f32 ", 5);
        time_file<amc::bf16>(file, "bf16", 5);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "amc-bench-gguf: %s\n", error.what());
        return 1;
      }
      return 0;
    }
  }
  register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

#include "session_flags.hpp"

#include <CLI/CLI.hpp>
#include <amc/error.hpp>

#include <algorithm>
#include <charconv>
#include <sstream>
#include <thread>

#include "model_files.hpp"
#include "rope.hpp"

namespace amc::transformer {
namespace {

constexpr int kMostThreads = 1024;

/// An amc::error "where: parts", or "parts" when `where` is empty (a tool that prefixes its
/// own name).
template <class... Parts>
[[noreturn]] void refuse(std::string_view where, Parts&&... parts) {
  std::ostringstream message;
  if (!where.empty()) message << where << ": ";
  (message << ... << std::forward<Parts>(parts));
  throw error(message.str());
}

bool one_of(std::string_view value, std::initializer_list<std::string_view> choices) {
  return std::find(choices.begin(), choices.end(), value) != choices.end();
}

/// --threads as a count (0 when not given); throws for anything but an integer in range.
int parse_threads(const std::string& threads, std::string_view where) {
  if (threads.empty()) return 0;
  int n = 0;
  const char* end = threads.data() + threads.size();
  const auto [ptr, ec] = std::from_chars(threads.data(), end, n);
  if (ec != std::errc() || ptr != end || n < 1 || n > kMostThreads) {
    refuse(where, "--threads: must be an integer in [1, ", kMostThreads, "], got ", threads);
  }
  return n;
}

}  // namespace

void SessionFlags::validate(std::string_view where) const {
  parse_threads(threads, where);
  if (!one_of(kv_dtype, {"auto", "bf16", "f32", "q8_0"})) {
    refuse(where, "--kv-dtype: expected auto, bf16, f32 or q8_0, got '", kv_dtype, "'");
  }
  if (!one_of(weight_dtype, {"auto", "bf16", "f32", "stored"})) {
    refuse(where, "--weight-dtype: expected auto, bf16, f32 or stored, got '", weight_dtype, "'");
  }
  if (!one_of(activations, {"f32", "int8", "q8"})) {  // q8: int8's old name
    refuse(where, "--activations: expected f32 or int8, got '", activations, "'");
  }
  if (!one_of(rope_angles, {"auto", "transformers", "exact"})) {
    refuse(where, "--rope-angles: expected auto, transformers or exact, got '", rope_angles, "'");
  }
}

int SessionFlags::thread_count() const {
  const int given = parse_threads(threads, "");
  return given > 0 ? given : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

LoadOptions SessionFlags::load_options() const {
  // int8 activations are asked for speed: their matvec reads rows interleaved 16 at a time.
  if (weight_dtype == "stored") {
    return {.keep_blocks = true, .interleave_rows = activations == "int8" || activations == "q8"};
  }
  return {.weight_dtype = parse_weight_dtype(weight_dtype)};
}

SessionOptions SessionFlags::session_options(const Checkpoint& checkpoint,
                                             SessionOptions base) const {
  base.threads = thread_count();
  if (kv_dtype == "q8_0") {  // q8_0 blocks, which the operators read widened to f32
    // Refused here, before a tool starts work, rather than when the session makes its cache.
    const std::int64_t head_dim = checkpoint.config().head_dim;
    if (head_dim % kQ8Block != 0) {
      refuse("",
             "--kv-dtype q8_0: needs head_dim a multiple of 32 (blocks of 32 channels); this "
             "model's is ",
             head_dim);
    }
    base.kv_dtype = StorageType::f32;
    base.kv_quantization = KvQuantization::q8_0;
  } else {
    base.kv_dtype = kv_dtype == "auto" ? auto_kv_dtype(checkpoint) : parse_storage_type(kv_dtype);
    base.kv_quantization = KvQuantization::none;
  }
  base.rope_angles = rope_angles == "auto" ? auto_rope_angles(checkpoint.config())
                                           : parse_rope_angles(rope_angles, "--rope-angles");
  base.activations = parse_activations(activations, "--activations");
  return base;
}

void add_session_flags(CLI::App& app, SessionFlags& flags) {
  app.add_option("--threads", flags.threads, "threads (results do not depend on it)")
      ->type_name("INT")
      ->default_str("every hardware thread");
  app.add_option("--kv-dtype", flags.kv_dtype,
                 "KV cache storage; auto: the weights' dtype (bf16 for bf16 weights, else f32); "
                 "q8_0: 8-bit blocks as llama.cpp's q8_0 cache (read widened to f32)")
      ->type_name("auto|bf16|f32|q8_0")
      ->capture_default_str();
  app.add_option("--weight-dtype", flags.weight_dtype,
                 "weight matrices in memory; auto: as a safetensors checkpoint stores them, bf16 "
                 "for GGUF (dequantized at load); stored: a GGUF file's quantized blocks as they "
                 "are, multiplied on the blocks")
      ->type_name("auto|bf16|f32|stored")
      ->capture_default_str();
  app.add_option("--rope-angles", flags.rope_angles,
                 "RoPE angles: transformers (float32, as transformers computes them) or exact "
                 "(double); auto: config.json's amc_rope_angles, else transformers")
      ->type_name("auto|transformers|exact")
      ->capture_default_str();
  app.add_option("--activations", flags.activations,
                 "with --weight-dtype stored: f32 (exact block values times f32 activations) or "
                 "int8 (activations quantized per block of 32 and multiplied in integers, as "
                 "llama.cpp does; Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K blocks; with "
                 "AVX-512 VNNI, Q8_0, Q4_0 and Q4_1 matrices also kept 16 rows interleaved); q8 "
                 "is int8's old name")
      ->type_name("f32|int8")
      ->capture_default_str();
}

}  // namespace amc::transformer

// The flags of every tool that runs a model (--threads, --kv-dtype, --weight-dtype,
// --rope-angles, --activations): declared once, so that amc-generate and amc-eval's commands take
// the same names, choices, defaults and help, refuse a bad value with the same message, and resolve
// "auto" the same way. (amc-bench-qwen2 keeps flags of its own: it measures fixed dtypes.)
#pragma once

#include <string>
#include <string_view>

#include "checkpoint.hpp"
#include "model.hpp"

namespace CLI {
class App;
}

namespace amc::transformer {

/// The flags as given (text, so that every tool checks them with validate() and names the
/// flag and the value the same way).
struct SessionFlags {
  std::string threads;            ///< "" (not given): every hardware thread
  std::string kv_dtype = "auto";  ///< auto|bf16|f32|q8_0; auto: auto_kv_dtype(), the weights'
  /// auto|bf16|f32|stored; auto: as stored, bf16 for GGUF; stored: GGUF blocks kept
  std::string weight_dtype = "auto";
  std::string rope_angles = "auto";  ///< auto|transformers|exact; auto: auto_rope_angles()
  std::string activations = "f32";   ///< f32|int8 (or q8): what stored blocks multiply

  /// Throws amc::error "<where>: --flag: ..., got VALUE" for the first bad value (without the
  /// prefix when `where` is empty: for a tool that prints its own name first).
  void validate(std::string_view where) const;
  /// --threads, or every hardware thread when not given; throws as validate() for a bad value.
  int thread_count() const;
  /// What Checkpoint::load needs of them: the weight dtype, and rows interleaved for --activations
  /// int8 (LoadOptions::interleave_rows).
  LoadOptions load_options() const;
  /// `base` with the thread count, and the KV dtype and RoPE angles with "auto" resolved for
  /// `checkpoint` (so the options say what the session runs with).
  SessionOptions session_options(const Checkpoint& checkpoint, SessionOptions base = {}) const;
};

/// Declares --threads, --kv-dtype, --weight-dtype, --rope-angles and --activations on `app`,
/// writing into
/// `flags`, which must outlive parsing.
void add_session_flags(CLI::App& app, SessionFlags& flags);

/// What a run used and what was asked for ("auto" or the explicit choice), as the tools
/// record it: kv_dtype, kv_dtype_requested, rope_angles, rope_angles_requested, weight_dtype,
/// weight_dtype_requested, and activations and rows_interleaved when weights are kept as stored
/// blocks (the only place they act). `resolved`: session_options()'s result.
template <class Json>
void record_session(Json& out, const SessionFlags& flags, const SessionOptions& resolved,
                    const Checkpoint& checkpoint) {
  out["kv_dtype"] = resolved.kv_quantization == KvQuantization::q8_0
                        ? std::string("q8_0")
                        : std::string(to_string(resolved.kv_dtype.value()));
  out["kv_dtype_requested"] = flags.kv_dtype;
  out["rope_angles"] = std::string(to_string(resolved.rope_angles.value()));
  out["rope_angles_requested"] = flags.rope_angles;
  out["weight_dtype"] =
      checkpoint.blocks_kept() ? "stored" : std::string(to_string(checkpoint.weight_dtype()));
  out["weight_dtype_requested"] = flags.weight_dtype;
  if (checkpoint.blocks_kept()) {
    out["activations"] = std::string(to_string(resolved.activations));
    out["rows_interleaved"] = checkpoint.rows_interleaved();
  }
}

}  // namespace amc::transformer

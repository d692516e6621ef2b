// config.json parsing: every field checked before anything is sized from it.
#include "config.hpp"

#include <amc/error.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace amc::qwen2 {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "amc::qwen2::parse_config";

// Upper limits far beyond any Qwen2 model (the 72B model has hidden 8192, 80 layers, vocab
// 152064), low enough that a corrupt file cannot make the loader reserve terabytes.
constexpr std::int64_t kMaxHidden = 1 << 16;
constexpr std::int64_t kMaxIntermediate = 1 << 20;
constexpr std::int64_t kMaxLayers = 1 << 12;
constexpr std::int64_t kMaxHeads = 1 << 12;
constexpr std::int64_t kMaxVocab = 1 << 24;
constexpr std::int64_t kMaxPositions = std::int64_t{1} << 30;
constexpr std::int64_t kMaxInteger = std::numeric_limits<std::int64_t>::max();

/// A scalar's JSON text, cut to `limit` characters.
std::string cut_dump(const json& value, std::size_t limit) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > limit ? text.substr(0, limit) + "..." : text;
}

/// A JSON value for an error message: scalars as JSON text, arrays and objects one level deep
/// (nested ones as [...] and {...}), cut short. Not json::dump(), which recurses without limit:
/// a hostile config.json may nest arrays a million deep and overflow the stack.
std::string brief(const json& value) {
  constexpr std::size_t limit = 80;
  if (!value.is_structured()) return cut_dump(value, limit);
  const bool array = value.is_array();
  std::string text = array ? "[" : "{";
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (text.size() > limit) {
      text += "...";
      break;
    }
    if (it != value.begin()) text += ", ";
    if (!array) text += cut_dump(json(it.key()), limit) + ": ";
    const json& item = it.value();
    text += item.is_array() ? "[...]" : item.is_object() ? "{...}" : cut_dump(item, limit);
  }
  return text + (array ? "]" : "}");
}

class Reader {
 public:
  Reader(const json& root, const std::string& source) : root_(root), source_(source) {}

  /// The value of `key`, or nullptr when it is absent or null.
  const json* optional(const char* key) const {
    const auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const json& required(const char* key) const {
    const auto it = root_.find(key);
    if (it == root_.end()) fail("missing required key '", key, "'");
    if (it->is_null()) fail("required key '", key, "' is null");
    return *it;
  }

  std::int64_t integer(const char* key, const json& value) const {
    // JSON writers sometimes emit 896.0 for an integer; accept exact integral floats.
    if (value.is_number_unsigned() &&
        value.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxInteger)) {
      fail("key '", key, "' = ", brief(value), " is beyond any supported size");
    }
    if (value.is_number_integer()) return value.get<std::int64_t>();
    if (value.is_number_float()) {
      const double d = value.get<double>();
      // Range first: converting a double beyond int64's range is undefined behaviour.
      if (std::abs(d) < 9.0e15 && d == std::trunc(d)) return static_cast<std::int64_t>(d);
    }
    fail("key '", key, "' must be an integer, got ", brief(value));
  }

  std::int64_t size(const char* key, std::int64_t limit) const {
    const std::int64_t v = integer(key, required(key));
    check_size(key, v, limit);
    return v;
  }

  void check_size(const char* key, std::int64_t v, std::int64_t limit) const {
    if (v <= 0) fail("key '", key, "' must be positive, got ", v);
    if (v > limit) fail("key '", key, "' = ", v, " exceeds the supported maximum ", limit);
  }

  double number(const char* key, const json& value) const {
    if (!value.is_number()) fail("key '", key, "' must be a number, got ", brief(value));
    return value.get<double>();
  }

  std::int64_t token_id(const char* key) const {
    const json* value = optional(key);
    if (value == nullptr) return -1;
    // Some configs list several end tokens; the first is the canonical one.
    if (value->is_array()) {
      if (value->empty()) return -1;
      value = &(*value)[0];
    }
    const std::int64_t id = integer(key, *value);
    if (id < 0) fail("key '", key, "' must be >= 0, got ", id);
    return id;
  }

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    detail::throw_error(kWhere, source_, ": ", std::forward<Parts>(parts)...);
  }

 private:
  const json& root_;
  const std::string& source_;
};

}  // namespace

Config parse_config(std::string_view json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    // Not only parse_error: a number beyond double's range (1e400) is an out_of_range.
    detail::throw_error(kWhere, source, ": not valid JSON: ", e.what());
  }
  const Reader r(root, source);
  if (!root.is_object()) r.fail("the top level must be a JSON object");

  Config c;
  c.hidden_size = r.size("hidden_size", kMaxHidden);
  c.intermediate_size = r.size("intermediate_size", kMaxIntermediate);
  c.num_hidden_layers = r.size("num_hidden_layers", kMaxLayers);
  c.num_attention_heads = r.size("num_attention_heads", kMaxHeads);
  c.vocab_size = r.size("vocab_size", kMaxVocab);
  // transformers' Qwen2Config: a missing or null num_key_value_heads means plain multi-head.
  if (const json* kv = r.optional("num_key_value_heads")) {
    c.num_key_value_heads = r.integer("num_key_value_heads", *kv);
    r.check_size("num_key_value_heads", c.num_key_value_heads, kMaxHeads);
  } else {
    c.num_key_value_heads = c.num_attention_heads;
  }
  c.max_position_embeddings = 32768;  // Qwen2Config's default
  if (const json* v = r.optional("max_position_embeddings")) {
    c.max_position_embeddings = r.integer("max_position_embeddings", *v);
    r.check_size("max_position_embeddings", c.max_position_embeddings, kMaxPositions);
  }

  if (c.hidden_size % c.num_attention_heads != 0) {
    r.fail("num_attention_heads (", c.num_attention_heads, ") does not divide hidden_size (",
           c.hidden_size, ")");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    r.fail("num_key_value_heads (", c.num_key_value_heads,
           ") does not divide num_attention_heads (", c.num_attention_heads, ")");
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (c.head_dim % 2 != 0) {
    r.fail("head_dim = hidden_size / num_attention_heads = ", c.head_dim,
           " must be even for rotate-half RoPE");
  }
  // Qwen2 derives head_dim; a file that states a different one describes another architecture.
  if (const json* v = r.optional("head_dim")) {
    const std::int64_t stated = r.integer("head_dim", *v);
    if (stated != c.head_dim) {
      r.fail("key 'head_dim' = ", stated,
             " differs from hidden_size / num_attention_heads = ", c.head_dim,
             " (only Qwen2's derived head_dim is supported)");
    }
  }

  // Refuse shapes whose weights alone would not fit any machine this runs on (2^40 elements,
  // 2 TB in bf16), before a loader or a synthetic writer sizes anything from them.
  const auto hidden = static_cast<double>(c.hidden_size);
  const double per_layer =
      4.0 * hidden * hidden + 3.0 * hidden * static_cast<double>(c.intermediate_size);
  const double parameters = per_layer * static_cast<double>(c.num_hidden_layers) +
                            2.0 * static_cast<double>(c.vocab_size) * hidden;
  if (parameters > 1099511627776.0) {
    r.fail("the model would have about ", parameters, " parameters, beyond the supported 2^40");
  }

  if (const json* v = r.optional("rope_theta")) {
    c.rope_theta = r.number("rope_theta", *v);
    if (!(c.rope_theta > 1.0) || !std::isfinite(c.rope_theta)) {
      r.fail("key 'rope_theta' must be finite and > 1, got ", brief(*v));
    }
  }
  if (const json* v = r.optional("rms_norm_eps")) {
    c.rms_norm_eps = r.number("rms_norm_eps", *v);
    if (!(c.rms_norm_eps > 0.0) || !(c.rms_norm_eps < 1.0)) {
      r.fail("key 'rms_norm_eps' must be in (0, 1), got ", brief(*v));
    }
  }
  if (const json* v = r.optional("tie_word_embeddings")) {
    if (!v->is_boolean()) r.fail("key 'tie_word_embeddings' must be a boolean, got ", brief(*v));
    c.tie_word_embeddings = v->get<bool>();
  }
  c.bos_token_id = r.token_id("bos_token_id");
  c.eos_token_id = r.token_id("eos_token_id");

  // Features of the Qwen2 family that this reference transformer does not implement: refuse
  // them rather than silently compute something else.
  if (const json* v = r.optional("hidden_act")) {
    if (!v->is_string() || v->get<std::string>() != "silu") {
      r.fail("key 'hidden_act' must be \"silu\", got ", brief(*v));
    }
  }
  if (const json* v = r.optional("use_sliding_window")) {
    if (!v->is_boolean()) r.fail("key 'use_sliding_window' must be a boolean, got ", brief(*v));
    if (v->get<bool>()) r.fail("use_sliding_window = true is not supported (full attention only)");
  }
  // amc's own key: the angle convention of RoPE (rope.hpp) the model was trained with.
  if (const json* v = r.optional("amc_rope_angles")) {
    const bool known = v->is_string() && (v->get<std::string>() == "transformers" ||
                                          v->get<std::string>() == "exact");
    if (!known) {
      r.fail("key 'amc_rope_angles' must be \"transformers\" or \"exact\", got ", brief(*v));
    }
    c.rope_angles = v->get<std::string>() == "exact" ? RopeAngles::exact : RopeAngles::transformers;
  }
  if (const json* v = r.optional("rope_scaling")) {
    r.fail("rope_scaling ", brief(*v), " is not supported (plain RoPE only); expected null");
  }
  return c;
}

Config load_config(const std::filesystem::path& path) {
  const std::filesystem::path file =
      std::filesystem::is_directory(path) ? path / "config.json" : path;
  std::ifstream in(file, std::ios::binary);
  if (!in) detail::throw_error("amc::qwen2::load_config", "cannot open ", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) detail::throw_error("amc::qwen2::load_config", "cannot read ", file.string());
  return parse_config(text.str(), file.string());
}

}  // namespace amc::qwen2

// config.json parsing: every field checked before anything is sized from it.
#include "config.hpp"

#include <amc/error.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace amc::transformer {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "amc::transformer::parse_config";

// Upper limits far beyond any Qwen2 model (the 72B model has hidden 8192, 80 layers, vocab
// 152064), low enough that a corrupt file cannot make the loader reserve terabytes.
constexpr std::int64_t kMaxHidden = 1 << 16;
constexpr std::int64_t kMaxIntermediate = 1 << 20;
constexpr std::int64_t kMaxLayers = 1 << 12;
constexpr std::int64_t kMaxHeads = 1 << 12;
constexpr std::int64_t kMaxHeadDim = 1 << 12;
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

  /// The boolean `key`, or `fallback` when it is absent or null.
  bool boolean(const char* key, bool fallback) const {
    const json* v = optional(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail("key '", key, "' must be a boolean, got ", brief(*v));
    return v->get<bool>();
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

/// The family: config.json's "architectures" (its one entry), else its "model_type"; both
/// present must agree. Neither is refused: since this transformer runs several families, a
/// config that does not say which one it describes would be guessed at.
Architecture architecture(const Reader& r) {
  std::optional<Architecture> named;
  if (const json* v = r.optional("architectures")) {
    if (!v->is_array() || v->size() != 1 || !(*v)[0].is_string()) {
      r.fail("key 'architectures' must be an array of one class name, got ", brief(*v));
    }
    const std::string name = (*v)[0].get<std::string>();
    named = architecture_from_class_name(name);
    if (!named) {
      r.fail("architecture \"", name,
             "\" (key 'architectures') is not supported; supported: ", known_class_names());
    }
  }
  if (const json* v = r.optional("model_type")) {
    if (!v->is_string()) r.fail("key 'model_type' must be a string, got ", brief(*v));
    const std::string type = v->get<std::string>();
    if (named) {
      if (type != family(*named).model_type) {
        r.fail("key 'model_type' = \"", type, "\" contradicts 'architectures' ",
               family(*named).class_name, " (model_type \"", family(*named).model_type, "\")");
      }
    } else {
      named = architecture_from_model_type(type);
      if (!named) {
        r.fail("model_type \"", type,
               "\" is not supported (no 'architectures' key); supported: ", known_model_types());
      }
    }
  }
  if (!named) {
    r.fail("neither 'architectures' nor 'model_type' names the model family; expected one of ",
           known_class_names());
  }
  return *named;
}

/// config.json's "rope_scaling": null, absent or rope_type "default" is plain RoPE; "llama3"
/// with its four parameters (all required, as transformers' validation requires them); any
/// other type (linear, dynamic, yarn, longrope, ...) is refused by name.
RopeScaling rope_scaling(const Reader& r) {
  RopeScaling s;
  const json* v = r.optional("rope_scaling");
  if (v == nullptr) return s;
  if (!v->is_object()) r.fail("key 'rope_scaling' must be an object or null, got ", brief(*v));
  // transformers reads "rope_type", or "type" in configs written before the rename.
  auto member = [&](const char* key) -> const json* {
    const auto it = v->find(key);
    return it == v->end() || it->is_null() ? nullptr : &*it;
  };
  const json* type = member("rope_type");
  if (type == nullptr) type = member("type");
  if (type == nullptr) r.fail("key 'rope_scaling' = ", brief(*v), " has no 'rope_type'");
  if (!type->is_string()) {
    r.fail("key 'rope_scaling.rope_type' must be a string, got ", brief(*type));
  }
  const std::string name = type->get<std::string>();
  if (name == "default") return s;
  if (name != "llama3") {
    r.fail("rope_scaling type \"", name,
           "\" is not supported (\"llama3\", or null or \"default\" for plain RoPE)");
  }
  auto number = [&](const char* key) {
    const json* value = member(key);
    if (value == nullptr) r.fail("key 'rope_scaling' of type llama3 lacks '", key, "'");
    if (!value->is_number()) {
      r.fail("key 'rope_scaling.", key, "' must be a number, got ", brief(*value));
    }
    return value->get<double>();
  };
  s.type = RopeScaling::Type::llama3;
  s.factor = number("factor");
  s.low_freq_factor = number("low_freq_factor");
  s.high_freq_factor = number("high_freq_factor");
  s.original_max_position_embeddings = number("original_max_position_embeddings");
  if (!(s.factor >= 1.0)) r.fail("key 'rope_scaling.factor' must be >= 1, got ", s.factor);
  if (!(s.low_freq_factor > 0.0)) {
    r.fail("key 'rope_scaling.low_freq_factor' must be > 0, got ", s.low_freq_factor);
  }
  if (!(s.high_freq_factor > s.low_freq_factor)) {
    r.fail("key 'rope_scaling.high_freq_factor' (", s.high_freq_factor,
           ") must exceed low_freq_factor (", s.low_freq_factor, ")");
  }
  if (!(s.original_max_position_embeddings > 0.0)) {
    r.fail("key 'rope_scaling.original_max_position_embeddings' must be positive, got ",
           s.original_max_position_embeddings);
  }
  return s;
}

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
  c.max_position_embeddings = 32768;  // Qwen2Config's and Qwen3Config's default
  if (const json* v = r.optional("max_position_embeddings")) {
    c.max_position_embeddings = r.integer("max_position_embeddings", *v);
    r.check_size("max_position_embeddings", c.max_position_embeddings, kMaxPositions);
  }

  c.architecture = architecture(r);
  const Family& fam = family(c.architecture);

  // head_dim: stated (every family's attention reads config.head_dim when present, Qwen2's as
  // getattr(config, "head_dim", hidden_size // num_attention_heads)), else the family's default.
  if (const json* v = r.optional("head_dim")) {
    c.head_dim = r.integer("head_dim", *v);
    r.check_size("head_dim", c.head_dim, kMaxHeadDim);
    if (c.head_dim % 2 != 0) {
      r.fail("key 'head_dim' = ", c.head_dim, " must be even for rotate-half RoPE");
    }
  } else if (fam.default_head_dim > 0) {
    c.head_dim = fam.default_head_dim;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      r.fail("num_attention_heads (", c.num_attention_heads, ") does not divide hidden_size (",
             c.hidden_size, ")");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
    if (c.head_dim % 2 != 0) {
      r.fail("head_dim = hidden_size / num_attention_heads = ", c.head_dim,
             " must be even for rotate-half RoPE");
    }
  }

  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    r.fail("num_key_value_heads (", c.num_key_value_heads,
           ") does not divide num_attention_heads (", c.num_attention_heads, ")");
  }

  // Refuse shapes whose weights alone would not fit any machine this runs on (2^40 elements,
  // 2 TB in bf16), before a loader or a synthetic writer sizes anything from them.
  const auto hidden = static_cast<double>(c.hidden_size);
  const double q_dim = static_cast<double>(c.num_attention_heads) * static_cast<double>(c.head_dim);
  const double kv_dim =
      static_cast<double>(c.num_key_value_heads) * static_cast<double>(c.head_dim);
  const double per_layer =
      2.0 * hidden * (q_dim + kv_dim) + 3.0 * hidden * static_cast<double>(c.intermediate_size);
  const double parameters = per_layer * static_cast<double>(c.num_hidden_layers) +
                            2.0 * static_cast<double>(c.vocab_size) * hidden;
  if (parameters > 1099511627776.0) {
    r.fail("the model would have about ", parameters, " parameters, beyond the supported 2^40");
  }

  // The family's features, with the keys config.json may set for them (family.hpp).
  c.qk_norm = fam.qk_norm;
  if (fam.attention_bias_key) {
    c.qkv_bias = r.boolean("attention_bias", fam.default_attention_bias);
    c.o_bias = c.qkv_bias;
  } else {
    // Qwen2's attention has q, k, v biases and none on o_proj whatever the config says;
    // transformers ignores an "attention_bias" there. One that says false contradicts the
    // weights Qwen2 must have: refuse it rather than guess which one is wrong.
    c.qkv_bias = true;
    c.o_bias = false;
    if (!r.boolean("attention_bias", true)) {
      r.fail("attention_bias = false contradicts ", fam.class_name,
             ", whose q, k and v projections always have biases");
    }
  }
  if (r.boolean("mlp_bias", false)) {
    r.fail("mlp_bias = true is not supported (MLP projections without biases only)");
  }
  c.rope_scaling = rope_scaling(r);

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
  if (const json* v = r.optional("layer_types")) {
    // Newer transformers list each layer's attention; only full attention is implemented.
    if (!v->is_array()) r.fail("key 'layer_types' must be an array, got ", brief(*v));
    for (std::size_t i = 0; i < v->size(); ++i) {
      const json& t = (*v)[i];
      if (!t.is_string() || t.get<std::string>() != "full_attention") {
        r.fail("layer_types[", i, "] = ", brief(t),
               " is not supported (full attention only: \"full_attention\")");
      }
    }
  }
  return c;
}

Config load_config(const std::filesystem::path& path) {
  const std::filesystem::path file =
      std::filesystem::is_directory(path) ? path / "config.json" : path;
  std::ifstream in(file, std::ios::binary);
  if (!in) detail::throw_error("amc::transformer::load_config", "cannot open ", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) detail::throw_error("amc::transformer::load_config", "cannot read ", file.string());
  return parse_config(text.str(), file.string());
}

}  // namespace amc::transformer

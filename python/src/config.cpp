// amc.SparseConfig, amc.settings() and amc.rules(): the selection settings table
// (amc/attention/sparse_config.hpp) seen from Python, so the two front doors cannot drift.
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amc/amc.hpp"
#include "bindings.hpp"
#include "inputs.hpp"
#include "outputs.hpp"

namespace amc::python {
namespace {

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
  std::vector<const SparseSetting*> seen;  // by its name and its former name: refused
  for (const auto& [key, value] : settings) {
    const SparseSetting& setting = sparse_setting(key.cast<std::string>());
    if (std::find(seen.begin(), seen.end(), &setting) != seen.end()) {
      fail("amc::SparseConfig: " + std::string(setting.name) + " is given twice (" +
           std::string(setting.former_name) + " is its former name)");
    }
    seen.push_back(&setting);
    setting.set(config, setting_text(setting, value));
  }
}

}  // namespace

/// `config` (an amc.SparseConfig or None: the defaults) with `settings` applied, validated.
SparseConfig make_config(const std::optional<SparseConfig>& config, const py::kwargs& settings) {
  SparseConfig out = config.value_or(SparseConfig{});
  apply_settings(out, settings);
  out.validate();
  return out;
}

void bind_config(py::module_& m) {
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
    // The setting's attribute, and under its former name (score: rule) the same one.
    for (const std::string_view name : {s.name, s.former_name}) {
      if (name.empty()) continue;
      config_class.def_property(
          std::string(name).c_str(), [&s](const SparseConfig& c) { return setting_value(s, c); },
          [&s](SparseConfig& c, py::handle value) {
            s.set(c, setting_text(s, value));  // a refused value leaves c as it was
          },
          std::string(s.help).c_str());
    }
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
          py::list settings;  // its own settings, rows of amc.settings() too
          for (const RuleSetting& setting : r.settings) settings.append(std::string(setting.name));
          out.append(py::dict("name"_a = std::string(r.name),
                              "description"_a = std::string(r.description),
                              "reads_keys"_a = r.reads_keys, "settings"_a = settings));
        }
        return out;
      },
      "The registered block scoring rules: name, description, reads_keys, settings (the names "
      "of its own settings).");
  m.def("_make_config", &make_config, py::arg("config") = py::none());
}

}  // namespace amc::python

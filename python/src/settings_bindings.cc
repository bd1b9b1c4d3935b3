#include "settings_bindings.h"

#include <string>

#include "kv/settings_catalog.h"

namespace py = pybind11;

namespace pdkv::python {
namespace {

// The default, low and high as the Python type the setting has (None where it has no
// range), so pdkv.Config compares and checks them without parsing text.
void add_value_fields(const config::SettingSpec& s, py::dict& out) {
  out["low"] = py::none();
  out["high"] = py::none();
  switch (s.type) {
    case config::SettingType::kInt:
      out["default"] = s.int_default;
      out["low"] = s.int_low;
      out["high"] = s.int_high;
      break;
    case config::SettingType::kDouble:
      out["default"] = s.double_default;
      out["low"] = s.double_low;
      out["high"] = s.double_high;
      break;
    case config::SettingType::kBool: out["default"] = s.bool_default; break;
    case config::SettingType::kString: out["default"] = std::string(s.string_default); break;
  }
}

py::dict to_dict(std::string_view section, const config::SettingSpec& s) {
  py::dict out;
  out["name"] = std::string(s.name);
  out["section"] = std::string(section);
  out["type"] = std::string(config::to_string(s.type));
  out["scope"] = std::string(config::to_string(s.scope));
  add_value_fields(s, out);
  py::list choices;
  for (std::string_view c : s.choices) choices.append(std::string(c));
  out["choices"] = choices;
  out["default_note"] = std::string(s.default_note);
  out["default_text"] = std::string(s.default_text);
  out["range_text"] = std::string(s.range_text);
  out["help"] = std::string(s.help);
  return out;
}

// One dict per setting, in catalog order: name, section, type ("int", "float", "bool",
// "str"), scope ("manager": a pdkv.Config field; "process": environment only), default,
// low, high, choices, and the docs' default_note, default_text, range_text and help.
py::list settings_catalog() {
  py::list out;
  for (const kv::SettingsSection& section : kv::settings_catalog()) {
    for (const config::SettingSpec* spec : section.settings)
      out.append(to_dict(section.key, *spec));
  }
  return out;
}

}  // namespace

void add_settings_functions(py::module_& m) { m.def("settings_catalog", &settings_catalog); }

}  // namespace pdkv::python

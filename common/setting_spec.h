// One PDKV_* setting, declared once: its name, type, default, range and help text.
//
// Each layer declares the settings it reads as `inline constexpr SettingSpec` values in
// its own `*_settings.h` (engine/engine_settings.h, kv/manager_settings.h, ...), and its
// options reader reads through them (`config::read<kTcpStreams>(settings)`, config.h),
// so a default or a range is written in one place. The catalog (kv/settings_catalog.h)
// lists every spec; pdkv.Config and the tables of docs/CONFIG.md are made from it, and
// tests fail when they drift.
//
// Settings read outside config::Settings (the process-wide logger, the CUDA driver, the
// fault-injection shim) are declared here too, with scope kProcess: they are documented
// from the same place but are no pdkv.Config field.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace pdkv::config {

enum class SettingType : uint8_t { kInt, kDouble, kBool, kString };

// Who sets it.
enum class SettingScope : uint8_t {
  // Read through a config::Settings by a manager's components: explicit value (a
  // pdkv.Config field) > environment > default.
  kManager,
  // Read from the environment only, once per process or by a tool outside the library.
  kProcess,
};

struct SettingSpec {
  std::string_view name;  // the environment variable, PDKV_...
  SettingType type = SettingType::kString;
  SettingScope scope = SettingScope::kManager;
  // The default and inclusive range of the field matching `type`; the others stay zero.
  int64_t int_default = 0;
  int64_t int_low = 0;
  int64_t int_high = 0;
  double double_default = 0;
  double double_low = 0;
  double double_high = 0;
  bool bool_default = false;
  std::string_view string_default;
  std::span<const std::string_view> choices;  // allowed strings; empty = any
  // How docs/CONFIG.md shows the setting where the value alone would say too little:
  std::string_view default_note;  // after the default: "(off)", "(64 MiB)"
  std::string_view default_text;  // instead of the default: "(detected)"
  std::string_view range_text;    // instead of the range: free text, or words that say it better
  std::string_view help;          // the docs' meaning column (Markdown)

  constexpr SettingSpec process_wide() const {
    SettingSpec s = *this;
    s.scope = SettingScope::kProcess;
    return s;
  }
  constexpr SettingSpec noted(std::string_view note) const {
    SettingSpec s = *this;
    s.default_note = note;
    return s;
  }
  constexpr SettingSpec shown_default(std::string_view text) const {
    SettingSpec s = *this;
    s.default_text = text;
    return s;
  }
  constexpr SettingSpec shown_range(std::string_view text) const {
    SettingSpec s = *this;
    s.range_text = text;
    return s;
  }
  constexpr SettingSpec described(std::string_view text) const {
    SettingSpec s = *this;
    s.help = text;
    return s;
  }
};

constexpr SettingSpec int_setting(std::string_view name, int64_t default_value, int64_t low,
                                  int64_t high) {
  SettingSpec s;
  s.name = name;
  s.type = SettingType::kInt;
  s.int_default = default_value;
  s.int_low = low;
  s.int_high = high;
  return s;
}

constexpr SettingSpec double_setting(std::string_view name, double default_value, double low,
                                     double high) {
  SettingSpec s;
  s.name = name;
  s.type = SettingType::kDouble;
  s.double_default = default_value;
  s.double_low = low;
  s.double_high = high;
  return s;
}

// Accepts 1/0, true/false, yes/no, on/off (config::read_bool).
constexpr SettingSpec bool_setting(std::string_view name, bool default_value) {
  SettingSpec s;
  s.name = name;
  s.type = SettingType::kBool;
  s.bool_default = default_value;
  return s;
}

// `choices` must outlive the spec: a namespace-scope constexpr array.
constexpr SettingSpec string_setting(std::string_view name, std::string_view default_value,
                                     std::span<const std::string_view> choices = {}) {
  SettingSpec s;
  s.name = name;
  s.type = SettingType::kString;
  s.string_default = default_value;
  s.choices = choices;
  return s;
}

// "int", "float", "bool", "str": the Python type of the pdkv.Config field.
std::string_view to_string(SettingType type);
std::string_view to_string(SettingScope scope);

}  // namespace pdkv::config

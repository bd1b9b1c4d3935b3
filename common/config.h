// Configuration knobs: PDKV_* settings given in code or in the environment.
//
// Each component reads its knobs once, at start-up, into a plain options struct
// (e.g. KvManagerOptions::from(settings)). Where a value comes from is decided here and
// nowhere else, highest first:
//   1. an explicit value in a `Settings` (set in code: pdkv.Config, a C++ caller),
//   2. the PDKV_* environment variable (unless the Settings turned it off),
//   3. the default the reader passes.
// A value that does not parse or lies outside its range is an InvalidArgument error
// naming the variable, the value, where it came from and the range: a bad setting fails
// start-up instead of silently falling back to the default, as the reference did. Every
// knob read is logged at debug level and recorded. A knob's name, default and range are
// declared once, as a SettingSpec (setting_spec.h) read with `read<kSpec>(settings)`;
// docs/CONFIG.md's tables are generated from those specs (a test checks).
//
// Thread safety: the read_* functions and knobs_read() may be called from any thread. A
// Settings is a value type: build it on one thread, then share it read-only; its
// readings() log is internally synchronised and shared by its copies.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/setting_spec.h"
#include "common/status.h"

namespace pdkv::config {

// Where a value came from.
enum class Origin : uint8_t { kDefault, kEnvironment, kExplicit };
std::string_view to_string(Origin origin);

struct KnobReading {
  std::string name;
  std::string value;
  Origin origin = Origin::kDefault;
};

class Settings {
 public:
  Settings();

  // An explicit value for the variable `name` (PDKV_...), as text: it is parsed and
  // range-checked by the reader exactly like an environment value. Replaces an earlier one.
  Settings& set(std::string name, std::string value);
  Settings& set(std::string name, const char* value) {
    return set(std::move(name), std::string(value));
  }
  // Numbers and booleans, written so the reader parses back the same value.
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  Settings& set(std::string name, T value) {
    if constexpr (std::is_same_v<T, bool>) {
      return set(std::move(name), std::string(value ? "true" : "false"));
    } else {
      return set(std::move(name), format_number(static_cast<double>(value), std::is_integral_v<T>,
                                                static_cast<int64_t>(value)));
    }
  }
  // The explicit value of `name`, or nullptr.
  const std::string* find(std::string_view name) const;
  const std::map<std::string, std::string, std::less<>>& explicit_values() const { return values_; }

  // false: the environment is ignored (explicit values and defaults only), e.g. to check
  // a pdkv.Config on its own. Default true.
  Settings& use_environment(bool on) {
    use_environment_ = on;
    return *this;
  }
  bool uses_environment() const { return use_environment_; }

  // What was read through this Settings and its copies, in first-read order, one entry
  // per name: the values a component actually got, and where from.
  std::vector<KnobReading> readings() const;
  void record(const KnobReading& reading) const;

 private:
  static std::string format_number(double as_double, bool integral, int64_t as_int);
  struct Log;

  std::map<std::string, std::string, std::less<>> values_;
  bool use_environment_ = true;
  std::shared_ptr<Log> log_;  // shared by copies; never null
};

Result<int64_t> read_int(const Settings& settings, std::string_view name, int64_t default_value,
                         int64_t min_value, int64_t max_value);
Result<double> read_double(const Settings& settings, std::string_view name, double default_value,
                           double min_value, double max_value);
// Accepts 1/0, true/false, yes/no, on/off (case-insensitive).
Result<bool> read_bool(const Settings& settings, std::string_view name, bool default_value);
// `allowed` empty = any value.
Result<std::string> read_string(const Settings& settings, std::string_view name,
                                std::string default_value,
                                const std::vector<std::string>& allowed = {});

// The setting `kSpec` declares, with its default, range and choices: int64_t, double,
// bool or std::string as its type says, chosen at compile time.
template <const SettingSpec& kSpec>
auto read(const Settings& settings) {
  if constexpr (kSpec.type == SettingType::kInt) {
    return read_int(settings, kSpec.name, kSpec.int_default, kSpec.int_low, kSpec.int_high);
  } else if constexpr (kSpec.type == SettingType::kDouble) {
    return read_double(settings, kSpec.name, kSpec.double_default, kSpec.double_low,
                       kSpec.double_high);
  } else if constexpr (kSpec.type == SettingType::kBool) {
    return read_bool(settings, kSpec.name, kSpec.bool_default);
  } else {
    return read_string(settings, kSpec.name, std::string(kSpec.string_default),
                       std::vector<std::string>(kSpec.choices.begin(), kSpec.choices.end()));
  }
}

// The same, from the environment and defaults only (no explicit values).
Result<int64_t> read_int(std::string_view name, int64_t default_value, int64_t min_value,
                         int64_t max_value);
Result<double> read_double(std::string_view name, double default_value, double min_value,
                           double max_value);
Result<bool> read_bool(std::string_view name, bool default_value);
Result<std::string> read_string(std::string_view name, std::string default_value,
                                const std::vector<std::string>& allowed = {});

// Every knob read so far in this process, in first-read order (one entry per name, the
// latest reading).
std::vector<KnobReading> knobs_read();

}  // namespace pdkv::config

#include "common/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/logging.h"
#include "common/mutex.h"

namespace pdkv::config {
namespace {

Mutex g_readings_mu;
std::vector<KnobReading>& readings() PDKV_REQUIRES(g_readings_mu) {
  static std::vector<KnobReading> all;
  return all;
}

void upsert(std::vector<KnobReading>& all, const KnobReading& reading) {
  auto it = std::find_if(all.begin(), all.end(),
                         [&](const KnobReading& r) { return r.name == reading.name; });
  if (it != all.end()) {
    *it = reading;
  } else {
    all.push_back(reading);
  }
}

void record(const Settings& settings, std::string_view name, const std::string& value,
            Origin origin) {
  const KnobReading reading{std::string(name), value, origin};
  settings.record(reading);
  MutexLock lock(g_readings_mu);
  auto& all = readings();
  const bool first =
      std::none_of(all.begin(), all.end(), [&](const KnobReading& r) { return r.name == name; });
  upsert(all, reading);
  if (first) PDKV_LOG_DEBUG("config {}={} ({})", name, value, to_string(origin));
}

// The value that applies to `name` and where it came from; nullptr when neither an
// explicit value nor a non-empty environment variable is there (both mean "default").
// This is the one place the precedence explicit > environment > default is decided.
const char* lookup(const Settings& settings, std::string_view name, Origin* origin) {
  if (const std::string* v = settings.find(name); v != nullptr && !v->empty()) {
    *origin = Origin::kExplicit;
    return v->c_str();
  }
  if (!settings.uses_environment()) return nullptr;
  const char* raw = std::getenv(std::string(name).c_str());
  if (raw == nullptr || *raw == '\0') return nullptr;
  *origin = Origin::kEnvironment;
  return raw;
}

Status bad_value(std::string_view name, const char* raw, Origin origin,
                 const std::string& expected) {
  const char* where = origin == Origin::kExplicit ? " (set in code)" : "";
  return invalid_argument(std::string(name) + "=" + raw + where + " is invalid: expected " +
                          expected);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

std::string_view to_string(Origin origin) {
  switch (origin) {
    case Origin::kDefault: return "default";
    case Origin::kEnvironment: return "environment";
    case Origin::kExplicit: return "explicit";
  }
  return "default";
}

std::string_view to_string(SettingType type) {
  switch (type) {
    case SettingType::kInt: return "int";
    case SettingType::kDouble: return "float";
    case SettingType::kBool: return "bool";
    case SettingType::kString: return "str";
  }
  return "str";
}

std::string_view to_string(SettingScope scope) {
  switch (scope) {
    case SettingScope::kManager: return "manager";
    case SettingScope::kProcess: return "process";
  }
  return "manager";
}

struct Settings::Log {
  mutable Mutex mu;
  std::vector<KnobReading> readings PDKV_GUARDED_BY(mu);
};

Settings::Settings() : log_(std::make_shared<Log>()) {}

Settings& Settings::set(std::string name, std::string value) {
  values_[std::move(name)] = std::move(value);
  return *this;
}

const std::string* Settings::find(std::string_view name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

std::vector<KnobReading> Settings::readings() const {
  MutexLock lock(log_->mu);
  return log_->readings;
}

void Settings::record(const KnobReading& reading) const {
  MutexLock lock(log_->mu);
  upsert(log_->readings, reading);
}

std::string Settings::format_number(double as_double, bool integral, int64_t as_int) {
  // "{}" is the shortest text that parses back to the same double.
  return integral ? std::to_string(as_int) : fmt::format("{}", as_double);
}

Result<int64_t> read_int(const Settings& settings, std::string_view name, int64_t default_value,
                         int64_t min_value, int64_t max_value) {
  const std::string range =
      "an integer in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]";
  Origin origin = Origin::kDefault;
  const char* raw = lookup(settings, name, &origin);
  if (raw == nullptr) {
    record(settings, name, std::to_string(default_value), Origin::kDefault);
    return default_value;
  }
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(raw, &end, 10);
  if (errno != 0 || end == raw || *end != '\0') return bad_value(name, raw, origin, range);
  if (parsed < min_value || parsed > max_value) return bad_value(name, raw, origin, range);
  record(settings, name, raw, origin);
  return static_cast<int64_t>(parsed);
}

Result<double> read_double(const Settings& settings, std::string_view name, double default_value,
                           double min_value, double max_value) {
  const std::string range =
      "a number in [" + fmt::format("{}", min_value) + ", " + fmt::format("{}", max_value) + "]";
  Origin origin = Origin::kDefault;
  const char* raw = lookup(settings, name, &origin);
  if (raw == nullptr) {
    record(settings, name, fmt::format("{}", default_value), Origin::kDefault);
    return default_value;
  }
  errno = 0;
  char* end = nullptr;
  double parsed = std::strtod(raw, &end);
  if (errno != 0 || end == raw || *end != '\0' || !(parsed >= min_value && parsed <= max_value)) {
    return bad_value(name, raw, origin, range);
  }
  record(settings, name, raw, origin);
  return parsed;
}

Result<bool> read_bool(const Settings& settings, std::string_view name, bool default_value) {
  Origin origin = Origin::kDefault;
  const char* raw = lookup(settings, name, &origin);
  if (raw == nullptr) {
    record(settings, name, default_value ? "true" : "false", Origin::kDefault);
    return default_value;
  }
  const std::string v = lower(raw);
  bool parsed;
  if (v == "1" || v == "true" || v == "yes" || v == "on") {
    parsed = true;
  } else if (v == "0" || v == "false" || v == "no" || v == "off") {
    parsed = false;
  } else {
    return bad_value(name, raw, origin, "a boolean (1/0, true/false, yes/no, on/off)");
  }
  record(settings, name, parsed ? "true" : "false", origin);
  return parsed;
}

Result<std::string> read_string(const Settings& settings, std::string_view name,
                                std::string default_value,
                                const std::vector<std::string>& allowed) {
  Origin origin = Origin::kDefault;
  const char* raw = lookup(settings, name, &origin);
  if (raw == nullptr) {
    record(settings, name, default_value, Origin::kDefault);
    return default_value;
  }
  std::string value(raw);
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    std::string expected = "one of";
    for (const auto& a : allowed) expected += " '" + a + "'";
    return bad_value(name, raw, origin, expected);
  }
  record(settings, name, value, origin);
  return value;
}

Result<int64_t> read_int(std::string_view name, int64_t default_value, int64_t min_value,
                         int64_t max_value) {
  return read_int(Settings(), name, default_value, min_value, max_value);
}

Result<double> read_double(std::string_view name, double default_value, double min_value,
                           double max_value) {
  return read_double(Settings(), name, default_value, min_value, max_value);
}

Result<bool> read_bool(std::string_view name, bool default_value) {
  return read_bool(Settings(), name, default_value);
}

Result<std::string> read_string(std::string_view name, std::string default_value,
                                const std::vector<std::string>& allowed) {
  return read_string(Settings(), name, std::move(default_value), allowed);
}

std::vector<KnobReading> knobs_read() {
  MutexLock lock(g_readings_mu);
  return readings();
}

}  // namespace pdkv::config

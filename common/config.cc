#include "common/config.h"

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

void record(std::string_view name, const std::string& value, bool from_env) {
  MutexLock lock(g_readings_mu);
  auto& all = readings();
  auto it =
      std::find_if(all.begin(), all.end(), [&](const KnobReading& r) { return r.name == name; });
  if (it != all.end()) {
    *it = KnobReading{std::string(name), value, from_env};
    return;
  }
  all.push_back(KnobReading{std::string(name), value, from_env});
  PDKV_LOG_DEBUG("config {}={} ({})", name, value, from_env ? "environment" : "default");
}

// Returns nullptr when the variable is unset or empty (both mean "use the default").
const char* env_value(std::string_view name) {
  const char* raw = std::getenv(std::string(name).c_str());
  return (raw != nullptr && *raw != '\0') ? raw : nullptr;
}

Status bad_value(std::string_view name, const char* raw, const std::string& expected) {
  return invalid_argument(std::string(name) + "=" + raw + " is invalid: expected " + expected);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

Result<int64_t> read_int(std::string_view name, int64_t default_value, int64_t min_value,
                         int64_t max_value) {
  const std::string range =
      "an integer in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]";
  const char* raw = env_value(name);
  if (raw == nullptr) {
    record(name, std::to_string(default_value), false);
    return default_value;
  }
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(raw, &end, 10);
  if (errno != 0 || end == raw || *end != '\0') return bad_value(name, raw, range);
  if (parsed < min_value || parsed > max_value) return bad_value(name, raw, range);
  record(name, raw, true);
  return static_cast<int64_t>(parsed);
}

Result<double> read_double(std::string_view name, double default_value, double min_value,
                           double max_value) {
  const std::string range =
      "a number in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]";
  const char* raw = env_value(name);
  if (raw == nullptr) {
    record(name, std::to_string(default_value), false);
    return default_value;
  }
  errno = 0;
  char* end = nullptr;
  double parsed = std::strtod(raw, &end);
  if (errno != 0 || end == raw || *end != '\0' || !(parsed >= min_value && parsed <= max_value)) {
    return bad_value(name, raw, range);
  }
  record(name, raw, true);
  return parsed;
}

Result<bool> read_bool(std::string_view name, bool default_value) {
  const char* raw = env_value(name);
  if (raw == nullptr) {
    record(name, default_value ? "true" : "false", false);
    return default_value;
  }
  const std::string v = lower(raw);
  bool parsed;
  if (v == "1" || v == "true" || v == "yes" || v == "on") {
    parsed = true;
  } else if (v == "0" || v == "false" || v == "no" || v == "off") {
    parsed = false;
  } else {
    return bad_value(name, raw, "a boolean (1/0, true/false, yes/no, on/off)");
  }
  record(name, parsed ? "true" : "false", true);
  return parsed;
}

Result<std::string> read_string(std::string_view name, std::string default_value,
                                const std::vector<std::string>& allowed) {
  const char* raw = env_value(name);
  if (raw == nullptr) {
    record(name, default_value, false);
    return default_value;
  }
  std::string value(raw);
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    std::string expected = "one of";
    for (const auto& a : allowed) expected += " '" + a + "'";
    return bad_value(name, raw, expected);
  }
  record(name, value, true);
  return value;
}

std::vector<KnobReading> knobs_read() {
  MutexLock lock(g_readings_mu);
  return readings();
}

}  // namespace pdkv::config

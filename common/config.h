// Configuration knobs from PDKV_* environment variables.
//
// Each component reads its knobs once, at start-up, into a plain options struct
// (e.g. TcpOptions::from_env()). A knob that is set but not parseable or outside its
// range is an InvalidArgument error naming the variable, the value and the range: a bad
// setting fails start-up instead of silently falling back (SPEC §11). Every knob read is
// logged at debug level and recorded, and has a line in docs/CONFIG.md (a test checks).
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pdkv::config {

Result<int64_t> read_int(std::string_view name, int64_t default_value, int64_t min_value,
                         int64_t max_value);
Result<double> read_double(std::string_view name, double default_value, double min_value,
                           double max_value);
// Accepts 1/0, true/false, yes/no, on/off (case-insensitive).
Result<bool> read_bool(std::string_view name, bool default_value);
// `allowed` empty = any value.
Result<std::string> read_string(std::string_view name, std::string default_value,
                                const std::vector<std::string>& allowed = {});

struct KnobReading {
  std::string name;
  std::string value;
  bool from_environment;  // false = default used
};

// Every knob read so far in this process, in first-read order (one entry per name).
std::vector<KnobReading> knobs_read();

}  // namespace pdkv::config

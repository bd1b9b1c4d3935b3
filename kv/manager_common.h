// Small helpers both KV managers use: a rank's incarnation and the way durations are
// written in failure reasons.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace pdkv::kv {

// A random id per manager start: a process restarted at the same endpoint is told apart
// from its predecessor by it (proto::RankIdentity::incarnation). Never 0.
uint64_t random_incarnation();

// "1.5 s": durations as they appear in failure reasons.
std::string format_seconds(std::chrono::milliseconds ms);

}  // namespace pdkv::kv

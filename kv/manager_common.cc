#include "kv/manager_common.h"

#include <cstdio>
#include <random>

#include "common/clock.h"

namespace pdkv::kv {

uint64_t random_incarnation() {
  std::random_device rd;
  uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                static_cast<uint64_t>(now().time_since_epoch().count());
  return id == 0 ? 1 : id;
}

std::string format_seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

}  // namespace pdkv::kv

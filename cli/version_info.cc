#include "cli/version_info.h"

#include <pdkv/version.h>

#include "engine/backends/tcp/tcp_frame.h"
#include "engine/lease/wire.h"
#include "proto/wire.h"

namespace pdkv::cli {

// pdkv/version.h copies these two constants at configure time (cmake/PdkvVersion.cmake);
// the headers stay the one source, and a stale copy fails the build here.
static_assert(PDKV_PROTOCOL_VERSION == proto::kProtocolVersion,
              "pdkv/version.h is stale: re-run cmake");
static_assert(PDKV_LEASE_WIRE_VERSION == engine::lease::kWireVersion,
              "pdkv/version.h is stale: re-run cmake");
static_assert(PDKV_TCP_WIRE_VERSION == engine::tcp::kVersion,
              "pdkv/version.h is stale: re-run cmake");

std::string version_text() {
  return std::string("pdkv ") + PDKV_VERSION_STRING + " (control protocol " +
         std::to_string(PDKV_PROTOCOL_VERSION) + ", lease wire " +
         std::to_string(PDKV_LEASE_WIRE_VERSION) + ", tcp data wire " +
         std::to_string(PDKV_TCP_WIRE_VERSION) + ")";
}

}  // namespace pdkv::cli

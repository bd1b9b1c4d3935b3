#include "engine/path/path_messages.h"

#include "engine/lease/wire.h"

namespace pdkv::engine {
namespace {

using lease::Reader;
using lease::Writer;

// Smallest encoding of one offer: two empty strings and a flag.
constexpr size_t kMinOfferBytes = 4 + 4 + 1;

Status read_flag(Reader& in, bool* v, const char* what) {
  uint8_t b = 0;
  PDKV_RETURN_IF_ERROR(in.u8(&b));
  if (b > 1) return data_loss(std::string(what) + " flag is " + std::to_string(b) + ", not 0/1");
  *v = b != 0;
  return Status();
}

Status read_bounded(Reader& in, std::string* v, size_t max, const char* what) {
  PDKV_RETURN_IF_ERROR(in.bytes(v));
  if (v->size() > max) {
    return data_loss(std::string(what) + " has " + std::to_string(v->size()) +
                     " bytes, more than " + std::to_string(max));
  }
  return Status();
}

Status expect_end(const Reader& in, const char* what) {
  if (in.remaining() != 0) {
    return data_loss(std::string(what) + " carries " + std::to_string(in.remaining()) +
                     " trailing bytes");
  }
  return Status();
}

}  // namespace

void encode_path_hello(const PathHello& m, std::vector<uint8_t>* out) {
  Writer w(*out);
  w.u32(m.version);
  w.bytes(m.endpoint);
  w.bytes(m.locality.boot_id);
  w.u64(m.locality.net_ns);
  w.u64(m.locality.pid_ns);
  w.u32(m.locality.pid);
  w.bytes(std::string_view(reinterpret_cast<const char*>(m.challenge.data()), m.challenge.size()));
  w.u64(m.proof_addr);
  w.u8(m.device_destinations ? 1 : 0);
  w.u32(static_cast<uint32_t>(m.offers.size()));
  for (const PathOffer& o : m.offers) {
    w.bytes(o.backend);
    w.bytes(o.endpoint);
    w.u8(o.device_destination ? 1 : 0);
  }
}

Result<PathHello> decode_path_hello(std::span<const uint8_t> payload) {
  Reader in(payload);
  PathHello m;
  PDKV_RETURN_IF_ERROR(in.u32(&m.version));
  if (m.version != kPathProtocolVersion) {
    return data_loss("path hello of protocol version " + std::to_string(m.version) +
                     ", this engine speaks " + std::to_string(kPathProtocolVersion));
  }
  PDKV_RETURN_IF_ERROR(read_bounded(in, &m.endpoint, kMaxPathEndpointBytes, "endpoint"));
  PDKV_RETURN_IF_ERROR(read_bounded(in, &m.locality.boot_id, kMaxPathEndpointBytes, "boot id"));
  PDKV_RETURN_IF_ERROR(in.u64(&m.locality.net_ns));
  PDKV_RETURN_IF_ERROR(in.u64(&m.locality.pid_ns));
  PDKV_RETURN_IF_ERROR(in.u32(&m.locality.pid));
  std::string challenge;
  PDKV_RETURN_IF_ERROR(in.bytes(&challenge));
  if (challenge.size() != m.challenge.size()) {
    return data_loss("path hello challenge of " + std::to_string(challenge.size()) +
                     " bytes, not " + std::to_string(m.challenge.size()));
  }
  std::copy(challenge.begin(), challenge.end(), m.challenge.begin());
  PDKV_RETURN_IF_ERROR(in.u64(&m.proof_addr));
  PDKV_RETURN_IF_ERROR(read_flag(in, &m.device_destinations, "device destinations"));
  uint32_t n = 0;
  PDKV_RETURN_IF_ERROR(in.u32(&n));
  if (n > kMaxPathOffers || n * kMinOfferBytes > in.remaining()) {
    return data_loss("path hello declares " + std::to_string(n) + " offers (at most " +
                     std::to_string(kMaxPathOffers) + ", and as many as its bytes hold)");
  }
  m.offers.resize(n);
  for (PathOffer& o : m.offers) {
    PDKV_RETURN_IF_ERROR(read_bounded(in, &o.backend, kMaxPathNameBytes, "offer backend"));
    PDKV_RETURN_IF_ERROR(read_bounded(in, &o.endpoint, kMaxPathEndpointBytes, "offer endpoint"));
    PDKV_RETURN_IF_ERROR(read_flag(in, &o.device_destination, "offer device destination"));
  }
  PDKV_RETURN_IF_ERROR(expect_end(in, "path hello"));
  return m;
}

void encode_path_choice(const PathChoice& m, std::vector<uint8_t>* out) {
  Writer w(*out);
  w.u8(static_cast<uint8_t>(m.path));
  w.bytes(m.why);
}

Result<PathChoice> decode_path_choice(std::span<const uint8_t> payload) {
  Reader in(payload);
  PathChoice m;
  uint8_t path = 0;
  PDKV_RETURN_IF_ERROR(in.u8(&path));
  if (path >= kAllPaths.size()) return data_loss("path choice names path " + std::to_string(path));
  m.path = static_cast<PathKind>(path);
  PDKV_RETURN_IF_ERROR(read_bounded(in, &m.why, kMaxPathReasonBytes, "path choice reason"));
  PDKV_RETURN_IF_ERROR(expect_end(in, "path choice"));
  return m;
}

}  // namespace pdkv::engine

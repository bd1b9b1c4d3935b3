#include "engine/backends/shm/lease_client.h"

#include <poll.h>

namespace pdkv::engine::shm {

Status LeaseClient::connect(const std::string& endpoint, const std::string& backend_name,
                            int timeout_ms) {
  PDKV_ASSIGN_OR_RETURN(sock_, connect_to(endpoint, timeout_ms));
  auto deadline = now() + Millis(timeout_ms);
  buf_.clear();
  Writer w(buf_);
  w.bytes(backend_name);
  w.bytes(host_identity());
  Status st = sock_.send_frame(MsgType::kHello, buf_, deadline);
  MsgType type{};
  if (st.ok()) st = sock_.recv_frame(&type, &buf_, deadline);
  if (!st.ok()) {
    return unavailable(endpoint + ": no " + backend_name + " handshake (" + st.message() +
                       "); is the peer running the " + backend_name + " backend?");
  }
  if (type != MsgType::kHelloAck) return data_loss(endpoint + ": expected hello ack");
  Reader in(buf_);
  uint8_t ok = 0;
  std::string message;
  uint32_t lease_ms = 0;
  PDKV_RETURN_IF_ERROR(in.u8(&ok));
  PDKV_RETURN_IF_ERROR(in.bytes(&message));
  PDKV_RETURN_IF_ERROR(in.u32(&hello_.pid));
  PDKV_RETURN_IF_ERROR(in.bytes(&hello_.host_identity));
  PDKV_RETURN_IF_ERROR(in.u32(&lease_ms));
  PDKV_RETURN_IF_ERROR(in.bytes(&hello_.extra));
  if (!ok) return failed_precondition(endpoint + ": " + message);
  hello_.lease_ms = static_cast<int>(lease_ms);
  return Status();
}

Result<Grant> LeaseClient::lease(uint64_t part_id, std::span<const uint64_t> dst_ranges,
                                 TimePoint deadline) {
  buf_.clear();
  buf_.reserve(12 + dst_ranges.size() * 8);
  Writer w(buf_);
  w.u64(part_id);
  w.u32(static_cast<uint32_t>(dst_ranges.size() / 2));
  for (uint64_t v : dst_ranges) w.u64(v);
  PDKV_RETURN_IF_ERROR(sock_.send_frame(MsgType::kLease, buf_, deadline));
  MsgType type{};
  PDKV_RETURN_IF_ERROR(sock_.recv_frame(&type, &buf_, deadline));
  if (type != MsgType::kGrant) return data_loss("expected a lease grant");
  Reader in(buf_);
  uint64_t id = 0;
  uint8_t ok = 0;
  Grant g;
  PDKV_RETURN_IF_ERROR(in.u64(&id));
  PDKV_RETURN_IF_ERROR(in.u8(&ok));
  PDKV_RETURN_IF_ERROR(in.u32(&g.bad_index));
  PDKV_RETURN_IF_ERROR(in.u64(&g.first_bad));
  PDKV_RETURN_IF_ERROR(in.u64(&g.regions_epoch));
  PDKV_RETURN_IF_ERROR(in.bytes(&g.message));
  if (id != part_id) return data_loss("grant for the wrong part");
  g.ok = ok != 0;
  return g;
}

Status LeaseClient::done(uint64_t part_id, TimePoint deadline) {
  buf_.clear();
  Writer(buf_).u64(part_id);
  PDKV_RETURN_IF_ERROR(sock_.send_frame(MsgType::kDone, buf_, deadline));
  MsgType type{};
  PDKV_RETURN_IF_ERROR(sock_.recv_frame(&type, &buf_, deadline));
  Reader in(buf_);
  uint64_t id = 0;
  PDKV_RETURN_IF_ERROR(in.u64(&id));
  if (type != MsgType::kDoneAck || id != part_id) return data_loss("expected a done ack");
  return Status();
}

bool LeaseClient::peer_closed() const {
  pollfd p{sock_.fd(), POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

Result<std::vector<uint8_t>> LeaseClient::regions(TimePoint deadline) {
  PDKV_RETURN_IF_ERROR(sock_.send_frame(MsgType::kRegionsReq, {}, deadline));
  MsgType type{};
  std::vector<uint8_t> out;
  PDKV_RETURN_IF_ERROR(sock_.recv_frame(&type, &out, deadline));
  if (type != MsgType::kRegions) return data_loss("expected a region table");
  return out;
}

}  // namespace pdkv::engine::shm

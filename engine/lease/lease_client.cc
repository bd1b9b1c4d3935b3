#include "engine/lease/lease_client.h"

#include <poll.h>

#include "engine/lease/lease_auth.h"

namespace pdkv::engine::lease {

Status LeaseClient::connect(const std::string& endpoint, const std::string& backend_name,
                            int timeout_ms, const ClusterKey* key) {
  PDKV_ASSIGN_OR_RETURN(sock_, connect_to(endpoint, timeout_ms));
  if (key != nullptr) {
    Status auth = authenticate_to_lease_server(sock_, *key, timeout_ms);
    if (!auth.ok()) {
      sock_.shutdown_both();
      return Status(auth.code(),
                    endpoint + ": " + backend_name + " session handshake: " + auth.message());
    }
  }
  auto deadline = now() + Millis(timeout_ms);
  buf_.clear();
  encode_hello(Hello{backend_name, host_identity()}, &buf_);
  Status st = sock_.send_frame(MsgType::kHello, buf_, deadline);
  MsgType type{};
  if (st.ok()) st = sock_.recv_frame(&type, &buf_, deadline);
  if (!st.ok()) {
    return unavailable(endpoint + ": no " + backend_name + " handshake (" + st.message() +
                       "); is the peer running the " + backend_name + " backend?");
  }
  // A receiver with a cluster secret answers a hello that did not authenticate so.
  if (type == MsgType::kAuthRefused) {
    Status refused = refused_by_peer(buf_);
    return Status(refused.code(), endpoint + ": " + backend_name +
                                      " session refused without a cluster secret on this side: " +
                                      refused.message());
  }
  if (type != MsgType::kHelloAck) return data_loss(endpoint + ": expected hello ack");
  PDKV_ASSIGN_OR_RETURN(HelloAck ack, decode_hello_ack(buf_));
  if (!ack.ok) return failed_precondition(endpoint + ": " + ack.message);
  hello_.pid = ack.pid;
  hello_.host_identity = std::move(ack.host_identity);
  hello_.lease_ms = static_cast<int>(ack.lease_ms);
  hello_.extra = std::move(ack.extra);
  return Status();
}

Result<Grant> LeaseClient::lease(uint64_t part_id, std::span<const uint64_t> dst_ranges,
                                 TimePoint deadline) {
  buf_.clear();
  encode_lease(part_id, dst_ranges, &buf_);
  PDKV_RETURN_IF_ERROR(sock_.send_frame(MsgType::kLease, buf_, deadline));
  MsgType type{};
  PDKV_RETURN_IF_ERROR(sock_.recv_frame(&type, &buf_, deadline));
  if (type != MsgType::kGrant) return data_loss("expected a lease grant");
  PDKV_ASSIGN_OR_RETURN(Grant g, decode_grant(buf_));
  if (g.part_id != part_id) return data_loss("grant for the wrong part");
  return g;
}

Status LeaseClient::done(uint64_t part_id, TimePoint deadline) {
  buf_.clear();
  encode_part_id(part_id, &buf_);
  PDKV_RETURN_IF_ERROR(sock_.send_frame(MsgType::kDone, buf_, deadline));
  MsgType type{};
  PDKV_RETURN_IF_ERROR(sock_.recv_frame(&type, &buf_, deadline));
  if (type != MsgType::kDoneAck) return data_loss("expected a done ack");
  PDKV_ASSIGN_OR_RETURN(uint64_t id, decode_part_id(buf_));
  if (id != part_id) return data_loss("done ack for the wrong part");
  return Status();
}

bool LeaseClient::peer_closed() const {
  pollfd p{sock_.fd(), POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

Result<RegionTable> LeaseClient::regions(TimePoint deadline) {
  PDKV_RETURN_IF_ERROR(sock_.send_frame(MsgType::kRegionsReq, {}, deadline));
  MsgType type{};
  PDKV_RETURN_IF_ERROR(sock_.recv_frame(&type, &buf_, deadline));
  if (type != MsgType::kRegions) return data_loss("expected a region table");
  return decode_regions(buf_);
}

}  // namespace pdkv::engine::lease

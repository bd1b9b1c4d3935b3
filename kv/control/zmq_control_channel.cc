#include "kv/control/zmq_control_channel.h"

#include "proto/zmq_endpoint.h"

namespace pdkv::kv {
namespace {

class ZmqControlChannel : public ControlChannel {
 public:
  explicit ZmqControlChannel(std::unique_ptr<proto::ZmqEndpoint> endpoint)
      : endpoint_(std::move(endpoint)) {}
  const std::string& endpoint() const override { return endpoint_->endpoint(); }
  Status send(const std::string& peer, const proto::Message& message) override {
    return endpoint_->send(peer, message);
  }
  Result<size_t> send_burst(const std::string& peer,
                            std::span<const proto::Message> messages) override {
    return endpoint_->send_burst(peer, messages);
  }
  Status send_once(const std::string& peer, const proto::Message& message) override {
    return endpoint_->send_once(peer, message);
  }
  void connect(const std::string& peer) override { (void)endpoint_->connect(peer); }
  void forget(const std::string& peer) override { endpoint_->forget_peer(peer); }
  void stop() override { endpoint_->shutdown(); }

 private:
  std::unique_ptr<proto::ZmqEndpoint> endpoint_;
};

}  // namespace

ControlChannelFactory zmq_channel_factory(proto::EndpointOptions base) {
  return [base = std::move(base)](
             const std::string& host,
             ChannelCallbacks callbacks) -> Result<std::unique_ptr<ControlChannel>> {
    proto::EndpointOptions options = base;
    options.bind_host = host;
    proto::ZmqEndpoint::PeerGoneHandler on_gone;
    if (callbacks.on_peer_gone) on_gone = std::move(callbacks.on_peer_gone);
    proto::ZmqEndpoint::PeerRefusedHandler on_refused;
    if (callbacks.on_peer_refused) on_refused = std::move(callbacks.on_peer_refused);
    PDKV_ASSIGN_OR_RETURN(auto endpoint, proto::ZmqEndpoint::start(
                                             options,
                                             [handler = std::move(callbacks.on_message)](
                                                 proto::Message&& m, const std::string&) {
                                               handler(std::move(m));
                                               return Status();
                                             },
                                             std::move(on_gone), std::move(on_refused)));
    return std::unique_ptr<ControlChannel>(
        std::make_unique<ZmqControlChannel>(std::move(endpoint)));
  };
}

}  // namespace pdkv::kv

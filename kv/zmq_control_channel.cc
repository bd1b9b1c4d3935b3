#include "kv/zmq_control_channel.h"

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
  void stop() override { endpoint_->shutdown(); }

 private:
  std::unique_ptr<proto::ZmqEndpoint> endpoint_;
};

}  // namespace

ControlChannelFactory zmq_channel_factory() {
  return [](const std::string& host,
            MessageHandler handler) -> Result<std::unique_ptr<ControlChannel>> {
    PDKV_ASSIGN_OR_RETURN(proto::EndpointOptions options, proto::EndpointOptions::from_env());
    options.bind_host = host;
    PDKV_ASSIGN_OR_RETURN(auto endpoint, proto::ZmqEndpoint::start(
                                             options, [handler = std::move(handler)](
                                                          proto::Message&& m, const std::string&) {
                                               handler(std::move(m));
                                               return Status();
                                             }));
    return std::unique_ptr<ControlChannel>(
        std::make_unique<ZmqControlChannel>(std::move(endpoint)));
  };
}

}  // namespace pdkv::kv

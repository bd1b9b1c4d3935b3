#include "kv/testing/environment_channels.h"

#include <memory>
#include <string>
#include <utility>

#include "kv/control/zmq_control_channel.h"
#include "proto/zmq_endpoint_options.h"

namespace pdkv::kv::testing {

ControlChannelFactory zmq_channels_from_environment() {
  Result<proto::EndpointOptions> options = proto::EndpointOptions::from_env();
  if (options.ok()) return zmq_channel_factory(std::move(options).value());
  return [error = options.status()](const std::string&,
                                    ChannelCallbacks) -> Result<std::unique_ptr<ControlChannel>> {
    return error;
  };
}

}  // namespace pdkv::kv::testing

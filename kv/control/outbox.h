// Outbox: control messages a manager decided on while holding its lock, sent once it let
// go of it (no network send under a lock), one send burst per peer.
//
// Messages to one peer keep their order; peers are flushed in the order first named.
// Thread safety: none (a value filled and flushed by one thread).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kv/control/control_channel.h"

namespace pdkv::kv {

class Outbox {
 public:
  void add(const std::string& endpoint, proto::Message message);
  bool empty() const { return peers_.empty(); }

  // What the channel did not take (a peer's queue full, or the channel stopped).
  struct Unsent {
    std::string endpoint;
    proto::Message message;
    Status why;
  };
  // Sends everything and empties the outbox.
  std::vector<Unsent> flush(ControlChannel& channel);

 private:
  std::vector<std::pair<std::string, std::vector<proto::Message>>> peers_;
};

}  // namespace pdkv::kv

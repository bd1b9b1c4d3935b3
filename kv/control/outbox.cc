#include "kv/control/outbox.h"

namespace pdkv::kv {

void Outbox::add(const std::string& endpoint, proto::Message message) {
  // A handful of peers per flush: a linear search beats a map here.
  for (auto& [peer, messages] : peers_) {
    if (peer == endpoint) {
      messages.push_back(std::move(message));
      return;
    }
  }
  peers_.emplace_back(endpoint, std::vector<proto::Message>{});
  peers_.back().second.push_back(std::move(message));
}

std::vector<Outbox::Unsent> Outbox::flush(ControlChannel& channel) {
  std::vector<Unsent> unsent;
  for (auto& [peer, messages] : peers_) {
    Result<size_t> sent = channel.send_burst(peer, messages);
    const size_t n = sent.ok() ? *sent : 0;
    if (n == messages.size()) continue;
    const Status why = sent.ok() ? unavailable("the queue to " + peer + " is full") : sent.status();
    for (size_t i = n; i < messages.size(); ++i) {
      unsent.push_back(Unsent{peer, std::move(messages[i]), why});
    }
  }
  peers_.clear();
  return unsent;
}

}  // namespace pdkv::kv

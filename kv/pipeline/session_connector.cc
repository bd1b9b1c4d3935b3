#include "kv/pipeline/session_connector.h"

namespace pdkv::kv {

SessionConnector::SessionConnector(engine::TransferEngine& engine, OnOpened on_opened)
    : engine_(engine), on_opened_(std::move(on_opened)) {}

SessionConnector::~SessionConnector() { stop(); }

void SessionConnector::open(std::string endpoint) {
  MutexLock lock(mu_);
  if (stopping_) return;
  reap_finished();
  // One thread per open: a peer whose handshake hangs (a stopped process accepts the TCP
  // connection but never answers) must not hold up sessions to every other peer.
  auto done = std::make_shared<std::atomic<bool>>(false);
  workers_.push_back(Worker{std::thread([this, endpoint = std::move(endpoint), done] {
                              Result<engine::SessionId> session = engine_.open_session(endpoint);
                              bool deliver;
                              {
                                MutexLock lock(mu_);
                                deliver = !stopping_;
                              }
                              if (deliver) {
                                on_opened_(endpoint, std::move(session));
                              } else if (session.ok()) {
                                (void)engine_.close_session(*session);
                              }
                              done->store(true, std::memory_order_release);
                            }),
                            done});
}

void SessionConnector::close(engine::SessionId session) {
  MutexLock lock(mu_);
  if (stopping_) return;
  reap_finished();
  auto done = std::make_shared<std::atomic<bool>>(false);
  workers_.push_back(Worker{std::thread([this, session, done] {
                              (void)engine_.close_session(session);
                              done->store(true, std::memory_order_release);
                            }),
                            done});
}

void SessionConnector::reap_finished() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->done->load(std::memory_order_acquire)) {
      it->thread.join();
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

void SessionConnector::stop() {
  std::vector<Worker> workers;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    workers.swap(workers_);
  }
  for (Worker& w : workers) w.thread.join();  // each bounded by the connect timeout
}

}  // namespace pdkv::kv

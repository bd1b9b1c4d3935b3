// SessionConnector: opens and closes transfer-engine sessions off the transfer
// pipeline's dispatcher, so it never waits for a connect (which may take the whole connect
// timeout for a dead host or a stopped process) or for a broken session's threads to be
// joined. Each operation runs on its own short-lived thread, so one peer that hangs its
// handshake never delays sessions to the others (sessions open once per decode rank, so
// the threads are few).
//
// Thread safety: open() and close() may be called from any thread; on_opened runs on a
// connector thread, once per open(), unless stop() came first.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "engine/transfer_engine.h"

namespace pdkv::kv {

class SessionConnector {
 public:
  using OnOpened = std::function<void(const std::string& endpoint, Result<engine::SessionId>)>;

  SessionConnector(engine::TransferEngine& engine, OnOpened on_opened);
  ~SessionConnector();
  SessionConnector(const SessionConnector&) = delete;
  SessionConnector& operator=(const SessionConnector&) = delete;

  void open(std::string endpoint);
  void close(engine::SessionId session);
  // Waits for the operations under way (each bounded by the connect timeout); later
  // calls do nothing.
  void stop();

 private:
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void reap_finished() PDKV_REQUIRES(mu_);

  engine::TransferEngine& engine_;
  const OnOpened on_opened_;
  Mutex mu_;
  std::vector<Worker> workers_ PDKV_GUARDED_BY(mu_);
  bool stopping_ PDKV_GUARDED_BY(mu_) = false;
};

}  // namespace pdkv::kv

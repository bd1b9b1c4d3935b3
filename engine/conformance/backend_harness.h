// Test harness for backends without the engine core: a MemoryRegistry, a CompletionSink
// that records statuses by token, and make_named_backend() ("shm", or "ucx" when built).
// Also the region layout every cross-process test uses: PROT_NONE guard page, canary
// page, the registered region, canary page, guard page.
//
// Thread safety: Sink may be completed from any backend thread and waited on from any.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/cluster_key.h"
#include "common/mutex.h"
#include "engine/backend.h"
#include "engine/engine_options.h"
#include "engine/memory_registry.h"

namespace pdkv::engine::testing {

class RecordingSink final : public CompletionSink {
 public:
  void on_complete(uint64_t token, Status status) override;
  // The status for token, or DeadlineExceeded if it does not arrive within timeout.
  Status wait(uint64_t token, std::chrono::milliseconds timeout);
  int completions(uint64_t token);

 private:
  Mutex mu_;
  CondVar cv_;
  std::map<uint64_t, Status> done_ PDKV_GUARDED_BY(mu_);
  std::map<uint64_t, int> count_ PDKV_GUARDED_BY(mu_);
};

struct BackendBox {
  EngineOptions options;
  MemoryRegistry registry;
  RecordingSink sink;
  std::unique_ptr<Backend> backend;
  std::string endpoint;
};

// Creates and starts (listen()) a backend by name; env knobs apply (UCX_TLS etc.).
// `cluster_key` set: its sessions run the handshake with that secret.
Result<std::unique_ptr<BackendBox>> make_named_backend(
    const std::string& name, std::shared_ptr<const ClusterKey> cluster_key = nullptr);

// A cluster secret in a private (mode 0600) temporary file, removed by the destructor;
// `fill` makes secrets that differ.
class SecretFile {
 public:
  explicit SecretFile(uint8_t fill);
  ~SecretFile();
  SecretFile(const SecretFile&) = delete;
  SecretFile& operator=(const SecretFile&) = delete;
  const std::string& path() const { return path_; }
  // The key every process given path() derives.
  const std::shared_ptr<const ClusterKey>& key() const { return key_; }

 private:
  std::string path_;
  std::shared_ptr<const ClusterKey> key_;
};

inline constexpr uint8_t kCanary = 0xA5;

// mmap'ed guard | canary | region | canary | guard; region bytes start zeroed.
class GuardedRegion {
 public:
  explicit GuardedRegion(uint64_t length);
  ~GuardedRegion();
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;
  uint8_t* data() const { return region_; }
  uint64_t length() const { return length_; }
  bool canaries_intact() const;

 private:
  uint8_t* base_ = nullptr;
  uint64_t map_bytes_ = 0;
  uint8_t* region_ = nullptr;
  uint64_t length_ = 0;
  uint64_t canary_bytes_ = 0;
};

// FNV-1a-style hash over 8-byte words (deterministic across processes).
uint64_t fnv64(const uint8_t* p, uint64_t n);

}  // namespace pdkv::engine::testing

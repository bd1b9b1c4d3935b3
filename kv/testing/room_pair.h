// The set-up the KV manager tests share. ManagerMaker builds prefill and decode managers
// at one bootstrap address over one in-memory route directory and one kind of control
// channel (the in-process bus, or real ZeroMQ sockets on loopback), each with a loopback
// TCP engine. RoomPair is one prefill rank and one decode rank (TP 1 each) with their
// buffers, and the steps of one room (RoomMove, which also serves managers a test built
// itself): open it on both sides, send its pages, check that they landed. All are driven
// from the test's thread only; none is thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kv/kv_sender.h"
#include "kv/manager_factory.h"
#include "kv/testing/kv_cluster.h"

namespace pdkv::kv::testing {

enum class Channels { kInProcess, kZmq };

inline constexpr char kTestBootstrapAddr[] = "bootstrap-under-test:8998";

class ManagerMaker {
 public:
  explicit ManagerMaker(std::string bootstrap_addr = kTestBootstrapAddr,
                        Channels channels = Channels::kInProcess);
  ManagerMaker(const ManagerMaker&) = delete;
  ManagerMaker& operator=(const ManagerMaker&) = delete;

  // A config for rank `args.engine_rank` at this address: the loopback engine, `options`.
  // Edit it for anything else (layerwise, an L1.5 cache, the first-token wait).
  PrefillManagerConfig prefill_config(const KvArgs& args,
                                      const KvManagerOptions& options = fast_options()) const;
  DecodeManagerConfig decode_config(const KvArgs& args,
                                    const KvManagerOptions& options = fast_options()) const;

  // Through kv::ManagerFactory (as production builds a manager), over this maker's
  // channels and directory.
  Result<std::unique_ptr<PrefillManager>> create_prefill(PrefillManagerConfig config);
  // A started manager; one that fails to start fails the test (EXPECT) and is null.
  std::unique_ptr<PrefillManager> prefill(PrefillManagerConfig config);
  std::unique_ptr<DecodeManager> decode(DecodeManagerConfig config);
  std::unique_ptr<PrefillManager> prefill(const KvArgs& args,
                                          const KvManagerOptions& options = fast_options()) {
    return prefill(prefill_config(args, options));
  }
  std::unique_ptr<DecodeManager> decode(const KvArgs& args,
                                        const KvManagerOptions& options = fast_options()) {
    return decode(decode_config(args, options));
  }

  // The in-process bus the managers talk over; only with Channels::kInProcess.
  InProcessBus& bus() { return *bus_; }
  MemoryDirectory& directory() { return *directory_; }
  const std::string& bootstrap_addr() const { return bootstrap_addr_; }

 private:
  // The factory for one config's engine and options (the tests edit those per manager).
  ManagerFactory factory(const engine::EngineOptions& engine,
                         const KvManagerOptions& options) const;

  const std::string bootstrap_addr_;
  std::unique_ptr<InProcessBus> bus_;  // null with real ZeroMQ; outlives every channel
  ControlChannelFactory channels_;
  std::shared_ptr<MemoryDirectory> directory_ = std::make_shared<MemoryDirectory>();
};

// A prefill and a decode manager with the buffers they registered, which a room's steps
// fill and check. What it names must outlive whatever holds it.
struct RoomSides {
  PrefillManager& prefill;
  RankBuffers& prefill_buffers;
  DecodeManager& decode;
  RankBuffers& decode_buffers;
};

// One room between a prefill and a decode manager, over the buffers they registered: open
// it on both sides, send its pages, check that they landed. RoomPair runs it over its own
// pair; tests that build their managers themselves run it directly. The managers and
// buffers must outlive it.
class RoomMove {
 public:
  explicit RoomMove(RoomSides sides) : sides_(sides) {}
  // The room's KVSender and KVReceiver end before the managers.
  ~RoomMove();
  RoomMove(const RoomMove&) = delete;
  RoomMove& operator=(const RoomMove&) = delete;

  enum class Wait { kForPreAllocation, kNo };
  // Opens `room`: fills `src` on the prefill with the room's pattern (`salt`), opens the
  // KVSender for src.size() pages, then the KVReceiver, which pre-allocates `dst`; with
  // Wait::kForPreAllocation, waits until the prefill holds the pre-allocation (the sender
  // is WaitingForInput). Fails the test (ASSERT: wrap in ASSERT_NO_FATAL_FAILURE) if a
  // step fails. A room opened before is replaced.
  void open(uint64_t room, std::vector<int64_t> src, std::vector<int64_t> dst,
            Wait wait = Wait::kForPreAllocation, int64_t salt = 0);
  // Sends the open room's pages in one chunk and checks that both sides succeed and that
  // the decode's `dst` pages hold the room's bytes.
  void finish_and_check();
  // Ends the room's KVReceiver (an engine that dropped its request or went away).
  void end_receiver() { receiver_.reset(); }

  // The open room's ends.
  KVSender& sender() { return *sender_; }
  KVReceiver& receiver() { return *receiver_; }

 private:
  RoomSides sides_;
  std::vector<int64_t> src_, dst_;
  int64_t salt_ = 0;
  std::unique_ptr<KVSender> sender_;
  std::unique_ptr<KVReceiver> receiver_;
};

struct RoomPairOptions {
  std::string bootstrap_addr = kTestBootstrapAddr;
  Channels channels = Channels::kInProcess;
  ModelShape shape;
  int64_t num_pages = 16;  // on each side
  KvManagerOptions prefill_options = fast_options();
  KvManagerOptions decode_options = fast_options();
};

class RoomPair {
 public:
  // Starts both managers; a manager that fails to start fails the test (see ok()).
  explicit RoomPair(RoomPairOptions options = {});

  // Both managers started.
  bool ok() const { return prefill_ != nullptr && decode_ != nullptr; }

  using Wait = RoomMove::Wait;
  // RoomMove's steps over this pair's managers and buffers.
  void open(uint64_t room, std::vector<int64_t> src, std::vector<int64_t> dst,
            Wait wait = Wait::kForPreAllocation, int64_t salt = 0);
  void finish_and_check();
  void end_receiver() { room_->end_receiver(); }

  ManagerMaker& maker() { return maker_; }
  PrefillManager& prefill() { return *prefill_; }
  DecodeManager& decode() { return *decode_; }
  RankBuffers& prefill_buffers() { return pbuf_; }
  RankBuffers& decode_buffers() { return dbuf_; }
  // The open room's ends.
  KVSender& sender() { return room_->sender(); }
  KVReceiver& receiver() { return room_->receiver(); }

 private:
  ManagerMaker maker_;
  RankBuffers pbuf_, dbuf_;  // outlive the managers, whose engines registered them
  std::unique_ptr<PrefillManager> prefill_;
  std::unique_ptr<DecodeManager> decode_;
  std::unique_ptr<RoomMove> room_;  // ends before the managers; null unless ok()
};

}  // namespace pdkv::kv::testing

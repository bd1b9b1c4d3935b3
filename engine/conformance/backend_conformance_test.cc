// Cross-process conformance tests for the one-sided backends (shm; ucx over tcp and over
// shared-memory transports when built). The sender backend lives in this process, each
// receiver in its own engine_backend_peer process; bytes are verified by hash, and the
// receiver's region sits between canaries and PROT_NONE guard pages.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "engine/conformance/backend_harness.h"
#include "engine/conformance/backend_peer_process.h"
#include "engine/conformance/conformance_data.h"
#include "engine/testing/peer_commands.h"
#include "engine/transfer_engine.h"

namespace pdkv::engine::testing {
namespace {

using std::chrono::milliseconds;

class BackendConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    apply_transports(GetParam());
    auto box = make_named_backend(backend_of(GetParam()));
    ASSERT_TRUE(box.ok()) << box.status().to_string();
    box_ = std::move(*box);
  }
  void TearDown() override {
    peers_.clear();  // BackendPeers first, as the engine does
    box_.reset();
  }

  BackendPeer& connect(const BackendPeerProcess& p) {
    auto peer = box_->backend->connect(p.endpoint());
    EXPECT_TRUE(peer.ok()) << peer.status().to_string();
    if (!peer.ok()) std::abort();
    peers_.push_back(std::move(*peer));
    return *peers_.back();
  }

  Status post_and_wait(BackendPeer& peer, const std::vector<WriteBlock>& blocks,
                       milliseconds timeout = milliseconds(60000)) {
    uint64_t token = next_token_++;
    PDKV_RETURN_IF_ERROR(box_->backend->post(peer, blocks, token));
    return box_->sink.wait(token, timeout);
  }

  std::unique_ptr<BackendBox> box_;
  std::vector<std::unique_ptr<BackendPeer>> peers_;
  std::atomic<uint64_t> next_token_{1};
};

TEST_P(BackendConformance, RandomBlocksLandExactly) {
  const uint64_t kRegion = 24u << 20;
  BackendPeerProcess p(backend_of(GetParam()), kRegion);
  ASSERT_TRUE(p.ready()) << p.error();
  BackendPeer& peer = connect(p);
  std::vector<uint8_t> model(kRegion, 0);
  auto src = random_bytes(kRegion, 7);
  for (uint64_t round = 0; round < 3; ++round) {
    auto blocks = random_blocks(100 + round, src, p.region_addr(), &model);
    ASSERT_TRUE(post_and_wait(peer, blocks).ok());
  }
  expect_region(p, model);
}

TEST_P(BackendConformance, OutOfRangeEntryFailsWholeBatchAndWritesNothing) {
  const uint64_t kRegion = 1u << 20;
  BackendPeerProcess p(backend_of(GetParam()), kRegion);
  ASSERT_TRUE(p.ready()) << p.error();
  BackendPeer& peer = connect(p);
  auto src = random_bytes(1u << 16, 3);
  uint64_t s = reinterpret_cast<uint64_t>(src.data());
  uint64_t end = p.region_addr() + kRegion;
  for (auto bad : {WriteBlock{s, end - 10, 11}, WriteBlock{s, p.region_addr() - 1, 2},
                   WriteBlock{s, end, 1}, WriteBlock{s, 4096, 8}}) {
    std::vector<WriteBlock> blocks{{s, p.region_addr(), 100},
                                   {s, p.region_addr() + 200, 50},
                                   {s, p.region_addr() + 4096, 4096},
                                   bad};
    Status st = post_and_wait(peer, blocks);
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
    EXPECT_NE(st.message().find("block 3"), std::string::npos) << st.to_string();
  }
  expect_region(p, std::vector<uint8_t>(kRegion, 0));
  // The session survives a rejected batch.
  EXPECT_TRUE(post_and_wait(peer, {{s, p.region_addr(), 64}}).ok());
}

TEST_P(BackendConformance, UnregisteredRegionIsRevoked) {
  BackendPeerProcess p(backend_of(GetParam()), 1u << 20);
  ASSERT_TRUE(p.ready()) << p.error();
  BackendPeer& peer = connect(p);
  auto src = random_bytes(4096, 5);
  WriteBlock b{reinterpret_cast<uint64_t>(src.data()), p.region_addr(), 4096};
  ASSERT_TRUE(post_and_wait(peer, {b}).ok());
  ASSERT_EQ(p.command("UNREG"), "UNREG OK");
  Status st = post_and_wait(peer, {b});
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
}

// Fencing (docs/SECURITY.md): under write grants, a block is admitted only under a live grant
// covering it; after a revoke, a late block naming the old grant is refused even though
// the same bytes were granted again under a new id.
TEST_P(BackendConformance, WritesLandOnlyUnderALiveGrant) {
  const uint64_t kRegion = 1u << 20;
  BackendPeerProcess p(backend_of(GetParam()), kRegion);
  ASSERT_TRUE(p.ready()) << p.error();
  BackendPeer& peer = connect(p);
  auto src = random_bytes(1u << 16, 9);
  const uint64_t s = reinterpret_cast<uint64_t>(src.data());
  const uint64_t r = p.region_addr();
  ASSERT_EQ(p.command("GRANT 11 0 65536"), "GRANT OK");
  ASSERT_EQ(p.command("GRANT 12 131072 65536"), "GRANT OK");
  EXPECT_EQ(post_and_wait(peer, {{s, r, 4096, 0}}).code(), StatusCode::kOutOfRange);
  Status st = post_and_wait(peer, {{s, r, 4096, 11}, {s, r + 131072, 4096, 11}});
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  EXPECT_NE(st.message().find("block 1"), std::string::npos) << st.to_string();
  expect_region(p, std::vector<uint8_t>(kRegion, 0));
  ASSERT_EQ(p.command("REVOKE 11"), "REVOKE OK");
  ASSERT_EQ(p.command("GRANT 13 0 65536"), "GRANT OK");
  EXPECT_EQ(post_and_wait(peer, {{s, r, 4096, 11}}).code(), StatusCode::kOutOfRange);
  expect_region(p, std::vector<uint8_t>(kRegion, 0));
  ASSERT_TRUE(post_and_wait(peer, {{s, r, 65536, 13}, {s, r + 131072, 65536, 12}}).ok());
  std::vector<uint8_t> model(kRegion, 0);
  std::copy_n(src.data(), 65536, model.data());
  std::copy_n(src.data(), 65536, model.data() + 131072);
  expect_region(p, model);
}

TEST_P(BackendConformance, KilledReceiverFailsBatchInBoundedTimeOthersUnaffected) {
  const uint64_t kRegion = 256u << 20;
  BackendPeerProcess victim(backend_of(GetParam()), kRegion);
  BackendPeerProcess other(backend_of(GetParam()), 1u << 20);
  ASSERT_TRUE(victim.ready() && other.ready()) << victim.error() << other.error();
  BackendPeer& vpeer = connect(victim);
  BackendPeer& opeer = connect(other);
  auto src = random_bytes(kRegion, 9);
  std::vector<WriteBlock> blocks;
  for (uint64_t off = 0; off < kRegion; off += 4096) {
    blocks.push_back(
        {reinterpret_cast<uint64_t>(src.data()) + off, victim.region_addr() + off, 4096});
  }
  // Many rounds, so the kill lands mid-batch however fast the copy is.
  std::vector<uint64_t> tokens;
  for (int i = 0; i < 20; ++i) {
    tokens.push_back(next_token_++);
    ASSERT_TRUE(box_->backend->post(vpeer, blocks, tokens.back()).ok());
  }
  std::this_thread::sleep_for(milliseconds(30));
  auto killed_at = std::chrono::steady_clock::now();
  victim.kill9();
  Status last = box_->sink.wait(tokens.back(), milliseconds(15000));
  auto took = std::chrono::steady_clock::now() - killed_at;
  EXPECT_FALSE(last.ok());
  EXPECT_NE(last.code(), StatusCode::kDeadlineExceeded) << "no completion: " << last.to_string();
  EXPECT_LT(took, milliseconds(5000));
  for (auto t : tokens) EXPECT_EQ(box_->sink.completions(t), 1);
  EXPECT_FALSE(vpeer.health().ok());
  Status unaffected =
      post_and_wait(opeer, {{reinterpret_cast<uint64_t>(src.data()), other.region_addr(), 4096}});
  EXPECT_TRUE(unaffected.ok()) << unaffected.to_string();
}

// The receiving side of the test above: a sender killed in the middle of its writes must
// not stop another sender's writes from landing here (UCX's shared-memory rings are
// per session for this reason, ucx_worker.h).
TEST_P(BackendConformance, KilledSenderLeavesOtherSendersUnaffected) {
  if (GetParam().rfind("ucx", 0) == 0) {
    // Every UCX transport set a GPU-less host offers emulates puts in software, and there
    // UCX 1.13 itself aborts the receiver now and then (ucp_put_handler answers the dead
    // sender: "Fatal: unexpected error", or a crash purging those answers at worker
    // destruction); seen in 2 of 25 runs. Documented in RELIABILITY.md.
    GTEST_SKIP() << "UCX 1.13 software RMA cannot survive a sender killed mid-put";
  }
  const uint64_t kVictimBytes = 64u << 20;
  const uint64_t kOtherBytes = 1u << 20;
  GuardedRegion local(kVictimBytes + kOtherBytes);
  const auto base = reinterpret_cast<uint64_t>(local.data());
  ASSERT_TRUE(box_->registry.add(base, local.length()).ok());
  ASSERT_TRUE(box_->backend->on_register_memory(base, local.length()).ok());
  BackendPeerProcess victim(backend_of(GetParam()), kVictimBytes);
  BackendPeerProcess other(backend_of(GetParam()), kOtherBytes);
  ASSERT_TRUE(victim.ready() && other.ready()) << victim.error() << other.error();
  // Many rounds, so the kill lands mid-write however fast the copy is.
  ASSERT_TRUE(victim.start_command(
      format_peer_command(push_command(box_->endpoint, base, kVictimBytes, 1000))));
  std::this_thread::sleep_for(milliseconds(300));
  victim.kill9();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(other.command(format_peer_command(
                push_command(box_->endpoint, base + kVictimBytes, kOtherBytes, 3))),
            "PUSH OK");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(5000));
  EXPECT_TRUE(std::all_of(local.data() + kVictimBytes, local.data() + local.length(),
                          [](uint8_t b) { return b == kPushPattern; }));
  EXPECT_TRUE(local.canaries_intact());
  // Nothing may be writing once the registry let go of the region.
  ASSERT_TRUE(box_->registry.remove(base).ok());
  ASSERT_TRUE(box_->backend->on_unregister_memory(base, local.length()).ok());
}

TEST_P(BackendConformance, SilentReceiverFailsWithinIoTimeout) {
  setenv("PDKV_SHM_IO_TIMEOUT_MS", "800", 1);
  setenv("PDKV_UCX_IO_TIMEOUT_MS", "800", 1);
  auto box = make_named_backend(backend_of(GetParam()));
  unsetenv("PDKV_SHM_IO_TIMEOUT_MS");
  unsetenv("PDKV_UCX_IO_TIMEOUT_MS");
  ASSERT_TRUE(box.ok()) << box.status().to_string();
  BackendPeerProcess p(backend_of(GetParam()), 1u << 20);
  ASSERT_TRUE(p.ready()) << p.error();
  auto peer = (*box)->backend->connect(p.endpoint());
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  auto src = random_bytes(4096, 19);
  ::kill(p.pid(), SIGSTOP);  // alive but silent: no EOF, no answer
  int wstatus = 0;
  ASSERT_EQ(::waitpid(p.pid(), &wstatus, WUNTRACED), p.pid());  // really stopped
  ASSERT_TRUE(WIFSTOPPED(wstatus));
  auto t0 = std::chrono::steady_clock::now();
  std::vector<WriteBlock> blocks{{reinterpret_cast<uint64_t>(src.data()), p.region_addr(), 4096}};
  ASSERT_TRUE((*box)->backend->post(**peer, blocks, 1).ok());
  Status st = (*box)->sink.wait(1, milliseconds(10000));
  auto took = std::chrono::steady_clock::now() - t0;
  ::kill(p.pid(), SIGCONT);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
  EXPECT_LT(took, milliseconds(4000));
  peer->reset();
}

TEST_P(BackendConformance, ClosedPortIsUnavailableWithoutHang) {
  auto t0 = std::chrono::steady_clock::now();
  auto peer = box_->backend->connect("127.0.0.1:1");
  EXPECT_FALSE(peer.ok());
  EXPECT_EQ(peer.status().code(), StatusCode::kUnavailable) << peer.status().to_string();
  EXPECT_NE(peer.status().message().find("127.0.0.1:1"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(3000));
}

// 1 GiB; 256 MiB under sanitizers, whose shadow memory would multiply 2 GiB of buffers
// on a machine shared with other jobs.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr uint64_t kDefaultLargeEntryBytes = 256ull << 20;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr uint64_t kDefaultLargeEntryBytes = 256ull << 20;
#else
constexpr uint64_t kDefaultLargeEntryBytes = 1ull << 30;
#endif
#else
constexpr uint64_t kDefaultLargeEntryBytes = 1ull << 30;
#endif

TEST_P(BackendConformance, LargeSingleEntry) {
  const char* env = std::getenv("PDKV_TEST_LARGE_ENTRY_BYTES");
  const uint64_t kBytes = env ? std::strtoull(env, nullptr, 10) : kDefaultLargeEntryBytes;
  BackendPeerProcess p(backend_of(GetParam()), kBytes);
  ASSERT_TRUE(p.ready()) << p.error();
  BackendPeer& peer = connect(p);
  auto src = random_bytes(kBytes, 11);
  const Status posted = post_and_wait(
      peer, {{reinterpret_cast<uint64_t>(src.data()), p.region_addr(), kBytes}},
      milliseconds(120000));
  ASSERT_TRUE(posted.ok()) << posted.to_string();
  expect_region(p, src);
}

TEST_P(BackendConformance, ConcurrentPostsFromManyThreadsToTwoPeers) {
  const uint64_t kRegion = 8u << 20;
  BackendPeerProcess a(backend_of(GetParam()), kRegion), b(backend_of(GetParam()), kRegion);
  ASSERT_TRUE(a.ready() && b.ready());
  BackendPeer* peers[2] = {&connect(a), &connect(b)};
  BackendPeerProcess* procs[2] = {&a, &b};
  auto src = random_bytes(kRegion, 13);
  const int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread owns a quarter of each region.
      uint64_t quarter = kRegion / kThreads;
      for (int round = 0; round < 5; ++round) {
        for (int k = 0; k < 2; ++k) {
          std::vector<WriteBlock> blocks;
          for (uint64_t off = 0; off < quarter; off += 8192) {
            uint64_t o = t * quarter + off;
            blocks.push_back(
                {reinterpret_cast<uint64_t>(src.data()) + o, procs[k]->region_addr() + o, 8192});
          }
          if (!post_and_wait(*peers[k], blocks).ok()) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  expect_region(a, src);
  expect_region(b, src);
}

// Through the public API: the engine core in front of the backend (zero-length batch
// and entries are the core's job; the backend never sees them).
TEST_P(BackendConformance, TransferEngineZeroLengthAndSyncTransfer) {
  BackendPeerProcess p(backend_of(GetParam()), 1u << 20);
  ASSERT_TRUE(p.ready()) << p.error();
  EngineOptions o;
  o.backend = backend_of(GetParam());
  auto engine = TransferEngine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_EQ((*engine)->backend_name(), backend_of(GetParam()));
  auto session = (*engine)->open_session(p.endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  EXPECT_EQ((*engine)->transfer_sync(*session, {}), 0);
  auto src = random_bytes(1u << 20, 17);
  uint64_t s = reinterpret_cast<uint64_t>(src.data());
  std::vector<WriteBlock> blocks{{s, p.region_addr(), 0},
                                 {s, p.region_addr(), 1u << 19},
                                 {s + (1u << 19), p.region_addr() + (1u << 19), 1u << 19}};
  EXPECT_EQ((*engine)->transfer_sync(*session, blocks), 0);
  expect_region(p, src);
  std::vector<WriteBlock> bad{{s, p.region_addr() + (1u << 20), 1}};
  EXPECT_NE((*engine)->transfer_sync(*session, bad), 0);
}

#ifdef PDKV_HAVE_UCX
// A byte of this process's memory that a UCX put wrote on one of the backend's worker
// threads. The ordering runs through UCX and a socket round trip (the sender's flush,
// then its lease done), which TSan cannot see, so this read is not instrumented.
__attribute__((no_sanitize("thread"))) uint8_t landed_byte(const uint8_t* p) { return *p; }

// PDKV_UCX_MAX_WORKERS bounds the UCP workers one backend runs, sending and receiving
// alike: past it a connect fails and a sender's hello is refused, both naming the
// setting, and a freed worker is available again.
TEST(UcxWorkerBudget, PastTheCapConnectsAndSendersAreRefusedNamingTheSetting) {
  setenv("PDKV_UCX_TLS", "tcp", 1);
  setenv("PDKV_UCX_MAX_WORKERS", "2", 1);
  auto box = make_named_backend("ucx");
  unsetenv("PDKV_UCX_MAX_WORKERS");  // the peers keep the default
  ASSERT_TRUE(box.ok()) << box.status().to_string();
  BackendPeerProcess a("ucx", 1u << 20), b("ucx", 1u << 20), c("ucx", 1u << 20);
  ASSERT_TRUE(a.ready() && b.ready() && c.ready()) << a.error() << b.error() << c.error();
  auto to_a = (*box)->backend->connect(a.endpoint());
  auto to_b = (*box)->backend->connect(b.endpoint());
  ASSERT_TRUE(to_a.ok() && to_b.ok());
  auto to_c = (*box)->backend->connect(c.endpoint());
  ASSERT_FALSE(to_c.ok());
  EXPECT_NE(to_c.status().message().find("PDKV_UCX_MAX_WORKERS"), std::string::npos)
      << to_c.status().to_string();

  GuardedRegion local(1u << 20);
  const auto base = reinterpret_cast<uint64_t>(local.data());
  ASSERT_TRUE((*box)->registry.add(base, local.length()).ok());
  ASSERT_TRUE((*box)->backend->on_register_memory(base, local.length()).ok());
  const std::string push = format_peer_command(push_command((*box)->endpoint, base, 4096, 1));
  const std::string refused = c.command(push);
  EXPECT_NE(refused.find("PDKV_UCX_MAX_WORKERS"), std::string::npos) << refused;
  EXPECT_EQ(landed_byte(local.data()), 0);

  to_a->reset();  // frees a worker
  EXPECT_EQ(c.command(push), "PUSH OK");
  EXPECT_EQ(landed_byte(local.data()), kPushPattern);
  // The PUSH session's worker goes when the receiver sees its connection close.
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  for (;;) {
    to_c = (*box)->backend->connect(c.endpoint());
    if (to_c.ok() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(to_c.ok()) << to_c.status().to_string();
  to_b->reset();
  to_c->reset();
  ASSERT_TRUE((*box)->registry.remove(base).ok());
  ASSERT_TRUE((*box)->backend->on_unregister_memory(base, local.length()).ok());
}
#endif

INSTANTIATE_TEST_SUITE_P(Backends, BackendConformance, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace pdkv::engine::testing

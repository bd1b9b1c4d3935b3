// Multi-process tests: this process sends, pdkv_engine_peer processes receive. Bytes are
// checked exactly in the shared guarded buffer (testing/guarded_buffer.h); every byte the
// peer should not have written must still hold its canary pattern.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "common/clock.h"
#include "engine/backends/tcp/socket_util.h"
#include "engine/backends/tcp/tcp_frame.h"
#include "engine/testing/engine_peer_process.h"
#include "engine/testing/guarded_buffer.h"
#include "engine/transfer_engine.h"

namespace pdkv::engine {
namespace {

using testing::EnginePeerProcess;
using testing::fill_pattern;
using testing::first_pattern_mismatch;
using testing::GuardedBuffer;
using testing::PeerRegion;

constexpr uint64_t kCanarySeed = 0xC0FFEE;
constexpr uint64_t kSourceSeed = 0x5EED;
constexpr auto kGenerous = std::chrono::seconds(120);

// `bytes` of the source pattern (kSourceSeed), what every test sends.
std::vector<uint8_t> source_bytes(size_t bytes) {
  std::vector<uint8_t> src(bytes);
  fill_pattern(src.data(), src.size(), kSourceSeed);
  return src;
}

std::unique_ptr<TransferEngine> make_engine(int streams = 4, int io_timeout_ms = 10000) {
  EngineOptions o;
  o.tcp.streams = streams;
  o.tcp.io_timeout_ms = io_timeout_ms;
  o.tcp.min_split_bytes = 256 * 1024;
  auto e = TransferEngine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

// Waits for every batch in *ids, counting each that did not succeed in *failures, and
// releases them all (*ids ends empty).
void wait_all_succeeded(TransferEngine& engine, std::vector<BatchId>* ids,
                        std::atomic<int>* failures) {
  for (BatchId id : *ids) {
    auto st = engine.wait(id, kGenerous);
    if (!st.ok() || st->state != BatchState::kSucceeded) ++*failures;
    (void)engine.release(id);
  }
  ids->clear();
}

struct Peer {
  std::unique_ptr<GuardedBuffer> buffer;
  std::unique_ptr<EnginePeerProcess> process;
};

Peer start_peer(size_t bytes, const std::vector<PeerRegion>& regions,
                const std::vector<std::string>& env = {}) {
  Peer p;
  auto buf = GuardedBuffer::create(bytes);
  EXPECT_TRUE(buf.ok()) << buf.status().to_string();
  p.buffer = std::move(buf).value();
  fill_pattern(p.buffer->data(), p.buffer->size(), kCanarySeed);
  auto proc = EnginePeerProcess::start(*p.buffer, regions, env);
  EXPECT_TRUE(proc.ok()) << proc.status().to_string();
  p.process = std::move(proc).value();
  return p;
}

// Expected image of a peer buffer after `blocks` (dst as peer offsets) from `src`.
void expect_image(const Peer& peer, const std::vector<WriteBlock>& local_view,
                  const uint8_t* src_base, uint64_t src_addr_base) {
  std::vector<uint8_t> expected(peer.buffer->size());
  fill_pattern(expected.data(), expected.size(), kCanarySeed);
  for (const WriteBlock& b : local_view) {
    std::memcpy(expected.data() + (b.dst_addr - peer.process->remote_base()),
                src_base + (b.src_addr - src_addr_base), b.length);
  }
  const uint8_t* got = peer.buffer->data();
  if (std::memcmp(expected.data(), got, expected.size()) != 0) {
    size_t i = 0;
    while (expected[i] == got[i]) ++i;
    FAIL() << "first mismatching byte at buffer offset " << i;
  }
}

// Random regions with gaps; random blocks (1 B .. max_block) at shuffled positions.
struct Layout {
  std::vector<PeerRegion> regions;
  std::vector<WriteBlock> blocks;  // dst as buffer offsets, src as offsets into source
};

Layout random_layout(std::mt19937_64& rng, size_t buffer_bytes, uint64_t max_block,
                     size_t src_bytes) {
  Layout l;
  uint64_t pos = 4096;
  while (pos + 8192 < buffer_bytes) {
    uint64_t len = std::min<uint64_t>(buffer_bytes - pos - 4096, 4096 + rng() % (max_block * 2));
    l.regions.push_back({pos, len});
    // Carve blocks inside the region: log-uniform lengths, random holes.
    uint64_t off = pos;
    while (off < pos + len) {
      const int bits = static_cast<int>(rng() % 27);  // 1 B .. 64 MiB
      uint64_t blen = std::max<uint64_t>(
          1, std::min<uint64_t>((uint64_t{1} << bits) + rng() % (uint64_t{1} << bits), max_block));
      if (off + blen > pos + len) blen = pos + len - off;
      if (rng() % 4 != 0) {
        const uint64_t src = rng() % (src_bytes - blen + 1);
        l.blocks.push_back({src, off, blen});
      }
      off += blen + rng() % 64;
    }
    pos += len + 1 + rng() % 8192;
  }
  std::shuffle(l.blocks.begin(), l.blocks.end(), rng);
  return l;
}

std::vector<WriteBlock> to_addresses(const std::vector<WriteBlock>& offsets, uint64_t src_base,
                                     uint64_t dst_base) {
  std::vector<WriteBlock> out;
  out.reserve(offsets.size());
  for (const auto& b : offsets)
    out.push_back({src_base + b.src_addr, dst_base + b.dst_addr, b.length});
  return out;
}

TEST(EngineMultiProcess, RandomLayoutsAndBlocksAreWrittenExactly) {
  std::mt19937_64 rng(12345);
  const size_t src_bytes = 80u << 20;
  const std::vector<uint8_t> src = source_bytes(src_bytes);
  auto engine = make_engine();
  ASSERT_TRUE(engine->register_memory(reinterpret_cast<uint64_t>(src.data()), src.size()).ok());
  for (int round = 0; round < 2; ++round) {
    std::vector<Peer> peers;
    std::vector<Layout> layouts;
    for (int p = 0; p < 2; ++p) {
      const uint64_t max_block = (p == 0) ? (64u << 20) : (64u << 10);
      const size_t bytes = (p == 0) ? (96u << 20) : (8u << 20);
      layouts.push_back(random_layout(rng, bytes, max_block, src_bytes));
      peers.push_back(start_peer(bytes, layouts.back().regions));
    }
    std::vector<std::vector<WriteBlock>> lists;
    std::vector<BatchId> batches;
    for (int p = 0; p < 2; ++p) {
      auto session = engine->open_session(peers[p].process->endpoint());
      ASSERT_TRUE(session.ok()) << session.status().to_string();
      lists.push_back(to_addresses(layouts[p].blocks, reinterpret_cast<uint64_t>(src.data()),
                                   peers[p].process->remote_base()));
      auto batch = engine->submit(*session, lists.back());
      ASSERT_TRUE(batch.ok()) << batch.status().to_string();
      batches.push_back(*batch);
    }
    for (int p = 0; p < 2; ++p) {
      auto st = engine->wait(batches[p], kGenerous);
      ASSERT_TRUE(st.ok());
      ASSERT_EQ(st->state, BatchState::kSucceeded) << st->error.to_string();
      ASSERT_TRUE(engine->release(batches[p]).ok());
      SCOPED_TRACE("peer " + std::to_string(p) + ", " + std::to_string(lists[p].size()) +
                   " blocks");
      expect_image(peers[p], lists[p], src.data(), reinterpret_cast<uint64_t>(src.data()));
      EXPECT_TRUE(peers[p].process->ping().ok());
    }
  }
}

TEST(EngineMultiProcess, OutOfRangeDestinationIsRejectedAndNothingIsWritten) {
  const std::vector<uint8_t> src = source_bytes(1 << 20);
  // Region [4096, 4096+64 KiB) of a 128 KiB buffer; guard pages lie outside the buffer.
  Peer peer = start_peer(128 << 10, {{4096, 64 << 10}});
  auto engine = make_engine(1);
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok());
  const uint64_t base = peer.process->remote_base();
  const uint64_t s = reinterpret_cast<uint64_t>(src.data());
  const std::vector<WriteBlock> cases[] = {
      // entry 2 runs one byte past the region end
      {{s, base + 4096, 100},
       {s + 200, base + 8192, 100},
       {s + 300, base + 4096 + (64 << 10) - 99, 100}},
      // entry 1 lies entirely past the end of the buffer (into the guard page)
      {{s, base + 4096, 100}, {s, base + (128 << 10), 16}},
      // entry 0 wraps around the address space
      {{s, UINT64_MAX - 10, 100}},
      // entry 1 starts before the region
      {{s, base + 5000, 10}, {s, base + 4095, 2}},
  };
  const uint32_t bad_index[] = {2, 1, 0, 1};
  for (size_t c = 0; c < std::size(cases); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    auto batch = engine->submit(*session, cases[c]);
    if (c == 2) {  // wrap-around is refused locally
      EXPECT_EQ(batch.status().code(), StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(batch.ok());
    auto st = engine->wait(*batch, kGenerous);
    ASSERT_TRUE(st.ok());
    ASSERT_EQ(st->state, BatchState::kFailed);
    EXPECT_EQ(st->error.code(), StatusCode::kOutOfRange) << st->error.to_string();
    EXPECT_NE(st->error.message().find("block " + std::to_string(bad_index[c])), std::string::npos)
        << st->error.message();
    (void)engine->release(*batch);
    EXPECT_EQ(first_pattern_mismatch(peer.buffer->data(), peer.buffer->size(), kCanarySeed),
              peer.buffer->size());
  }
  // The peer survived (no guard-page fault) and the same session still works.
  EXPECT_TRUE(peer.process->ping().ok());
  std::vector<WriteBlock> good = {{s, base + 4096, 64 << 10}};
  EXPECT_EQ(engine->transfer_sync(*session, good), 0);
  EXPECT_EQ(std::memcmp(peer.buffer->data() + 4096, src.data(), 64 << 10), 0);
  EXPECT_EQ(first_pattern_mismatch(peer.buffer->data(), 4096, kCanarySeed), 4096u);
  const size_t tail = 4096 + (64 << 10);
  EXPECT_EQ(first_pattern_mismatch(peer.buffer->data() + tail, peer.buffer->size() - tail,
                                   kCanarySeed, tail),
            peer.buffer->size() - tail);
}

// Head-split KV pages (tokens of 512 B, every other 512 B of the destination) travel as
// runs: one wire entry per page. A run whose stride steps over the hole between two
// registrations writes only registered bytes and is accepted; a run with one piece past
// the end is refused whole, naming that piece's block, and writes nothing.
TEST(EngineMultiProcess, StridedRunsAreWrittenExactlyAndCheckedPieceByPiece) {
  const std::vector<uint8_t> src = source_bytes(1 << 20);
  // Regions [4 KiB, 260 KiB) and [264 KiB, 520 KiB): a 4 KiB hole between them.
  Peer peer = start_peer(640 << 10, {{4 << 10, 256 << 10}, {264 << 10, 256 << 10}});
  auto engine = make_engine(2);
  ASSERT_TRUE(engine->register_memory(reinterpret_cast<uint64_t>(src.data()), src.size()).ok());
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok());
  const uint64_t base = peer.process->remote_base();
  const uint64_t s = reinterpret_cast<uint64_t>(src.data());
  std::vector<WriteBlock> blocks;
  uint64_t from = 0;
  for (uint64_t page : {7u, 2u, 12u, 3u}) {  // 16 KiB destination pages, shuffled
    for (uint64_t t = 0; t < 16; ++t) {
      blocks.push_back({s + from, base + (4 << 10) + page * 16384 + t * 1024 + 512, 512});
      from += 512;
    }
  }
  // 8 pieces of 1 KiB every 8 KiB from 232 KiB: pieces 4..7 are in the second region, and
  // the run's span covers the hole.
  for (uint64_t k = 0; k < 8; ++k) {
    blocks.push_back({s + from, base + (232 << 10) + k * 8192, 1024});
    from += 1024;
  }
  EXPECT_EQ(engine->transfer_sync(*session, blocks), 0);
  expect_image(peer, blocks, src.data(), s);

  // A run whose last piece crosses the end of the second region.
  fill_pattern(peer.buffer->data(), peer.buffer->size(), kCanarySeed);
  std::vector<WriteBlock> bad;
  for (uint64_t k = 0; k < 6; ++k) {
    bad.push_back({s + k * 4096, base + (500 << 10) + k * 4096, 4000});
  }
  auto batch = engine->submit(*session, bad);
  ASSERT_TRUE(batch.ok());
  auto st = engine->wait(*batch, kGenerous);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->state, BatchState::kFailed);
  EXPECT_EQ(st->error.code(), StatusCode::kOutOfRange) << st->error.to_string();
  EXPECT_NE(st->error.message().find("block 5"), std::string::npos) << st->error.message();
  (void)engine->release(*batch);
  EXPECT_EQ(first_pattern_mismatch(peer.buffer->data(), peer.buffer->size(), kCanarySeed),
            peer.buffer->size());
  EXPECT_TRUE(peer.process->ping().ok());
}

// Fencing (docs/SECURITY.md): a receiver that requires write grants admits a block only under a
// live grant that covers it. Blocks without a grant, under an unknown or revoked grant, or
// reaching past their grant are refused whole and write nothing; after a revoke the same
// bytes granted under a new id take the new writer's bytes and refuse the old one's.
TEST(EngineMultiProcess, WritesLandOnlyUnderALiveGrantThatCoversThem) {
  const std::vector<uint8_t> src = source_bytes(1 << 20);
  Peer peer = start_peer(320 << 10, {{4 << 10, 256 << 10}}, {"PDKV_PEER_REQUIRE_GRANTS=1"});
  const uint64_t kA = 0x1111222233334444;
  const uint64_t kB = 0x5555666677778888;
  const uint64_t kC = 0x9999aaaabbbbcccc;
  ASSERT_TRUE(peer.process->grant(kA, 4 << 10, 64 << 10).ok());
  ASSERT_TRUE(peer.process->grant(kB, 132 << 10, 64 << 10).ok());
  auto engine = make_engine(2);
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok());
  const uint64_t base = peer.process->remote_base();
  const uint64_t s = reinterpret_cast<uint64_t>(src.data());
  auto refused = [&](const std::vector<WriteBlock>& blocks, uint32_t bad_block) {
    auto batch = engine->submit(*session, blocks);
    ASSERT_TRUE(batch.ok());
    auto st = engine->wait(*batch, kGenerous);
    ASSERT_TRUE(st.ok());
    ASSERT_EQ(st->state, BatchState::kFailed);
    EXPECT_EQ(st->error.code(), StatusCode::kOutOfRange) << st->error.to_string();
    EXPECT_NE(st->error.message().find("block " + std::to_string(bad_block)), std::string::npos)
        << st->error.message();
    (void)engine->release(*batch);
    EXPECT_EQ(first_pattern_mismatch(peer.buffer->data(), peer.buffer->size(), kCanarySeed),
              peer.buffer->size());
  };
  {
    SCOPED_TRACE("no grant");
    refused({{s, base + (4 << 10), 4096, 0}}, 0);
  }
  {
    SCOPED_TRACE("grant A into B's bytes");
    refused({{s, base + (4 << 10), 4096, kA}, {s, base + (132 << 10), 4096, kA}}, 1);
  }
  {
    SCOPED_TRACE("unknown grant");
    refused({{s, base + (4 << 10), 4096, 0x42}}, 0);
  }
  {
    SCOPED_TRACE("strided run leaving grant A");
    std::vector<WriteBlock> run;
    for (uint64_t k = 0; k < 5; ++k)
      run.push_back({s + k * 512, base + (52 << 10) + k * 4096, 512, kA});
    refused(run, 4);
  }
  // Both grants in one batch (a batch mixes rooms): every byte lands where it should.
  std::vector<WriteBlock> both = {{s, base + (4 << 10), 64 << 10, kA},
                                  {s + (64 << 10), base + (132 << 10), 64 << 10, kB}};
  ASSERT_EQ(engine->transfer_sync(*session, both), 0);
  expect_image(peer, both, src.data(), s);

  // A revoked, its bytes re-granted under C: the old writer's late batch is refused, the
  // new one's lands, and the old one's bytes are not there.
  fill_pattern(peer.buffer->data(), peer.buffer->size(), kCanarySeed);
  ASSERT_TRUE(peer.process->revoke_grant(kA).ok());
  ASSERT_TRUE(peer.process->grant(kC, 4 << 10, 64 << 10).ok());
  {
    SCOPED_TRACE("late write under revoked grant A");
    refused({{s + (128 << 10), base + (4 << 10), 64 << 10, kA}}, 0);
  }
  std::vector<WriteBlock> fresh = {{s + (256 << 10), base + (4 << 10), 64 << 10, kC}};
  ASSERT_EQ(engine->transfer_sync(*session, fresh), 0);
  expect_image(peer, fresh, src.data(), s);
  EXPECT_EQ(peer.process->revoke_grant(kA).code(), StatusCode::kInternal);  // not live any more
  EXPECT_TRUE(peer.process->ping().ok());
}

TEST(EngineMultiProcess, KilledReceiverFailsBatchQuicklyAndOtherPeerStillWorks) {
  const size_t bytes = 256u << 20;
  const std::vector<uint8_t> src = source_bytes(bytes);
  const int io_timeout_ms = 3000;
  auto engine = make_engine(4, io_timeout_ms);
  Peer victim = start_peer(bytes, {{0, bytes}});
  auto session = engine->open_session(victim.process->endpoint());
  ASSERT_TRUE(session.ok());
  // Stopped first, so the batch is certainly mid-flight (256 MiB cannot fit in socket
  // buffers) when the kill lands.
  victim.process->send_signal(SIGSTOP);
  std::vector<WriteBlock> blocks = {
      {reinterpret_cast<uint64_t>(src.data()), victim.process->remote_base(), bytes}};
  auto batch = engine->submit(*session, blocks);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(engine->poll(*batch)->state, BatchState::kPending);
  const TimePoint killed = now();
  victim.process->send_signal(SIGKILL);
  auto st = engine->wait(*batch, kGenerous);
  const int64_t detect_ms = elapsed_ms(killed);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, BatchState::kFailed);
  EXPECT_EQ(st->error.code(), StatusCode::kUnavailable) << st->error.to_string();
  EXPECT_LE(detect_ms, io_timeout_ms) << "kill detected after " << detect_ms << " ms";
  (void)engine->release(*batch);
  // The broken session refuses new work at once.
  EXPECT_EQ(engine->submit(*session, blocks).status().code(), StatusCode::kUnavailable);

  Peer other = start_peer(bytes, {{0, bytes}});
  blocks[0].dst_addr = other.process->remote_base();
  EXPECT_EQ(engine->transfer_sync(other.process->endpoint(), blocks), 0);
  EXPECT_EQ(std::memcmp(other.buffer->data(), src.data(), bytes), 0);
}

// A receiver that is alive but silent (SIGSTOP: no EOF, no answer) fails a batch of
// `bytes` with DeadlineExceeded after io_timeout_ms, not later and not never.
void expect_silent_receiver_fails_in_time(size_t bytes, int streams) {
  std::vector<uint8_t> src(bytes, 7);
  const int io_timeout_ms = 500;
  auto engine = make_engine(streams, io_timeout_ms);
  Peer peer = start_peer(bytes, {{0, bytes}});
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok());
  // The streams are idle (their threads asleep with no work) when the silent peer gets it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  peer.process->send_signal(SIGSTOP);
  // A signal lands asynchronously: a small part would otherwise be applied first.
  int wstatus = 0;
  ASSERT_EQ(::waitpid(peer.process->pid(), &wstatus, WUNTRACED), peer.process->pid());
  ASSERT_TRUE(WIFSTOPPED(wstatus));
  std::vector<WriteBlock> blocks = {
      {reinterpret_cast<uint64_t>(src.data()), peer.process->remote_base(), bytes}};
  const TimePoint start = now();
  auto batch = engine->submit(*session, blocks);
  ASSERT_TRUE(batch.ok());
  auto st = engine->wait(*batch, kGenerous);
  const int64_t took = elapsed_ms(start);
  peer.process->send_signal(SIGCONT);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, BatchState::kFailed);
  EXPECT_EQ(st->error.code(), StatusCode::kDeadlineExceeded) << st->error.to_string();
  EXPECT_GE(took, io_timeout_ms);
  EXPECT_LE(took, 2 * io_timeout_ms + 20000);  // generous for a loaded 2-core machine
  (void)engine->release(*batch);
  EXPECT_TRUE(peer.process->ping().ok());  // the receiver itself lives on
}

TEST(EngineMultiProcess, SilentReceiverFailsBatchAfterIoTimeout) {
  expect_silent_receiver_fails_in_time(128u << 20, 2);
}

// A part this small is written by the submitting thread (TcpOptions::
// inline_write_max_bytes), so the stream's thread never saw it go out: it must still watch
// it and fail it when no ACK comes, not wait forever.
TEST(EngineMultiProcess, SilentReceiverFailsASmallInlineWrittenBatchAfterIoTimeout) {
  expect_silent_receiver_fails_in_time(4096, 1);
}

// Small batches from several threads on one stream per peer: inline writers race each
// other and the stream's thread (which writes whatever they leave and reads every ACK).
// Every batch succeeds and every byte lands where it belongs.
TEST(EngineMultiProcess, SmallBatchesFromManyThreadsOnOneStreamAllLand) {
  constexpr int kPeers = 2, kThreads = 4, kBatchesPerThread = 150;
  constexpr size_t kBlock = 2048, kBlocksPerBatch = 8;
  constexpr size_t kSlot = kBlock * kBlocksPerBatch;
  const size_t peer_bytes = kSlot * kThreads * kBatchesPerThread;
  const std::vector<uint8_t> src = source_bytes(peer_bytes);
  std::vector<Peer> peers;
  for (int p = 0; p < kPeers; ++p) peers.push_back(start_peer(peer_bytes, {{0, peer_bytes}}));
  auto engine = make_engine(1);
  std::vector<SessionId> sessions;
  for (auto& p : peers) sessions.push_back(engine->open_session(p.process->endpoint()).value());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<BatchId> ids;
      std::vector<WriteBlock> blocks;
      for (int b = 0; b < kBatchesPerThread; ++b) {
        const size_t slot = (size_t(t) * kBatchesPerThread + b) * kSlot;
        for (int p = 0; p < kPeers; ++p) {
          blocks.clear();
          for (size_t i = 0; i < kBlocksPerBatch; ++i) {
            // Reversed order: no two blocks coalesce, so each is its own entry.
            const size_t at = slot + (kBlocksPerBatch - 1 - i) * kBlock;
            blocks.push_back({reinterpret_cast<uint64_t>(src.data()) + at,
                              peers[p].process->remote_base() + at, kBlock});
          }
          auto id = engine->submit(sessions[p], blocks);
          if (id.ok()) {
            ids.push_back(*id);
          } else {
            ++failures;
          }
        }
        if (b % 16 == 15) {  // keep some in flight, and let the streams go idle now and then
          wait_all_succeeded(*engine, &ids, &failures);
        }
      }
      wait_all_succeeded(*engine, &ids, &failures);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (auto& p : peers) EXPECT_EQ(std::memcmp(p.buffer->data(), src.data(), peer_bytes), 0);
}

TEST(EngineMultiProcess, ConnectToClosedPortFailsFastWithClearError) {
  uint16_t port = 0;
  {
    auto fd = tcp::listen_tcp("127.0.0.1", 0, &port);
    ASSERT_TRUE(fd.ok());
  }  // closed again: nothing listens on `port` now
  auto engine = make_engine();
  const TimePoint start = now();
  auto session = engine->open_session("127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(session.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(session.status().message().find("refused"), std::string::npos)
      << session.status().message();
  EXPECT_LT(elapsed_ms(start), 2000);
  EXPECT_EQ(engine->open_session("no-port").status().code(), StatusCode::kInvalidArgument);
  std::vector<WriteBlock> one = {{1, 2, 3}};
  EXPECT_LT(engine->transfer_sync("127.0.0.1:" + std::to_string(port), one), 0);
}

TEST(EngineMultiProcess, ZeroLengthBatchAndEntries) {
  const std::vector<uint8_t> src = source_bytes(4096);
  Peer peer = start_peer(64 << 10, {{4096, 8192}});
  auto engine = make_engine();
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(engine->transfer_sync(*session, {}), 0);
  EXPECT_EQ(engine->transfer_sync(peer.process->endpoint(), {}), 0);
  auto empty = engine->submit(*session, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(engine->poll(*empty)->state, BatchState::kSucceeded);
  const uint64_t s = reinterpret_cast<uint64_t>(src.data());
  const uint64_t base = peer.process->remote_base();
  // A zero-length entry writes nothing, even with a destination outside every region.
  std::vector<WriteBlock> blocks = {{s, base + 4096, 0}, {s, base + 4096, 10}, {s, 12345, 0}};
  EXPECT_EQ(engine->transfer_sync(*session, blocks), 0);
  EXPECT_EQ(std::memcmp(peer.buffer->data() + 4096, src.data(), 10), 0);
  EXPECT_EQ(first_pattern_mismatch(peer.buffer->data() + 4106, 60000, kCanarySeed, 4106), 60000u);
}

TEST(EngineMultiProcess, OneGibibyteEntry) {
  const size_t bytes = size_t{1} << 30;
  std::unique_ptr<uint8_t[]> src(new (std::nothrow) uint8_t[bytes]);
  if (!src) GTEST_SKIP() << "cannot allocate 1 GiB";
  fill_pattern(src.get(), bytes, kSourceSeed);
  Peer peer = start_peer(bytes + 8192, {{4096, bytes}});
  auto engine = make_engine();
  std::vector<WriteBlock> blocks = {
      {reinterpret_cast<uint64_t>(src.get()), peer.process->remote_base() + 4096, bytes}};
  ASSERT_EQ(engine->transfer_sync(peer.process->endpoint(), blocks), 0);
  EXPECT_EQ(std::memcmp(peer.buffer->data() + 4096, src.get(), bytes), 0);
  EXPECT_EQ(first_pattern_mismatch(peer.buffer->data(), 4096, kCanarySeed), 4096u);
  EXPECT_EQ(
      first_pattern_mismatch(peer.buffer->data() + 4096 + bytes, 4096, kCanarySeed, 4096 + bytes),
      4096u);
}

TEST(EngineMultiProcess, ConcurrentBatchesFromThreadsToSeveralPeers) {
  constexpr int kPeers = 3, kThreads = 4, kBatchesPerThread = 6;
  constexpr size_t kSlot = 256 << 10;  // each (thread, batch) owns one slot per peer
  const size_t peer_bytes = kSlot * kThreads * kBatchesPerThread;
  const std::vector<uint8_t> src = source_bytes(peer_bytes);
  std::vector<Peer> peers;
  for (int p = 0; p < kPeers; ++p) peers.push_back(start_peer(peer_bytes, {{0, peer_bytes}}));
  auto engine = make_engine(2);
  std::vector<SessionId> sessions;
  for (auto& p : peers) sessions.push_back(engine->open_session(p.process->endpoint()).value());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<BatchId> ids;
      for (int b = 0; b < kBatchesPerThread; ++b) {
        for (int p = 0; p < kPeers; ++p) {
          const size_t slot = (size_t(t) * kBatchesPerThread + b) * kSlot;
          // 2 KiB pages to shuffled positions inside the slot.
          std::vector<size_t> order(kSlot / 2048);
          std::iota(order.begin(), order.end(), 0);
          std::shuffle(order.begin(), order.end(), rng);
          std::vector<WriteBlock> blocks;
          blocks.reserve(order.size());
          for (size_t i = 0; i < order.size(); ++i) {
            blocks.push_back({reinterpret_cast<uint64_t>(src.data()) + slot + order[i] * 2048,
                              peers[p].process->remote_base() + slot + order[i] * 2048, 2048});
          }
          auto id = engine->submit(sessions[p], blocks);
          if (!id.ok()) {
            ++failures;
            continue;
          }
          ids.push_back(*id);
        }
      }
      wait_all_succeeded(*engine, &ids, &failures);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (auto& p : peers) EXPECT_EQ(std::memcmp(p.buffer->data(), src.data(), peer_bytes), 0);
}

// A raw socket speaking garbage to the peer: that connection is dropped, the peer keeps
// serving engine sessions.
TEST(EngineMultiProcess, MalformedFramesDropTheConnectionButPeerKeepsServing) {
  const std::vector<uint8_t> src = source_bytes(64 << 10);
  Peer peer = start_peer(128 << 10, {{0, 128 << 10}});
  auto engine = make_engine(2);
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok());

  auto frame = [](uint8_t type, uint32_t count, uint64_t payload) {
    std::vector<uint8_t> f(tcp::kHeaderSize);
    tcp::FrameHeader h;
    h.type = static_cast<tcp::FrameType>(type);
    h.count = count;
    h.payload_bytes = payload;
    tcp::encode_header(h, f.data());
    return f;
  };
  std::vector<std::vector<uint8_t>> garbage;
  garbage.push_back(std::vector<uint8_t>(64, 0xAB));           // bad magic
  garbage.push_back(frame(3, 0xFFFFFFFF, UINT64_C(1) << 40));  // count over limit
  garbage.push_back(frame(9, 0, 0));                           // unknown type
  garbage.push_back(frame(4, 16, 0));                          // ACK sent to a receiver
  {
    auto f = frame(3, 2, 10);  // entries that do not sum to the payload
    f.resize(f.size() + 2 * tcp::kEntrySize);
    tcp::encode_entry({peer.process->remote_base(), 3, 1, 0}, f.data() + tcp::kHeaderSize);
    tcp::encode_entry({peer.process->remote_base(), 3, 1, 0},
                      f.data() + tcp::kHeaderSize + tcp::kEntrySize);
    garbage.push_back(f);
  }
  {
    auto f = frame(3, 1, 40);  // a run whose pieces overlap (stride < length)
    f.resize(f.size() + tcp::kEntrySize);
    tcp::encode_entry({peer.process->remote_base(), 10, 4, 5}, f.data() + tcp::kHeaderSize);
    garbage.push_back(f);
  }
  garbage.push_back(frame(3, 1, 100));  // truncated: header only, then close
  for (size_t g = 0; g < garbage.size(); ++g) {
    SCOPED_TRACE("garbage " + std::to_string(g));
    auto fd = tcp::connect_tcp(peer.process->endpoint(), 5000);
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(tcp::write_full(fd->get(), garbage[g].data(), garbage[g].size(), -1, 5000).ok());
    if (g + 1 == garbage.size()) {
      fd->reset();  // the truncated case: the peer sees EOF mid-frame
    } else {
      uint8_t byte;
      Status st = tcp::read_full(fd->get(), &byte, 1, -1, 30000, 30000);
      EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();  // closed by the peer
    }
  }
  EXPECT_TRUE(peer.process->ping().ok());
  std::vector<WriteBlock> blocks = {
      {reinterpret_cast<uint64_t>(src.data()), peer.process->remote_base() + 100, src.size()}};
  EXPECT_EQ(engine->transfer_sync(*session, blocks), 0);
  EXPECT_EQ(std::memcmp(peer.buffer->data() + 100, src.data(), src.size()), 0);
  EXPECT_EQ(first_pattern_mismatch(peer.buffer->data(), 100, kCanarySeed), 100u);
}

}  // namespace
}  // namespace pdkv::engine

// Device memory over the tcp backend, across processes, on the fake CUDA driver
// (engine/device/fake/): this process sends, a pdkv_engine_peer receives. The fake's
// device memory is PROT_NONE to the CPU, so any path that touched it with the CPU (a
// socket send, a memcpy, a checksum) would fault or fail with EFAULT instead of passing;
// its poison mode fills a pinned copy destination with 0xA5 until the copy lands, so a
// send that did not wait for its copy is a byte mismatch. Bytes are checked exactly.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "engine/device/device_driver.h"
#include "engine/device/device_health.h"
#include "engine/device/device_regions.h"
#include "engine/testing/device_memory.h"
#include "engine/testing/engine_peer_process.h"
#include "engine/testing/guarded_buffer.h"
#include "engine/transfer_engine.h"

namespace pdkv::engine {
namespace {

// Before anything loads a driver: this process and its peers use the fake, unless
// PDKV_TEST_CUDA_LIBRARY names another driver (scripts/gpu_check.sh: the real one).
const char* const kDriverPath = [] {
  const char* real = std::getenv("PDKV_TEST_CUDA_LIBRARY");
  const char* path = real != nullptr && *real != '\0' ? real : PDKV_FAKE_CUDA_PATH;
  setenv("PDKV_CUDA_LIBRARY", path, 1);
  return path;
}();
bool on_fake_driver() { return std::strcmp(kDriverPath, PDKV_FAKE_CUDA_PATH) == 0; }

using testing::DeviceBuffer;
using testing::EnginePeerProcess;
using testing::GuardedBuffer;
using testing::PeerRegion;

constexpr size_t kBytes = 8u << 20;
constexpr auto kWait = std::chrono::seconds(60);

std::unique_ptr<TransferEngine> make_engine(const std::string& backend = "tcp") {
  EngineOptions o;
  o.backend = backend;
  o.tcp.streams = 2;
  o.tcp.min_split_bytes = 256 * 1024;
  o.tcp.device_slab_bytes = 256 * 1024;  // many slabs per batch: the ring turns over
  auto e = TransferEngine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

// Blocks in three shapes, all inside [0, kBytes) on both sides: big contiguous blocks,
// head-split runs (512 B pieces every 1 KiB, as heterogeneous TP slices a page) and small
// scattered blocks. Applies them to `model` (indexed like the destination).
std::vector<WriteBlock> mixed_blocks(uint64_t src, uint64_t dst, const std::vector<uint8_t>& from,
                                     std::vector<uint8_t>* model) {
  std::vector<WriteBlock> blocks;
  auto add = [&](uint64_t s, uint64_t d, uint64_t n) {
    blocks.push_back(WriteBlock{src + s, dst + d, n});
    std::memcpy(model->data() + d, from.data() + s, n);
  };
  for (uint64_t i = 0; i < 3; ++i) add(i * (1u << 20), (3 - i) * (1u << 20), 1u << 20);
  for (uint64_t i = 0; i < 1024; ++i) add((4u << 20) + i * 1024, (5u << 20) + i * 1024, 512);
  for (uint64_t i = 0; i < 64; ++i)
    add((7u << 20) + i * 4096 + 8, (7u << 20) + i * 4096 + 100, 700);
  return blocks;
}

struct Peer {
  std::unique_ptr<GuardedBuffer> shared;
  std::unique_ptr<EnginePeerProcess> process;
};

// A receiving peer whose region is device memory (device >= 0) or host memory.
Peer start_peer(int device, std::vector<std::string> env = {}) {
  Peer p;
  auto shared = GuardedBuffer::create(kBytes);
  EXPECT_TRUE(shared.ok());
  p.shared = std::move(*shared);
  std::memset(p.shared->data(), 0, kBytes);
  if (device >= 0) env.push_back("PDKV_PEER_DEVICE=" + std::to_string(device));
  env.push_back(std::string("PDKV_CUDA_LIBRARY=") + kDriverPath);
  env.push_back("PDKV_TCP_DEVICE_SLAB_BYTES=262144");  // the receiver's ring turns over too
  auto process = EnginePeerProcess::start(*p.shared, {PeerRegion{0, kBytes}}, env);
  EXPECT_TRUE(process.ok()) << process.status().to_string();
  p.process = std::move(*process);
  if (device >= 0) {
    EXPECT_TRUE(p.process->device_upload().ok());  // zeroes, like host
  }
  return p;
}

// The peer's destination bytes, wherever they live.
const uint8_t* peer_bytes(Peer& p, bool device) {
  if (device) {
    EXPECT_TRUE(p.process->device_download().ok());
  }
  return p.shared->data();
}

Status send(TransferEngine& engine, const std::string& endpoint, std::span<const WriteBlock> b) {
  auto session = engine.open_session(endpoint);
  if (!session.ok()) return session.status();
  Status st = engine.transfer(*session, b);
  (void)engine.close_session(*session);
  return st;
}

class DeviceTransfer : public ::testing::TestWithParam<std::pair<bool, bool>> {};

// Every pairing: host->device, device->host, device->device (host->host is the rest of
// the suite), with the fake's copies delayed and its pinned destinations poisoned.
TEST_P(DeviceTransfer, MixedBlocksLandExactly) {
  const auto [src_device, dst_device] = GetParam();
  ASSERT_NE(device_driver(), nullptr) << device_driver_absent_reason();
  // On the fake: copies delayed and pinned destinations poisoned (a real GPU has neither).
  EXPECT_EQ(testing::fake_device_set_poison(true), on_fake_driver());
  testing::fake_device_set_copy_delay_us(200);
  Peer peer =
      start_peer(dst_device ? 0 : -1, {"PDKV_FAKE_CUDA_POISON=1", "PDKV_FAKE_CUDA_DELAY_US=200"});
  auto engine = make_engine();
  const std::vector<uint8_t> source = random_bytes(kBytes, 11);
  std::unique_ptr<DeviceBuffer> device_source;
  uint64_t src = reinterpret_cast<uint64_t>(source.data());
  if (src_device) {
    auto buffer = DeviceBuffer::allocate(0, kBytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
    device_source = std::move(*buffer);
    ASSERT_TRUE(device_source->upload(0, source.data(), kBytes).ok());
    src = device_source->addr();
    ASSERT_TRUE(
        engine->register_memory(src, kBytes, MemoryAccess::kLocalReadOnly, MemoryKind::kAuto).ok());
    EXPECT_EQ(engine->device_regions().device_of(src, kBytes), 0);
  }
  std::vector<uint8_t> model(kBytes, 0);
  const auto blocks = mixed_blocks(src, peer.process->remote_base(), source, &model);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(send(*engine, peer.process->endpoint(), blocks).ok());
  }
  const uint8_t* landed = peer_bytes(peer, dst_device);
  for (size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(landed[i], model[i]) << "first wrong byte at offset " << i;
  }
  testing::fake_device_set_poison(false);
  testing::fake_device_set_copy_delay_us(0);
  // Only the registered device ever had a context (no implicit device 0 elsewhere).
  if (on_fake_driver()) {
    EXPECT_EQ(testing::fake_device_context_created(1), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, DeviceTransfer,
                         ::testing::Values(std::make_pair(false, true), std::make_pair(true, false),
                                           std::make_pair(true, true)),
                         [](const auto& info) {
                           return std::string(info.param.first ? "Device" : "Host") + "To" +
                                  (info.param.second ? "Device" : "Host");
                         });

// A head-split run (1,024 pieces of 512 B) is one strided driver call per slab, not one
// per piece.
TEST(DeviceStaging, StridedRunsAreFewDriverCalls) {
  if (!on_fake_driver()) GTEST_SKIP() << "counts the fake driver's calls";
  Peer peer = start_peer(-1);
  auto engine = make_engine();
  auto buffer = DeviceBuffer::allocate(0, kBytes);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE((*buffer)->upload(0, random_bytes(kBytes, 3).data(), kBytes).ok());
  ASSERT_TRUE(engine
                  ->register_memory((*buffer)->addr(), kBytes, MemoryAccess::kLocalReadOnly,
                                    MemoryKind::kCuda)
                  .ok());
  std::vector<WriteBlock> blocks;
  for (uint64_t i = 0; i < 1024; ++i) {
    blocks.push_back(
        WriteBlock{(*buffer)->addr() + i * 1024, peer.process->remote_base() + i * 1024, 512});
  }
  const long before = testing::fake_device_copy_count();
  ASSERT_TRUE(send(*engine, peer.process->endpoint(), blocks).ok());
  const long calls = testing::fake_device_copy_count() - before;
  EXPECT_GT(calls, 0);
  EXPECT_LE(calls, 8) << "512 KiB in 256 KiB slabs over 2 streams: a few strided copies";
}

// Scattered pages (page size 1: 512 B pieces in shuffled order on both sides, nothing for
// the planner to fold into strided runs) go out as batched copies, a few per slab, not one
// driver call per piece, and land exactly (the receiver lands its slabs the same way).
TEST(DeviceStaging, ScatteredPiecesAreBatchedCopies) {
  if (!on_fake_driver()) GTEST_SKIP() << "counts the fake driver's calls";
  Peer peer = start_peer(0);
  auto engine = make_engine();
  auto buffer = DeviceBuffer::allocate(0, kBytes);
  ASSERT_TRUE(buffer.ok());
  const std::vector<uint8_t> source = random_bytes(kBytes, 5);
  ASSERT_TRUE((*buffer)->upload(0, source.data(), kBytes).ok());
  ASSERT_TRUE(engine
                  ->register_memory((*buffer)->addr(), kBytes, MemoryAccess::kLocalReadOnly,
                                    MemoryKind::kCuda)
                  .ok());
  constexpr uint64_t kPiece = 512, kPieces = 2048;
  std::vector<uint64_t> from(kPieces), to(kPieces);
  std::iota(from.begin(), from.end(), 0);
  std::iota(to.begin(), to.end(), 0);
  std::mt19937_64 rng(9);
  std::shuffle(from.begin(), from.end(), rng);
  std::shuffle(to.begin(), to.end(), rng);
  std::vector<WriteBlock> blocks;
  std::vector<uint8_t> model(kBytes, 0);
  for (uint64_t i = 0; i < kPieces; ++i) {
    // Every other slot, so no two pieces are adjacent on either side.
    const uint64_t src = 2 * from[i] * kPiece, dst = 2 * to[i] * kPiece;
    blocks.push_back(
        WriteBlock{(*buffer)->addr() + src, peer.process->remote_base() + dst, kPiece});
    std::memcpy(model.data() + dst, source.data() + src, kPiece);
  }
  testing::fake_device_set_poison(true);
  testing::fake_device_set_copy_delay_us(200);
  const long before = testing::fake_device_copy_count();
  Status st = send(*engine, peer.process->endpoint(), blocks);
  const long calls = testing::fake_device_copy_count() - before;
  testing::fake_device_set_poison(false);
  testing::fake_device_set_copy_delay_us(0);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_GT(calls, 0);
  EXPECT_LE(calls, 16) << "1 MiB of 512 B pieces in 256 KiB slabs: a batched copy per slab";
  const uint8_t* landed = peer_bytes(peer, true);
  for (size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(landed[i], model[i]) << "first wrong byte at offset " << i;
  }
}

// The planner folds equally spaced blocks into one strided run whatever buffer they are
// in: blocks alternating between two device allocations become runs whose pieces lie in
// different allocations, which a single strided copy must not span (the fake, like the
// driver, refuses a copy that leaves its allocation). They are copied piece by piece.
TEST(DeviceStaging, RunsAcrossTwoAllocationsLandExactly) {
  Peer peer = start_peer(-1);
  auto engine = make_engine();
  constexpr size_t kHalf = kBytes / 2;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<std::vector<uint8_t>> sources;
  for (int b = 0; b < 2; ++b) {
    auto buffer = DeviceBuffer::allocate(0, kHalf);
    ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
    sources.push_back(random_bytes(kHalf, 40 + b));
    ASSERT_TRUE((*buffer)->upload(0, sources.back().data(), kHalf).ok());
    ASSERT_TRUE(engine
                    ->register_memory((*buffer)->addr(), kHalf, MemoryAccess::kLocalReadOnly,
                                      MemoryKind::kCuda)
                    .ok());
    buffers.push_back(std::move(*buffer));
  }
  // Page i of buffer 0, then page i of buffer 1 (K then V of one page), for 64 pages.
  std::vector<WriteBlock> blocks;
  std::vector<uint8_t> model(kBytes, 0);
  constexpr uint64_t kPage = 2048;
  for (uint64_t i = 0; i < 64; ++i) {
    for (uint64_t b = 0; b < 2; ++b) {
      const uint64_t dst = (2 * i + b) * kPage;
      blocks.push_back(
          WriteBlock{buffers[b]->addr() + i * 3 * kPage, peer.process->remote_base() + dst, kPage});
      std::memcpy(model.data() + dst, sources[b].data() + i * 3 * kPage, kPage);
    }
  }
  Status st = send(*engine, peer.process->endpoint(), blocks);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const uint8_t* landed = peer_bytes(peer, false);
  for (size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(landed[i], model[i]) << "first wrong byte at offset " << i;
  }
}

// The child of ASenderStickyErrorEndsTheDevicePathButNotHostMemory: 0 when all held.
int sender_fault_child() {
  bool ok = true;
  auto check = [&ok](bool cond, const std::string& what) {
    if (!cond) std::fprintf(stderr, "failed: %s\n", what.c_str());
    ok = ok && cond;
  };
  Peer peer = start_peer(-1);
  auto engine = make_engine();
  auto buffer = DeviceBuffer::allocate(0, kBytes);
  check(buffer.ok(), "allocate");
  const auto source = random_bytes(kBytes, 5);
  check((*buffer)->upload(0, source.data(), kBytes).ok(), "upload");
  check(engine->register_memory((*buffer)->addr(), kBytes, MemoryAccess::kLocalReadOnly).ok(),
        "register device");
  const auto host = random_bytes(1u << 20, 6);
  const uint64_t host_addr = reinterpret_cast<uint64_t>(host.data());
  check(engine->register_memory(host_addr, host.size(), MemoryAccess::kLocalReadOnly).ok(),
        "register host");
  const WriteBlock device_block{(*buffer)->addr(), peer.process->remote_base(), 1u << 20};
  const WriteBlock host_block{host_addr, peer.process->remote_base() + (2u << 20), host.size()};
  auto session = engine->open_session(peer.process->endpoint());
  check(session.ok(), "session");
  check(device_healthy(), "healthy before");
  check(testing::fake_device_fail_copy_after(1), "inject");
  Status failed = engine->transfer(*session, std::span(&device_block, 1));
  check(!failed.ok(), "the faulted batch fails");
  check(failed.message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos &&
            failed.message().find("an illegal memory access was encountered") != std::string::npos,
        "name and description in: " + failed.to_string());
  check(!device_healthy(), "unhealthy after");
  check(device_fault().message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos,
        "the fault: " + device_fault().to_string());
  // No re-staging on a fresh stream can help: the next device batch fails at once.
  const auto start = std::chrono::steady_clock::now();
  Status again = engine->transfer(*session, std::span(&device_block, 1));
  check(!again.ok() && again.message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos,
        "the next device batch fails with the same cause: " + again.to_string());
  check(std::chrono::steady_clock::now() - start < std::chrono::seconds(5), "at once");
  // Host memory still moves, on the same session.
  check(engine->transfer(*session, std::span(&host_block, 1)).ok(), "host batch");
  check(std::memcmp(peer.shared->data() + (2u << 20), host.data(), host.size()) == 0,
        "host bytes landed");
  return ok ? 0 : 1;
}

// A sticky driver error on the sender (an illegal address fails the whole CUDA context,
// as on a GPU) ends this process's device path for good: the batch that met it fails with
// the error's name and description, the process reports itself unhealthy, every later
// batch reading device memory fails at once with the same cause, and host memory still
// moves. Runs in a child process of its own: the fault would end the device path of every
// later test in this one.
TEST(DeviceFault, ASenderStickyErrorEndsTheDevicePathButNotHostMemory) {
  if (!on_fake_driver()) GTEST_SKIP() << "injects a fake driver error";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(sender_fault_child()), ::testing::ExitedWithCode(0), "");
}

// A sticky error on the receiver ends its device path: the batch that met it and every
// later one into its device memory fail (the ACK carries the driver's error), in bounded
// time, on a connection that stays in step. The sender's own device path is untouched.
TEST(DeviceFault, AReceiverStickyErrorFailsEveryLaterBatchIntoItsDeviceMemory) {
  if (!on_fake_driver()) GTEST_SKIP() << "injects a fake driver error";
  Peer peer = start_peer(0, {"PDKV_FAKE_CUDA_FAIL_COPY_AFTER=1"});
  auto engine = make_engine();
  const auto source = random_bytes(1u << 20, 9);
  const WriteBlock block{reinterpret_cast<uint64_t>(source.data()), peer.process->remote_base(),
                         source.size()};
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok());
  for (int i = 0; i < 3; ++i) {
    Status failed = engine->transfer(*session, std::span(&block, 1));
    EXPECT_FALSE(failed.ok()) << "batch " << i;
    EXPECT_NE(failed.message().find("CUDA device 0"), std::string::npos) << failed.to_string();
    EXPECT_NE(failed.message().find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos)
        << failed.to_string();
  }
  EXPECT_TRUE(device_healthy());
}

// Waits on the device path sleep: every event pdkv makes is blocking-sync, and pdkv never
// calls cuStreamSynchronize (which polls a core) on a transfer, so a device-source
// transfer with slow copies costs this process no spinning wait.
TEST(DeviceStaging, WaitsForCopiesSleepInsteadOfSpinning) {
  if (!on_fake_driver()) GTEST_SKIP() << "counts the fake driver's waits";
  Peer peer = start_peer(-1);
  auto engine = make_engine();
  auto buffer = DeviceBuffer::allocate(0, kBytes);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE((*buffer)->upload(0, random_bytes(kBytes, 4).data(), kBytes).ok());
  ASSERT_TRUE(
      engine->register_memory((*buffer)->addr(), kBytes, MemoryAccess::kLocalReadOnly).ok());
  testing::fake_device_set_copy_delay_us(2000);
  const long spins = testing::fake_device_spin_waits();
  const WriteBlock block{(*buffer)->addr(), peer.process->remote_base(), kBytes};
  ASSERT_TRUE(send(*engine, peer.process->endpoint(), std::span(&block, 1)).ok());
  testing::fake_device_set_copy_delay_us(0);
  EXPECT_EQ(testing::fake_device_spin_waits() - spins, 0);
}

// The child of StridesAboveTheMaxPitchAreSplit: 0 when the bytes landed.
int max_pitch_child() {
  setenv("PDKV_FAKE_CUDA_MAX_PITCH", "4096", 1);
  bool ok = true;
  Peer peer = start_peer(-1);
  auto engine = make_engine();
  auto buffer = DeviceBuffer::allocate(0, kBytes);
  const auto source = random_bytes(kBytes, 12);
  ok = ok && buffer.ok() && (*buffer)->upload(0, source.data(), kBytes).ok();
  ok = ok && engine->register_memory((*buffer)->addr(), kBytes, MemoryAccess::kLocalReadOnly).ok();
  std::vector<WriteBlock> blocks;
  std::vector<uint8_t> model(kBytes, 0);
  for (uint64_t i = 0; i < 512; ++i) {  // 512 B every 8 KiB: pitch 8192 > 4096
    blocks.push_back(
        WriteBlock{(*buffer)->addr() + i * 8192, peer.process->remote_base() + i * 8192, 512});
    std::memcpy(model.data() + i * 8192, source.data() + i * 8192, 512);
  }
  Status sent = send(*engine, peer.process->endpoint(), blocks);
  if (!sent.ok()) std::fprintf(stderr, "send: %s\n", sent.to_string().c_str());
  ok = ok && sent.ok() && std::memcmp(peer.shared->data(), model.data(), kBytes) == 0;
  return ok ? 0 : 1;
}

// A head-split run whose stride exceeds the device's CU_DEVICE_ATTRIBUTE_MAX_PITCH cannot
// be one 2-D copy (the driver refuses it): pdkv splits it into one batched copy of rows,
// and the bytes land exactly. The limit is read when the driver loads, so the sender
// runs in a child process started with it.
TEST(DeviceStaging, StridesAboveTheMaxPitchAreSplit) {
  if (!on_fake_driver()) GTEST_SKIP() << "sets the fake driver's max pitch";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(max_pitch_child()), ::testing::ExitedWithCode(0), "");
}

// A peer killed while device-staged batches are in flight fails them in bounded time; a
// new session to another peer works.
TEST(DeviceStaging, KilledReceiverFailsInFlightBatches) {
  Peer doomed = start_peer(0, {"PDKV_FAKE_CUDA_DELAY_US=2000"});
  auto engine = make_engine();
  auto buffer = DeviceBuffer::allocate(0, kBytes);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(
      engine->register_memory((*buffer)->addr(), kBytes, MemoryAccess::kLocalReadOnly).ok());
  auto session = engine->open_session(doomed.process->endpoint());
  ASSERT_TRUE(session.ok());
  const WriteBlock block{(*buffer)->addr(), doomed.process->remote_base(), kBytes};
  std::vector<BatchId> ids;
  for (int i = 0; i < 4; ++i) {
    auto id = engine->submit(*session, std::span(&block, 1));
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  doomed.process->send_signal(SIGKILL);
  for (BatchId id : ids) {
    auto st = engine->wait(id, kWait);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->state, BatchState::kFailed);
  }
  Peer fresh = start_peer(0);
  const WriteBlock again{(*buffer)->addr(), fresh.process->remote_base(), kBytes};
  ASSERT_TRUE(send(*engine, fresh.process->endpoint(), std::span(&again, 1)).ok());
}

// A source written by a device stream (as a forward pass writes the KV cache) and sent
// naming only that stream: pdkv's copies wait for it on the device, so the new bytes go
// out. Unnamed, the same send races the write (the fake delays it), which is what the
// naming is for.
TEST(DeviceOrdering, ASourceWrittenOnASideStreamIsSentAfterIt) {
  DeviceDriver* driver = device_driver();
  ASSERT_NE(driver, nullptr);
  Peer peer = start_peer(-1);
  auto engine = make_engine();
  const size_t n = 1u << 20;
  auto buffer = DeviceBuffer::allocate(0, n);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(engine->register_memory((*buffer)->addr(), n, MemoryAccess::kLocalReadOnly).ok());
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(driver->bind_thread(0).ok());
  auto stream = driver->create_stream();
  ASSERT_TRUE(stream.ok());
  const WriteBlock block{(*buffer)->addr(), peer.process->remote_base(), n};
  auto write_then_send = [&](uint64_t seed, bool name_stream) {
    const std::vector<uint8_t> stale(n, 0x11);
    EXPECT_TRUE((*buffer)->upload(0, stale.data(), n).ok());
    static std::vector<uint8_t> fresh;  // read by the fake's stream thread later
    fresh = random_bytes(n, seed);
    EXPECT_TRUE(driver->bind_thread(0).ok());
    // The "forward pass": 50 ms of work on the side stream, then the write.
    EXPECT_TRUE(driver
                    ->call_when_done(
                        *stream,
                        [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); },
                        nullptr)
                    .ok());
    EXPECT_TRUE(driver->copy_to_device(*stream, (*buffer)->addr(), fresh.data(), n).ok());
    const SourceReady ready = name_stream ? SourceReady{*stream, 0, {}} : SourceReady{};
    EXPECT_TRUE(engine->transfer(*session, std::span(&block, 1), ready).ok());
    EXPECT_TRUE(driver->sync_stream(*stream).ok());
    return std::memcmp(peer.shared->data(), fresh.data(), n) == 0;
  };
  EXPECT_TRUE(write_then_send(21, /*name_stream=*/true));
  if (on_fake_driver()) {
    EXPECT_FALSE(write_then_send(22, /*name_stream=*/false)) << "the unordered send raced";
  }
  driver->destroy_stream(*stream);
}

// --- registration ---------------------------------------------------------------------

TEST(DeviceRegistration, EachMistakeGetsItsOwnClearError) {
  auto engine = make_engine();
  std::vector<uint8_t> host(1 << 16);
  const auto host_addr = reinterpret_cast<uint64_t>(host.data());
  Status st = engine->register_memory(host_addr, host.size(), MemoryAccess::kPeerWritable,
                                      MemoryKind::kCuda);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("reports host memory"), std::string::npos) << st.to_string();

  auto managed = DeviceBuffer::allocate(0, 1 << 20, /*managed=*/true);
  ASSERT_TRUE(managed.ok());
  st = engine->register_memory((*managed)->addr(), 1 << 20);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("managed"), std::string::npos) << st.to_string();

  auto device = DeviceBuffer::allocate(0, 1 << 20);
  ASSERT_TRUE(device.ok());
  st = engine->register_memory((*device)->addr(), (2 << 20), MemoryAccess::kPeerWritable,
                               MemoryKind::kCuda);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("runs past the end of its CUDA memory"), std::string::npos)
      << st.to_string();

  st = engine->register_memory((*device)->addr(), 1 << 20, MemoryAccess::kPeerWritable,
                               MemoryKind::kHost);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("CUDA device memory"), std::string::npos) << st.to_string();

  st = engine->register_memory((*device)->addr(), 1 << 20, MemoryAccess::kPeerWritable,
                               MemoryKind::kCuda, /*device=*/1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);

  auto shm = make_engine("shm");
  st = shm->register_memory((*device)->addr(), 1 << 20);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("backend 'shm'"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("tcp"), std::string::npos) << st.to_string();

  // UCX moves device memory only when it was built with CUDA (Debian's is not): it says
  // so, instead of accepting a registration that would read device memory as host.
  EngineOptions ucx_options;
  ucx_options.backend = "ucx";
  if (auto ucx = TransferEngine::create(ucx_options); ucx.ok()) {
    st = (*ucx)->register_memory((*device)->addr(), 1 << 20);
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(st.message().find("backend 'ucx'"), std::string::npos) << st.to_string();
    }
  }

  // Auto finds it is device memory; unregistering forgets it.
  ASSERT_TRUE(engine->register_memory((*device)->addr(), 1 << 20).ok());
  EXPECT_EQ(engine->device_regions().device_of((*device)->addr(), 4096), 0);
  ASSERT_TRUE(engine->unregister_memory((*device)->addr()).ok());
  EXPECT_EQ(engine->device_regions().device_of((*device)->addr(), 4096), DeviceRegions::kHost);
}

// A tensor in memory mapped piece by piece (PyTorch's expandable segments, any cuMemMap
// allocator): cuMemGetAddressRange gives one piece, so registration walks the pieces; a
// range spanning three is accepted as one device region and its bytes move exactly,
// copies running across the pieces' edges. A range running past the last piece is refused.
TEST(DeviceRegistration, ARangeSpanningSeveralMappedPiecesIsAccepted) {
  const size_t piece = 2u << 20;
  auto buffer = DeviceBuffer::allocate_mapped_pieces(0, piece, 3);
  if (!buffer.ok() && !on_fake_driver()) GTEST_SKIP() << buffer.status().to_string();
  ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
  const uint64_t base = (*buffer)->addr();
  auto engine = make_engine();
  Status past = engine->register_memory(base + piece, 3 * piece, MemoryAccess::kLocalReadOnly,
                                        MemoryKind::kCuda);
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("runs past the end of its CUDA memory"), std::string::npos)
      << past.to_string();
  const uint64_t start = base + 4096;  // inside piece 0, ending inside piece 2
  const uint64_t length = 2 * piece + 8192;
  ASSERT_TRUE(engine->register_memory(start, length, MemoryAccess::kLocalReadOnly).ok());
  EXPECT_EQ(engine->device_regions().device_of(start, length), 0);
  const auto source = random_bytes(3 * piece, 31);
  ASSERT_TRUE((*buffer)->upload(0, source.data(), 3 * piece).ok());
  Peer peer = start_peer(-1);
  // One contiguous run across both edges, and a head-split run across the first edge.
  std::vector<WriteBlock> blocks = {{start, peer.process->remote_base(), kBytes / 2}};
  std::vector<uint8_t> model(kBytes, 0);
  std::memcpy(model.data(), source.data() + 4096, kBytes / 2);
  for (uint64_t i = 0; i < 256; ++i) {
    const uint64_t from = piece - 128 * 1024 + i * 1024;
    const uint64_t to = kBytes / 2 + i * 1024;
    blocks.push_back(WriteBlock{base + from, peer.process->remote_base() + to, 512});
    std::memcpy(model.data() + to, source.data() + from, 512);
  }
  ASSERT_TRUE(send(*engine, peer.process->endpoint(), blocks).ok());
  EXPECT_EQ(std::memcmp(peer.shared->data(), model.data(), kBytes), 0);
}

}  // namespace
}  // namespace pdkv::engine

// The cuda_ipc backend across real processes on the fake CUDA driver: this process writes,
// a pdkv_engine_peer receives into device memory it allocated (cuMemAlloc: legacy IPC
// handles; or cuMemCreate: POSIX file-descriptor handles passed with SCM_RIGHTS). The
// fake's handles really cross processes (/proc/<pid>/fd, SCM_RIGHTS) and its device
// memory is PROT_NONE to the CPU, so bytes can only have landed through mapped handles
// and device-to-device copies. Every byte is checked; driver copies are counted.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/backends/cuda_ipc/cuda_ipc_backend.h"
#include "engine/backends/cuda_ipc/fd_channel.h"
#include "engine/backends/cuda_ipc/handle_wire.h"
#include "engine/backends/cuda_ipc/ipc_writer.h"
#include "engine/conformance/backend_harness.h"
#include "engine/device/device_driver.h"
#include "engine/testing/device_memory.h"
#include "engine/testing/engine_peer_process.h"
#include "engine/testing/guarded_buffer.h"
#include "engine/transfer_engine.h"

namespace pdkv::engine {
namespace {

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

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

struct Peer {
  std::unique_ptr<GuardedBuffer> shared;
  std::unique_ptr<EnginePeerProcess> process;
};

Peer start_peer(bool vmm, std::vector<std::string> env = {}, int device = 0) {
  Peer p;
  auto shared = GuardedBuffer::create(kBytes);
  EXPECT_TRUE(shared.ok());
  p.shared = std::move(*shared);
  std::memset(p.shared->data(), 0, kBytes);
  env.push_back("PDKV_ENGINE_BACKEND=cuda_ipc");
  env.push_back("PDKV_PEER_DEVICE=" + std::to_string(device));
  if (vmm) env.push_back("PDKV_PEER_DEVICE_VMM=1");
  env.push_back(std::string("PDKV_CUDA_LIBRARY=") + kDriverPath);
  auto process = EnginePeerProcess::start(*p.shared, {PeerRegion{0, kBytes}}, env);
  EXPECT_TRUE(process.ok()) << process.status().to_string();
  if (process.ok()) {
    p.process = std::move(*process);
    EXPECT_TRUE(p.process->device_upload().ok());  // zeroes
  }
  return p;
}

std::unique_ptr<TransferEngine> make_engine(std::shared_ptr<const ClusterKey> key = nullptr) {
  EngineOptions o;
  o.backend = "cuda_ipc";
  o.cluster_key = std::move(key);
  auto e = TransferEngine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

// The device source: random bytes in device memory of device 0, registered read-only.
struct Source {
  std::vector<uint8_t> bytes;
  std::unique_ptr<DeviceBuffer> device;
};
Source make_source(TransferEngine& engine, uint64_t seed) {
  Source s;
  s.bytes = random_bytes(kBytes, seed);
  auto buffer = DeviceBuffer::allocate(0, kBytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status().to_string();
  s.device = std::move(*buffer);
  EXPECT_TRUE(s.device->upload(0, s.bytes.data(), kBytes).ok());
  EXPECT_TRUE(engine
                  .register_memory(s.device->addr(), kBytes, MemoryAccess::kLocalReadOnly,
                                   MemoryKind::kCuda)
                  .ok());
  return s;
}

enum class Shape { kPage16, kPage1, kHeadSplit };

// The blocks of one shape (offsets inside [0, kBytes) on both sides), applied to `model`.
std::vector<WriteBlock> shape_blocks(Shape shape, uint64_t src, uint64_t dst,
                                     const std::vector<uint8_t>& from,
                                     std::vector<uint8_t>* model) {
  std::vector<WriteBlock> blocks;
  auto add = [&](uint64_t s, uint64_t d, uint64_t n) {
    blocks.push_back(WriteBlock{src + s, dst + d, n});
    std::memcpy(model->data() + d, from.data() + s, n);
  };
  std::mt19937_64 rng(7);
  if (shape == Shape::kPage16 || shape == Shape::kPage1) {
    // Pages of 16 tokens x 2 KiB (32 KiB) or one token (2 KiB), destinations shuffled.
    const uint64_t page = shape == Shape::kPage16 ? 32768 : 2048;
    const uint64_t pages = (kBytes / 2) / page;
    std::vector<uint64_t> slots(pages);
    for (uint64_t i = 0; i < pages; ++i) slots[i] = i;
    std::shuffle(slots.begin(), slots.end(), rng);
    for (uint64_t i = 0; i < pages; ++i) add(i * page, slots[i] * page, page);
  } else {
    // Decode TP 2 from prefill TP 1: each token's half of the heads (1 KiB of 2 KiB) lands
    // packed in the decode's page: 1,024 pieces, source pitch 2 KiB, destination 1 KiB.
    for (uint64_t i = 0; i < 1024; ++i) add(i * 2048, (1u << 20) + i * 1024, 1024);
  }
  return blocks;
}

class CudaIpcBytes : public ::testing::TestWithParam<std::tuple<bool, Shape>> {};

TEST_P(CudaIpcBytes, LandExactlyAcrossProcesses) {
  const auto [vmm, shape] = GetParam();
  ASSERT_NE(device_driver(), nullptr) << device_driver_absent_reason();
  Peer peer = start_peer(vmm, {"PDKV_FAKE_CUDA_DELAY_US=100"});
  ASSERT_NE(peer.process, nullptr);
  testing::fake_device_set_copy_delay_us(100);  // copies land late: completion must wait
  auto engine = make_engine();
  ASSERT_NE(engine, nullptr);
  Source src = make_source(*engine, 31);
  std::vector<uint8_t> model(kBytes, 0);
  const auto blocks =
      shape_blocks(shape, src.device->addr(), peer.process->remote_base(), src.bytes, &model);
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  const long copies_before = testing::fake_device_copy_count();
  ASSERT_TRUE(engine->transfer(*session, blocks).ok());
  const long copies = testing::fake_device_copy_count() - copies_before;
  testing::fake_device_set_copy_delay_us(0);
  ASSERT_TRUE(peer.process->device_download().ok());
  const uint8_t* landed = peer.shared->data();
  for (size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(landed[i], model[i]) << "first wrong byte at offset " << i;
  }
  if (on_fake_driver()) {
    // The writer's copies: one strided copy for the 1,024-piece head-split run, one batched
    // copy for scattered pages (the fake has cuMemcpyBatchAsync).
    EXPECT_GT(copies, 0);
    EXPECT_LE(copies, 2) << "a handful of device copies, not one per piece";
  }
  (void)engine->close_session(*session);
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<bool, Shape>>& info) {
  const char* shapes[] = {"Page16", "Page1", "HeadSplitTp1To2"};
  return std::string(std::get<0>(info.param) ? "Vmm" : "Legacy") +
         shapes[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaIpcBytes,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(Shape::kPage16, Shape::kPage1,
                                                              Shape::kHeadSplit)),
                         case_name);

// The receiver's region spans four 2 MiB pieces mapped back to back into one reserved
// range (PyTorch's expandable segments): cuMemGetAddressRange gives one piece, so the
// export walks the region piece by piece, each with its own file-descriptor handle, and
// the writer maps all four. Pages scattered over the whole region land exactly.
TEST(CudaIpcPieces, ARegionSpanningSeveralMappedPiecesIsExportedPieceByPiece) {
  ASSERT_NE(device_driver(), nullptr) << device_driver_absent_reason();
  Peer peer = start_peer(false, {"PDKV_PEER_DEVICE_VMM=pieces"});
  ASSERT_NE(peer.process, nullptr);
  auto engine = make_engine();
  ASSERT_NE(engine, nullptr);
  Source src = make_source(*engine, 47);
  const uint64_t page = 32768;
  const uint64_t pages = kBytes / page;
  std::vector<uint64_t> slots(pages);
  for (uint64_t i = 0; i < pages; ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(11));
  std::vector<WriteBlock> blocks;
  std::vector<uint8_t> model(kBytes, 0);
  for (uint64_t i = 0; i < pages; ++i) {
    blocks.push_back(WriteBlock{src.device->addr() + i * page,
                                peer.process->remote_base() + slots[i] * page, page});
    std::memcpy(model.data() + slots[i] * page, src.bytes.data() + i * page, page);
  }
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  ASSERT_TRUE(engine->transfer(*session, blocks).ok());
  ASSERT_TRUE(peer.process->device_download().ok());
  EXPECT_EQ(std::memcmp(peer.shared->data(), model.data(), kBytes), 0);
  (void)engine->close_session(*session);
}

// A member writes only into what the receiver granted its room: a part naming one range
// outside the grant is refused before any copy, so not even its good pieces land.
TEST(CudaIpcGrants, WritesOutsideTheGrantAreRefusedBeforeAnyCopy) {
  Peer peer = start_peer(false, {"PDKV_PEER_REQUIRE_GRANTS=1"});
  ASSERT_NE(peer.process, nullptr);
  ASSERT_TRUE(peer.process->grant(7, 0, 1u << 20).ok());
  auto engine = make_engine();
  Source src = make_source(*engine, 5);
  const uint64_t dst = peer.process->remote_base();
  const uint64_t s = src.device->addr();
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  // Inside the grant: lands.
  std::vector<WriteBlock> good = {{s, dst + 4096, 65536, 7}};
  ASSERT_TRUE(engine->transfer(*session, good).ok());
  // One block past the grant's end, one under another grant id: refused whole.
  std::vector<WriteBlock> outside = {{s, dst + 8192, 4096, 7}, {s, dst + (1u << 20), 4096, 7}};
  Status st = engine->transfer(*session, outside);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  std::vector<WriteBlock> forged = {{s, dst + (2u << 20), 4096, 8}};
  st = engine->transfer(*session, forged);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  ASSERT_TRUE(peer.process->device_download().ok());
  const uint8_t* landed = peer.shared->data();
  for (size_t i = 0; i < kBytes; ++i) {
    const bool in_good = i >= 4096 && i < 4096 + 65536;
    const uint8_t want = in_good ? src.bytes[i - 4096] : 0;
    ASSERT_EQ(landed[i], want) << "byte " << i << (in_good ? " (granted)" : " (never granted)");
  }
}

// The abstract names this process's children listen on for device handles.
std::vector<std::string> handle_sockets_of(pid_t pid) {
  std::vector<std::string> names;
  std::ifstream in("/proc/net/unix");
  std::string line;
  const std::string prefix = "@pdkv-cuda-ipc-" + std::to_string(pid) + "-";
  while (std::getline(in, line)) {
    const size_t at = line.find(prefix);
    if (at != std::string::npos) names.push_back(line.substr(at + 1));
  }
  return names;
}

// Strangers get no handle: not through the lease channel without the cluster secret, and
// not by dialling the handle socket (its name is visible to every process of the host)
// with a guessed token.
TEST(CudaIpcStrangers, GetNoHandles) {
  testing::SecretFile cluster(0x5c);
  testing::SecretFile other(0x0f);
  Peer peer = start_peer(false, {"PDKV_SECRET_FILE=" + cluster.path()});
  ASSERT_NE(peer.process, nullptr);
  for (auto key : {std::shared_ptr<const ClusterKey>(), other.key()}) {
    auto stranger = make_engine(key);
    auto session = stranger->open_session(peer.process->endpoint());
    EXPECT_FALSE(session.ok());
    if (!session.ok()) EXPECT_EQ(session.status().code(), StatusCode::kUnauthenticated);
  }
  const auto names = handle_sockets_of(peer.process->pid());
  ASSERT_EQ(names.size(), 1u) << "the peer's handle socket is listed in /proc/net/unix";
  auto channel = cuda_ipc::FdChannel::connect(names[0], 2000);
  ASSERT_TRUE(channel.ok()) << channel.status().to_string();
  std::vector<uint8_t> guess(cuda_ipc::kTokenBytes, 0x42);
  ASSERT_TRUE(channel->send(guess).ok());
  std::vector<uint8_t> record;
  UniqueFd fd;
  ASSERT_TRUE(channel->receive(&record, &fd).ok());
  EXPECT_FALSE(fd.valid()) << "a descriptor was handed to a stranger";
  auto header = cuda_ipc::decode_header(record);
  ASSERT_TRUE(header.ok());
  EXPECT_FALSE(header->ok);
  EXPECT_EQ(header->count, 0u);
  // Nothing follows the refusal.
  EXPECT_FALSE(channel->receive(&record, &fd).ok());
  // A member with the secret is served and moves bytes.
  auto member = make_engine(cluster.key());
  Source src = make_source(*member, 9);
  auto session = member->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  std::vector<WriteBlock> blocks = {{src.device->addr(), peer.process->remote_base(), 1u << 20}};
  ASSERT_TRUE(member->transfer(*session, blocks).ok());
  ASSERT_TRUE(peer.process->device_download().ok());
  EXPECT_EQ(std::memcmp(peer.shared->data(), src.bytes.data(), 1u << 20), 0);
}

// Across GPUs: the writer's copies run on its own device into the receiver's device,
// where the driver reports peer access; where it does not, the pair is refused with the
// reason (another path must serve it), before any byte moves.
TEST(CudaIpcPeers, AcrossDevicesWherePeerAccessExists) {
  if (!on_fake_driver()) GTEST_SKIP() << "needs the fake's two devices and its peer switch";
  Peer peer = start_peer(false, {}, /*device=*/1);
  ASSERT_NE(peer.process, nullptr);
  auto engine = make_engine();
  Source src = make_source(*engine, 13);
  std::vector<WriteBlock> blocks = {{src.device->addr(), peer.process->remote_base(), 1u << 20}};
  {
    auto session = engine->open_session(peer.process->endpoint());
    ASSERT_TRUE(session.ok()) << session.status().to_string();
    ASSERT_TRUE(engine->transfer(*session, blocks).ok());
    ASSERT_TRUE(peer.process->device_download().ok());
    EXPECT_EQ(std::memcmp(peer.shared->data(), src.bytes.data(), 1u << 20), 0);
  }
  setenv("PDKV_FAKE_CUDA_NO_PEER", "1", 1);
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  Status st = engine->transfer(*session, blocks);
  unsetenv("PDKV_FAKE_CUDA_NO_PEER");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
  EXPECT_NE(st.message().find("peer access"), std::string::npos) << st.to_string();
}

// A source the "forward pass" writes on a side stream, with the send naming only that
// stream: the writer's copies wait for it on the device (post_after), so the new bytes land.
// Unnamed, the same send races the write (the fake delays it): what the naming is for.
TEST(CudaIpcOrdering, ASourceWrittenOnASideStreamIsCopiedAfterIt) {
  DeviceDriver* driver = device_driver();
  ASSERT_NE(driver, nullptr);
  Peer peer = start_peer(false);
  ASSERT_NE(peer.process, nullptr);
  auto engine = make_engine();
  const size_t n = 1u << 20;
  auto buffer = DeviceBuffer::allocate(0, n);
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(engine->register_memory((*buffer)->addr(), n, MemoryAccess::kLocalReadOnly).ok());
  auto session = engine->open_session(peer.process->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  ASSERT_TRUE(driver->bind_thread(0).ok());
  auto stream = driver->create_stream();
  ASSERT_TRUE(stream.ok());
  const WriteBlock block{(*buffer)->addr(), peer.process->remote_base(), n};
  static std::vector<uint8_t> fresh;  // read by the fake's stream thread later
  auto write_then_send = [&](uint64_t seed, bool name_stream) {
    const std::vector<uint8_t> stale(n, 0x11);
    EXPECT_TRUE((*buffer)->upload(0, stale.data(), n).ok());
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
    EXPECT_TRUE(peer.process->device_download().ok());
    return std::memcmp(peer.shared->data(), fresh.data(), n) == 0;
  };
  EXPECT_TRUE(write_then_send(21, /*name_stream=*/true));
  if (on_fake_driver()) {
    EXPECT_FALSE(write_then_send(22, /*name_stream=*/false)) << "the unordered send raced";
  }
  driver->destroy_stream(*stream);
}

// What the per-peer path selection asks of this backend.
TEST(CudaIpcPath, ServesDeviceDestinationsOnThisHostOnly) {
  ASSERT_NE(device_driver(), nullptr);
  EXPECT_TRUE(cuda_ipc::can_serve(MemoryKind::kCuda, MemoryKind::kCuda, true).can_serve);
  EXPECT_TRUE(cuda_ipc::can_serve(MemoryKind::kHost, MemoryKind::kCuda, true).can_serve);
  EXPECT_FALSE(cuda_ipc::can_serve(MemoryKind::kCuda, MemoryKind::kCuda, false).can_serve);
  EXPECT_FALSE(cuda_ipc::can_serve(MemoryKind::kCuda, MemoryKind::kHost, true).can_serve);
}

}  // namespace
}  // namespace pdkv::engine

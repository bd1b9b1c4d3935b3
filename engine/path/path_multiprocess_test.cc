// The per-peer path choice across real processes: an automatic engine here writes into
// pdkv_engine_peer processes (one on this host, one moved to another network namespace),
// and into a fake peer whose locality claim is a lie. Bytes are checked in the shared
// guarded buffer; the canary pattern must survive everywhere else.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/cluster_key.h"
#include "engine/path/locality.h"
#include "engine/path/path_channel.h"
#include "engine/testing/engine_peer_process.h"
#include "engine/testing/guarded_buffer.h"
#include "engine/transfer_engine.h"

namespace pdkv::engine {
namespace {

using testing::EnginePeerProcess;
using testing::fill_pattern;
using testing::GuardedBuffer;

constexpr uint64_t kCanarySeed = 0xC0FFEE;
constexpr uint64_t kSourceSeed = 0x5EED;
constexpr size_t kBytes = 4 << 20;
constexpr char kSecret[] = "path-test-secret-path-test-secret-0123456789";

std::string secret_file() {
  static const std::string path = [] {
    std::string p = "/tmp/pdkv_path_test_secret_" + std::to_string(::getpid());
    FILE* f = std::fopen(p.c_str(), "w");
    std::fputs(kSecret, f);
    std::fclose(f);
    ::chmod(p.c_str(), 0600);
    return p;
  }();
  return path;
}

std::shared_ptr<const ClusterKey> key() {
  config::Settings s;
  s.set("PDKV_SECRET_FILE", secret_file());
  auto k = ClusterKey::from(s);
  EXPECT_TRUE(k.ok() && *k) << k.status().to_string();
  return *k;
}

std::unique_ptr<TransferEngine> make_engine(std::string backend, std::string require_path = "") {
  EngineOptions o;
  o.backend = std::move(backend);
  o.require_path = std::move(require_path);
  o.cluster_key = key();
  auto e = TransferEngine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

struct Peer {
  std::unique_ptr<GuardedBuffer> buffer;
  std::unique_ptr<EnginePeerProcess> process;
};

Peer start_peer(std::vector<std::string> env) {
  Peer p;
  p.buffer = std::move(GuardedBuffer::create(kBytes)).value();
  fill_pattern(p.buffer->data(), p.buffer->size(), kCanarySeed);
  env.push_back("PDKV_ENGINE_BACKEND=auto");
  env.push_back("PDKV_SECRET_FILE=" + secret_file());
  auto proc = EnginePeerProcess::start(*p.buffer, {{0, kBytes}}, env);
  EXPECT_TRUE(proc.ok()) << proc.status().to_string();
  p.process = std::move(proc).value();
  return p;
}

// Writes kBytes / 2 in scattered 64 KiB blocks (every other block) and checks the image.
void write_and_verify(TransferEngine& engine, SessionId session, const Peer& peer) {
  static std::vector<uint8_t> src = [] {
    std::vector<uint8_t> v(kBytes);
    fill_pattern(v.data(), v.size(), kSourceSeed);
    return v;
  }();
  static const Status registered = engine.register_memory(reinterpret_cast<uint64_t>(src.data()),
                                                          src.size(), MemoryAccess::kLocalReadOnly);
  (void)registered;
  std::vector<WriteBlock> blocks;
  constexpr uint64_t kBlock = 64 << 10;
  for (uint64_t off = 0; off + kBlock <= kBytes; off += 2 * kBlock) {
    blocks.push_back(
        {reinterpret_cast<uint64_t>(src.data()) + off, peer.process->remote_base() + off, kBlock});
  }
  ASSERT_TRUE(engine.transfer(session, blocks).ok());
  std::vector<uint8_t> expected(kBytes);
  fill_pattern(expected.data(), expected.size(), kCanarySeed);
  for (uint64_t off = 0; off + kBlock <= kBytes; off += 2 * kBlock) {
    std::memcpy(expected.data() + off, src.data() + off, kBlock);
  }
  EXPECT_EQ(std::memcmp(expected.data(), peer.buffer->data(), kBytes), 0);
}

const PeerPath* outgoing_path(const std::vector<PeerPath>& paths, const std::string& peer) {
  for (const PeerPath& p : paths) {
    if (p.outgoing && !p.device_sources && p.peer == peer) return &p;
  }
  return nullptr;
}

TEST(PathChoice, SameHostPeerGetsShmAndRemoteNamespacePeerGetsTcp) {
  auto engine = make_engine("auto");
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->backend_name(), "auto");
  Peer local = start_peer({});
  Peer remote = start_peer({"PDKV_PEER_UNSHARE_NET=1"});

  auto to_local = engine->open_session(local.process->endpoint());
  ASSERT_TRUE(to_local.ok()) << to_local.status().to_string();
  auto to_remote = engine->open_session(remote.process->endpoint());
  ASSERT_TRUE(to_remote.ok()) << to_remote.status().to_string();

  const auto paths = engine->peer_paths();
  const PeerPath* l = outgoing_path(paths, local.process->endpoint());
  const PeerPath* r = outgoing_path(paths, remote.process->endpoint());
  ASSERT_NE(l, nullptr);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(l->path, PathKind::kShm) << l->why;
  EXPECT_EQ(r->path, PathKind::kTcp);
  EXPECT_NE(r->why.find("shm: another network namespace"), std::string::npos) << r->why;
  EXPECT_FALSE(engine->carries_notes(*to_local));  // shm carries none
  EXPECT_TRUE(engine->carries_notes(*to_remote));

  write_and_verify(*engine, *to_local, local);
  write_and_verify(*engine, *to_remote, remote);
}

TEST(PathChoice, RequirePathRefusesAPeerBelowIt) {
  auto engine = make_engine("auto", "shm");
  ASSERT_NE(engine, nullptr);
  Peer local = start_peer({});
  Peer remote = start_peer({"PDKV_PEER_UNSHARE_NET=1"});
  auto to_local = engine->open_session(local.process->endpoint());
  ASSERT_TRUE(to_local.ok()) << to_local.status().to_string();
  auto to_remote = engine->open_session(remote.process->endpoint());
  ASSERT_FALSE(to_remote.ok());
  EXPECT_EQ(to_remote.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(to_remote.status().message().find("below the required shm"), std::string::npos)
      << to_remote.status().to_string();
  EXPECT_NE(to_remote.status().message().find("network namespace"), std::string::npos);
  write_and_verify(*engine, *to_local, local);
}

TEST(PathChoice, FixedBackendBelowRequiredPathIsRefused) {
  auto engine = make_engine("tcp", "shm");
  ASSERT_NE(engine, nullptr);
  auto receiver = make_engine("tcp");
  auto session = engine->open_session(receiver->endpoint());
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), StatusCode::kFailedPrecondition);
}

// A member that claims this host (our boot id and namespaces) at a pid that is not its
// own: the proof read finds no challenge there, so it gets tcp, never shm (whose writes
// would land in that other process).
TEST(PathChoice, PeerLyingAboutItsHostCannotGetShm) {
  auto engine = make_engine("auto");
  ASSERT_NE(engine, nullptr);
  // Its real data endpoints: fixed engines of this process.
  auto tcp = make_engine("tcp");
  auto shm = make_engine("shm");
  std::vector<uint8_t> dst(kBytes, 0);
  ASSERT_TRUE(tcp->register_memory(reinterpret_cast<uint64_t>(dst.data()), dst.size()).ok());
  const pid_t bystander = ::fork();
  if (bystander == 0) {
    ::pause();
    ::_exit(0);
  }
  PathServer liar(
      PathServerOptions{key(), 3000, 8},
      [&] {
        PathHello h;
        h.locality = local_locality();                      // this host, truly
        h.locality.pid = static_cast<uint32_t>(bystander);  // but not this process
        h.offers = {{"tcp", tcp->endpoint(), false}, {"shm", shm->endpoint(), false}};
        return h;
      },
      [](const PathHello&, const PathChoice&) {});
  auto liar_endpoint = liar.listen("127.0.0.1", 0);
  ASSERT_TRUE(liar_endpoint.ok());
  auto session = engine->open_session(*liar_endpoint);
  ::kill(bystander, SIGKILL);
  ::waitpid(bystander, nullptr, 0);
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  const std::vector<PeerPath> p_paths = engine->peer_paths();
  const PeerPath* p = outgoing_path(p_paths, *liar_endpoint);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->path, PathKind::kTcp);
  EXPECT_NE(p->why.find("proof failed"), std::string::npos) << p->why;
  std::vector<uint8_t> src(4096, 0xAB);
  ASSERT_TRUE(engine
                  ->register_memory(reinterpret_cast<uint64_t>(src.data()), src.size(),
                                    MemoryAccess::kLocalReadOnly)
                  .ok());
  WriteBlock b{reinterpret_cast<uint64_t>(src.data()), reinterpret_cast<uint64_t>(dst.data()),
               src.size()};
  ASSERT_TRUE(engine->transfer(*session, {&b, 1}).ok());
  EXPECT_EQ(dst[0], 0xAB);
  EXPECT_EQ(dst[4095], 0xAB);
}

TEST(PathChoice, StrangerWithoutTheSecretLearnsNothing) {
  auto engine = make_engine("auto");
  ASSERT_NE(engine, nullptr);
  PathClient stranger;
  PathHello mine;
  mine.locality = local_locality();
  auto answer = stranger.exchange(engine->endpoint(), mine, nullptr, 2000);
  ASSERT_FALSE(answer.ok());
}

TEST(PathChoice, ReceiverReportsHowEachPeerWritesIntoIt) {
  auto receiver = make_engine("auto");
  auto sender = make_engine("auto");
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  auto session = sender->open_session(receiver->endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  // The receiver learns the sender's choice at the end of the path handshake.
  for (int i = 0; i < 100; ++i) {
    for (const PeerPath& p : receiver->peer_paths()) {
      if (!p.outgoing && p.peer == sender->endpoint()) {
        EXPECT_EQ(p.path, PathKind::kShm);
        return;
      }
    }
    ::usleep(20000);
  }
  FAIL() << "the receiver never recorded the sender's path";
}

}  // namespace
}  // namespace pdkv::engine

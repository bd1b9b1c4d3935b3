// ZmqEndpoint over real loopback TCP, with a second process (proto_zmq_peer) where the
// point is crossing a process boundary.
#include "proto/zmq_endpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "common/clock.h"
#include "proto/test_messages.h"

namespace pdkv::proto {
namespace {

// Collects what the handler receives; waits are bounded.
class Inbox {
 public:
  ZmqEndpoint::Handler handler() {
    return [this](Message&& m, const std::string&) {
      MutexLock lock(mu_);
      messages_.push_back(std::move(m));
      cv_.notify_all();
      return Status();
    };
  }
  // Waits up to 20 s for n messages; returns what arrived.
  std::vector<Message> wait_for(size_t n) {
    MutexLock lock(mu_);
    // The predicate runs with mu_ held (CondVar contract); clang cannot see that.
    cv_.wait_for(mu_, std::chrono::seconds(20),
                 [&]() PDKV_NO_THREAD_SAFETY_ANALYSIS { return messages_.size() >= n; });
    return messages_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::vector<Message> messages_ PDKV_GUARDED_BY(mu_);
};

class PeerProcess {
 public:
  PeerProcess(const char* mode, const std::string& endpoint) {
    const char* dir = std::getenv("PDKV_BIN_DIR");
    std::string bin = std::string(dir ? dir : "build/bin") + "/proto_zmq_peer";
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      execl(bin.c_str(), "proto_zmq_peer", mode, endpoint.c_str(), nullptr);
      _exit(127);
    }
    close(out[1]);
    out_ = fdopen(out[0], "r");
  }
  ~PeerProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_) fclose(out_);
  }
  std::string read_line() {
    char buf[512] = {};
    if (!out_ || !fgets(buf, sizeof(buf), out_)) return "";
    std::string s(buf);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  // Exit code, or -1 if it did not exit within timeout_ms (bounded poll of waitpid).
  int wait_exit(int timeout_ms) {
    auto start = now();
    int status = 0;
    while (elapsed_ms(start) < timeout_ms) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(5000);
    }
    return -1;
  }
  void kill9() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  bool reaped_ = false;
};

std::unique_ptr<ZmqEndpoint> start(Inbox& inbox, EndpointOptions o = {}) {
  auto ep = ZmqEndpoint::start(o, inbox.handler());
  EXPECT_TRUE(ep.ok()) << ep.status().to_string();
  return ep.ok() ? std::move(ep).value() : nullptr;
}

TEST(ZmqEndpointTest, BindsAWildcardPortAndAdvertisesIt) {
  Inbox inbox;
  auto a = start(inbox), b = start(inbox);
  EXPECT_EQ(a->endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << a->endpoint();
  EXPECT_NE(a->endpoint(), b->endpoint());
}

TEST(ZmqEndpointTest, EveryMessageRoundTripsThroughAnotherProcess) {
  Inbox inbox;
  auto ep = start(inbox);
  PeerProcess peer("echo", ep->endpoint());
  std::string peer_endpoint = peer.read_line();
  ASSERT_EQ(peer_endpoint.rfind("tcp://", 0), 0u) << "peer printed '" << peer_endpoint << "'";
  auto sent = testing::sample_messages();
  for (const Message& m : sent) ASSERT_TRUE(ep->send(peer_endpoint, m).ok());
  auto got = inbox.wait_for(sent.size());
  ASSERT_GE(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_TRUE(got[i] == sent[i]) << "message " << i;

  // Liveness probe: the peer echoes the Ping and answers with a Pong of the same seq.
  RankIdentity me = testing::sample_identity(Role::kDecode, 0);
  me.control_endpoint = ep->endpoint();
  ASSERT_TRUE(ep->send(peer_endpoint, Ping{me, 77}).ok());
  got = inbox.wait_for(sent.size() + 2);
  bool pong = false;
  for (const Message& m : got) {
    if (auto* p = std::get_if<Pong>(&m)) pong = pong || p->seq == 77;
  }
  EXPECT_TRUE(pong);
  ASSERT_TRUE(ep->send(peer_endpoint, Abort{0, me, "exit"}).ok());
  EXPECT_EQ(peer.wait_exit(10000), 0);
}

TEST(ZmqEndpointTest, MalformedMessagesAreDroppedAndGoodOnesStillArrive) {
  Inbox inbox;
  auto ep = start(inbox);
  PeerProcess peer("garbage", ep->endpoint());
  auto sent = testing::sample_messages();
  auto got = inbox.wait_for(sent.size());
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_TRUE(got[i] == sent[i]) << "message " << i;
  EXPECT_EQ(ep->stats().malformed, 7u);
  EXPECT_EQ(ep->stats().received, sent.size());
  EXPECT_EQ(peer.wait_exit(10000), 0);
}

TEST(ZmqEndpointTest, HandlerErrorsAndExceptionsDoNotStopTheReceiver) {
  Mutex mu;
  CondVar cv;
  int calls = 0;
  auto ep = ZmqEndpoint::start({}, [&](Message&&, const std::string&) -> Status {
    int n;
    {
      MutexLock lock(mu);
      n = ++calls;
      cv.notify_all();
    }
    if (n == 1) return internal_error("first fails");
    if (n == 2) throw std::runtime_error("second throws");
    return Status();
  });
  ASSERT_TRUE(ep.ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*ep)->send((*ep)->endpoint(), Ping{RankIdentity{}, uint64_t(i)}).ok());
  }
  MutexLock lock(mu);
  EXPECT_TRUE(cv.wait_for(mu, std::chrono::seconds(20), [&] { return calls == 3; }));
  EXPECT_EQ((*ep)->stats().handler_errors, 2u);
}

TEST(ZmqEndpointTest, SendToAnAbsentPeerReturnsQuicklyWithUnavailable) {
  Inbox inbox;
  EndpointOptions o;
  o.send_timeout = std::chrono::milliseconds(100);
  auto ep = start(inbox, o);
  // A port nobody listens on: bind an endpoint, note its port, shut it down.
  std::string dead;
  {
    Inbox other;
    dead = start(other)->endpoint();
  }
  for (int i = 0; i < 5; ++i) {
    auto t0 = now();
    Status st = ep->send(dead, Ping{RankIdentity{}, 1});
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
    EXPECT_LT(elapsed_ms(t0), 2000);
  }
  EXPECT_EQ(ep->stats().send_failures, 5u);
  EXPECT_EQ(ep->send("not an endpoint", Ping{}).code(), StatusCode::kInvalidArgument);
}

TEST(ZmqEndpointTest, SendToAKilledPeerNeverBlocksForLong) {
  Inbox inbox;
  EndpointOptions o;
  o.send_timeout = std::chrono::milliseconds(100);
  o.send_hwm = 4;
  auto ep = start(inbox, o);
  PeerProcess peer("echo", ep->endpoint());
  std::string peer_endpoint = peer.read_line();
  ASSERT_TRUE(ep->send(peer_endpoint, Ping{RankIdentity{}, 1}).ok());
  inbox.wait_for(1);
  peer.kill9();
  // Some sends may still be queued while ZeroMQ notices the closed connection; none
  // may block beyond the timeout, and they must start failing.
  int failures = 0;
  for (int i = 0; i < 200 && failures < 3; ++i) {
    auto t0 = now();
    if (!ep->send(peer_endpoint, Ping{RankIdentity{}, 2}).ok()) ++failures;
    EXPECT_LT(elapsed_ms(t0), 2000);
  }
  EXPECT_GT(failures, 0);
}

TEST(ZmqEndpointTest, ConcurrentSendersAllArrive) {
  Inbox inbox;
  auto receiver = start(inbox);
  Inbox unused;
  auto sender = start(unused);
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        TransferStatus st;
        st.room = uint64_t(t) * kEach + i;
        st.state = TransferState::kSuccess;
        // The same peer from every thread (one cached socket, its mutex) and also a
        // second sender endpoint, so both paths run concurrently.
        ZmqEndpoint& from = (i % 2) ? *sender : *receiver;
        if (!from.send(receiver->endpoint(), st).ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(inbox.wait_for(kThreads * kEach).size(), size_t{kThreads * kEach});
}

TEST(ZmqEndpointTest, ShutdownIsPromptAndLaterSendsAreAborted) {
  Inbox inbox;
  auto ep = start(inbox);
  ASSERT_TRUE(ep->send(ep->endpoint(), Ping{}).ok());
  auto t0 = now();
  ep->shutdown();
  EXPECT_LT(elapsed_ms(t0), 2000);
  EXPECT_EQ(ep->send(ep->endpoint(), Ping{}).code(), StatusCode::kAborted);
  ep->shutdown();  // idempotent
}

}  // namespace
}  // namespace pdkv::proto

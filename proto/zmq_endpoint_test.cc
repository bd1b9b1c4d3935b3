// ZmqEndpoint over real loopback TCP, with a second process (proto_zmq_peer) where the
// point is crossing a process boundary or killing a peer.
#include "proto/zmq_endpoint.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "common/clock.h"
#include "proto/test_messages.h"
#include "proto/zmq_socket_budget.h"

namespace pdkv::proto {
namespace {

// What a handler was called with, in order, and the thread of its last call; waits are
// bounded.
template <typename T>
class CallLog {
 public:
  // Waits up to `timeout` for n calls; returns what they passed.
  std::vector<T> wait_for(size_t n, Millis timeout = Millis(20000)) {
    MutexLock lock(mu_);
    // The predicate runs with mu_ held (CondVar contract); clang cannot see that.
    cv_.wait_for(mu_, timeout, [&]() PDKV_NO_THREAD_SAFETY_ANALYSIS { return calls_.size() >= n; });
    return calls_;
  }
  std::vector<T> calls() {
    MutexLock lock(mu_);
    return calls_;
  }
  std::thread::id thread() {
    MutexLock lock(mu_);
    return thread_;
  }

 protected:
  void record(T call) {
    MutexLock lock(mu_);
    calls_.push_back(std::move(call));
    thread_ = std::this_thread::get_id();
    cv_.notify_all();
  }
  // Waits up to `timeout` until `done` holds for the calls so far; whether it does.
  bool wait_until(Millis timeout, const std::function<bool(const std::vector<T>&)>& done) {
    MutexLock lock(mu_);
    return cv_.wait_for(mu_, timeout,
                        [&]() PDKV_NO_THREAD_SAFETY_ANALYSIS { return done(calls_); });
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::vector<T> calls_ PDKV_GUARDED_BY(mu_);
  std::thread::id thread_ PDKV_GUARDED_BY(mu_);
};

// Collects what the handler receives.
class Inbox : public CallLog<Message> {
 public:
  ZmqEndpoint::Handler handler() {
    return [this](Message&& m, const std::string&) {
      record(std::move(m));
      return Status();
    };
  }
  // Waits up to 20 s for a Pong carrying `seq`.
  bool wait_for_pong(uint64_t seq) {
    return wait_until(std::chrono::seconds(20), [&](const std::vector<Message>& messages) {
      for (const Message& m : messages) {
        if (auto* p = std::get_if<Pong>(&m); p && p->seq == seq) return true;
      }
      return false;
    });
  }
  std::thread::id handler_thread() { return thread(); }
};

// Records on_peer_gone calls.
class GoneLog : public CallLog<std::string> {
 public:
  ZmqEndpoint::PeerGoneHandler handler() {
    return [this](const std::string& peer) { record(peer); };
  }
  // Waits up to `timeout` for n reports; returns how many there are.
  size_t wait_for(size_t n, Millis timeout) { return CallLog::wait_for(n, timeout).size(); }
  std::vector<std::string> peers() { return calls(); }
};

class PeerProcess {
 public:
  PeerProcess(const char* mode, const std::string& endpoint, const std::string& extra = "") {
    const char* dir = std::getenv("PDKV_BIN_DIR");
    std::string bin = std::string(dir ? dir : "build/bin") + "/proto_zmq_peer";
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      if (extra.empty()) {
        execl(bin.c_str(), "proto_zmq_peer", mode, endpoint.c_str(), nullptr);
      } else {
        execl(bin.c_str(), "proto_zmq_peer", mode, endpoint.c_str(), extra.c_str(), nullptr);
      }
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
  }
  ~PeerProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }
  // The next line the peer printed, "" at its exit or after 20 s (a peer that misbehaves
  // fails the test instead of hanging it).
  std::string read_line() {
    auto start = now();
    for (;;) {
      if (size_t nl = buffered_.find('\n'); nl != std::string::npos) {
        std::string line = buffered_.substr(0, nl);
        buffered_.erase(0, nl + 1);
        return line;
      }
      pollfd p{out_, POLLIN, 0};
      int left_ms = 20000 - static_cast<int>(elapsed_ms(start));
      if (out_ < 0 || left_ms <= 0 || poll(&p, 1, left_ms) <= 0) return "";
      char buf[512];
      ssize_t n = read(out_, buf, sizeof(buf));
      if (n <= 0) return "";
      buffered_.append(buf, static_cast<size_t>(n));
    }
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
  void stop() { kill(pid_, SIGSTOP); }
  void resume() { kill(pid_, SIGCONT); }

 private:
  pid_t pid_ = -1;
  int out_ = -1;  // the peer's stdout
  std::string buffered_;
  bool reaped_ = false;
};

std::unique_ptr<ZmqEndpoint> start(Inbox& inbox, EndpointOptions o = {},
                                   ZmqEndpoint::PeerGoneHandler gone = nullptr) {
  auto ep = ZmqEndpoint::start(o, inbox.handler(), std::move(gone));
  EXPECT_TRUE(ep.ok()) << ep.status().to_string();
  return ep.ok() ? std::move(ep).value() : nullptr;
}

// Default options but for one limit.
EndpointOptions with_send_hwm(int send_hwm) {
  EndpointOptions o;
  o.send_hwm = send_hwm;
  return o;
}
EndpointOptions with_max_peers(size_t max_peers) {
  EndpointOptions o;
  o.max_peers = max_peers;
  return o;
}

// An endpoint nobody listens on: bind one, note it, shut it down.
std::string unused_endpoint() {
  Inbox other;
  return start(other)->endpoint();
}

RankIdentity identity_of(const ZmqEndpoint& ep) {
  RankIdentity me = testing::sample_identity(Role::kDecode, 0);
  me.control_endpoint = ep.endpoint();
  return me;
}

// Starts an echo peer and waits until it answered a ping (so the connection to it is
// established); returns its endpoint.
std::string connect_echo_peer(ZmqEndpoint& ep, Inbox& inbox, PeerProcess& peer) {
  std::string peer_endpoint = peer.read_line();
  EXPECT_EQ(peer_endpoint.rfind("tcp://", 0), 0u) << "peer printed '" << peer_endpoint << "'";
  EXPECT_TRUE(ep.send(peer_endpoint, Ping{identity_of(ep), 1}).ok());
  EXPECT_TRUE(inbox.wait_for_pong(1));
  return peer_endpoint;
}

// The receive thread hands urgent messages (Ping, Pong) over first, so only each class
// keeps its order: compares `got` with `sent` class by class.
void expect_same_messages_urgent_first(const std::vector<Message>& got,
                                       const std::vector<Message>& sent) {
  auto split = [](const std::vector<Message>& all, bool urgent) {
    std::vector<Message> part;
    for (const Message& m : all) {
      if (is_urgent(m) == urgent) part.push_back(m);
    }
    return part;
  };
  for (bool urgent : {true, false}) {
    auto g = split(got, urgent), s = split(sent, urgent);
    ASSERT_EQ(g.size(), s.size()) << (urgent ? "urgent" : "other");
    for (size_t i = 0; i < s.size(); ++i) EXPECT_TRUE(g[i] == s[i]) << "message " << i;
  }
}

TransferStatus status_of_room(uint64_t room) {
  TransferStatus st;
  st.room = room;
  st.state = TransferState::kSuccess;
  return st;
}

// Durations of sends that must not block. The old sends blocked up to ZMQ_SNDTIMEO
// (200 ms) before failing; a non-blocking one takes microseconds. The median tells them
// apart on a loaded machine, where any single call may be descheduled for a while.
class SendTimes {
 public:
  template <typename F>
  auto time(F&& send) {
    auto t0 = now();
    auto result = send();
    ms_.push_back(elapsed_ms(t0));
    return result;
  }
  int64_t median_ms() {
    if (ms_.empty()) return 0;
    std::nth_element(ms_.begin(), ms_.begin() + ms_.size() / 2, ms_.end());
    return ms_[ms_.size() / 2];
  }
  int64_t max_ms() const { return ms_.empty() ? 0 : *std::max_element(ms_.begin(), ms_.end()); }
  void expect_never_blocked() {
    EXPECT_LE(median_ms(), 20);
    EXPECT_LT(max_ms(), 1000);  // a descheduled call, not a 200 ms wait per call
  }

 private:
  std::vector<int64_t> ms_;
};

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
  expect_same_messages_urgent_first(got, sent);

  // Liveness probe: the peer echoes the Ping and answers with a Pong of the same seq.
  ASSERT_TRUE(ep->send(peer_endpoint, Ping{identity_of(*ep), 77}).ok());
  EXPECT_TRUE(inbox.wait_for_pong(77));
  ASSERT_TRUE(ep->send(peer_endpoint, Abort{0, identity_of(*ep), "exit"}).ok());
  EXPECT_EQ(peer.wait_exit(10000), 0);
}

TEST(ZmqEndpointTest, MalformedMessagesAreDroppedAndGoodOnesStillArrive) {
  Inbox inbox;
  auto ep = start(inbox);
  PeerProcess peer("garbage", ep->endpoint());
  auto sent = testing::sample_messages();
  auto got = inbox.wait_for(sent.size());
  ASSERT_EQ(got.size(), sent.size());
  expect_same_messages_urgent_first(got, sent);
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

// ---- sends never block ----

TEST(ZmqEndpointTest, SendsToAnAbsentPeerQueueUpToTheHwmThenFailAtOnce) {
  Inbox inbox;
  const EndpointOptions o = with_send_hwm(4);
  auto ep = start(inbox, o);
  std::string dead = unused_endpoint();
  SendTimes times;
  for (int i = 0; i < 10; ++i) {
    Status st = times.time([&] { return ep->send(dead, Ping{RankIdentity{}, 1}); });
    if (i < o.send_hwm) {
      EXPECT_TRUE(st.ok()) << "send " << i << ": " << st.to_string();
    } else {
      EXPECT_EQ(st.code(), StatusCode::kUnavailable) << "send " << i << ": " << st.to_string();
    }
  }
  times.expect_never_blocked();
  EXPECT_EQ(ep->stats().sent, 4u);
  EXPECT_EQ(ep->stats().send_failures, 6u);
  EXPECT_EQ(ep->send("not an endpoint", Ping{}).code(), StatusCode::kInvalidArgument);
}

TEST(ZmqEndpointTest, FirstContactQueuesUntilThePeerListens) {
  Inbox inbox;
  auto ep = start(inbox);
  std::string later = unused_endpoint();
  Status st = ep->send(later, Ping{identity_of(*ep), 5});
  ASSERT_TRUE(st.ok()) << st.to_string();    // the old send refused after 200 ms
  std::this_thread::sleep_for(Millis(300));  // several refused connect attempts
  PeerProcess peer("listen", ep->endpoint(), later);
  ASSERT_EQ(peer.read_line(), "ready");
  EXPECT_TRUE(inbox.wait_for_pong(5));  // the peer got the ping queued before it listened
}

TEST(ZmqEndpointTest, SendsToAPeerThatStopsReadingFailAtOnceAndQueueWholeMessages) {
  Inbox inbox;
  GoneLog gone;
  const EndpointOptions o = with_send_hwm(64);
  auto ep = start(inbox, o, gone.handler());
  PeerProcess peer("echo", ep->endpoint());
  std::string peer_endpoint = connect_echo_peer(*ep, inbox, peer);
  size_t before = inbox.wait_for(2).size();  // the ping's echo and the pong
  peer.stop();                               // SIGSTOP: alive, reads nothing

  PreAllocation big;  // 64 KiB: fills the kernel's buffers in a few dozen messages
  big.dst_kv_pages.assign(8192, 7);
  uint64_t queued = 0;
  Status refused;
  SendTimes fill;
  for (; queued < 100000; ++queued) {
    big.room = queued;
    refused = fill.time([&] { return ep->send(peer_endpoint, big); });
    if (!refused.ok()) break;
  }
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.to_string();
  EXPECT_GT(queued, uint64_t(o.send_hwm / 2));  // the pipe acknowledges reads in steps
  EXPECT_LT(fill.max_ms(), 1000);
  // The queue is full by count: small messages are refused too, each at once.
  SendTimes refusals;
  for (int i = 0; i < 100; ++i) {
    Status st = refusals.time([&] { return ep->send(peer_endpoint, status_of_room(1000000 + i)); });
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  }
  refusals.expect_never_blocked();

  // Resumed, the peer echoes exactly the queued messages, each whole, in order.
  peer.resume();
  auto got = inbox.wait_for(before + queued);
  ASSERT_EQ(got.size(), before + queued);
  for (uint64_t i = 0; i < queued; ++i) {
    auto* pa = std::get_if<PreAllocation>(&got[before + i]);
    ASSERT_NE(pa, nullptr) << "message " << i;
    EXPECT_EQ(pa->room, i);
    EXPECT_EQ(pa->dst_kv_pages, big.dst_kv_pages);
  }
  EXPECT_EQ(ep->stats().malformed, 0u);
  EXPECT_EQ(gone.peers().size(), 0u);  // a stopped process is not a dead one
}

TEST(ZmqEndpointTest, SendToAKilledPeerNeverBlocksForLong) {
  Inbox inbox;
  auto ep = start(inbox, with_send_hwm(4));
  PeerProcess peer("echo", ep->endpoint());
  std::string peer_endpoint = connect_echo_peer(*ep, inbox, peer);
  peer.kill9();
  // Sends queue while ZeroMQ reconnects, up to the HWM; none may block, and they must
  // start failing.
  int failures = 0;
  SendTimes times;
  for (int i = 0; i < 200 && failures < 3; ++i) {
    if (!times.time([&] { return ep->send(peer_endpoint, Ping{RankIdentity{}, 2}); }).ok()) {
      ++failures;
    }
  }
  EXPECT_GT(failures, 0);
  times.expect_never_blocked();
}

TEST(ZmqEndpointTest, SendBurstQueuesInOrderAndReportsThePrefix) {
  Inbox inbox;
  auto ep = start(inbox, with_send_hwm(16));
  std::string later = unused_endpoint();
  std::vector<Message> burst;
  for (uint64_t room = 0; room < 40; ++room) burst.push_back(status_of_room(room));
  auto queued = ep->send_burst(later, burst);
  ASSERT_TRUE(queued.ok()) << queued.status().to_string();
  EXPECT_GT(*queued, 0u);
  EXPECT_LT(*queued, burst.size());
  EXPECT_EQ(ep->stats().sent, *queued);
  EXPECT_EQ(ep->stats().send_failures, burst.size() - *queued);
  auto again = ep->send_burst(later, burst);  // still full: nothing queued, not an error
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(*again, 0u);

  PeerProcess peer("listen", ep->endpoint(), later);
  ASSERT_EQ(peer.read_line(), "ready");
  auto got = inbox.wait_for(*queued);
  ASSERT_EQ(got.size(), *queued);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i] == burst[i]) << "message " << i;
  // Nothing beyond the prefix arrives.
  EXPECT_EQ(inbox.wait_for(*queued + 1, Millis(300)).size(), *queued);
}

TEST(ZmqEndpointTest, SendBurstToALivePeerArrivesWholeAndInOrder) {
  Inbox inbox;
  auto receiver = start(inbox);
  Inbox unused;
  auto sender = start(unused);
  std::vector<Message> burst;
  for (uint64_t room = 0; room < 3000; ++room) burst.push_back(status_of_room(room));
  auto queued = sender->send_burst(receiver->endpoint(), burst);
  ASSERT_TRUE(queued.ok()) << queued.status().to_string();
  EXPECT_EQ(*queued, burst.size());
  auto got = inbox.wait_for(burst.size());
  ASSERT_EQ(got.size(), burst.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(got[i] == burst[i]) << "message " << i;
}

TEST(ZmqEndpointTest, SendBurstFailsOnlyWhenNothingCanBeQueued) {
  Inbox inbox;
  auto ep = start(inbox);
  std::vector<Message> burst{status_of_room(1), status_of_room(2)};
  EXPECT_EQ(ep->send_burst("not an endpoint", burst).status().code(), StatusCode::kInvalidArgument);
  auto none = ep->send_burst(ep->endpoint(), {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0u);
  ep->shutdown();
  EXPECT_EQ(ep->send_burst(ep->endpoint(), burst).status().code(), StatusCode::kAborted);
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
        // The same peer from every thread (one cached socket, its mutex) and also a
        // second sender endpoint, so both paths run concurrently; bursts too.
        ZmqEndpoint& from = (i % 2) ? *sender : *receiver;
        uint64_t room = uint64_t(t) * kEach + i;
        if (i % 4 == 3) {
          Message one[] = {status_of_room(room)};
          auto n = from.send_burst(receiver->endpoint(), one);
          if (!n.ok() || *n != 1) failures++;
        } else if (!from.send(receiver->endpoint(), status_of_room(room)).ok()) {
          failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(inbox.wait_for(kThreads * kEach).size(), size_t{kThreads * kEach});
}

// ---- the receive thread: urgent messages first ----

TEST(ZmqEndpointTest, APingIsHandledBeforeABacklogOfSlowMessages) {
  constexpr int kBacklog = 2000;
  Mutex mu;
  CondVar cv;
  int handled = 0;      // non-urgent messages handled
  int ping_after = -1;  // how many of them were handled before the ping
  auto receiver = ZmqEndpoint::start({}, [&](Message&& m, const std::string&) {
    if (!is_urgent(m)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    MutexLock lock(mu);
    if (std::holds_alternative<Ping>(m)) {
      ping_after = handled;
    } else {
      ++handled;
    }
    cv.notify_all();
    return Status();
  });
  ASSERT_TRUE(receiver.ok());
  Inbox unused;
  auto sender = start(unused);
  std::vector<Message> backlog;
  for (int room = 0; room < kBacklog; ++room) backlog.push_back(status_of_room(room));
  auto queued = sender->send_burst((*receiver)->endpoint(), backlog);
  ASSERT_TRUE(queued.ok() && *queued == backlog.size());
  // Same socket, so it travels behind the whole backlog.
  ASSERT_TRUE(sender->send((*receiver)->endpoint(), Ping{identity_of(*sender), 9}).ok());
  {
    MutexLock lock(mu);
    ASSERT_TRUE(cv.wait_for(mu, std::chrono::seconds(30), [&] { return ping_after >= 0; }));
    // Handled in arrival order it would come after all 2000 (2 s of handling);
    // drained in batches of 256 without re-draining, after ~1750.
    EXPECT_LT(ping_after, kBacklog / 2);
  }
  EXPECT_GE((*receiver)->stats().urgent, 1u);
  EXPECT_GT((*receiver)->stats().drained_batches, 0u);
}

// ---- peer-process death ----

// An endpoint whose on_peer_gone reports go to gone_.
class ZmqPeerDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(ep_, nullptr); }
  Inbox inbox_;
  GoneLog gone_;
  std::unique_ptr<ZmqEndpoint> ep_ = start(inbox_, {}, gone_.handler());
};

TEST_F(ZmqPeerDeathTest, AKilledPeerIsReportedGoneOnceWithinASecond) {
  PeerProcess peer("echo", ep_->endpoint());
  std::string peer_endpoint = connect_echo_peer(*ep_, inbox_, peer);
  auto t0 = now();
  peer.kill9();
  ASSERT_EQ(gone_.wait_for(1, Millis(5000)), 1u);
  EXPECT_LT(elapsed_ms(t0), 1000);
  EXPECT_EQ(gone_.peers()[0], peer_endpoint);
  EXPECT_EQ(gone_.thread(), inbox_.handler_thread());  // the receive thread
  // Reconnect attempts keep being refused: still one report.
  EXPECT_EQ(gone_.wait_for(2, Millis(600)), 1u);
  EXPECT_EQ(ep_->stats().peers_gone, 1u);
  EXPECT_GE(ep_->stats().disconnects, 1u);
}

TEST_F(ZmqPeerDeathTest, APeerWhoseConnectionIsResetIsNotReportedGone) {
  PeerProcess peer("echo", ep_->endpoint());
  std::string peer_endpoint = connect_echo_peer(*ep_, inbox_, peer);
  ASSERT_TRUE(ep_->send(peer_endpoint, Abort{0, identity_of(*ep_), "reset"}).ok());
  std::string reset = peer.read_line();
  ASSERT_EQ(reset.rfind("reset ", 0), 0u) << reset;
  EXPECT_GE(std::atoi(reset.c_str() + 6), 1) << "the peer found no connection to reset";
  // Our side saw the connection close...
  auto t0 = now();
  while (ep_->stats().disconnects == 0 && elapsed_ms(t0) < 5000) usleep(5000);
  ASSERT_GE(ep_->stats().disconnects, 1u);
  // ...reconnected to the live process...
  ASSERT_TRUE(ep_->send(peer_endpoint, Ping{identity_of(*ep_), 2}).ok());
  EXPECT_TRUE(inbox_.wait_for_pong(2));
  // ...and never reports it (several reconnect intervals later).
  EXPECT_EQ(gone_.wait_for(1, Millis(500)), 0u);
  EXPECT_EQ(ep_->stats().peers_gone, 0u);
}

TEST_F(ZmqPeerDeathTest, APeerThatNeverListenedIsNotReportedGone) {
  ASSERT_TRUE(ep_->send(unused_endpoint(), Ping{identity_of(*ep_), 1}).ok());
  EXPECT_EQ(gone_.wait_for(1, Millis(600)), 0u);  // ~5 refused connects
  EXPECT_EQ(ep_->stats().peers_gone, 0u);
  EXPECT_EQ(ep_->stats().disconnects, 0u);
}

TEST_F(ZmqPeerDeathTest, APeerRestartedAtTheSamePortIsReportedAgainWhenItDies) {
  auto first = std::make_unique<PeerProcess>("echo", ep_->endpoint());
  std::string peer_endpoint = connect_echo_peer(*ep_, inbox_, *first);
  first->kill9();
  ASSERT_EQ(gone_.wait_for(1, Millis(5000)), 1u);
  // The same port, a new process: the cached socket reconnects and is watched again.
  PeerProcess second("listen", ep_->endpoint(), peer_endpoint);
  ASSERT_EQ(second.read_line(), "ready");
  ASSERT_TRUE(ep_->send(peer_endpoint, Ping{identity_of(*ep_), 3}).ok());
  ASSERT_TRUE(inbox_.wait_for_pong(3));
  EXPECT_EQ(gone_.peers().size(), 1u);
  auto t0 = now();
  second.kill9();
  ASSERT_EQ(gone_.wait_for(2, Millis(5000)), 2u);
  EXPECT_LT(elapsed_ms(t0), 1000);
  EXPECT_EQ(gone_.peers()[1], peer_endpoint);
}

TEST_F(ZmqPeerDeathTest, AForgottenPeerIsNotReportedGone) {
  PeerProcess peer("echo", ep_->endpoint());
  std::string peer_endpoint = connect_echo_peer(*ep_, inbox_, peer);
  ep_->forget_peer(peer_endpoint);
  peer.kill9();
  EXPECT_EQ(gone_.wait_for(1, Millis(600)), 0u);
  EXPECT_EQ(ep_->stats().peers_gone, 0u);
}

TEST(ZmqEndpointTest, ShutdownIsPromptAndLaterSendsAreAborted) {
  Inbox inbox;
  auto ep = start(inbox);
  ASSERT_TRUE(ep->send(ep->endpoint(), Ping{}).ok());
  ASSERT_TRUE(ep->send(unused_endpoint(), Ping{}).ok());  // a monitor still reconnecting
  auto t0 = now();
  ep->shutdown();
  EXPECT_LT(elapsed_ms(t0), 2000);
  EXPECT_EQ(ep->send(ep->endpoint(), Ping{}).code(), StatusCode::kAborted);
  ep->shutdown();  // idempotent
}

}  // namespace
}  // namespace pdkv::proto

namespace pdkv::proto {
namespace {

// A flood of made-up peers must not exhaust ZeroMQ's sockets: past max_peers a send to a
// new peer fails at once (naming the setting), peers already connected keep working, and
// forgetting one frees its place.
TEST(ZmqEndpointTest, SocketsAreKeptForAtMostMaxPeers) {
  Inbox inbox, other_inbox;
  auto ep = start(inbox, with_max_peers(16));
  auto other = start(other_inbox);
  ASSERT_TRUE(ep->send(other->endpoint(), Ping{identity_of(*ep), 1}).ok());
  std::vector<std::string> made_up;
  for (int i = 0; i < 15; ++i) {
    made_up.push_back("tcp://127.0.0.1:" + std::to_string(2000 + i));
    ASSERT_TRUE(ep->send(made_up.back(), Ping{}).ok()) << i;
  }
  Status over = ep->send("tcp://127.0.0.1:1999", Ping{});
  EXPECT_EQ(over.code(), StatusCode::kUnavailable) << over.to_string();
  EXPECT_NE(over.message().find("PDKV_ZMQ_MAX_PEERS"), std::string::npos) << over.to_string();
  EXPECT_EQ(ep->stats().peers_over_cap, 1u);
  ASSERT_TRUE(ep->send(other->endpoint(), Ping{identity_of(*ep), 2}).ok());
  EXPECT_GE(other_inbox.wait_for(2).size(), 2u);
  ep->forget_peer(made_up.front());
  EXPECT_TRUE(ep->send("tcp://127.0.0.1:1999", Ping{}).ok());
}

// send_once() delivers without keeping a socket (the cap above is not touched) and is
// rate-limited, so refusing a flood of peers cannot become a flood of sockets.
TEST(ZmqEndpointTest, OneOffSendsDeliverKeepNoSocketAndAreRateLimited) {
  Inbox inbox, other_inbox;
  auto ep = start(inbox, with_max_peers(16));
  auto other = start(other_inbox);
  ASSERT_TRUE(ep->send_once(other->endpoint(), Ping{identity_of(*ep), 9}).ok());
  EXPECT_EQ(other_inbox.wait_for(1).size(), 1u);
  // Many more one-off sends than max_peers: none takes a place in the cache.
  int sent = 0, refused = 0;
  for (int i = 0; i < 2 * ZmqEndpoint::kOncePerSecond; ++i) {
    Status st = ep->send_once("tcp://127.0.0.1:" + std::to_string(3000 + i), Ping{});
    (st.ok() ? sent : refused) += 1;
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
    }
  }
  EXPECT_GE(refused, ZmqEndpoint::kOncePerSecond - 1);
  EXPECT_LT(sent, ZmqEndpoint::kOncePerSecond + 1);
  EXPECT_EQ(ep->stats().once_dropped, static_cast<uint64_t>(refused));
  for (int i = 0; i < 16; ++i) {
    EXPECT_TRUE(ep->send("tcp://127.0.0.1:" + std::to_string(4000 + i), Ping{}).ok()) << i;
  }
}

TEST(SocketBudgetTest, SizesTheContextAndSaysWhichLimitBinds) {
  SocketBudget fits = plan_socket_budget(4096, 65535, 1 << 20);
  EXPECT_EQ(fits.max_peers, 4096u);
  EXPECT_EQ(fits.max_sockets, 4096 * kSocketsPerPeer + kReservedSockets);
  EXPECT_TRUE(fits.warning.empty());
  SocketBudget by_fds = plan_socket_budget(4096, 65535, 1024);
  EXPECT_EQ(by_fds.max_peers, (1024 - kReservedDescriptors) / kDescriptorsPerPeer);
  EXPECT_NE(by_fds.warning.find("ulimit -n"), std::string::npos) << by_fds.warning;
  SocketBudget by_zmq = plan_socket_budget(4096, 1023, 1 << 20);
  EXPECT_EQ(by_zmq.max_peers, static_cast<size_t>((1023 - kReservedSockets) / kSocketsPerPeer));
  EXPECT_NE(by_zmq.warning.find("libzmq"), std::string::npos) << by_zmq.warning;
  EXPECT_GE(plan_socket_budget(4096, 0, 0).max_peers, 1u);
}

}  // namespace
}  // namespace pdkv::proto

// The session handshake's logic (session_auth.h) over an in-memory transport: members
// agree; another secret fails on the side that checks first; a recorded transcript cannot
// be replayed; and a channel's transcript never authenticates on another channel, even
// under the same secret (the TCP data plane and the lease channel MAC under their own
// keys). Framing and sockets are the transports' tests (tcp_auth_test, lease_channel_test).
#include "engine/session_auth.h"

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace pdkv::engine {
namespace {

struct Message {
  AuthStep step;
  std::vector<uint8_t> body;
};

// One direction of an in-memory connection; close() is a hang-up.
class Queue {
 public:
  void push(Message m) {
    MutexLock lock(mu_);
    q_.push_back(std::move(m));
    cv_.notify_all();
  }
  void close() {
    MutexLock lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  Result<Message> pop() {
    MutexLock lock(mu_);
    if (!cv_.wait_for(mu_, std::chrono::seconds(5),
                      [&]() PDKV_REQUIRES(mu_) { return closed_ || !q_.empty(); })) {
      return deadline_exceeded("silent peer");
    }
    if (q_.empty()) return unavailable("peer hung up");
    Message m = std::move(q_.front());
    q_.pop_front();
    return m;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<Message> q_ PDKV_GUARDED_BY(mu_);
  bool closed_ PDKV_GUARDED_BY(mu_) = false;
};

// One end: sends into `out`, receives from `in`, and records what it sent.
class QueueTransport final : public AuthTransport {
 public:
  QueueTransport(Queue& in, Queue& out) : in_(in), out_(out) {}
  Status send(AuthStep step, std::span<const uint8_t> body) override {
    sent.push_back({step, std::vector<uint8_t>(body.begin(), body.end())});
    out_.push(sent.back());
    return Status();
  }
  Status recv(AuthStep step, std::span<uint8_t> body) override {
    PDKV_ASSIGN_OR_RETURN(Message m, in_.pop());
    if (m.step != step) return unexpected_auth_message(step);
    if (m.body.size() != body.size()) return data_loss("wrong body size");
    std::copy(m.body.begin(), m.body.end(), body.begin());
    return Status();
  }
  std::vector<Message> sent;

 private:
  Queue& in_;
  Queue& out_;
};

std::shared_ptr<const ClusterKey> key_of(uint8_t fill) {
  auto key = ClusterKey::from_secret(std::vector<uint8_t>(32, fill));
  EXPECT_TRUE(key.ok());
  return *key;
}

struct Outcome {
  Status sender;
  Status receiver;
  std::vector<Message> sender_sent;
};

// Runs both sides; an end that fails hangs up, as a real transport closes its socket.
Outcome run(const ClusterKey& sender_key, const AuthChannel& sender_channel,
            const ClusterKey& receiver_key, const AuthChannel& receiver_channel) {
  Queue to_receiver, to_sender;
  QueueTransport sender(to_sender, to_receiver), receiver(to_receiver, to_sender);
  Outcome out;
  std::thread r([&] {
    out.receiver = authenticate_sender(receiver, receiver_key, receiver_channel);
    to_sender.close();
  });
  out.sender = authenticate_to_receiver(sender, sender_key, sender_channel);
  to_receiver.close();
  r.join();
  out.sender_sent = sender.sent;
  return out;
}

bool names_the_mismatch(const Status& st) {
  return st.message().find(kSecretMismatchHint) != std::string::npos;
}

TEST(SessionAuth, MembersOfOneClusterAuthenticateEachOther) {
  auto key = key_of(1);
  for (const AuthChannel* channel : {&kTcpDataChannel, &kLeaseChannel}) {
    Outcome o = run(*key, *channel, *key, *channel);
    EXPECT_TRUE(o.sender.ok()) << o.sender.to_string();
    EXPECT_TRUE(o.receiver.ok()) << o.receiver.to_string();
  }
}

TEST(SessionAuth, AnotherSecretFailsAtTheSenderBeforeItProvesAnything) {
  Outcome o = run(*key_of(1), kLeaseChannel, *key_of(2), kLeaseChannel);
  EXPECT_EQ(o.sender.code(), StatusCode::kUnauthenticated) << o.sender.to_string();
  EXPECT_TRUE(names_the_mismatch(o.sender)) << o.sender.to_string();
  EXPECT_FALSE(o.receiver.ok());
  // The sender stopped after its hello: no proof under its key left it.
  ASSERT_EQ(o.sender_sent.size(), 1u);
  EXPECT_EQ(o.sender_sent[0].step, AuthStep::kHello);
}

TEST(SessionAuth, ATcpTranscriptNeverAuthenticatesOnTheLeaseChannel) {
  // Same secret, other channel: the derived keys and labels differ, so neither side's
  // proof verifies for the other.
  static_assert(KeyUse::kDataPlane != KeyUse::kLeaseChannel);
  auto key = key_of(1);
  Outcome o = run(*key, kTcpDataChannel, *key, kLeaseChannel);
  EXPECT_EQ(o.sender.code(), StatusCode::kUnauthenticated) << o.sender.to_string();
  EXPECT_FALSE(o.receiver.ok());
  Outcome reverse = run(*key, kLeaseChannel, *key, kTcpDataChannel);
  EXPECT_EQ(reverse.sender.code(), StatusCode::kUnauthenticated);
  EXPECT_FALSE(reverse.receiver.ok());
}

TEST(SessionAuth, ALeaseTranscriptNeverAuthenticatesOnThePathChannel) {
  // Same secret and derived key, other labels: every MAC covers its channel's labels.
  auto key = key_of(1);
  Outcome o = run(*key, kLeaseChannel, *key, kPathChannel);
  EXPECT_EQ(o.sender.code(), StatusCode::kUnauthenticated) << o.sender.to_string();
  EXPECT_FALSE(o.receiver.ok());
  Outcome reverse = run(*key, kPathChannel, *key, kLeaseChannel);
  EXPECT_EQ(reverse.sender.code(), StatusCode::kUnauthenticated);
  EXPECT_FALSE(reverse.receiver.ok());
  Outcome same = run(*key, kPathChannel, *key, kPathChannel);
  EXPECT_TRUE(same.sender.ok() && same.receiver.ok());
}

// A stranger that recorded a member's hello and proof sends them again to a receiver: the
// receiver's fresh nonce makes the old proof worthless.
TEST(SessionAuth, AReplayedTranscriptIsRefused) {
  auto key = key_of(1);
  Outcome recorded = run(*key, kLeaseChannel, *key, kLeaseChannel);
  ASSERT_TRUE(recorded.sender.ok() && recorded.receiver.ok());
  ASSERT_EQ(recorded.sender_sent.size(), 2u);

  Queue to_receiver, to_stranger;
  QueueTransport receiver(to_receiver, to_stranger);
  to_receiver.push(recorded.sender_sent[0]);  // hello
  to_receiver.push(recorded.sender_sent[1]);  // proof of the recorded session
  Status st = authenticate_sender(receiver, *key, kLeaseChannel);
  EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.to_string();
  EXPECT_NE(st.message().find("does not verify"), std::string::npos) << st.to_string();
  EXPECT_TRUE(names_the_mismatch(st)) << st.to_string();
}

TEST(SessionAuth, AHangUpOrAnUnexpectedFirstMessageIsUnauthenticated) {
  auto key = key_of(1);
  {
    // The receiver hangs up after our hello (a receiver without the secret does that).
    Queue in, out;
    QueueTransport sender(in, out);
    in.close();
    Status st = authenticate_to_receiver(sender, *key, kLeaseChannel);
    EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.to_string();
    EXPECT_TRUE(names_the_mismatch(st)) << st.to_string();
  }
  {
    // A sender that starts with something else (its proof, say) is refused at once.
    Queue in, out;
    QueueTransport receiver(in, out);
    in.push({AuthStep::kProof, std::vector<uint8_t>(kAuthProofBytes)});
    Status st = authenticate_sender(receiver, *key, kLeaseChannel);
    EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.to_string();
    EXPECT_TRUE(receiver.sent.empty());  // not even a challenge was answered
  }
}

}  // namespace
}  // namespace pdkv::engine

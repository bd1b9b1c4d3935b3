// The control plane with a cluster secret: ZmqEndpoints over real loopback sockets.
// Members exchange messages; a client without the secret, with another secret, or with
// a forged key pair that knows the server's public key gets nothing delivered.
#include <gtest/gtest.h>
#include <sodium.h>

#include <chrono>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "proto/zmq_endpoint.h"

namespace pdkv::proto {
namespace {

std::shared_ptr<const ClusterKey> key_of(uint8_t fill) {
  std::vector<uint8_t> secret(32, fill);
  auto key = ClusterKey::from_secret(secret);
  EXPECT_TRUE(key.ok());
  return *key;
}

class Counter {
 public:
  ZmqEndpoint::Handler handler() {
    return [this](Message&&, const std::string&) {
      MutexLock lock(mu_);
      ++count_;
      cv_.notify_all();
      return Status();
    };
  }
  // Waits up to `timeout` for n messages; returns how many arrived.
  size_t wait_for(size_t n, Millis timeout) {
    MutexLock lock(mu_);
    cv_.wait_for(mu_, timeout, [&]() PDKV_NO_THREAD_SAFETY_ANALYSIS { return count_ >= n; });
    return count_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  size_t count_ PDKV_GUARDED_BY(mu_) = 0;
};

std::unique_ptr<ZmqEndpoint> start(std::shared_ptr<const ClusterKey> key, Counter& inbox) {
  EndpointOptions o;
  o.cluster_key = std::move(key);
  auto ep = ZmqEndpoint::start(o, inbox.handler());
  EXPECT_TRUE(ep.ok()) << ep.status().to_string();
  return std::move(ep).value();
}

Ping ping(uint64_t seq) {
  Ping p;
  p.sender.control_endpoint = "tcp://127.0.0.1:1";
  p.seq = seq;
  return p;
}

TEST(ZmqCurve, MembersExchangeMessagesBothWays) {
  auto key = key_of(1);
  Counter a_in, b_in;
  auto a = start(key, a_in), b = start(key, b_in);
  ASSERT_TRUE(b->send(a->endpoint(), ping(1)).ok());
  ASSERT_TRUE(a->send(b->endpoint(), ping(2)).ok());
  EXPECT_EQ(a_in.wait_for(1, Millis(10000)), 1u);
  EXPECT_EQ(b_in.wait_for(1, Millis(10000)), 1u);
  EXPECT_EQ(a->stats().auth_refused, 0u);
}

TEST(ZmqCurve, NoSecretOrAnotherSecretDeliversNothing) {
  Counter member_in, keyless_in, other_in;
  auto member = start(key_of(1), member_in);
  auto keyless = start(nullptr, keyless_in);
  auto other = start(key_of(2), other_in);
  // Each send is queued, or refused when the failed handshake was seen first (a slow run,
  // ASan under load, can see it before the send): either way nothing may be delivered.
  const Status keyless_sent = keyless->send(member->endpoint(), ping(1));
  const Status other_sent = other->send(member->endpoint(), ping(2));
  const Status member_sent = member->send(keyless->endpoint(), ping(3));  // to a stranger
  SCOPED_TRACE("sends: " + keyless_sent.to_string() + " / " + other_sent.to_string() + " / " +
               member_sent.to_string());
  EXPECT_EQ(member_in.wait_for(1, Millis(1500)), 0u);
  EXPECT_EQ(keyless_in.wait_for(1, Millis(100)), 0u);
  // The member's own handshake to the keyless endpoint failed, and it says so.
  const auto deadline = now() + std::chrono::seconds(5);
  while (member->stats().auth_failed == 0 && now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(member->stats().auth_failed, 0u);
}

TEST(ZmqCurve, AForgedClientKeyIsRefusedEvenKnowingTheServerKey) {
  // An attacker who somehow learned the (public) server key but not the secret: CURVE
  // completes, the ZAP handler refuses the client key.
  auto key = key_of(1);
  Counter member_in;
  auto member = start(key, member_in);
  zmq::context_t ctx(1);
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  uint8_t pk[32], sk[32];
  crypto_box_keypair(pk, sk);
  auto server = key->curve_pair(KeyUse::kCurveServer);
  ASSERT_EQ(zmq_setsockopt(push.handle(), ZMQ_CURVE_SERVERKEY, server.public_key.data(), 32), 0);
  ASSERT_EQ(zmq_setsockopt(push.handle(), ZMQ_CURVE_PUBLICKEY, pk, 32), 0);
  ASSERT_EQ(zmq_setsockopt(push.handle(), ZMQ_CURVE_SECRETKEY, sk, 32), 0);
  push.connect(member->endpoint());
  Multipart frames = encode(ping(9));
  for (size_t i = 0; i < frames.size(); ++i) {
    push.send(zmq::buffer(frames[i]),
              i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::dontwait);
  }
  const auto deadline = now() + std::chrono::seconds(5);
  while (member->stats().auth_refused == 0 && now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(member->stats().auth_refused, 0u);
  EXPECT_EQ(member_in.wait_for(1, Millis(300)), 0u);
  push.close();
  ctx.close();
}

}  // namespace
}  // namespace pdkv::proto

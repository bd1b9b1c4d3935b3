// PeerLinkState: the event sequences libzmq 4.3.4 emits (peer_monitor.h), as tables.
#include "proto/peer_monitor.h"

#include <gtest/gtest.h>

#include <vector>

namespace pdkv::proto {
namespace {

constexpr uint16_t kDelayed = ZMQ_EVENT_CONNECT_DELAYED, kConnected = ZMQ_EVENT_CONNECTED,
                   kHandshake = ZMQ_EVENT_HANDSHAKE_SUCCEEDED,
                   kDisconnected = ZMQ_EVENT_DISCONNECTED, kRetried = ZMQ_EVENT_CONNECT_RETRIED,
                   kClosed = ZMQ_EVENT_CLOSED;

// How many events of `events` report the peer gone.
int reports(PeerLinkState& state, const std::vector<uint16_t>& events) {
  int n = 0;
  for (uint16_t e : events) n += state.on_event(e) ? 1 : 0;
  return n;
}

TEST(ZmqPeerLinkStateTest, KilledPeerIsGoneAtTheFirstRefusedReconnectAndOnlyOnce) {
  PeerLinkState s;
  EXPECT_EQ(reports(s, {kDelayed, kConnected, kHandshake, kDisconnected, kRetried, kDelayed}), 0);
  EXPECT_TRUE(s.on_event(kClosed));
  EXPECT_EQ(reports(s, {kRetried, kDelayed, kClosed, kRetried, kDelayed, kClosed}), 0);
  EXPECT_TRUE(s.gone());
}

TEST(ZmqPeerLinkStateTest, ResetWithTheProcessAliveIsNotGone) {
  PeerLinkState s;
  EXPECT_EQ(reports(s, {kDelayed, kConnected, kHandshake, kDisconnected, kRetried, kDelayed,
                        kConnected, kHandshake, kDisconnected, kRetried, kConnected}),
            0);
  EXPECT_FALSE(s.gone());
}

TEST(ZmqPeerLinkStateTest, PeerThatNeverAcceptedIsNotGone) {
  PeerLinkState s;
  EXPECT_EQ(reports(s, {kDelayed, kClosed, kRetried, kDelayed, kClosed, kRetried, kClosed}), 0);
}

TEST(ZmqPeerLinkStateTest, RestartAtTheSamePortRearms) {
  PeerLinkState s;
  EXPECT_EQ(reports(s, {kConnected, kDisconnected, kClosed, kClosed}), 1);
  EXPECT_EQ(reports(s, {kDelayed, kConnected, kHandshake}), 0);
  EXPECT_FALSE(s.gone());
  EXPECT_EQ(reports(s, {kDisconnected, kRetried, kDelayed, kClosed, kClosed}), 1);
}

}  // namespace
}  // namespace pdkv::proto

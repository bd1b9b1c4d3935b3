// Hostile clients against a real HttpListener on loopback: every limit of
// http_listener.h, each checked by what a client sees (a status, a closed connection,
// silence) and by /health still answering a well-behaved client meanwhile. These are the
// attacks a security review ran against cpp-httplib 0.11, which bounded none of them.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "http/http_listener.h"
#include "http/testing/raw_http_client.h"

namespace pdkv::http {
namespace {

using std::chrono::milliseconds;
using testing::body_chunk;
using testing::raw_get;
using testing::RawConnection;
using testing::RawReply;

constexpr size_t kMiB = 1 << 20;

// /health answers "OK"; PUT /echo answers with the size of the body it got.
std::unique_ptr<HttpListener> start_listener(HttpListenerOptions o) {
  o.name = "limits-test";
  o.host = "127.0.0.1";
  o.port = 0;
  HttpRouter router("limits-test");
  router.on(HttpMethod::kGet, "/health",
            [](const HttpRequest&, HttpResponse& res) { res.set_content("OK", "text/plain"); });
  router.on(HttpMethod::kPut, "/echo", [](const HttpRequest& req, HttpResponse& res) {
    res.set_content(std::to_string(req.body.size()), "text/plain");
  });
  auto l = HttpListener::start(o, std::move(router));
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return l.ok() ? std::move(l).value() : nullptr;
}

std::unique_ptr<HttpListener> start_with_body_limit(size_t max_body_bytes) {
  HttpListenerOptions o;
  o.max_body_bytes = max_body_bytes;
  return start_listener(o);
}

// This process's resident set, from /proc (the server runs in it).
size_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(HttpListenerLimits, AChunkedBodyWithinTheLimitIsServed) {
  auto l = start_with_body_limit(kMiB);
  ASSERT_TRUE(l);
  RawConnection c(l->port());
  ASSERT_TRUE(c.send_all("PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(c.send_all(body_chunk(64 * 1024)));
  ASSERT_TRUE(c.send_all("0\r\n\r\n"));
  RawReply r = c.read_reply(milliseconds(5000));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, std::to_string(15 * 64 * 1024));
}

// (a) cpp-httplib 0.11 kept reading a chunked body past its limit into memory (3.9 GB
// observed). Here the connection is cut once the sum passes 1 MiB, so a 64 MiB stream
// gets nowhere near its end, and the server's memory does not grow with it.
TEST(HttpListenerLimits, AChunkedBodyPastTheLimitIsCutOffWithoutBeingBuffered) {
  auto l = start_with_body_limit(kMiB);
  ASSERT_TRUE(l);
  const size_t rss_before = rss_bytes();
  RawConnection c(l->port());
  ASSERT_TRUE(c.send_all("PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const size_t sent = c.send_chunks(64 * 1024, 64 * kMiB);
  // What the socket buffers on both sides absorb before the reset arrives: a few MiB.
  EXPECT_LT(sent, 16 * kMiB) << "the server kept reading past its 1 MiB limit";
  RawReply r = c.read_reply(milliseconds(2000));
  EXPECT_TRUE(r.status == 413 || r.status == 0) << r.status;  // 413, or reset before it
  EXPECT_LT(rss_bytes(), rss_before + 16 * kMiB) << "the server buffered the body";
  EXPECT_EQ(raw_get(l->port(), "/health", milliseconds(1000)).status, 200);
}

TEST(HttpListenerLimits, ADeclaredBodyPastTheLimitIs413BeforeAnyOfItIsSent) {
  auto l = start_with_body_limit(kMiB);
  ASSERT_TRUE(l);
  RawConnection c(l->port());
  ASSERT_TRUE(c.send_all("PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 104857600\r\n\r\n"));
  RawReply r = c.read_reply(milliseconds(2000));
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("limit of 1048576 bytes"), std::string::npos) << r.body;
  EXPECT_TRUE(c.closed_within(milliseconds(2000)));
}

// (b) cpp-httplib 0.11 took any number of headers.
TEST(HttpListenerLimits, TenThousandHeadersAreRefusedAndHealthStillAnswers) {
  auto l = start_listener(HttpListenerOptions{});
  ASSERT_TRUE(l);
  std::string flood = "GET /health HTTP/1.1\r\nHost: t\r\n";
  for (int i = 0; i < 10000; ++i) flood += "X-Flood-" + std::to_string(i) + ": v\r\n";
  flood += "\r\n";
  RawConnection c(l->port());
  c.send_all(flood);  // the server may close before all of it is in
  RawReply r = c.read_reply(milliseconds(3000));
  EXPECT_TRUE(r.status == 431 || r.status == 0) << r.status;  // 431, or closed: not served
  EXPECT_EQ(raw_get(l->port(), "/health", milliseconds(1000)).status, 200);
}

TEST(HttpListenerLimits, MoreHeadersThanTheCountLimitAre431EvenWhenTheyAreSmall) {
  HttpListenerOptions o;
  o.max_header_count = 100;
  auto l = start_listener(o);
  ASSERT_TRUE(l);
  std::string request = "GET /health HTTP/1.1\r\nHost: t\r\n";
  for (int i = 0; i < 100; ++i) request += "X" + std::to_string(i) + ": v\r\n";  // 101 in all
  RawConnection c(l->port());
  ASSERT_TRUE(c.send_all(request + "\r\n"));
  RawReply r = c.read_reply(milliseconds(3000));
  EXPECT_EQ(r.status, 431);
  EXPECT_NE(r.body.find("at most 100"), std::string::npos) << r.body;
  // 100 headers in all pass.
  request = "GET /health HTTP/1.1\r\nHost: t\r\n";
  for (int i = 0; i < 99; ++i) request += "X" + std::to_string(i) + ": v\r\n";
  RawConnection ok(l->port());
  ASSERT_TRUE(ok.send_all(request + "\r\n"));
  EXPECT_EQ(ok.read_reply(milliseconds(3000)).status, 200);
}

// (c) Slowloris: with cpp-httplib 0.11 each of these held a worker thread for as long as
// it kept sending, and 10 of them stopped /health. Here they cost no thread, and the
// whole-request deadline closes them although each byte restarts the idle timeout.
TEST(HttpListenerLimits, SlowlorisConnectionsNeitherStopHealthNorOutliveTheDeadline) {
  HttpListenerOptions o;
  o.request_deadline = milliseconds(3000);
  o.idle_timeout = std::chrono::seconds(10);
  auto l = start_listener(o);
  ASSERT_TRUE(l);
  constexpr int kSlow = 50;
  std::vector<RawConnection> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.emplace_back(l->port());
    ASSERT_TRUE(slow.back().ok());
  }
  // One byte a second to each, from one thread, until the server cuts them off (or 10 s).
  const std::string request =
      "GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: " + std::string(64, 'z') + "\r\n\r\n";
  std::atomic<bool> done{false};
  std::atomic<int> cut{0};
  std::vector<bool> alive(kSlow, true);
  std::thread trickle([&] {
    for (size_t byte = 0; byte < request.size() && !done; ++byte) {
      for (int i = 0; i < kSlow; ++i) {
        if (alive[i] && !slow[i].send_all(request.substr(byte, 1))) {
          alive[i] = false;
          cut++;
        }
      }
      for (int t = 0; t < 10 && !done; ++t) std::this_thread::sleep_for(milliseconds(100));
    }
  });
  // Meanwhile /health answers a fresh client within 1 s, again and again.
  const TimePoint started = now();
  int answered = 0;
  while (elapsed_ms(started) < 2500) {
    TimePoint asked = now();
    RawReply r = raw_get(l->port(), "/health", milliseconds(1000));
    EXPECT_EQ(r.status, 200) << "after " << elapsed_ms(started) << " ms";
    EXPECT_LT(elapsed_ms(asked), 1000);
    if (r.status == 200) ++answered;
    std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_GE(answered, 5);
  // Every slow connection is closed by the server soon after its 3 s deadline.
  int closed = 0;
  for (auto& c : slow) closed += c.closed_within(milliseconds(5000)) ? 1 : 0;
  done = true;
  trickle.join();
  EXPECT_EQ(closed, kSlow);
  EXPECT_LT(elapsed_ms(started), 9000) << "the deadline, not the 10 s idle timeout, closed them";
  EXPECT_GE(l->deadline_expiries(), static_cast<uint64_t>(kSlow));
  EXPECT_EQ(raw_get(l->port(), "/health", milliseconds(1000)).status, 200);
}

// A kept-alive connection gets a fresh deadline for each request.
TEST(HttpListenerLimits, TheDeadlineRestartsForEachRequestOnAKeptAliveConnection) {
  HttpListenerOptions o;
  o.request_deadline = milliseconds(1500);
  auto l = start_listener(o);
  ASSERT_TRUE(l);
  RawConnection c(l->port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send_all(testing::get_request("/health")));
    ASSERT_EQ(c.read_reply(milliseconds(1000)).status, 200) << i;
    std::this_thread::sleep_for(milliseconds(800));  // 2.4 s in all: past one deadline
  }
  EXPECT_EQ(l->deadline_expiries(), 0u);
}

// (d) One client address cannot take every slot: past its cap a connection is closed at
// once, while another address is still served.
TEST(HttpListenerLimits, PastThePerAddressCapAConnectionIsClosedAndOtherAddressesAreServed) {
  HttpListenerOptions o;
  o.max_connections_per_ip = 4;
  auto l = start_listener(o);
  ASSERT_TRUE(l);
  std::vector<RawConnection> held;
  for (int i = 0; i < 4; ++i) {  // accepted for sure: each has had an answer
    held.emplace_back(l->port());
    ASSERT_TRUE(held.back().send_all(testing::get_request("/health")));
    ASSERT_EQ(held.back().read_reply(milliseconds(2000)).status, 200);
  }
  RawConnection fifth(l->port());
  ASSERT_TRUE(fifth.ok());  // the kernel accepts it; the server closes it at once
  EXPECT_TRUE(fifth.closed_within(milliseconds(2000)));
  EXPECT_EQ(raw_get(l->port(), "/health", milliseconds(1000), "127.0.0.2").status, 200);
  held.clear();
  // Once they are gone the first address is served again.
  RawReply again;
  for (TimePoint until = now() + milliseconds(3000); now() < until;) {
    again = raw_get(l->port(), "/health", milliseconds(500));
    if (again.status == 200) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(again.status, 200);
}

// (d) Past the overall cap no connection is served until one closes.
TEST(HttpListenerLimits, PastTheConnectionCapNothingIsServedUntilASlotFrees) {
  HttpListenerOptions o;
  o.max_connections = 8;
  o.max_connections_per_ip = 0;
  o.worker_threads = 4;  // the cap is split: 2 connections a worker
  auto l = start_listener(o);
  ASSERT_TRUE(l);
  std::vector<RawConnection> held;
  for (int i = 0; i < 8; ++i) {
    held.emplace_back(l->port());
    ASSERT_TRUE(held.back().send_all(testing::get_request("/health")));
    ASSERT_EQ(held.back().read_reply(milliseconds(2000)).status, 200) << i;
  }
  RawConnection ninth(l->port());
  ASSERT_TRUE(ninth.send_all(testing::get_request("/health")));
  EXPECT_EQ(ninth.read_reply(milliseconds(1000)).status, -1) << "served past the cap";
  EXPECT_EQ(raw_get(l->port(), "/health", milliseconds(500)).status, -1);
  for (int i = 5; i < 8; ++i) held[i].close();  // three slots free
  EXPECT_EQ(ninth.read_reply(milliseconds(3000)).status, 200);
  EXPECT_EQ(raw_get(l->port(), "/health", milliseconds(3000)).status, 200);
}

// (e) No SO_REUSEPORT: a second server on a port in use is refused, saying why.
TEST(HttpListenerLimits, ASecondBindOfThePortIsUnavailableSayingItIsInUse) {
  auto first = start_listener(HttpListenerOptions{});
  ASSERT_TRUE(first);
  ASSERT_GT(first->port(), 0);  // port 0 reports the port the kernel chose
  HttpListenerOptions o;
  o.name = "second";
  o.host = "127.0.0.1";
  o.port = first->port();
  auto second = HttpListener::start(o, HttpRouter("second"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos)
      << second.status().to_string();
  EXPECT_EQ(raw_get(first->port(), "/health", milliseconds(1000)).status, 200);
  // Once the first is gone the port can be taken again (SO_REUSEADDR).
  int port = first->port();
  first->stop();
  auto third = HttpListener::start(o, HttpRouter("third"));
  EXPECT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_EQ((*third)->port(), port);
}

TEST(HttpListenerLimits, LimitsThatBoundNothingAreRefused) {
  HttpListenerOptions o;
  o.max_connections = 0;
  EXPECT_EQ(HttpListener::start(o, HttpRouter("x")).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdkv::http

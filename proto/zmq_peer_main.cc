// Test peer process for zmq_endpoint_test (not installed).
//   proto_zmq_peer echo <reply_endpoint>
//       prints its endpoint on stdout, sends every message it receives to reply_endpoint,
//       answers a Ping with a Pong to the ping's sender; exits 0 on an Abort whose
//       reason is "exit", or after 60 s without a message.
//   proto_zmq_peer garbage <endpoint>
//       sends malformed and truncated multipart messages from a raw PUSH socket, then
//       the sample messages, then exits 0.
#include <cstdio>
#include <cstring>
#include <zmq.hpp>

#include "common/mutex.h"
#include "proto/codec.h"
#include "proto/coding.h"
#include "proto/test_messages.h"
#include "proto/zmq_endpoint.h"

using namespace pdkv;         // NOLINT: test program
using namespace pdkv::proto;  // NOLINT

namespace {

int echo(const std::string& reply_to) {
  Mutex mu;
  CondVar cv;
  bool done = false;
  uint64_t seen = 0;
  // Atomic: the receive thread reads it, and TSan cannot see libzmq's own ordering.
  std::atomic<ZmqEndpoint*> self{nullptr};
  auto ep = ZmqEndpoint::start(EndpointOptions{}, [&](Message&& m, const std::string&) {
    Status st = self.load()->send(reply_to, m);
    if (auto* ping = std::get_if<Ping>(&m)) {
      st = self.load()->send(ping->sender.control_endpoint,
                             Pong{testing::sample_identity(Role::kPrefill, 9), ping->seq});
    }
    MutexLock lock(mu);
    ++seen;
    if (auto* abort = std::get_if<Abort>(&m); abort && abort->reason == "exit") done = true;
    cv.notify_all();
    return st;
  });
  if (!ep.ok()) {
    std::fprintf(stderr, "%s\n", ep.status().to_string().c_str());
    return 1;
  }
  self = ep->get();
  std::printf("%s\n", (*ep)->endpoint().c_str());
  std::fflush(stdout);
  MutexLock lock(mu);
  for (;;) {
    uint64_t before = seen;
    bool woke = cv.wait_for(mu, std::chrono::seconds(60), [&] { return done || seen != before; });
    if (done) break;
    if (!woke) return 2;  // orphaned: the test died
  }
  return 0;
}

int garbage(const std::string& target) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::push);
  s.set(zmq::sockopt::linger, 5000);  // deliver everything before exiting
  s.connect(target);
  auto send_all = [&](const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      (void)s.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  Multipart good = encode(std::get<TransferStatus>(testing::sample_messages()[2]));
  send_all({"not a pdkv message"});
  send_all({""});
  send_all({good[0]});                                         // header only
  send_all({good[0], good[1].substr(0, good[1].size() / 2)});  // truncated body
  Multipart v2 = good;
  v2[0][4] = static_cast<char>(kProtocolVersion + 7);  // another protocol version
  send_all(v2);
  Multipart forged = good;  // header and body agree, body lies about an array count
  encode_fixed<uint32_t>(forged[1].data() + 8 + 1 + 4 + 4 + 8, 0x7fffffff);
  send_all(forged);
  send_all(std::vector<std::string>(20, good[0]));  // too many frames
  for (const Message& m : testing::sample_messages()) send_all(encode_message(m));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "echo") == 0) return echo(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "garbage") == 0) return garbage(argv[2]);
  std::fprintf(stderr, "usage: proto_zmq_peer echo|garbage <endpoint>\n");
  return 2;
}

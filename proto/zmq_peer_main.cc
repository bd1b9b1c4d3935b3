// Test peer process for zmq_endpoint_test (not installed).
//   proto_zmq_peer echo <reply_endpoint>
//       prints its endpoint on stdout, sends every message it receives to reply_endpoint,
//       answers a Ping with a Pong to the ping's sender; exits 0 on an Abort whose
//       reason is "exit", or after 60 s without a message. An Abort whose reason is
//       "reset" shuts down every TCP connection accepted on its endpoint's port (the
//       process and its listener live on) and prints "reset <connections>".
//   proto_zmq_peer listen <reply_endpoint> <bind_endpoint>
//       the same echo from a PULL socket bound at bind_endpoint (a fixed port: a peer
//       that starts listening late, or a restart at the same port); prints "ready" once
//       bound.
//   proto_zmq_peer garbage <endpoint>
//       sends malformed and truncated multipart messages from a raw PUSH socket, then
//       the sample messages, then exits 0.
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <zmq.hpp>

#include "common/host_port.h"
#include "common/mutex.h"
#include "proto/codec.h"
#include "proto/coding.h"
#include "proto/test_messages.h"
#include "proto/zmq_endpoint.h"

using namespace pdkv;         // NOLINT: test program
using namespace pdkv::proto;  // NOLINT

namespace {

int port_of(const std::string& endpoint) {
  Result<HostPort> hp = parse_tcp_endpoint(endpoint);
  return hp.ok() ? hp->port : 0;
}

// shutdown() (not close(): libzmq owns the descriptors) of every accepted TCP connection
// whose local port is `port`. The peer sees the connection end, as after a reset.
int shut_down_accepted(int port) {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  while (dirent* e = readdir(dir)) {
    int fd = std::atoi(e->d_name);
    if (fd <= STDERR_FILENO || fd == dirfd(dir)) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening) continue;
    sockaddr_storage local{};
    len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    int local_port = -1;
    if (local.ss_family == AF_INET)
      local_port = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    if (local.ss_family == AF_INET6)
      local_port = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
    if (local_port == port && ::shutdown(fd, SHUT_RDWR) == 0) ++n;
  }
  closedir(dir);
  return n;
}

// Echoes through `sender` (the process's ZmqEndpoint); returns the send status.
struct Echo {
  explicit Echo(std::string reply) : reply_to(std::move(reply)) {}
  const std::string reply_to;
  std::atomic<ZmqEndpoint*> sender{nullptr};  // TSan cannot see libzmq's own ordering
  Mutex mu;
  CondVar cv;
  bool done PDKV_GUARDED_BY(mu) = false;
  uint64_t seen PDKV_GUARDED_BY(mu) = 0;

  Status on_message(const Message& m, int listen_port) {
    Status st = sender.load()->send(reply_to, m);
    if (auto* ping = std::get_if<Ping>(&m)) {
      st = sender.load()->send(ping->sender.control_endpoint,
                               Pong{testing::sample_identity(Role::kPrefill, 9), ping->seq});
    }
    if (auto* abort = std::get_if<Abort>(&m); abort && abort->reason == "reset") {
      std::printf("reset %d\n", shut_down_accepted(listen_port));
      std::fflush(stdout);
    }
    MutexLock lock(mu);
    ++seen;
    if (auto* abort = std::get_if<Abort>(&m); abort && abort->reason == "exit") done = true;
    cv.notify_all();
    return st;
  }
  // 0 after "exit", 2 after 60 s without a message (the test died).
  int wait() {
    MutexLock lock(mu);
    for (;;) {
      uint64_t before = seen;
      bool woke = cv.wait_for(mu, std::chrono::seconds(60), [&]() PDKV_NO_THREAD_SAFETY_ANALYSIS {
        return done || seen != before;
      });
      if (done) return 0;
      if (!woke) return 2;
    }
  }
};

int echo(const std::string& reply_to) {
  Echo echo(reply_to);
  std::atomic<int> port{0};
  auto ep = ZmqEndpoint::start(EndpointOptions{}, [&](Message&& m, const std::string&) {
    return echo.on_message(m, port.load());
  });
  if (!ep.ok()) {
    std::fprintf(stderr, "%s\n", ep.status().to_string().c_str());
    return 1;
  }
  port = port_of((*ep)->endpoint());
  echo.sender = ep->get();
  std::printf("%s\n", (*ep)->endpoint().c_str());
  std::fflush(stdout);
  return echo.wait();
}

int listen_at(const std::string& reply_to, const std::string& bind_endpoint) {
  Echo echo(reply_to);
  auto ep =
      ZmqEndpoint::start(EndpointOptions{}, [](Message&&, const std::string&) { return Status(); });
  if (!ep.ok()) return 1;
  echo.sender = ep->get();
  zmq::context_t ctx(1);
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  pull.set(zmq::sockopt::linger, 0);
  pull.set(zmq::sockopt::rcvtimeo, 60000);
  try {
    pull.bind(bind_endpoint);
  } catch (const zmq::error_t& e) {
    std::printf("cannot bind %s: %s\n", bind_endpoint.c_str(), e.what());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) {
    std::vector<zmq::message_t> parts;
    bool more = true;
    while (more) {
      zmq::message_t part;
      if (!pull.recv(part)) return 2;  // 60 s without a message
      more = part.more();
      parts.push_back(std::move(part));
    }
    std::vector<std::string_view> views;
    for (const auto& p : parts) views.emplace_back(p.data<char>(), p.size());
    auto m = decode_message(views);
    if (!m.ok()) continue;
    (void)echo.on_message(*m, port_of(bind_endpoint));
    if (auto* abort = std::get_if<Abort>(&*m); abort && abort->reason == "exit") return 0;
  }
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
  if (argc == 4 && std::strcmp(argv[1], "listen") == 0) return listen_at(argv[2], argv[3]);
  if (argc == 3 && std::strcmp(argv[1], "garbage") == 0) return garbage(argv[2]);
  std::fprintf(stderr, "usage: proto_zmq_peer echo|garbage <endpoint> | listen <reply> <bind>\n");
  return 2;
}

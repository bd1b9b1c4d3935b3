#include "robustness/hostile/engine_attacks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <regex>
#include <thread>
#include <vector>

#include "common/host_port.h"
#include "engine/backends/tcp/socket_util.h"
#include "engine/backends/tcp/tcp_frame.h"
#include "engine/transfer_engine.h"

namespace pdkv::hostile {

using nlohmann::json;
namespace tcp = engine::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kConnectTimeoutMs = 2000;
constexpr int kAckTimeoutMs = 5000;
// A connection closed this soon after it opened was refused at accept (the cap).
constexpr int kAtOnceMs = 500;

int ms_since(Clock::time_point t0) {
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

// Watches open connections for `hold_ms`: when (ms after `t0`) the peer closed each one,
// or nullopt if it was still open at the end.
std::vector<std::optional<int>> watch_closures(const std::vector<tcp::UniqueFd>& fds,
                                               Clock::time_point t0, int hold_ms) {
  std::vector<std::optional<int>> closed(fds.size());
  size_t open = fds.size();
  while (open > 0 && ms_since(t0) < hold_ms) {
    std::vector<pollfd> polls;
    std::vector<size_t> index;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (closed[i]) continue;
      polls.push_back(pollfd{fds[i].get(), POLLIN | POLLRDHUP, 0});
      index.push_back(i);
    }
    const int n =
        ::poll(polls.data(), polls.size(), std::max(1, std::min(50, hold_ms - ms_since(t0))));
    if (n <= 0) continue;
    for (size_t k = 0; k < polls.size(); ++k) {
      if (polls[k].revents == 0) continue;
      // Read all that is there: a receiver with no slot writes a refusal frame before it
      // closes, and reading it a byte per poll round would time the attacker's reading,
      // not the close.
      char buf[4096];
      ssize_t r;
      do {
        r = ::recv(polls[k].fd, buf, sizeof buf, MSG_DONTWAIT);
      } while (r > 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) ||
          (polls[k].revents & (POLLHUP | POLLERR))) {
        closed[index[k]] = ms_since(t0);
        --open;
      }
    }
  }
  return closed;
}

json closure_summary(const std::vector<std::optional<int>>& closed) {
  int at_once = 0, later = 0, open = 0;
  std::vector<int> later_ms;
  for (const auto& c : closed) {
    if (!c) {
      ++open;
    } else if (*c < kAtOnceMs) {
      ++at_once;
    } else {
      ++later;
      later_ms.push_back(*c);
    }
  }
  std::sort(later_ms.begin(), later_ms.end());
  return json{{"closed_at_once", at_once},
              {"closed_later", later},
              {"still_open", open},
              {"closed_later_median_ms", later_ms.empty() ? -1 : later_ms[later_ms.size() / 2]}};
}

// Every "0x..." number in `text`.
std::vector<uint64_t> hex_numbers(const std::string& text) {
  std::vector<uint64_t> out;
  static const std::regex hex("0x([0-9a-fA-F]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), hex), end; it != end; ++it) {
    out.push_back(std::stoull((*it)[1].str(), nullptr, 16));
  }
  return out;
}

}  // namespace

json raw_write(const AttackOptions& o) {
  json report{{"attack", "raw_write"}, {"dst", o.dst}, {"length", o.length}, {"grant", o.grant}};
  engine::EngineOptions eo;
  eo.cluster_key = o.key;
  eo.connect_timeout_ms = kConnectTimeoutMs;
  eo.tcp.streams = 1;
  auto engine = engine::TransferEngine::create(eo);
  if (!engine.ok()) {
    report["error"] = engine.status().to_string();
    return report;
  }
  auto session = (*engine)->open_session(o.engine);
  if (!session.ok()) {
    report["refused"] = true;
    report["stage"] = "session";
    report["status"] = session.status().to_string();
    return report;
  }
  std::vector<uint8_t> src(o.length * o.count, 0xEE);
  std::vector<engine::WriteBlock> blocks;
  for (uint64_t i = 0; i < o.count; ++i) {
    blocks.push_back({reinterpret_cast<uint64_t>(src.data()) + i * o.length, o.dst + i * o.length,
                      o.length, o.grant});
  }
  Status st = (*engine)->transfer(*session, blocks);
  report["refused"] = !st.ok();
  report["stage"] = "write";
  report["status"] = st.ok() ? "OK" : st.to_string();
  return report;
}

json probe(const AttackOptions& o) {
  json report{{"attack", "probe"}, {"dst", o.dst}, {"length", o.length}, {"grant", o.grant}};
  auto fd = tcp::connect_tcp(o.engine, kConnectTimeoutMs);
  if (!fd.ok()) {
    report["refused"] = true;
    report["status"] = fd.status().to_string();
    return report;
  }
  tcp::EventFd stop;
  std::vector<uint8_t> frame(tcp::kHeaderSize + tcp::kEntrySize + o.length, 0xEE);
  tcp::FrameHeader header;
  header.type = tcp::FrameType::kPart;
  header.part_id = 1;
  header.count = 1;
  header.payload_bytes = o.length;
  tcp::encode_header(header, frame.data());
  tcp::encode_entry(tcp::WireEntry{o.dst, o.length, 1, 0, o.grant},
                    frame.data() + tcp::kHeaderSize);
  Status st = tcp::write_full(fd->get(), frame.data(), frame.size(), stop.fd(), kAckTimeoutMs);
  uint8_t ack_header[tcp::kHeaderSize];
  if (st.ok()) {
    st = tcp::read_full(fd->get(), ack_header, sizeof ack_header, stop.fd(), kAckTimeoutMs,
                        kAckTimeoutMs);
  }
  if (!st.ok()) {
    // With a cluster secret the victim closes a connection that does not authenticate
    // before it reads a frame: no ACK, nothing learned.
    report["refused"] = true;
    report["closed_before_ack"] = true;
    report["status"] = st.to_string();
    return report;
  }
  auto h = tcp::decode_header(std::span<const uint8_t>(ack_header, sizeof ack_header), 1);
  if (!h.ok() || h->type != tcp::FrameType::kAck) {
    report["error"] =
        "not an ACK: " + (h.ok() ? std::string("other frame") : h.status().to_string());
    return report;
  }
  std::vector<uint8_t> body(h->count);
  st = tcp::read_full(fd->get(), body.data(), body.size(), stop.fd(), kAckTimeoutMs, kAckTimeoutMs);
  auto ack = st.ok() ? tcp::decode_ack_body(body, *h) : Result<tcp::AckBody>(st);
  if (!ack.ok()) {
    report["error"] = ack.status().to_string();
    return report;
  }
  const auto code = static_cast<StatusCode>(h->aux);
  const uint64_t end = o.dst + o.length;
  json leaks = json::array();
  for (uint64_t a : hex_numbers(ack->message)) {
    if ((a < o.dst || a > end) && a != o.grant) leaks.push_back(a);
  }
  const bool bad_inside = ack->bad_addr >= o.dst && ack->bad_addr < end;
  if (code != StatusCode::kOk && !bad_inside) leaks.push_back(ack->bad_addr);
  report["refused"] = code != StatusCode::kOk;
  report["code"] = std::string(status_code_name(code));
  report["bytes_written"] = h->payload_bytes;
  report["entry_index"] = ack->entry_index;
  report["bad_addr"] = ack->bad_addr;
  report["bad_addr_inside_write"] = bad_inside;
  report["message"] = ack->message;
  report["leaks"] = leaks;
  return report;
}

json idle_connections(const AttackOptions& o) {
  std::vector<tcp::UniqueFd> fds;
  int connect_failed = 0;
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < o.count; ++i) {
    auto fd = tcp::connect_tcp(o.engine, kConnectTimeoutMs);
    if (fd.ok()) {
      fds.push_back(std::move(fd).value());
    } else {
      ++connect_failed;
    }
  }
  json report = closure_summary(watch_closures(fds, t0, o.hold_ms));
  report["attack"] = "idle_connections";
  report["opened"] = fds.size();
  report["connect_failed"] = connect_failed;
  report["open_ms"] = ms_since(t0);
  return report;
}

json huge_header(const AttackOptions& o) {
  std::vector<tcp::UniqueFd> fds;
  tcp::EventFd stop;
  uint8_t frame[tcp::kHeaderSize];
  tcp::FrameHeader header;
  header.type = tcp::FrameType::kPart;
  header.part_id = 1;
  header.count = o.entries;
  header.payload_bytes = o.entries;  // the smallest payload those entries can carry
  tcp::encode_header(header, frame);
  int send_failed = 0;
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < o.count; ++i) {
    auto fd = tcp::connect_tcp(o.engine, kConnectTimeoutMs);
    if (!fd.ok() || !tcp::write_full(fd->get(), frame, sizeof frame, stop.fd(), 1000).ok()) {
      ++send_failed;
      continue;
    }
    fds.push_back(std::move(fd).value());
  }
  json report = closure_summary(watch_closures(fds, t0, o.hold_ms));
  report["attack"] = "huge_header";
  report["declared_entries"] = o.entries;
  report["sent"] = fds.size();
  report["send_failed"] = send_failed;
  return report;
}

json hold_slots(const AttackOptions& o) {
  json report{{"attack", "hold_slots"}};
  Result<HostPort> target = parse_host_port(o.engine);
  if (!target.ok()) {
    report["error"] = target.status().to_string();
    return report;
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(target->port);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  if (::inet_pton(AF_INET, target->host.c_str(), &to.sin_addr) != 1 ||
      (!o.source.empty() && ::inet_pton(AF_INET, o.source.c_str(), &from.sin_addr) != 1)) {
    report["error"] = "hold-slots takes IPv4 addresses";
    return report;
  }
  // A blocking connect from `source`: on loopback it completes (or is refused) at once.
  auto open_one = [&]() -> tcp::UniqueFd {
    tcp::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return fd;
    const timeval limit{1, 0};  // a connect that would wait on a full backlog gives up
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    if (!o.source.empty() &&
        ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&from), sizeof from) != 0) {
      return tcp::UniqueFd();
    }
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
      return tcp::UniqueFd();
    }
    return fd;
  };
  std::vector<tcp::UniqueFd> fds;
  uint64_t opened = 0, failed = 0;
  size_t most = 0;
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::milliseconds(o.hold_ms);
  while (Clock::now() < end) {
    while (fds.size() < o.count) {
      tcp::UniqueFd fd = open_one();
      if (fd.get() < 0) {
        ++failed;
        break;
      }
      fds.push_back(std::move(fd));
      ++opened;
    }
    most = std::max(most, fds.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // Drop what the victim closed (readable with nothing to read, or an error).
    std::vector<pollfd> polls;
    for (const auto& fd : fds) polls.push_back(pollfd{fd.get(), POLLIN, 0});
    (void)::poll(polls.data(), polls.size(), 0);
    std::vector<tcp::UniqueFd> open;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (polls[i].revents == 0) open.push_back(std::move(fds[i]));
    }
    fds = std::move(open);
  }
  report["opened"] = opened;
  report["connect_failed"] = failed;
  report["held_most"] = most;
  report["held_at_end"] = fds.size();
  return report;
}

}  // namespace pdkv::hostile

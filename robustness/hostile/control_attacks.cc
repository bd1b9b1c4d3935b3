#include "robustness/hostile/control_attacks.h"

#include <chrono>
#include <string>
#include <thread>

#include "robustness/hostile/stranger_decode.h"

namespace pdkv::hostile {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

// Long enough for ZeroMQ to try (and, with a secret on the victim, fail) a handshake.
constexpr milliseconds kHandshakeWait{500};
// Messages built and queued per batch, so a 100k flood never sits in memory at once.
constexpr size_t kBatch = 4096;

// Runs one control attack as a stranger decode of its own: `attack(stranger)` sends what
// it sends and returns its report, to which this adds the attack's name and what every
// control attack reports at the end (the handshake refused, the answers it got). A
// stranger that did not start is reported with the reason.
template <typename Attack>
json with_stranger(const std::string& name, const AttackOptions& o, Attack attack) {
  auto started = StrangerDecode::start(o);
  if (!started.ok()) return json{{"attack", name}, {"error", started.status().to_string()}};
  StrangerDecode& s = **started;
  json report = attack(s);
  report["attack"] = name;
  report["handshake_refused"] = s.wait_handshake_refused(kHandshakeWait) > 0;
  report["answers"] = s.messages_received();
  return report;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

json status_json(const proto::TransferStatus& st) {
  return json{{"room", st.room},
              {"state", st.state == proto::TransferState::kSuccess ? "success" : "failed"},
              {"reason", st.failure_reason.substr(0, 300)}};
}

json registration_json(const std::optional<proto::RegistrationResult>& r) {
  if (!r) return json{{"answered", false}};
  return json{{"answered", true}, {"accepted", r->accepted}, {"reason", r->reason}};
}

// Sends `n` messages made by make(i), in batches; returns how many were queued.
template <typename Make>
size_t send_generated(StrangerDecode& s, const std::string& to, uint64_t n, Make make) {
  size_t sent = 0;
  std::vector<proto::Message> batch;
  for (uint64_t i = 0; i < n;) {
    batch.clear();
    for (; i < n && batch.size() < kBatch; ++i) batch.push_back(make(i));
    const size_t queued = s.send_all(to, batch);
    sent += queued;
    if (queued < batch.size()) break;  // the victim stopped taking them
  }
  return sent;
}

// Registers the stranger as a decode of its own (the first step of any "member" attack
// without a secret); the answer, if one came.
std::optional<proto::RegistrationResult> register_self(StrangerDecode& s, const std::string& to) {
  const proto::RankIdentity me = s.identity();
  proto::Message reg = s.registration(me);
  s.send_all(to, std::span<const proto::Message>(&reg, 1));
  return s.wait_registration(me.incarnation, milliseconds(3000));
}

}  // namespace

json forged_pong(const AttackOptions& o) {
  return with_stranger("forged_pong", o, [&](StrangerDecode& s) {
    proto::Pong pong;
    pong.sender = s.identity(o.as);
    pong.sender.role = proto::Role::kPrefill;
    pong.sender.incarnation = ClusterKey::random_u64() | 1;  // "a new process at that endpoint"
    const size_t sent = send_generated(s, o.control, o.count, [&](uint64_t i) {
      pong.seq = i < 32 ? i : i * 0x9e3779b97f4a7c15ull;  // small and scattered guesses
      return proto::Message(pong);
    });
    return json{{"sent", sent}};
  });
}

json forged_abort(const AttackOptions& o) {
  return with_stranger("forged_abort", o, [&](StrangerDecode& s) {
    proto::Abort abort;
    abort.sender = s.identity(o.as);
    abort.reason = "forged by pdkv_hostile_peer";
    std::vector<proto::Message> messages;
    for (uint64_t room : o.rooms) {
      abort.room = room;
      messages.emplace_back(abort);
    }
    return json{{"sent", s.send_all(o.control, messages)}};
  });
}

json forged_status(const AttackOptions& o) {
  return with_stranger("forged_status", o, [&](StrangerDecode& s) {
    proto::TransferStatus status;
    status.state =
        o.state == "success" ? proto::TransferState::kSuccess : proto::TransferState::kFailed;
    if (status.state == proto::TransferState::kFailed) status.failure_reason = "forged";
    if (o.ranges > 0) {
      // What a decode with PDKV_VERIFY_CHECKSUM re-reads if it trusts the list.
      status.checksum_crc32c = 0;
      status.checksum_ranges.reserve(2 * o.ranges);
      for (uint64_t i = 0; i < o.ranges; ++i) {
        status.checksum_ranges.push_back(o.range_addr);
        status.checksum_ranges.push_back(o.range_length);
      }
    }
    std::vector<proto::Message> messages;
    for (uint64_t room : o.rooms) {
      status.room = room;
      messages.emplace_back(status);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const size_t sent = s.send_all(o.control, messages);
    return json{
        {"state", o.state}, {"ranges", o.ranges}, {"sent", sent}, {"seconds", seconds_since(t0)}};
  });
}

json hijack_registration(const AttackOptions& o) {
  return with_stranger("hijack_registration", o, [&](StrangerDecode& s) {
    proto::Message reg = s.registration(s.identity(o.as));
    return json{{"sent", s.send_all(o.control, std::span<const proto::Message>(&reg, 1))}};
  });
}

json whole_pool(const AttackOptions& o) {
  return with_stranger(o.honest ? "room_pull" : "whole_pool", o, [&](StrangerDecode& s) {
    const auto answer = register_self(s, o.control);
    const uint64_t grant = ClusterKey::random_u64() | 1;
    Status granted = s.grant_everything(grant);
    proto::PreAllocation pre;
    pre.room = o.rooms.empty() ? 1 : o.rooms.front();
    pre.decode = s.identity();
    pre.write_grant = grant;
    // It registered as itself, so it read the answer: it can prove it is that decode.
    pre.registration_challenge = answer ? answer->challenge : 0;
    pre.ticket = ClusterKey::random_u64() | 1;
    if (o.honest) {
      for (uint64_t p = 0; p < o.count; ++p) pre.dst_kv_pages.push_back(static_cast<int64_t>(p));
    } else {
      // One page whose "fragment" is every KV buffer of the prefill, whole.
      pre.dst_kv_pages = {0};
      const uint64_t pool = o.shape.buffer_bytes();
      for (size_t b = 0; b < o.shape.buffers(); ++b) {
        proto::Fragment f;
        f.buffer_kind = static_cast<int64_t>(b) < o.shape.layers ? proto::BufferKind::kTargetK
                                                                 : proto::BufferKind::kTargetV;
        f.buffer_index = static_cast<uint32_t>(b);
        f.src_page_stride_bytes = 0;
        f.dst_page_stride_bytes = pool;
        f.bytes_per_page = pool;
        pre.fragments.push_back(f);
      }
    }
    proto::Message msg = pre;
    const size_t sent = s.send_all(o.control, std::span<const proto::Message>(&msg, 1));
    std::this_thread::sleep_for(milliseconds(o.hold_ms));
    json statuses = json::array();
    for (const auto& st : s.statuses()) statuses.push_back(status_json(st));
    const uint64_t bytes = s.bytes_received();
    return json{{"registration", registration_json(answer)},
                {"grant", granted.ok() ? "ok" : granted.to_string()},
                {"sent", sent},
                {"statuses", statuses},
                {"bytes_received", bytes},
                {"refused", bytes == 0}};
  });
}

json ping_flood(const AttackOptions& o) {
  return with_stranger("ping_flood", o, [&](StrangerDecode& s) {
    proto::Ping ping;
    ping.sender = s.identity();
    const size_t sent = send_generated(s, o.control, o.count, [&](uint64_t i) {
      // Closed ports: answering would open a socket each, and a send towards each could
      // stall the victim's receive thread.
      ping.sender.control_endpoint =
          "tcp://127.0.0.1:" + std::to_string(o.first_port + static_cast<int>(i % 60000));
      ping.sender.incarnation = i + 1;
      ping.seq = i;
      return proto::Message(ping);
    });
    return json{{"sent", sent}};
  });
}

json abort_flood(const AttackOptions& o) {
  return with_stranger("abort_flood", o, [&](StrangerDecode& s) {
    proto::Abort abort;
    abort.sender = s.identity();
    abort.reason = "flood";
    const auto t0 = std::chrono::steady_clock::now();
    const size_t sent = send_generated(s, o.control, o.count, [&](uint64_t) {
      abort.room = ClusterKey::random_u64();
      return proto::Message(abort);
    });
    return json{{"sent", sent}, {"seconds", seconds_since(t0)}};
  });
}

json pre_allocation_flood(const AttackOptions& o) {
  return with_stranger("pre_allocation_flood", o, [&](StrangerDecode& s) {
    const auto answer = register_self(s, o.control);
    proto::PreAllocation pre;
    pre.decode = s.identity();
    pre.write_grant = ClusterKey::random_u64() | 1;
    pre.registration_challenge = answer ? answer->challenge : 0;
    pre.ticket = ClusterKey::random_u64() | 1;
    const uint64_t base = ClusterKey::random_u64() >> 2;  // rooms nobody else uses
    const auto t0 = std::chrono::steady_clock::now();
    const size_t sent = send_generated(s, o.control, o.count, [&](uint64_t i) {
      pre.room = base + i;
      pre.dst_kv_pages = {static_cast<int64_t>(i % static_cast<uint64_t>(o.shape.pages))};
      return proto::Message(pre);
    });
    const double secs = seconds_since(t0);
    std::this_thread::sleep_for(milliseconds(o.hold_ms));
    json first = json::array();
    for (const auto& st : s.statuses()) {
      if (first.size() < 2) first.push_back(status_json(st));
    }
    return json{{"registration", registration_json(answer)},
                {"sent", sent},
                {"seconds", secs},
                {"refusals", s.status_count()},
                {"first_refusals", first}};
  });
}

json registration_flood(const AttackOptions& o) {
  return with_stranger("registration_flood", o, [&](StrangerDecode& s) {
    proto::BufferRegistration reg = s.registration(s.identity());
    const size_t sent = send_generated(s, o.control, o.count, [&](uint64_t i) {
      reg.decode.control_endpoint =
          "tcp://127.0.0.1:" + std::to_string(o.first_port + static_cast<int>(i % 60000));
      reg.decode.incarnation = i + 1;
      return proto::Message(reg);
    });
    return json{{"sent", sent}};
  });
}

json garbage_flood(const AttackOptions& o) {
  return with_stranger("garbage_flood", o, [&](StrangerDecode& s) {
    size_t sent = 0;
    auto last_progress = std::chrono::steady_clock::now();
    while (sent < o.count &&
           std::chrono::steady_clock::now() - last_progress < milliseconds(2000) &&
           s.endpoint().stats().auth_failed == 0) {
      // Distinct texts, so nothing on the way can fold them into one.
      if (s.endpoint()
              .send_frames(o.control, {"not a pdkv message " + std::to_string(sent)})
              .ok()) {
        ++sent;
        last_progress = std::chrono::steady_clock::now();
      } else {
        std::this_thread::sleep_for(milliseconds(1));  // the victim's queue is full
      }
    }
    return json{{"sent", sent}};
  });
}

}  // namespace pdkv::hostile

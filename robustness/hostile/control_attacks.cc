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

json started_failed(const std::string& attack, const Status& st) {
  return json{{"attack", attack}, {"error", st.to_string()}};
}

// What every control attack reports at the end.
void finish(StrangerDecode& s, json& report) {
  report["handshake_refused"] = s.wait_handshake_refused(kHandshakeWait) > 0;
  report["answers"] = s.messages_received();
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
  auto s = StrangerDecode::start(o);
  if (!s.ok()) return started_failed("forged_pong", s.status());
  proto::Pong pong;
  pong.sender = (*s)->identity(o.as);
  pong.sender.role = proto::Role::kPrefill;
  pong.sender.incarnation = ClusterKey::random_u64() | 1;  // "a new process at that endpoint"
  const size_t sent = send_generated(**s, o.control, o.count, [&](uint64_t i) {
    pong.seq = i < 32 ? i : i * 0x9e3779b97f4a7c15ull;  // small and scattered guesses
    return proto::Message(pong);
  });
  json report{{"attack", "forged_pong"}, {"sent", sent}};
  finish(**s, report);
  return report;
}

json forged_abort(const AttackOptions& o) {
  auto s = StrangerDecode::start(o);
  if (!s.ok()) return started_failed("forged_abort", s.status());
  proto::Abort abort;
  abort.sender = (*s)->identity(o.as);
  abort.reason = "forged by pdkv_hostile_peer";
  std::vector<proto::Message> messages;
  for (uint64_t room : o.rooms) {
    abort.room = room;
    messages.emplace_back(abort);
  }
  json report{{"attack", "forged_abort"}, {"sent", (*s)->send_all(o.control, messages)}};
  finish(**s, report);
  return report;
}

json forged_status(const AttackOptions& o) {
  auto s = StrangerDecode::start(o);
  if (!s.ok()) return started_failed("forged_status", s.status());
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
  const size_t sent = (*s)->send_all(o.control, messages);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json report{{"attack", "forged_status"},
              {"state", o.state},
              {"ranges", o.ranges},
              {"sent", sent},
              {"seconds", secs}};
  finish(**s, report);
  return report;
}

json hijack_registration(const AttackOptions& o) {
  auto s = StrangerDecode::start(o);
  if (!s.ok()) return started_failed("hijack_registration", s.status());
  proto::Message reg = (*s)->registration((*s)->identity(o.as));
  json report{{"attack", "hijack_registration"},
              {"sent", (*s)->send_all(o.control, std::span<const proto::Message>(&reg, 1))}};
  finish(**s, report);
  return report;
}

json whole_pool(const AttackOptions& o) {
  const char* name = o.honest ? "room_pull" : "whole_pool";
  auto started = StrangerDecode::start(o);
  if (!started.ok()) return started_failed(name, started.status());
  StrangerDecode& s = **started;
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
  json report{{"attack", name},
              {"registration", registration_json(answer)},
              {"grant", granted.ok() ? "ok" : granted.to_string()},
              {"sent", sent},
              {"statuses", statuses},
              {"bytes_received", bytes},
              {"refused", bytes == 0}};
  finish(s, report);
  return report;
}

json ping_flood(const AttackOptions& o) {
  auto s = StrangerDecode::start(o);
  if (!s.ok()) return started_failed("ping_flood", s.status());
  proto::Ping ping;
  ping.sender = (*s)->identity();
  const size_t sent = send_generated(**s, o.control, o.count, [&](uint64_t i) {
    // Closed ports: answering would open a socket each, and a send towards each could
    // stall the victim's receive thread.
    ping.sender.control_endpoint =
        "tcp://127.0.0.1:" + std::to_string(o.first_port + static_cast<int>(i % 60000));
    ping.sender.incarnation = i + 1;
    ping.seq = i;
    return proto::Message(ping);
  });
  json report{{"attack", "ping_flood"}, {"sent", sent}};
  finish(**s, report);
  return report;
}

json abort_flood(const AttackOptions& o) {
  auto s = StrangerDecode::start(o);
  if (!s.ok()) return started_failed("abort_flood", s.status());
  proto::Abort abort;
  abort.sender = (*s)->identity();
  abort.reason = "flood";
  const auto t0 = std::chrono::steady_clock::now();
  const size_t sent = send_generated(**s, o.control, o.count, [&](uint64_t) {
    abort.room = ClusterKey::random_u64();
    return proto::Message(abort);
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json report{{"attack", "abort_flood"}, {"sent", sent}, {"seconds", secs}};
  finish(**s, report);
  return report;
}

json pre_allocation_flood(const AttackOptions& o) {
  auto started = StrangerDecode::start(o);
  if (!started.ok()) return started_failed("pre_allocation_flood", started.status());
  StrangerDecode& s = **started;
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
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::this_thread::sleep_for(milliseconds(o.hold_ms));
  json first = json::array();
  for (const auto& st : s.statuses()) {
    if (first.size() < 2) first.push_back(status_json(st));
  }
  json report{{"attack", "pre_allocation_flood"},
              {"registration", registration_json(answer)},
              {"sent", sent},
              {"seconds", secs},
              {"refusals", s.status_count()},
              {"first_refusals", first}};
  finish(s, report);
  return report;
}

json registration_flood(const AttackOptions& o) {
  auto started = StrangerDecode::start(o);
  if (!started.ok()) return started_failed("registration_flood", started.status());
  StrangerDecode& s = **started;
  proto::BufferRegistration reg = s.registration(s.identity());
  const size_t sent = send_generated(s, o.control, o.count, [&](uint64_t i) {
    reg.decode.control_endpoint =
        "tcp://127.0.0.1:" + std::to_string(o.first_port + static_cast<int>(i % 60000));
    reg.decode.incarnation = i + 1;
    return proto::Message(reg);
  });
  json report{{"attack", "registration_flood"}, {"sent", sent}};
  finish(s, report);
  return report;
}

json garbage_flood(const AttackOptions& o) {
  auto started = StrangerDecode::start(o);
  if (!started.ok()) return started_failed("garbage_flood", started.status());
  StrangerDecode& s = **started;
  size_t sent = 0;
  auto last_progress = std::chrono::steady_clock::now();
  while (sent < o.count && std::chrono::steady_clock::now() - last_progress < milliseconds(2000) &&
         s.endpoint().stats().auth_failed == 0) {
    // Distinct texts, so nothing on the way can fold them into one.
    if (s.endpoint().send_frames(o.control, {"not a pdkv message " + std::to_string(sent)}).ok()) {
      ++sent;
      last_progress = std::chrono::steady_clock::now();
    } else {
      std::this_thread::sleep_for(milliseconds(1));  // the victim's queue is full
    }
  }
  json report{{"attack", "garbage_flood"}, {"sent", sent}};
  finish(s, report);
  return report;
}

}  // namespace pdkv::hostile

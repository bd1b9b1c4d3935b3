#include "robustness/hostile/stranger_decode.h"

#include <algorithm>
#include <thread>

#include "kv/kv_args.h"

namespace pdkv::hostile {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

constexpr milliseconds kPoll{10};

// The KV arguments of a decode rank with these buffers (TP 1, [K, V] per layer).
kv::KvArgs args_of(const PoolShape& shape, const std::vector<std::vector<uint8_t>>& buffers) {
  kv::KvArgs a;
  a.page_size = shape.page_size;
  for (const auto& b : buffers) {
    a.kv_data_ptrs.push_back(reinterpret_cast<uint64_t>(b.data()));
    a.kv_data_lens.push_back(b.size());
    a.kv_item_lens.push_back(shape.item_bytes());
  }
  for (int64_t l = 0; l < shape.layers; ++l) a.layer_buffers.push_back({l, shape.layers + l});
  a.kv_head_num = shape.heads;
  a.total_kv_head_num = shape.heads;
  a.head_dim = shape.head_dim;
  a.dtype_bytes = shape.dtype_bytes;
  return a;
}

}  // namespace

StrangerDecode::StrangerDecode(const AttackOptions& options)
    : options_(options), incarnation_(ClusterKey::random_u64() | 1) {}

StrangerDecode::~StrangerDecode() {
  if (endpoint_) endpoint_->shutdown();
}

Result<std::unique_ptr<StrangerDecode>> StrangerDecode::start(const AttackOptions& options) {
  std::unique_ptr<StrangerDecode> s(new StrangerDecode(options));
  for (size_t i = 0; i < options.shape.buffers(); ++i) {
    s->buffers_.emplace_back(options.shape.buffer_bytes(), 0);
  }
  engine::EngineOptions eo;
  eo.cluster_key = options.key;
  PDKV_ASSIGN_OR_RETURN(s->engine_, engine::TransferEngine::create(eo));
  for (auto& b : s->buffers_) {
    PDKV_RETURN_IF_ERROR(
        s->engine_->register_memory(reinterpret_cast<uint64_t>(b.data()), b.size()));
  }
  proto::EndpointOptions po;
  po.cluster_key = options.key;
  // Queued messages leave before the attacker exits (a victim with a secret never takes
  // them: then this is how long shutdown waits).
  po.linger_ms = 1000;
  StrangerDecode* raw = s.get();
  PDKV_ASSIGN_OR_RETURN(
      s->endpoint_, proto::ZmqEndpoint::start(po, [raw](proto::Message&& m, const std::string&) {
        return raw->on_message(std::move(m));
      }));
  return s;
}

Status StrangerDecode::on_message(proto::Message&& message) {
  MutexLock lock(mu_);
  ++received_;
  if (auto* r = std::get_if<proto::RegistrationResult>(&message)) results_.push_back(*r);
  if (auto* st = std::get_if<proto::TransferStatus>(&message)) {
    ++status_count_;
    // A flood may be refused many thousand times: the first few tell the story.
    if (statuses_.size() < 64) statuses_.push_back(*st);
  }
  return Status();
}

proto::RankIdentity StrangerDecode::identity(const std::string& as_endpoint) const {
  proto::RankIdentity id;
  id.role = proto::Role::kDecode;
  id.incarnation = incarnation_;
  id.control_endpoint = as_endpoint.empty() ? endpoint_->endpoint() : as_endpoint;
  id.engine_endpoint = options_.as_engine.empty() ? engine_->endpoint() : options_.as_engine;
  return id;
}

proto::BufferRegistration StrangerDecode::registration(const proto::RankIdentity& who) const {
  const kv::KvArgs a = args_of(options_.shape, buffers_);
  proto::BufferRegistration reg;
  reg.decode = who;
  reg.layout = a.layout();
  reg.kv = {a.kv_data_ptrs, a.kv_data_lens, a.kv_item_lens};
  return reg;
}

size_t StrangerDecode::send_all(const std::string& to, std::span<const proto::Message> messages,
                                milliseconds stall) {
  size_t sent = 0;
  auto last_progress = Clock::now();
  while (sent < messages.size() && Clock::now() - last_progress < stall) {
    auto n = endpoint_->send_burst(to, messages.subspan(sent));
    if (n.ok() && *n > 0) {
      sent += *n;
      last_progress = Clock::now();
    } else if (endpoint_->stats().auth_failed > 0) {
      break;  // the victim refused our handshake: its queue will never drain
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return sent;
}

std::optional<proto::RegistrationResult> StrangerDecode::wait_registration(uint64_t incarnation,
                                                                           milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  // A victim that refused our handshake (it has a cluster secret) will never answer.
  while (Clock::now() < deadline && endpoint_->stats().auth_failed == 0) {
    {
      MutexLock lock(mu_);
      for (const auto& r : results_) {
        if (r.decode_incarnation == incarnation) return r;
      }
    }
    std::this_thread::sleep_for(kPoll);
  }
  return std::nullopt;
}

Status StrangerDecode::grant_everything(uint64_t grant) {
  engine::WriteGrant g;
  for (const auto& b : buffers_) {
    auto one = engine::WriteGrant::of_range(reinterpret_cast<uint64_t>(b.data()), b.size());
    g.sets.insert(g.sets.end(), one.sets.begin(), one.sets.end());
  }
  return engine_->grant_writes(grant, std::move(g));
}

std::vector<proto::TransferStatus> StrangerDecode::statuses() const {
  MutexLock lock(mu_);
  return statuses_;
}

size_t StrangerDecode::status_count() const {
  MutexLock lock(mu_);
  return status_count_;
}

size_t StrangerDecode::messages_received() const {
  MutexLock lock(mu_);
  return received_;
}

uint64_t StrangerDecode::bytes_received() const {
  uint64_t n = 0;
  for (const auto& b : buffers_) {
    n += static_cast<uint64_t>(std::count_if(b.begin(), b.end(), [](uint8_t x) { return x != 0; }));
  }
  return n;
}

uint64_t StrangerDecode::wait_handshake_refused(milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (endpoint_->stats().auth_failed == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(kPoll);
  }
  return endpoint_->stats().auth_failed;
}

}  // namespace pdkv::hostile

// DecodeManager: creation, start-up, shutdown and metrics. The other jobs of the
// class each have their own file in this folder (decode_manager.h lists them).
#include "kv/decode/decode_manager.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "kv/decode/room_grant.h"
#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

DecodeManager::DecodeManager(DecodeManagerConfig config, std::shared_ptr<RouteDirectory> directory)
    : config_(std::move(config)), directory_(std::move(directory)) {}

Result<std::unique_ptr<DecodeManager>> DecodeManager::create(
    DecodeManagerConfig config, const ControlChannelFactory& channels,
    std::shared_ptr<RouteDirectory> directory) {
  PDKV_RETURN_IF_ERROR(config.args.validate().with_context("decode KVArgs"));
  if (config.enable_mla_l1_5_cache && !config.args.is_mla) {
    return invalid_argument("enable_mla_l1_5_cache needs an MLA model (is_mla)");
  }
  if (directory == nullptr) return invalid_argument("a decode manager needs a route directory");
  std::unique_ptr<DecodeManager> m(new DecodeManager(std::move(config), std::move(directory)));
  Status started = m->start(channels);
  if (!started.ok()) {
    m->shutdown();
    return started;
  }
  m->metrics_registration_ = MetricsRegistry::process().add(
      [raw = m.get()](PrometheusText& out) { raw->render_metrics(out); });
  return m;
}

Status DecodeManager::start(const ControlChannelFactory& channels) {
  const KvArgs& a = config_.args;
  if (!config_.options.local_ip.empty()) config_.engine.host = config_.options.local_ip;
  // Peers write only into what a room granted (room_grant.h), under its grant's id.
  config_.engine.require_write_grants = true;
  PDKV_ASSIGN_OR_RETURN(engine_, engine::TransferEngine::create(config_.engine));
  PDKV_RETURN_IF_ERROR(register_rank_buffers(*engine_, a, engine::MemoryAccess::kPeerWritable));
  grant_buffers_ = std::make_unique<const RankGrantBuffers>(a);
  for (const engine::Region& r : rank_regions(a)) {
    PDKV_RETURN_IF_ERROR(registered_.add(r.addr, r.length));
  }
  // The channel's receive thread starts before identity_ (which needs the channel's
  // endpoint) is set: its handlers wait until start() has set it (or shutdown() began).
  ChannelCallbacks callbacks;
  callbacks.on_message = [this](proto::Message m) {
    if (wait_until_started()) on_message(std::move(m));
  };
  callbacks.on_peer_gone = [this](const std::string& endpoint) {
    if (wait_until_started()) on_peer_gone(endpoint);
  };
  callbacks.on_peer_refused = [this](const std::string& endpoint) {
    if (wait_until_started()) on_peer_refused(endpoint);
  };
  PDKV_ASSIGN_OR_RETURN(channel_, channels(config_.engine.host, std::move(callbacks)));
  identity_ =
      make_rank_identity(proto::Role::kDecode, a, channel_->endpoint(), engine_->endpoint());
  started_.store(true, std::memory_order_release);
  started_.notify_all();
  // A prefill's Success status may ride the room's last batch (prefill_transfer.cc): the
  // engine hands it over once every byte of that batch landed here.
  engine_->set_note_handler([this](std::span<const uint8_t> note) { on_note(note); });
  route_subscription_ =
      directory_->subscribe([this](const RouteChange& change) { on_route_change(change); });
  for (int i = 0; i < kResolverThreads; ++i) resolvers_.emplace_back([this] { resolver_loop(); });
  timer_ = std::thread([this] { timer_loop(); });
  PDKV_LOG_INFO("decode rank {} ready: control {} engine {}", a.engine_rank, channel_->endpoint(),
                engine_->endpoint());
  return Status();
}

DecodeManager::~DecodeManager() { shutdown(); }

void DecodeManager::shutdown() {
  if (stopping_.exchange(true)) return;
  started_.store(true, std::memory_order_release);  // a handler still waiting returns
  started_.notify_all();
  route_subscription_.reset();    // waits for a route change being handled
  metrics_registration_.reset();  // waits for a scrape that is reading this manager
  {
    MutexLock lock(mu_);
    resolve_wake_.notify_all();
  }
  {
    MutexLock lock(timer_mu_);
    timer_wake_.notify_all();
  }
  for (std::thread& t : resolvers_) t.join();
  resolvers_.clear();
  if (timer_.joinable()) timer_.join();
  // As on the prefill: tell the prefill ranks while the channel still runs.
  auto fail_open_rooms = [this] {
    std::vector<uint64_t> open;
    {
      MutexLock lock(mu_);
      for (const auto& [room, r] : rooms_) open.push_back(room);
    }
    for (uint64_t room : open) {
      fail_room(room, FailureCause::kShutdown, "the decode manager shut down", true);
    }
  };
  fail_open_rooms();
  // No note handler runs after this (it may send through the channel).
  if (engine_) engine_->set_note_handler({});
  if (channel_) channel_->stop();  // no handler runs after this
  fail_open_rooms();
  channel_.reset();
  engine_.reset();
}

void DecodeManager::render_metrics(PrometheusText& out) const {
  render_rank_metrics(out, metrics_, proto::Role::kDecode, config_.args.engine_rank,
                      active_rooms());
}

std::string DecodeManager::metrics_text() const {
  PrometheusText out;
  render_metrics(out);
  return out.str();
}

size_t DecodeManager::active_rooms() const {
  size_t held = board_.size();
  MutexLock lock(mu_);
  return std::max(held, rooms_.size());
}

}  // namespace pdkv::kv

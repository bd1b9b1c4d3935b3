// pdkv._native: the KV managers, senders, receivers and the bootstrap server for Python.
//
// Thin by design, so the logic lives in C++ and is tested there: it converts types in bulk
// (numpy int64 arrays, never per-element Python objects), releases the GIL around every
// call that may wait or lock, and maps Status to Python exceptions in one place
// (raise_if_error). The Python-facing names and semantics live in pdkv/kv.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bootstrap/client.h"
#include "bootstrap/server.h"
#include "common/cluster_key.h"
#include "common/config.h"
#include "common/host_port.h"
#include "common/log_capture.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/stage_cpu.h"
#include "device_bindings.h"
#include "engine/backend.h"
#include "kv/kv_sender.h"
#include "kv/manager_factory.h"
#include "kv/metrics/metrics_registry.h"
#include "kv/metrics/process_metrics_endpoint.h"
#include "kv/room/failure_cause.h"
#include "settings_bindings.h"

namespace py = pybind11;

namespace pdkv::python {
namespace {

// KVSender / KVReceiver .wait(timeout_s), without the GIL: Python checked timeout_s >= 0;
// a week bounds it so the deadline cannot overflow.
template <typename RoomEnd>
int wait_for_end(const RoomEnd& self, double timeout_s) {
  const double capped = std::min(timeout_s, 7.0 * 24 * 3600);
  const TimePoint deadline = now() + std::chrono::duration_cast<SteadyClock::duration>(
                                         std::chrono::duration<double>(capped));
  py::gil_scoped_release release;
  return static_cast<int>(self.wait(deadline));
}

void raise_if_error(const Status& status) {
  if (status.ok()) return;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: throw py::value_error(status.message());
    default: throw std::runtime_error(status.to_string());
  }
}

template <typename T>
T value_or_raise(Result<T> result) {
  raise_if_error(result.status());
  return std::move(result).value();
}

template <typename T>
T get(const py::dict& d, const char* key) {
  try {
    return d[key].cast<T>();
  } catch (const py::cast_error&) {
    throw py::value_error(std::string("KVArgs.") + key + " has the wrong type");
  }
}

std::vector<uint64_t> get_u64_list(const py::dict& d, const char* key) {
  std::vector<uint64_t> out;
  for (py::handle item : d[key].cast<py::sequence>()) {
    auto v = item.cast<int64_t>();
    if (v < 0) throw py::value_error(std::string("KVArgs.") + key + " holds a negative value");
    out.push_back(static_cast<uint64_t>(v));
  }
  return out;
}

engine::MemoryKind to_memory_kind(const std::string& text, const char* key) {
  const std::optional<engine::MemoryKind> kind = engine::parse_memory_kind(text);
  if (!kind) {
    throw py::value_error(std::string("KVArgs.") + key +
                          " must be 'auto', 'host' or 'cuda', not '" + text + "'");
  }
  return *kind;
}

// Per-buffer (kind, device) pairs that pdkv/kv.py resolved from tensors; absent = none.
std::vector<kv::BufferMemory> get_memory_list(const py::dict& d, const char* key) {
  std::vector<kv::BufferMemory> out;
  if (!d.contains(key) || d[key].is_none()) return out;
  for (const auto& [kind, device] : get<std::vector<std::pair<std::string, int64_t>>>(d, key)) {
    out.push_back(kv::BufferMemory{to_memory_kind(kind, key), device});
  }
  return out;
}

// What the buffers are made of (added later: dicts built by older code lack the keys).
void read_memory_fields(const py::dict& d, kv::KvArgs& a) {
  if (d.contains("memory_kind")) {
    a.memory_kind = to_memory_kind(get<std::string>(d, "memory_kind"), "memory_kind");
  }
  if (d.contains("gpu_id")) a.gpu_id = get<int64_t>(d, "gpu_id");
  a.kv_data_memory = get_memory_list(d, "kv_data_memory");
  a.aux_data_memory = get_memory_list(d, "aux_data_memory");
  a.state_data_memory = get_memory_list(d, "state_data_memory");
}

kv::KvArgs to_kv_args(const py::dict& d) {
  kv::KvArgs a;
  a.engine_rank = get<int64_t>(d, "engine_rank");
  a.tp_size = get<int64_t>(d, "tp_size");
  a.dp_size = get<int64_t>(d, "dp_size");
  a.page_size = get<int64_t>(d, "page_size");
  a.kv_data_ptrs = get_u64_list(d, "kv_data_ptrs");
  a.kv_data_lens = get_u64_list(d, "kv_data_lens");
  a.kv_item_lens = get_u64_list(d, "kv_item_lens");
  a.layer_buffers = get<std::vector<std::vector<int64_t>>>(d, "layer_buffers");
  if (!d["kv_layer_ids"].is_none()) a.kv_layer_ids = get<std::vector<int64_t>>(d, "kv_layer_ids");
  a.kv_head_num = get<int64_t>(d, "kv_head_num");
  a.total_kv_head_num = get<int64_t>(d, "total_kv_head_num");
  a.head_dim = get<int64_t>(d, "head_dim");
  a.dtype_bytes = get<int64_t>(d, "dtype_bytes");
  const auto layout = get<std::string>(d, "page_layout");
  if (layout == "NHD") {
    a.page_layout = proto::PageLayout::kNHD;
  } else if (layout == "HND") {
    a.page_layout = proto::PageLayout::kHND;
  } else {
    throw py::value_error("KVArgs.page_layout must be 'NHD' or 'HND', not '" + layout + "'");
  }
  a.is_mla = get<bool>(d, "is_mla");
  a.aux_data_ptrs = get_u64_list(d, "aux_data_ptrs");
  a.aux_data_lens = get_u64_list(d, "aux_data_lens");
  a.aux_item_lens = get_u64_list(d, "aux_item_lens");
  a.state_data_ptrs = get_u64_list(d, "state_data_ptrs");
  a.state_data_lens = get_u64_list(d, "state_data_lens");
  a.state_item_lens = get_u64_list(d, "state_item_lens");
  a.state_layer_ids = get<std::vector<int64_t>>(d, "state_layer_ids");
  // State groups and page strides (added later: dicts built by older code lack them).
  if (d.contains("state_buffer_groups")) {
    a.state_buffer_groups = get<std::vector<int64_t>>(d, "state_buffer_groups");
  }
  if (d.contains("kv_layer_groups")) {
    a.kv_layer_groups = get<std::vector<int64_t>>(d, "kv_layer_groups");
  }
  if (d.contains("pp_size")) a.pp_size = get<int64_t>(d, "pp_size");
  if (d.contains("pp_rank")) a.pp_rank = get<int64_t>(d, "pp_rank");
  if (d.contains("window_state_groups")) {
    a.window_state_groups = get<std::vector<int64_t>>(d, "window_state_groups");
  }
  if (d.contains("kv_page_strides")) a.kv_page_strides = get_u64_list(d, "kv_page_strides");
  if (d.contains("state_page_strides")) {
    a.state_page_strides = get_u64_list(d, "state_page_strides");
  }
  // Draft-model fields (added later: dicts built by older code lack them).
  auto optional_int = [&](const char* key) {
    return d.contains(key) ? get<int64_t>(d, key) : int64_t{0};
  };
  a.target_layer_num = optional_int("target_layer_num");
  a.draft_kv_head_num = optional_int("draft_kv_head_num");
  a.draft_total_kv_head_num = optional_int("draft_total_kv_head_num");
  a.draft_head_dim = optional_int("draft_head_dim");
  read_memory_fields(d, a);
  raise_if_error(a.validate());
  return a;
}

using Int64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

std::vector<int64_t> to_vector(const Int64Array& a) {
  if (a.ndim() != 1) throw py::value_error("index arrays must be one-dimensional");
  return std::vector<int64_t>(a.data(), a.data() + a.size());
}

// L1.5 masks arrive as uint8 arrays (pdkv/kv.py turns bool/int masks into 0/1 bytes).
using MaskArray = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

std::vector<uint8_t> to_mask(const MaskArray& a) {
  if (a.ndim() != 1) throw py::value_error("page_transfer_mask must be one-dimensional");
  return std::vector<uint8_t>(a.data(), a.data() + a.size());
}

bool l1_5_enabled(const py::dict& args) {
  return args.contains("enable_mla_l1_5_cache") && get<bool>(args, "enable_mla_l1_5_cache");
}

// pdkv.Config's explicit values (variable name -> text); common/config.h applies them
// before the environment.
config::Settings to_settings(const std::map<std::string, std::string>& values,
                             bool use_environment) {
  config::Settings settings;
  for (const auto& [name, value] : values) settings.set(name, value);
  settings.use_environment(use_environment);
  return settings;
}

// The cluster key's HMAC for Python code that must sign what it hands through an
// untrusted party (vLLM's transfer parameters travel through the client's proxy). The
// message is one byte string the caller built; the key is KeyUse::kTransferParams's, so a
// MAC made here never verifies as any other pdkv message. No secret: keyed() is false
// and mac()/verify() raise, so a caller cannot mistake "unsigned" for "signed".
class NativeTransferParamsSeal {
 public:
  explicit NativeTransferParamsSeal(const std::map<std::string, std::string>& setting_values)
      : key_(value_or_raise(ClusterKey::from(to_settings(setting_values, true)))) {}
  bool keyed() const { return key_ != nullptr; }
  py::bytes mac(const std::string& message) const {
    const ClusterKey::Mac tag = require_key().mac(KeyUse::kTransferParams, {as_bytes(message)});
    return py::bytes(reinterpret_cast<const char*>(tag.data()), tag.size());
  }
  bool verify(const std::string& tag, const std::string& message) const {
    if (tag.size() != ClusterKey::kMacBytes) return false;
    return require_key().verify(KeyUse::kTransferParams, as_bytes(tag), {as_bytes(message)});
  }

 private:
  const ClusterKey& require_key() const {
    if (!key_) throw std::runtime_error("no cluster secret: nothing to sign or verify with");
    return *key_;
  }
  std::shared_ptr<const ClusterKey> key_;
};

class NativeBootstrapServer {
 public:
  NativeBootstrapServer(const std::string& host, int port,
                        const std::map<std::string, std::string>& setting_values,
                        bool authenticate_reads) {
    bootstrap::ServerOptions options =
        value_or_raise(bootstrap::ServerOptions::from(to_settings(setting_values, true)));
    options.host = host;
    options.port = port;
    options.authenticate_reads = authenticate_reads;
    py::gil_scoped_release release;
    server_ = value_or_raise(bootstrap::BootstrapServer::start(options));
  }
  int port() const { return server_->port(); }
  std::string host() const { return server_->host(); }
  void stop() { server_->stop(); }

 private:
  std::unique_ptr<bootstrap::BootstrapServer> server_;
};

// Every option struct a manager reads, through `settings`: what pdkv.Config.resolved()
// reports and what its tests check the Python table against.
std::vector<std::tuple<std::string, std::string, std::string>> resolve_settings(
    const std::map<std::string, std::string>& values, bool use_environment) {
  const config::Settings settings = to_settings(values, use_environment);
  raise_if_error(kv::ManagerSettings::from(settings).status());
  std::vector<std::tuple<std::string, std::string, std::string>> out;
  for (const config::KnobReading& r : settings.readings()) {
    out.emplace_back(r.name, r.value, std::string(config::to_string(r.origin)));
  }
  return out;
}

class NativeManager {
 public:
  NativeManager(const py::dict& args, const std::string& mode, const std::string& bootstrap_addr,
                const std::map<std::string, std::string>& setting_values,
                int64_t layerwise_interval, bool wait_for_prefill_metadata) {
    kv::ManagerSpec spec;
    spec.args = to_kv_args(args);
    spec.bootstrap_addr = bootstrap_addr;
    spec.enable_mla_l1_5_cache = l1_5_enabled(args);
    spec.layerwise_interval = layerwise_interval;
    spec.wait_for_prefill_metadata = wait_for_prefill_metadata;
    const kv::ManagerFactory factory =
        value_or_raise(kv::ManagerFactory::create(to_settings(setting_values, true)));
    const kv::KvManagerOptions& options = factory.settings().options;
    cluster_key_ = factory.settings().cluster_key;
    py::gil_scoped_release release;
    if (mode == "prefill") {
      prefill_ = value_or_raise(factory.prefill(std::move(spec)));
    } else {
      decode_ = value_or_raise(factory.decode(std::move(spec)));
    }
    if (options.metrics_port >= 0) {
      metrics_endpoint_ = value_or_raise(
          kv::ProcessMetricsEndpoint::acquire(options.metrics_host, options.metrics_port));
    }
  }

  kv::PrefillManager& prefill() {
    if (!prefill_) throw py::value_error("this is not a prefill KVManager (or it was shut down)");
    return *prefill_;
  }
  kv::DecodeManager& decode() {
    if (!decode_) throw py::value_error("this is not a decode KVManager (or it was shut down)");
    return *decode_;
  }
  std::optional<std::vector<uint64_t>> changed_rooms() {
    return prefill_  ? prefill_->changed_rooms()
           : decode_ ? decode_->changed_rooms()
                     : std::optional<std::vector<uint64_t>>{};
  }
  size_t active_rooms() const {
    return prefill_ ? prefill_->active_rooms() : decode_ ? decode_->active_rooms() : 0;
  }
  std::string control_endpoint() const {
    return prefill_ ? prefill_->control_endpoint() : decode_ ? decode_->control_endpoint() : "";
  }
  std::string engine_endpoint() const {
    return prefill_ ? prefill_->engine_endpoint() : decode_ ? decode_->engine_endpoint() : "";
  }
  kv::TransferMetricsSnapshot metrics() const {
    return prefill_  ? prefill_->metrics()
           : decode_ ? decode_->metrics()
                     : kv::TransferMetricsSnapshot{};
  }
  std::string metrics_text() const {
    return prefill_ ? prefill_->metrics_text() : decode_ ? decode_->metrics_text() : "";
  }
  // peer endpoint -> {"path", "why", "direction", "sources"} rows, one per route.
  py::list peer_paths() const {
    std::vector<engine::PeerPath> paths = prefill_  ? prefill_->peer_paths()
                                          : decode_ ? decode_->peer_paths()
                                                    : std::vector<engine::PeerPath>{};
    py::list out;
    for (const engine::PeerPath& p : paths) {
      py::dict row;
      row["peer"] = p.peer;
      row["path"] = std::string(engine::path_name(p.path));
      row["why"] = p.why;
      row["direction"] = p.outgoing ? "to" : "from";
      row["sources"] = p.device_sources ? "device" : "host";
      out.append(std::move(row));
    }
    return out;
  }
  int metrics_port() const { return metrics_endpoint_ ? metrics_endpoint_->port() : -1; }
  // Tells the bootstrap server at `address` which DP group serves `room`, signed with this
  // manager's cluster key when it has one (the server refuses unsigned writes then).
  Status report_room_dp_rank(const std::string& address, uint64_t room, int64_t dp_group,
                             double timeout_s) {
    PDKV_ASSIGN_OR_RETURN(bootstrap::BootstrapClient client, report_client(address));
    const auto budget = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(timeout_s));
    return client.register_room_dp_rank(room, dp_group, now() + budget);
  }
  void shutdown() {
    {
      MutexLock lock(report_clients_mu_);
      report_clients_.clear();
    }
    metrics_endpoint_.reset();
    if (prefill_) prefill_->shutdown();
    if (decode_) decode_->shutdown();
  }

 private:
  std::unique_ptr<kv::PrefillManager> prefill_;
  std::unique_ptr<kv::DecodeManager> decode_;
  std::shared_ptr<const ClusterKey> cluster_key_;  // null: no cluster secret
  // One client per bootstrap address the reports go to: a client learns the server's id
  // (GET /health) before its first signed request, once, and its copies share it.
  Result<bootstrap::BootstrapClient> report_client(const std::string& address) {
    MutexLock lock(report_clients_mu_);
    auto it = report_clients_.find(address);
    if (it == report_clients_.end()) {
      bootstrap::ClientOptions options;
      options.cluster_key = cluster_key_;
      PDKV_ASSIGN_OR_RETURN(bootstrap::BootstrapClient client,
                            bootstrap::BootstrapClient::from_address(address, options));
      it = report_clients_.emplace(address, std::move(client)).first;
    }
    return it->second;
  }
  Mutex report_clients_mu_;
  std::map<std::string, bootstrap::BootstrapClient> report_clients_
      PDKV_GUARDED_BY(report_clients_mu_);
  // The process's endpoint (shared by every manager asking for one; stops with the last).
  std::shared_ptr<kv::ProcessMetricsEndpoint> metrics_endpoint_;
};

// pdkv.metrics.serve(): a handle on the process's endpoint without a manager.
class MetricsEndpointHandle {
 public:
  MetricsEndpointHandle(const std::string& host, int port) {
    py::gil_scoped_release release;
    endpoint_ = value_or_raise(kv::ProcessMetricsEndpoint::acquire(host, port));
  }
  int port() const { return endpoint_ ? endpoint_->port() : -1; }
  void stop() { endpoint_.reset(); }

 private:
  std::shared_ptr<kv::ProcessMetricsEndpoint> endpoint_;
};

// None, or (message, cause, stage) of a Failed room: the message as failure() words it,
// the cause's wire value (pdkv.FailureCause) and the stage's label (pdkv.FailureStage).
// A Failed room never changes again, so reading its status after failure() is consistent.
py::object failure_info(const Status& failure, const kv::RoomStatus& status) {
  if (failure.ok()) return py::none();
  return py::make_tuple(failure.message(), static_cast<int>(status.failure_cause),
                        std::string(kv::to_string(status.failure_stage)));
}

// Labels by wire value, so pdkv/failure.py can check its mirror of the enums.
std::vector<std::string> failure_cause_labels() {
  std::vector<std::string> labels;
  for (unsigned v = 0; v <= kv::kMaxFailureCause; ++v) {
    labels.emplace_back(kv::to_string(static_cast<kv::FailureCause>(v)));
  }
  return labels;
}

std::vector<std::string> failure_stage_labels() {
  std::vector<std::string> labels;
  for (unsigned v = 0; v <= kv::kMaxFailureStage; ++v) {
    labels.emplace_back(kv::to_string(static_cast<kv::FailureStage>(v)));
  }
  return labels;
}

}  // namespace
}  // namespace pdkv::python

PYBIND11_MODULE(_native, m) {
  using namespace pdkv;
  using namespace pdkv::python;
  m.doc() = "pdkv native KV transfer API (use the pdkv package, not this module)";
  m.def("failure_cause_labels", &failure_cause_labels);
  add_device_functions(m);
  add_settings_functions(m);
  m.def("failure_stage_labels", &failure_stage_labels);
  m.def("resolve_settings", &resolve_settings, py::arg("values"), py::arg("use_environment"));
  // The one host:port parser (common/host_port.h), so Python validates addresses as the
  // C++ side does: (host without brackets, port), or ValueError naming what is wrong.
  m.def(
      "parse_host_port",
      [](const std::string& text) {
        HostPort hp = value_or_raise(parse_host_port(text));
        return std::make_pair(hp.host, static_cast<int>(hp.port));
      },
      py::arg("text"));
  m.def(
      "process_metrics_text", [] { return kv::MetricsRegistry::process().render(); },
      py::call_guard<py::gil_scoped_release>());

  // pdkv.log: pdkv's log lines into Python logging (common/log_capture.h).
  m.def("log_capture_enable", &log_capture::enable, py::arg("capacity"), py::arg("keep_stderr"));
  m.def("log_capture_disable", &log_capture::disable);
  m.def("log_capture_dropped", &log_capture::dropped);
  m.def("log_capture_take", [](int64_t wait_ms) {
    std::vector<log_capture::Line> lines;
    {
      py::gil_scoped_release release;
      lines = log_capture::take(std::chrono::milliseconds(wait_ms));
    }
    py::list out;
    for (auto& l : lines) {
      out.append(py::make_tuple(l.level, py::bytes(l.message), l.thread_id, l.unix_time));
    }
    return out;
  });
  m.def("set_log_level", [](const std::string& level) {
    const auto parsed = spdlog::level::from_str(level);
    if (parsed == spdlog::level::off && level != "off") {
      throw py::value_error("log level must be trace, debug, info, warn, error, critical or off");
    }
    logger().set_level(parsed);
  });

  py::class_<MetricsEndpointHandle>(m, "MetricsEndpoint")
      .def(py::init<const std::string&, int>(), py::arg("host"), py::arg("port"))
      .def_property_readonly("port", &MetricsEndpointHandle::port)
      .def("stop", &MetricsEndpointHandle::stop, py::call_guard<py::gil_scoped_release>());

  py::class_<NativeTransferParamsSeal>(m, "TransferParamsSeal")
      .def(py::init<const std::map<std::string, std::string>&>(), py::arg("settings"))
      .def_property_readonly("keyed", &NativeTransferParamsSeal::keyed)
      .def("mac", &NativeTransferParamsSeal::mac, py::arg("message"))
      .def("verify", &NativeTransferParamsSeal::verify, py::arg("tag"), py::arg("message"));

  py::class_<NativeBootstrapServer>(m, "BootstrapServer")
      .def(py::init<const std::string&, int, const std::map<std::string, std::string>&, bool>(),
           py::arg("host"), py::arg("port"), py::arg("settings"), py::arg("authenticate_reads"))
      .def_property_readonly("port", &NativeBootstrapServer::port)
      .def_property_readonly("host", &NativeBootstrapServer::host)
      .def("stop", &NativeBootstrapServer::stop, py::call_guard<py::gil_scoped_release>());

  py::class_<NativeManager>(m, "KVManager")
      .def(py::init<const py::dict&, const std::string&, const std::string&,
                    const std::map<std::string, std::string>&, int64_t, bool>())
      .def("set_prefill_metadata",
           [](NativeManager& self, uint64_t room, int64_t token, std::vector<int32_t> ids) {
             auto& p = self.prefill();
             py::gil_scoped_release release;
             p.set_prefill_metadata(room, token, std::move(ids));
           })
      .def("reserve_layerwise_cache_steps",
           [](NativeManager& self) { return self.prefill().reserve_layerwise_cache_steps(); })
      .def("mark_layers_ready",
           [](NativeManager& self, int64_t n) {
             auto& p = self.prefill();
             py::gil_scoped_release release;
             p.mark_layers_ready(n);
           })
      .def("active_rooms", &NativeManager::active_rooms, py::call_guard<py::gil_scoped_release>())
      .def("changed_rooms", &NativeManager::changed_rooms, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("control_endpoint", &NativeManager::control_endpoint)
      .def_property_readonly("engine_endpoint", &NativeManager::engine_endpoint)
      .def("metrics",
           [](const NativeManager& self) {
             kv::TransferMetricsSnapshot s = self.metrics();
             py::dict d;
             d["rooms_succeeded"] = s.rooms_succeeded;
             d["rooms_failed"] = s.rooms_failed;
             d["bytes_written"] = s.bytes_written;
             d["blocks_written"] = s.blocks_written;
             d["failures_by_cause"] = s.failures_by_cause;
             d["queued_chunks"] = s.queued_chunks;
             // Process-wide CPU seconds per stage of the managers' work (common/stage_cpu.h).
             py::dict cpu;
             const auto cpu_s = stage_cpu_seconds();
             for (size_t i = 0; i < kCpuStages; ++i) {
               cpu[py::str(std::string(to_string(static_cast<CpuStage>(i))))] = cpu_s[i];
             }
             d["cpu_seconds"] = cpu;
             // stage -> (rooms observed, total seconds)
             py::dict stages;
             for (size_t i = 0; i < kv::kRoomStages; ++i) {
               const auto& h = s.stages[i];
               stages[py::str(std::string(kv::to_string(static_cast<kv::RoomStage>(i))))] =
                   py::make_tuple(h.count, static_cast<double>(h.sum) / h.raw_per_unit);
             }
             d["stages"] = stages;
             // Whole histograms (bounds in seconds / bytes / blocks, per-bucket counts
             // with +Inf last, count, sum), so an engine can re-expose them (vLLM's
             // build_prom_metrics) with pdkv's buckets.
             auto histogram = [](const kv::Histogram::Snapshot& h) {
               py::dict out;
               py::list bounds, counts;
               for (uint64_t b : h.bounds) bounds.append(static_cast<double>(b) / h.raw_per_unit);
               for (size_t i = 0; i <= h.bounds.size(); ++i) counts.append(h.counts[i]);
               out["bounds"] = bounds;
               out["counts"] = counts;
               out["count"] = h.count;
               out["sum"] = static_cast<double>(h.sum) / h.raw_per_unit;
               return out;
             };
             py::dict histograms;
             for (size_t i = 0; i < kv::kRoomStages; ++i) {
               histograms[py::str("stage:" +
                                  std::string(kv::to_string(static_cast<kv::RoomStage>(i))))] =
                   histogram(s.stages[i]);
             }
             histograms["room_bytes"] = histogram(s.room_bytes);
             histograms["room_blocks"] = histogram(s.room_blocks);
             d["histograms"] = histograms;
             return d;
           })
      .def("metrics_text", &NativeManager::metrics_text, py::call_guard<py::gil_scoped_release>())
      .def("peer_paths", &NativeManager::peer_paths)
      .def_property_readonly("metrics_port", &NativeManager::metrics_port)
      .def(
          "report_room_dp_rank",
          [](NativeManager& self, const std::string& address, uint64_t room, int64_t dp_group,
             double timeout_s) {
            Status s;
            {
              py::gil_scoped_release release;
              s = self.report_room_dp_rank(address, room, dp_group, timeout_s);
            }
            raise_if_error(s);
          },
          py::arg("address"), py::arg("room"), py::arg("dp_group"), py::arg("timeout_s"))
      .def("shutdown", &NativeManager::shutdown, py::call_guard<py::gil_scoped_release>());

  py::class_<kv::KVSender>(m, "KVSender")
      .def(py::init([](NativeManager& mgr, uint64_t room) {
             auto& p = mgr.prefill();
             py::gil_scoped_release release;
             return std::make_unique<kv::KVSender>(p, room);
           }),
           py::keep_alive<1, 2>())
      .def("init",
           [](kv::KVSender& self, int64_t n, std::optional<int64_t> aux) {
             Status s;
             {
               py::gil_scoped_release release;
               const StageCpuScope cpu(CpuStage::kApi);
               s = self.init(n, aux);
             }
             raise_if_error(s);
           })
      .def(
          "send",
          [](kv::KVSender& self, const Int64Array& pages, const Int64Array& state,
             std::optional<std::vector<uint32_t>> state_ends, std::optional<MaskArray> mask,
             std::optional<Int64Array> local, std::optional<bool> layerwise,
             std::optional<uintptr_t> stream, int device) {
            std::vector<int64_t> p = to_vector(pages), st = to_vector(state);
            const std::vector<uint32_t> ends = state_ends.value_or(std::vector<uint32_t>{});
            if (mask.has_value() != local.has_value()) {
              throw py::value_error(
                  "page_transfer_mask and page_local_indices go together: pass both or neither");
            }
            std::optional<kv::ChunkOwnership> own;
            if (mask) own = kv::ChunkOwnership{to_mask(*mask), to_vector(*local)};
            Status s;
            {
              py::gil_scoped_release release;
              const StageCpuScope cpu(CpuStage::kApi);
              engine::SourceReady sources;
              if (stream)
                sources = engine::SourceReady{reinterpret_cast<void*>(*stream), device, {}};
              s = self.send_groups(p, kv::StateSlotLists{st, ends}, std::move(own), layerwise,
                                   std::move(sources));
            }
            raise_if_error(s);
          },
          py::arg("pages"), py::arg("state"), py::arg("state_group_ends") = py::none(),
          py::arg("page_transfer_mask") = py::none(), py::arg("page_local_indices") = py::none(),
          py::arg("layerwise") = py::none(), py::arg("stream") = py::none(), py::arg("device") = -1)
      .def("poll", [](const kv::KVSender& self) { return static_cast<int>(self.poll()); })
      .def("wait", &wait_for_end<kv::KVSender>, py::arg("timeout_s"))
      .def("failure",
           [](const kv::KVSender& self) { return failure_info(self.failure(), self.status()); })
      .def("abort", &kv::KVSender::abort, py::call_guard<py::gil_scoped_release>());

  py::class_<kv::KVReceiver>(m, "KVReceiver")
      .def(py::init([](NativeManager& mgr, const std::string& addr, uint64_t room) {
             auto& d = mgr.decode();
             py::gil_scoped_release release;
             return std::make_unique<kv::KVReceiver>(d, room, addr);
           }),
           py::keep_alive<1, 2>())
      .def("init",
           [](kv::KVReceiver& self, std::optional<int64_t> dp) {
             Status s;
             {
               py::gil_scoped_release release;
               const StageCpuScope cpu(CpuStage::kApi);
               s = self.init(dp);
             }
             raise_if_error(s);
           })
      .def(
          "send_metadata",
          [](kv::KVReceiver& self, const Int64Array& pages, std::optional<int64_t> aux,
             const Int64Array& state, int64_t prefix,
             std::optional<std::vector<uint32_t>> state_ends, std::optional<MaskArray> mask,
             std::optional<Int64Array> mapping, std::optional<Int64Array> local) {
            if (prefix < 0) throw py::value_error("decode_prefix_len must be >= 0");
            kv::PreAllocationRequest req;
            req.kv_pages = to_vector(pages);
            req.aux_index = aux;
            req.state_slots = to_vector(state);
            if (state_ends) req.state_group_ends = *state_ends;
            req.decode_prefix_len = static_cast<uint64_t>(prefix);
            const int given =
                int{mask.has_value()} + int{mapping.has_value()} + int{local.has_value()};
            if (given != 0 && given != 3) {
              throw py::value_error(
                  "page_transfer_mask, page_indices_mapping and page_local_indices go "
                  "together: pass all three or none");
            }
            if (given == 3) {
              req.ownership =
                  kv::RequestOwnership{to_mask(*mask), to_vector(*local), to_vector(*mapping)};
            }
            Status s;
            {
              py::gil_scoped_release release;
              const StageCpuScope cpu(CpuStage::kApi);
              s = self.send_metadata(std::move(req));
            }
            raise_if_error(s);
          },
          py::arg("pages"), py::arg("aux"), py::arg("state"), py::arg("prefix"),
          py::arg("state_group_ends") = py::none(), py::arg("page_transfer_mask") = py::none(),
          py::arg("page_indices_mapping") = py::none(), py::arg("page_local_indices") = py::none())
      .def("poll", [](const kv::KVReceiver& self) { return static_cast<int>(self.poll()); })
      .def("wait", &wait_for_end<kv::KVReceiver>, py::arg("timeout_s"))
      .def("failure",
           [](const kv::KVReceiver& self) { return failure_info(self.failure(), self.status()); })
      .def("abort", &kv::KVReceiver::abort, py::call_guard<py::gil_scoped_release>())
      .def("prefill_metadata", [](const kv::KVReceiver& self) {
        return py::make_tuple(self.bootstrap_token(), self.spec_candidate_ids());
      });
}

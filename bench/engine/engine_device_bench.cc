#include "bench/engine/engine_device_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/engine/engine_bench_util.h"
#include "common/clock.h"
#include "engine/device/device_driver.h"
#include "engine/testing/device_memory.h"

namespace pdkv::bench {
namespace {

constexpr double kTarget = 0.90;

// The fake driver built beside this binary (build/bin/pdkv -> build/lib/).
std::string fake_driver_path() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (exe.parent_path().parent_path() / "lib" / "libpdkv_fake_cuda.so").string();
}

struct Arm {
  std::string name;
  bool src_device = false;
  bool dst_device = false;
  std::unique_ptr<engine::testing::DeviceBuffer> device_src;
  std::unique_ptr<BenchLink> link;
  std::vector<double> gbps;
  bool verified = false;
};

Result<std::unique_ptr<Arm>> start_arm(std::string name, bool src_device, bool dst_device,
                                       const Workload& w, const SourceMemory& src,
                                       const engine::EngineOptions& options) {
  auto arm = std::make_unique<Arm>();
  arm->name = std::move(name);
  arm->src_device = src_device;
  arm->dst_device = dst_device;
  std::vector<std::string> env = {"PDKV_ENGINE_BACKEND=" + options.backend};
  if (dst_device) env.push_back("PDKV_PEER_DEVICE=0");
  uint64_t src_base = reinterpret_cast<uint64_t>(src.data);
  if (src_device) {
    PDKV_ASSIGN_OR_RETURN(arm->device_src, engine::testing::DeviceBuffer::allocate(0, src.size));
    PDKV_RETURN_IF_ERROR(arm->device_src->upload(0, src.data, src.size));
    src_base = arm->device_src->addr();
  }
  PDKV_ASSIGN_OR_RETURN(arm->link, start_link(w, src, options, env, src_base));
  PDKV_RETURN_IF_ERROR(arm->link->round(arm->name + " warm-up round"));
  return arm;
}

// The destination of one more round, poisoned first, compared with the source.
Result<bool> verify(Arm& arm, const Workload& w, const SourceMemory& src) {
  BenchLink& link = *arm.link;
  std::memset(link.dst->data(), 0xEE, link.dst->size());
  if (arm.dst_device) PDKV_RETURN_IF_ERROR(link.peer->device_upload());
  PDKV_RETURN_IF_ERROR(link.round(arm.name + " verification round"));
  if (arm.dst_device) PDKV_RETURN_IF_ERROR(link.peer->device_download());
  return first_bad_block(w, src.data, link.dst->data()) == w.blocks.size();
}

// GB/s of pinned device<->host copies of `bytes` with the loaded driver (median of 5).
Result<std::pair<double, double>> raw_copy_gbps(size_t bytes) {
  engine::DeviceDriver* driver = engine::device_driver();
  if (driver == nullptr) return failed_precondition(engine::device_driver_absent_reason());
  PDKV_ASSIGN_OR_RETURN(auto device, engine::testing::DeviceBuffer::allocate(0, bytes));
  PDKV_RETURN_IF_ERROR(driver->bind_thread(0));
  PDKV_ASSIGN_OR_RETURN(void* pinned, driver->alloc_pinned(bytes));
  PDKV_ASSIGN_OR_RETURN(engine::DeviceStreamHandle stream, driver->create_stream());
  std::vector<double> d2h;
  std::vector<double> h2d;
  Status st;
  for (int i = 0; i < 5 && st.ok(); ++i) {
    TimePoint start = now();
    st = driver->copy_to_host(stream, pinned, device->addr(), bytes);
    if (st.ok()) st = driver->sync_stream(stream);
    d2h.push_back(bytes / elapsed_s(start) / kGiga);
    start = now();
    if (st.ok()) st = driver->copy_to_device(stream, device->addr(), pinned, bytes);
    if (st.ok()) st = driver->sync_stream(stream);
    h2d.push_back(bytes / elapsed_s(start) / kGiga);
  }
  driver->destroy_stream(stream);
  driver->free_pinned(pinned);
  PDKV_RETURN_IF_ERROR(st);
  return std::make_pair(median(d2h), median(h2d));
}

// The CPU share of a thread waiting, `waits` times, on an event behind a device-to-host
// copy of `bytes` (on the fake, each copy is also delayed by 20 ms): with an event made
// as pdkv made them before (polling: the driver's default) and with pdkv's own
// (blocking-sync). A receiver thread waits like this on every slab it refills.
struct WaitCpu {
  double polling = 0;  // thread CPU seconds / wall seconds while waiting
  double blocking = 0;
};
Result<WaitCpu> wait_cpu_share(size_t bytes, int waits, bool fake) {
  engine::DeviceDriver* driver = engine::device_driver();
  PDKV_ASSIGN_OR_RETURN(auto device, engine::testing::DeviceBuffer::allocate(0, bytes));
  PDKV_RETURN_IF_ERROR(driver->bind_thread(0));
  PDKV_ASSIGN_OR_RETURN(void* pinned, driver->alloc_pinned(bytes));
  PDKV_ASSIGN_OR_RETURN(engine::DeviceStreamHandle stream, driver->create_stream());
  if (fake) engine::testing::fake_device_set_copy_delay_us(20000);
  auto share = [&](engine::DeviceEventHandle event) -> Result<double> {
    double cpu = 0, wall = 0;
    for (int i = 0; i < waits; ++i) {
      PDKV_RETURN_IF_ERROR(driver->copy_to_host(stream, pinned, device->addr(), bytes));
      PDKV_RETURN_IF_ERROR(driver->record(event, stream));
      timespec c0{}, c1{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
      const TimePoint start = now();
      PDKV_RETURN_IF_ERROR(driver->event_wait(event));
      wall += elapsed_s(start);
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
      cpu += (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) / 1e9;
    }
    return wall > 0 ? cpu / wall : 0.0;
  };
  WaitCpu out;
  Status st;
  Result<void*> polling = engine::testing::create_polling_event();
  if (polling.ok()) {
    Result<double> s = share(*polling);
    if (s.ok()) out.polling = *s;
    st = s.status();
    driver->destroy_event(*polling);
  } else {
    st = polling.status();
  }
  if (st.ok()) {
    Result<engine::DeviceEventHandle> blocking = driver->create_event();
    st = blocking.status();
    if (blocking.ok()) {
      Result<double> s = share(*blocking);
      if (s.ok()) out.blocking = *s;
      st = s.status();
      driver->destroy_event(*blocking);
    }
  }
  if (fake) engine::testing::fake_device_set_copy_delay_us(0);
  driver->destroy_stream(stream);
  driver->free_pinned(pinned);
  PDKV_RETURN_IF_ERROR(st);
  return out;
}

}  // namespace

Status run_engine_device_bench(const EngineBenchArgs& args) {
  const bool fake = args.device_driver == "fake";
  if (fake) setenv("PDKV_CUDA_LIBRARY", fake_driver_path().c_str(), 1);
  if (engine::device_driver() == nullptr) {
    return failed_precondition("no device driver: " + engine::device_driver_absent_reason());
  }
  if (args.backend != "tcp") {
    return invalid_argument("device memory is measured on the tcp backend (shm refuses it)");
  }
  PDKV_ASSIGN_OR_RETURN(Workload w, bench_workload(args));
  PDKV_ASSIGN_OR_RETURN(engine::EngineOptions options, engine::EngineOptions::from_env());
  options.backend = args.backend;
  if (args.streams > 0) options.tcp.streams = args.streams;
  SourceMemory src(w.layout_bytes);
  if (src.data == nullptr) return internal_error("cannot map the source layout");
  engine::testing::fill_pattern(src.data, src.size, args.seed);

  const bool src_device = args.src_memory == "device";
  const bool dst_device = args.dst_memory == "device";
  std::string id = fake ? "P9f" : "P9";
  if (src_device != dst_device) id += src_device ? "_d2h" : "_h2d";
  PDKV_ASSIGN_OR_RETURN(auto host, start_arm("host", false, false, w, src, options));
  PDKV_ASSIGN_OR_RETURN(auto device, start_arm(args.src_memory + "->" + args.dst_memory, src_device,
                                               dst_device, w, src, options));
  std::printf(
      "pdkv bench engine (%s): %s -> %s over tcp, %s driver, model %s, %lu tokens, page %lu, "
      "%zu blocks, %.1f MiB per round, %d streams; the host arm alternates with it\n",
      id.c_str(), args.src_memory.c_str(), args.dst_memory.c_str(),
      engine::device_driver()->description().c_str(), args.model.c_str(),
      static_cast<unsigned long>(w.tokens), static_cast<unsigned long>(w.page_tokens),
      w.blocks.size(), w.payload_bytes / 1048576.0, options.tcp.streams);
  std::printf("%6s %12s %12s\n", "round", "host GB/s", "device GB/s");
  for (int r = 0; r < args.rounds; ++r) {
    // Which arm goes first alternates, so neither always follows the other.
    Arm* order[2] = {host.get(), device.get()};
    if (r % 2 == 1) std::swap(order[0], order[1]);
    for (Arm* arm : order) {
      const TimePoint start = now();
      PDKV_RETURN_IF_ERROR(arm->link->round(arm->name + " timed round"));
      arm->gbps.push_back(w.payload_bytes / elapsed_s(start) / kGiga);
    }
    std::printf("%6d %12.3f %12.3f\n", r, host->gbps.back(), device->gbps.back());
  }
  PDKV_ASSIGN_OR_RETURN(host->verified, verify(*host, w, src));
  PDKV_ASSIGN_OR_RETURN(device->verified, verify(*device, w, src));
  Result<std::pair<double, double>> raw = raw_copy_gbps(std::min<size_t>(src.size, 256u << 20));
  Result<WaitCpu> wait_cpu = wait_cpu_share(std::min<size_t>(src.size, 256u << 20), 10, fake);
  if (wait_cpu.ok()) {
    std::printf(
        "waiting thread's CPU share while a copy runs: %.1f %% with a polling event (the "
        "driver's default), %.1f %% with pdkv's blocking-sync event\n",
        100 * wait_cpu->polling, 100 * wait_cpu->blocking);
  }
  const double host_gbps = median(host->gbps);
  const double device_gbps = median(device->gbps);
  const double ratio = device_gbps / host_gbps;
  std::printf(
      "\n| id | device arm GB/s | host arm GB/s (same run) | ratio | target | raw pinned copy "
      "D2H / H2D GB/s | verified |\n|---|---|---|---|---|---|---|\n");
  std::printf("| %s | %.3f | %.3f | %.3f | %s | %s | %s |\n", id.c_str(), device_gbps, host_gbps,
              ratio, fake ? "none (fake driver: for the record)" : ">= 0.90",
              raw.ok() ? fmt::format("{:.2f} / {:.2f}", raw->first, raw->second).c_str() : "n/a",
              host->verified && device->verified ? "yes" : "NO");
  if (!args.json_path.empty()) {
    nlohmann::json j;
    const Figure figure{device_gbps,
                        host_gbps,
                        ratio,
                        fake ? 0.0 : kTarget,
                        host->verified && device->verified,
                        "the same workload host->host, rounds alternating in this run"};
    j[id] = figure_json(figure,
                        {{"device_rounds", device->gbps},
                         {"host_rounds", host->gbps},
                         {"raw_d2h_gbps", raw.ok() ? raw->first : 0.0},
                         {"raw_h2d_gbps", raw.ok() ? raw->second : 0.0},
                         {"driver", engine::device_driver()->description()},
                         {"src_memory", args.src_memory},
                         {"dst_memory", args.dst_memory},
                         {"model", args.model},
                         {"tokens", args.tokens},
                         {"page", args.page},
                         {"head_split", args.head_split},
                         {"decode_tp", args.decode_tp},
                         {"streams", options.tcp.streams},
                         {"blocks", w.blocks.size()},
                         {"device_slab_bytes", options.tcp.device_slab_bytes},
                         {"device_slabs", options.tcp.device_slabs},
                         {"wait_cpu_share_polling", wait_cpu.ok() ? wait_cpu->polling : -1.0},
                         {"wait_cpu_share_blocking", wait_cpu.ok() ? wait_cpu->blocking : -1.0}});
    PDKV_RETURN_IF_ERROR(write_json_file(args.json_path, j));
  }
  if (!host->verified || !device->verified) {
    return data_loss("destination bytes do not match the source");
  }
  return Status();
}

}  // namespace pdkv::bench

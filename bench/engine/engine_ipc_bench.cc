#include "bench/engine/engine_ipc_bench.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/engine/engine_bench_util.h"
#include "common/clock.h"
#include "engine/backends/cuda_ipc/ipc_writer.h"
#include "engine/device/cuda_ipc_driver.h"
#include "engine/device/device_driver.h"
#include "engine/testing/device_memory.h"

namespace pdkv::bench {
namespace {

constexpr double kTarget = 0.80;

std::string fake_driver_path() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (exe.parent_path().parent_path() / "lib" / "libpdkv_fake_cuda.so").string();
}

// The baseline: the same number of bytes copied device to device in this process, one
// cuMemcpyDtoDAsync, timed to its completion.
class DriverCopy {
 public:
  static Result<std::unique_ptr<DriverCopy>> make(uint64_t src, size_t bytes) {
    auto d = std::unique_ptr<DriverCopy>(new DriverCopy());
    d->src_ = src;
    d->bytes_ = bytes;
    PDKV_ASSIGN_OR_RETURN(d->dst_, engine::testing::DeviceBuffer::allocate(0, bytes));
    PDKV_RETURN_IF_ERROR(engine::device_driver()->bind_thread(0));
    PDKV_ASSIGN_OR_RETURN(d->stream_, engine::device_driver()->create_stream());
    return d;
  }
  ~DriverCopy() {
    if (stream_ != nullptr) engine::device_driver()->destroy_stream(stream_);
  }
  Result<double> round_gbps() {
    PDKV_RETURN_IF_ERROR(engine::device_driver()->bind_thread(0));
    const engine::CopyPiece piece{dst_->addr(), src_, bytes_};
    const TimePoint start = now();
    PDKV_RETURN_IF_ERROR(engine::ipc_driver()->copy_batch(stream_, {&piece, 1}));
    PDKV_RETURN_IF_ERROR(engine::device_driver()->sync_stream(stream_));
    return bytes_ / elapsed_s(start) / kGiga;
  }

 private:
  DriverCopy() = default;
  uint64_t src_ = 0;
  size_t bytes_ = 0;
  std::unique_ptr<engine::testing::DeviceBuffer> dst_;
  engine::DeviceStreamHandle stream_ = nullptr;
};

}  // namespace

Status run_engine_ipc_bench(const EngineBenchArgs& args) {
  const bool fake = args.device_driver == "fake";
  if (fake) setenv("PDKV_CUDA_LIBRARY", fake_driver_path().c_str(), 1);
  if (engine::device_driver() == nullptr) {
    return failed_precondition("no device driver: " + engine::device_driver_absent_reason());
  }
  if (engine::ipc_driver() == nullptr) {
    return failed_precondition("no device IPC: " + engine::ipc_driver_absent_reason());
  }
  if (args.src_memory != "device" || args.dst_memory != "device") {
    return invalid_argument(
        "--path cuda_ipc moves device memory to device memory (--memory device)");
  }
  PDKV_ASSIGN_OR_RETURN(Workload w, bench_workload(args));
  PDKV_ASSIGN_OR_RETURN(engine::EngineOptions options, engine::EngineOptions::from_env());
  options.backend = "cuda_ipc";
  SourceMemory src(w.layout_bytes);
  if (src.data == nullptr) return internal_error("cannot map the source layout");
  engine::testing::fill_pattern(src.data, src.size, args.seed);
  PDKV_ASSIGN_OR_RETURN(auto device_src, engine::testing::DeviceBuffer::allocate(0, src.size));
  PDKV_RETURN_IF_ERROR(device_src->upload(0, src.data, src.size));
  const std::vector<std::string> env = {"PDKV_ENGINE_BACKEND=cuda_ipc",
                                        "PDKV_PEER_DEVICE=" + std::to_string(args.peer_device)};
  PDKV_ASSIGN_OR_RETURN(auto link, start_link(w, src, options, env, device_src->addr()));
  PDKV_RETURN_IF_ERROR(link->round("cuda_ipc warm-up round"));
  PDKV_ASSIGN_OR_RETURN(auto baseline, DriverCopy::make(device_src->addr(), w.payload_bytes));
  PDKV_RETURN_IF_ERROR(baseline->round_gbps().status());

  const std::string id = fake ? "P10f" : "P10";
  std::printf(
      "pdkv bench engine (%s): device -> device over cuda_ipc (receiver on device %d), %s "
      "driver, model %s, %lu tokens, page %lu, %zu blocks, %.1f MiB per round; the driver's "
      "own device-to-device copy of the same bytes alternates with it\n",
      id.c_str(), args.peer_device, engine::device_driver()->description().c_str(),
      args.model.c_str(), static_cast<unsigned long>(w.tokens),
      static_cast<unsigned long>(w.page_tokens), w.blocks.size(), w.payload_bytes / 1048576.0);
  std::printf("%6s %14s %16s %12s\n", "round", "cuda_ipc GB/s", "DtoD copy GB/s", "copies");
  auto& counters = engine::cuda_ipc::writer_counters();
  std::vector<double> ipc_gbps, base_gbps;
  std::vector<long> copies_per_round;
  uint64_t strided = 0, batches = 0, pieces = 0;
  for (int r = 0; r < args.rounds; ++r) {
    const long fake_before = engine::testing::fake_device_copy_count();
    const uint64_t s0 = counters.strided.load(), b0 = counters.batches.load(),
                   p0 = counters.pieces.load();
    auto timed_ipc = [&]() -> Status {
      const TimePoint start = now();
      PDKV_RETURN_IF_ERROR(link->round("cuda_ipc timed round"));
      ipc_gbps.push_back(w.payload_bytes / elapsed_s(start) / kGiga);
      return Status();
    };
    if (r % 2 == 0) PDKV_RETURN_IF_ERROR(timed_ipc());
    const long fake_mid = engine::testing::fake_device_copy_count();
    PDKV_ASSIGN_OR_RETURN(double b, baseline->round_gbps());
    base_gbps.push_back(b);
    const long fake_base = engine::testing::fake_device_copy_count() - fake_mid;
    if (r % 2 == 1) PDKV_RETURN_IF_ERROR(timed_ipc());
    strided = counters.strided.load() - s0;
    batches = counters.batches.load() - b0;
    pieces = counters.pieces.load() - p0;
    const long fake_calls =
        fake ? engine::testing::fake_device_copy_count() - fake_before - fake_base : -1;
    copies_per_round.push_back(fake ? fake_calls : static_cast<long>(strided + batches));
    std::printf("%6d %14.3f %16.3f %12ld\n", r, ipc_gbps.back(), base_gbps.back(),
                copies_per_round.back());
  }
  // One more round into a poisoned destination, read back from the receiver's device.
  std::memset(link->dst->data(), 0xEE, link->dst->size());
  PDKV_RETURN_IF_ERROR(link->peer->device_upload());
  PDKV_RETURN_IF_ERROR(link->round("cuda_ipc verification round"));
  PDKV_RETURN_IF_ERROR(link->peer->device_download());
  const size_t bad = first_bad_block(w, src.data, link->dst->data());
  const bool verified = bad == w.blocks.size();
  const double value = median(ipc_gbps);
  const double base = median(base_gbps);
  const double ratio = value / base;
  std::printf(
      "\n| id | cuda_ipc GB/s | DtoD copy GB/s (same run) | ratio | target | driver copies per "
      "round (pieces) | verified |\n|---|---|---|---|---|---|---|\n");
  std::printf("| %s | %.3f | %.3f | %.3f | %s | %ld (%lu: %lu strided, %lu batched) | %s |\n",
              id.c_str(), value, base, ratio,
              fake ? "none (fake driver: for the record)" : ">= 0.80", copies_per_round.back(),
              static_cast<unsigned long>(pieces), static_cast<unsigned long>(strided),
              static_cast<unsigned long>(batches), verified ? "yes" : "NO");
  if (!args.json_path.empty()) {
    nlohmann::json j;
    const Figure figure{
        value,    base,
        ratio,    fake ? 0.0 : kTarget,
        verified, "cuMemcpyDtoDAsync of the same bytes in one process, rounds alternating"};
    j[id] = figure_json(figure, {{"ipc_rounds", ipc_gbps},
                                 {"baseline_rounds", base_gbps},
                                 {"driver_copies_per_round", copies_per_round.back()},
                                 {"strided_copies_per_round", strided},
                                 {"batched_copies_per_round", batches},
                                 {"pieces_per_round", pieces},
                                 {"batched_copies_native", engine::ipc_driver()->batches_copies()},
                                 {"driver", engine::device_driver()->description()},
                                 {"peer_device", args.peer_device},
                                 {"model", args.model},
                                 {"tokens", args.tokens},
                                 {"page", args.page},
                                 {"head_split", args.head_split},
                                 {"decode_tp", args.decode_tp},
                                 {"blocks", w.blocks.size()}});
    PDKV_RETURN_IF_ERROR(write_json_file(args.json_path, j));
  }
  if (!verified) return data_loss(fmt::format("block {} of the last round did not land", bad));
  return Status();
}

}  // namespace pdkv::bench

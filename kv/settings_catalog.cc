#include "kv/settings_catalog.h"

#include "common/common_settings.h"
#include "common/fault_injection_settings.h"
#include "engine/backends/cuda_ipc/cuda_ipc_settings.h"
#include "engine/backends/shm/shm_settings.h"
#include "engine/backends/ucx/ucx_settings.h"
#include "engine/engine_settings.h"
#include "kv/manager_settings.h"
#include "kv/registry/registry_settings.h"
#include "proto/endpoint_settings.h"

namespace pdkv::kv {

const std::vector<SettingsSection>& settings_catalog() {
  static const std::vector<SettingsSection> catalog = {
      {"common", {&config::kLogLevel, &config::kSecretFile}},
      {"engine", {&engine::kEngineBackend,
                  &engine::kEngineRequirePath,
                  &engine::kEngineHost,
                  &engine::kEnginePort,
                  &engine::kEngineConnectTimeoutMs,
                  &engine::kTcpStreams,
                  &engine::kTcpIoTimeoutMs,
                  &engine::kTcpSocketBufferBytes,
                  &engine::kTcpMinSplitBytes,
                  &engine::kTcpMaxPartEntries,
                  &engine::kTcpStageMaxBytes,
                  &engine::kTcpRecvStageMaxBytes,
                  &engine::kTcpInlineWriteBytes,
                  &engine::kTcpMaxConnections,
                  &engine::kTcpDeviceSlabs,
                  &engine::kTcpDeviceSlabBytes,
                  &engine::kCudaLibrary,
                  &engine::kCudaNoBatchedCopies,
                  &engine::shm::kShmCopyThreads,
                  &engine::shm::kShmPartBytes,
                  &engine::shm::kShmIoTimeoutMs,
                  &engine::ucx::kUcxTls,
                  &engine::ucx::kUcxErrMode,
                  &engine::ucx::kUcxIoTimeoutMs,
                  &engine::ucx::kUcxMaxWorkers,
                  &engine::ucx::kUcxPartBytes,
                  &engine::cuda_ipc::kCudaIpcIoTimeoutMs,
                  &engine::cuda_ipc::kCudaIpcPartBytes}},
      {"control-plane", {&proto::kZmqSndHwm, &proto::kZmqMaxPeers}},
      {"kv-manager",
       {&kBootstrapTimeoutS,
        &kWaitingTimeoutS,
        &kMetadataTimeoutS,
        &kRouteAttemptTimeoutS,
        &kRouteBreakerFailures,
        &kRouteBreakerBackoffS,
        &kMaxResolvingInstances,
        &kHeartbeatIntervalS,
        &kHeartbeatMaxFailures,
        &kBootstrapRefreshS,
        &kFailedPeerTtlS,
        &kFailedPeerCooldownS,
        &kTransferAttempts,
        &kTransferWindowBytes,
        &kTransferBatchBytes,
        &kVerifyChecksum,
        &kStatusInBand,
        &kMaxDecodePeers,
        &kMaxPendingRooms,
        &kMaxPendingRoomsPerDecode,
        &kMaxPendingBytesPerDecode,
        &kLocalIp,
        &kMetricsPort,
        &kMetricsHost}},
      {"route-registry",
       {&kRegistry, &kEtcdEndpoints, &kEtcdPrefix, &kEtcdLeaseTtlS, &kEtcdCaFile, &kEtcdCertFile,
        &kEtcdKeyFile, &kEtcdUser, &kEtcdPasswordFile, &kEtcdBin}},
      {"fault-injection",
       {&config::kFaultEveryN, &config::kFaultMode, &config::kFaultErrno, &config::kFaultStallMs,
        &config::kFaultCalls, &config::kFaultSkip, &config::kFaultMax, &config::kFaultPrefix}},
  };
  return catalog;
}

}  // namespace pdkv::kv

# Type hints of the engine-facing API (pdkv.kv; what it promises: docs/API.md). Every call
# that may wait releases the GIL; failures raise ValueError (bad arguments) or
# RuntimeError / KVTransferError (with the reason, cause and stage) and never crash the
# interpreter.
from typing import Any, Mapping, Optional, Protocol, Sequence, Union

import numpy as np

# Defined once, in pure-Python modules (no native code), and re-exported here.
from pdkv.failure import FailureCause as FailureCause
from pdkv.failure import FailureStage as FailureStage
from pdkv.poll import KVPoll as KVPoll

_Indices = Union[np.ndarray, Sequence[int], None]
_Mask = Union[np.ndarray, Sequence[bool], None]
# state_indices: one list (at most one state group), or one list per state group.
_StateIndices = Union[np.ndarray, Sequence[int], Sequence[Union[np.ndarray, Sequence[int]]], None]

def device_health() -> dict: ...

class KVTransferError(RuntimeError):
    """failure_exception() sets all of room, reason, cause and stage; constructed
    directly, cause defaults to Internal and stage to None."""
    room: int
    reason: str
    cause: FailureCause
    stage: Optional[FailureStage]
    def __init__(self, room: int, reason: str, cause: FailureCause = ...,
                 stage: Optional[FailureStage] = None) -> None: ...

class DLPackTensor(Protocol):
    """A tensor exporting DLPack (torch, numpy, CuPy, JAX arrays)."""
    def __dlpack__(self, stream: Any = ...) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

class KVArgs:
    """Buffers of one rank and its place in the instance.

    A buffer entry (kv_data_ptrs, aux_data_ptrs, state_data_ptrs) is an int pointer, whose
    memory is memory_kind on gpu_id, or a contiguous tensor with __dlpack__ and
    __dlpack_device__ (torch CPU/CUDA tensors, numpy arrays), which gives its own pointer,
    length, kind and device; its *_data_lens entry may then be omitted (an empty list) or
    must agree. CUDA managed memory and other devices are refused. The KVArgs keeps the
    tensors alive. pdkv reads a CUDA source only after the caller synchronised the stream
    that wrote it."""
    engine_rank: int
    tp_size: int
    dp_size: int
    page_size: int
    kv_data_ptrs: list[Union[int, DLPackTensor]]
    kv_data_lens: list[int]
    kv_item_lens: list[int]
    layer_buffers: list[list[int]]
    kv_layer_ids: Optional[list[int]]
    kv_head_num: int
    total_kv_head_num: int
    head_dim: int
    dtype_bytes: int
    page_layout: str
    is_mla: bool
    aux_data_ptrs: list[Union[int, DLPackTensor]]
    aux_data_lens: list[int]
    aux_item_lens: list[int]
    state_data_ptrs: list[Union[int, DLPackTensor]]
    state_data_lens: list[int]
    state_item_lens: list[int]
    state_layer_ids: list[int]
    # State groups (docs/API.md): the group (>= 0) of each state buffer, empty = all 0;
    # per KV layer -1 (the room's chunked pages, kv_indices) or a state group g whose
    # index list names that layer's pages, empty = all -1. Both sides must agree. A room
    # then carries one state_indices list per group (G = 1 + the highest group).
    state_buffer_groups: list[int]
    kv_layer_groups: list[int]
    # State groups whose lists are sliding-window page lists: the prefill pairs the
    # leading min(len) entries of their two lists (the sides may count the window's last
    # page differently) instead of failing the room. Empty = equal lengths only.
    window_state_groups: list[int]
    # Pipeline parallelism (docs/API.md): prefill: this rank's stage of pp_size, its KV
    # buffers the stage's layers only; decode: the prefill stage this manager receives
    # from, its KV buffers that stage's layers. 1 / 0 = none.
    pp_size: int
    pp_rank: int
    # Per KV buffer: bytes from page i to page i+1 (empty, or 0 for one = its
    # kv_item_lens entry; else >= it). FlashInfer's (blocks, 2, ...) cache: K at base and
    # V at base + half, both with item = half, stride = 2 * half.
    kv_page_strides: list[int]
    state_page_strides: list[int]
    # MLA L1.5 cache (docs/API.md): this instance holds pages partially, so every chunk
    # (prefill) / pre-allocation (decode) carries its page ownership. Needs is_mla.
    enable_mla_l1_5_cache: bool
    # Speculative decoding: KV layers from target_layer_num on belong to
    # the draft model, whose head count and head size may differ (0 = as the target; a
    # target_layer_num of 0 means no draft layers).
    target_layer_num: int
    draft_kv_head_num: int
    draft_total_kv_head_num: int
    draft_head_dim: int
    # What raw-pointer buffers are: "auto" (the CUDA driver's answer; host memory in a
    # process without a driver), "host" or "cuda"; gpu_id their CUDA device (-1 = the one
    # the driver reports). Registration checks both.
    memory_kind: str
    gpu_id: int
    def __init__(self, **fields: object) -> None: ...
    def to_dict(self) -> dict: ...

class BootstrapServer:
    """HTTP rendezvous (PUT/GET/DELETE /route, /health, /metrics), serving on return."""
    def __init__(self, host: str = "0.0.0.0", port: int = 0, config: Optional[Config] = None,
                 authenticate_reads: bool = False) -> None: ...
    @property
    def port(self) -> int: ...
    @property
    def host(self) -> str: ...
    def stop(self) -> None: ...
    def __enter__(self) -> "BootstrapServer": ...
    def __exit__(self, *exc: object) -> None: ...

class Config:
    """Explicit PDKV_* settings for one KVManager (pdkv.config). A field left None comes
    from the environment, else its default (docs/CONFIG.md); a set field beats both.
    Construction checks types and ranges: ValueError naming the field."""
    # BEGIN settings fields (scripts/gen_config_docs.py; edit the C++ specs)
    secret_file: Optional[str]  # PDKV_SECRET_FILE, default ''
    engine_backend: Optional[str]  # PDKV_ENGINE_BACKEND, default 'tcp' (auto, tcp, shm, ucx, cuda_ipc)
    engine_require_path: Optional[str]  # PDKV_ENGINE_REQUIRE_PATH, default 'tcp' (cuda_ipc, shm, ucx, tcp_staged, tcp)
    engine_host: Optional[str]  # PDKV_ENGINE_HOST, default '127.0.0.1'
    engine_port: Optional[int]  # PDKV_ENGINE_PORT, default 0
    engine_connect_timeout_ms: Optional[int]  # PDKV_ENGINE_CONNECT_TIMEOUT_MS, default 3000
    tcp_streams: Optional[int]  # PDKV_TCP_STREAMS, default 4
    tcp_io_timeout_ms: Optional[int]  # PDKV_TCP_IO_TIMEOUT_MS, default 5000
    tcp_socket_buffer_bytes: Optional[int]  # PDKV_TCP_SOCKET_BUFFER_BYTES, default 0
    tcp_min_split_bytes: Optional[int]  # PDKV_TCP_MIN_SPLIT_BYTES, default 1048576
    tcp_max_part_entries: Optional[int]  # PDKV_TCP_MAX_PART_ENTRIES, default 1048576
    tcp_stage_max_bytes: Optional[int]  # PDKV_TCP_STAGE_MAX_BYTES, default 0
    tcp_recv_stage_max_bytes: Optional[int]  # PDKV_TCP_RECV_STAGE_MAX_BYTES, default 4096
    tcp_inline_write_bytes: Optional[int]  # PDKV_TCP_INLINE_WRITE_BYTES, default 262144
    tcp_max_connections: Optional[int]  # PDKV_TCP_MAX_CONNECTIONS, default 512
    tcp_device_slabs: Optional[int]  # PDKV_TCP_DEVICE_SLABS, default 3
    tcp_device_slab_bytes: Optional[int]  # PDKV_TCP_DEVICE_SLAB_BYTES, default 2097152
    shm_copy_threads: Optional[int]  # PDKV_SHM_COPY_THREADS, default 2
    shm_part_bytes: Optional[int]  # PDKV_SHM_PART_BYTES, default 67108864
    shm_io_timeout_ms: Optional[int]  # PDKV_SHM_IO_TIMEOUT_MS, default 5000
    ucx_tls: Optional[str]  # PDKV_UCX_TLS, default ''
    ucx_err_mode: Optional[str]  # PDKV_UCX_ERR_MODE, default 'auto' (auto, peer, none)
    ucx_io_timeout_ms: Optional[int]  # PDKV_UCX_IO_TIMEOUT_MS, default 5000
    ucx_max_workers: Optional[int]  # PDKV_UCX_MAX_WORKERS, default 256
    ucx_part_bytes: Optional[int]  # PDKV_UCX_PART_BYTES, default 67108864
    cuda_ipc_io_timeout_ms: Optional[int]  # PDKV_CUDA_IPC_IO_TIMEOUT_MS, default 5000
    cuda_ipc_part_bytes: Optional[int]  # PDKV_CUDA_IPC_PART_BYTES, default 268435456
    zmq_sndhwm: Optional[int]  # PDKV_ZMQ_SNDHWM, default 10000
    zmq_max_peers: Optional[int]  # PDKV_ZMQ_MAX_PEERS, default 8192
    bootstrap_timeout_s: Optional[float]  # PDKV_BOOTSTRAP_TIMEOUT_S, default 120.0
    waiting_timeout_s: Optional[float]  # PDKV_WAITING_TIMEOUT_S, default 300.0
    metadata_timeout_s: Optional[float]  # PDKV_METADATA_TIMEOUT_S, default 10.0
    route_attempt_timeout_s: Optional[float]  # PDKV_ROUTE_ATTEMPT_TIMEOUT_S, default 2.0
    route_breaker_failures: Optional[int]  # PDKV_ROUTE_BREAKER_FAILURES, default 3
    route_breaker_backoff_s: Optional[float]  # PDKV_ROUTE_BREAKER_BACKOFF_S, default 5.0
    max_resolving_instances: Optional[int]  # PDKV_MAX_RESOLVING_INSTANCES, default 64
    heartbeat_interval_s: Optional[float]  # PDKV_HEARTBEAT_INTERVAL_S, default 0.5
    heartbeat_max_failures: Optional[int]  # PDKV_HEARTBEAT_MAX_FAILURES, default 3
    bootstrap_refresh_s: Optional[float]  # PDKV_BOOTSTRAP_REFRESH_S, default 2.0
    failed_peer_ttl_s: Optional[float]  # PDKV_FAILED_PEER_TTL_S, default 30.0
    failed_peer_cooldown_s: Optional[float]  # PDKV_FAILED_PEER_COOLDOWN_S, default 1.0
    transfer_attempts: Optional[int]  # PDKV_TRANSFER_ATTEMPTS, default 3
    transfer_window_bytes: Optional[int]  # PDKV_TRANSFER_WINDOW_BYTES, default 67108864
    transfer_batch_bytes: Optional[int]  # PDKV_TRANSFER_BATCH_BYTES, default 4194304
    verify_checksum: Optional[bool]  # PDKV_VERIFY_CHECKSUM, default False
    status_in_band: Optional[bool]  # PDKV_STATUS_IN_BAND, default True
    max_decode_peers: Optional[int]  # PDKV_MAX_DECODE_PEERS, default 4096
    max_pending_rooms: Optional[int]  # PDKV_MAX_PENDING_ROOMS, default 65536
    max_pending_rooms_per_decode: Optional[int]  # PDKV_MAX_PENDING_ROOMS_PER_DECODE, default 8192
    max_pending_bytes_per_decode: Optional[int]  # PDKV_MAX_PENDING_BYTES_PER_DECODE, default 268435456
    local_ip: Optional[str]  # PDKV_LOCAL_IP, default ''
    metrics_port: Optional[int]  # PDKV_METRICS_PORT, default -1
    metrics_host: Optional[str]  # PDKV_METRICS_HOST, default '127.0.0.1'
    registry: Optional[str]  # PDKV_REGISTRY, default 'http' (http, etcd)
    etcd_endpoints: Optional[str]  # PDKV_ETCD_ENDPOINTS, default '127.0.0.1:2379'
    etcd_prefix: Optional[str]  # PDKV_ETCD_PREFIX, default '/pdkv'
    etcd_lease_ttl_s: Optional[int]  # PDKV_ETCD_LEASE_TTL_S, default 10
    etcd_ca_file: Optional[str]  # PDKV_ETCD_CA_FILE, default ''
    etcd_cert_file: Optional[str]  # PDKV_ETCD_CERT_FILE, default ''
    etcd_key_file: Optional[str]  # PDKV_ETCD_KEY_FILE, default ''
    etcd_user: Optional[str]  # PDKV_ETCD_USER, default ''
    etcd_password_file: Optional[str]  # PDKV_ETCD_PASSWORD_FILE, default ''
    # END settings fields
    def __init__(self, **fields: object) -> None: ...
    def replace(self, **fields: object) -> "Config": ...
    def explicit(self) -> dict[str, object]: ...
    def to_settings(self) -> dict[str, str]: ...
    def resolved(self, use_environment: bool = True) -> dict[str, tuple[str, str]]:
        """Variable -> (value, origin "explicit" | "environment" | "default"), as the C++
        readers resolve them."""
    @staticmethod
    def defaults() -> dict[str, object]: ...
    @staticmethod
    def from_mapping(values: Mapping[str, object]) -> "Config": ...

class KVManager:
    """One rank's KV manager; mode "prefill" or "decode". Settings: `config` first, then
    the PDKV_* environment, then defaults; `backend` / `local_ip` are shorthands for
    config.engine_backend / config.local_ip (None = not set here; a value contradicting
    the config's is a ValueError)."""
    mode: str
    config: Config
    def __init__(self, args: KVArgs, mode: str, bootstrap_addr: str,
                 backend: Optional[str] = None, layerwise_interval: int = 0,
                 local_ip: Optional[str] = None, wait_for_prefill_metadata: bool = False,
                 config: Optional[Config] = None) -> None: ...
    def set_prefill_metadata(self, room: int, bootstrap_token: int,
                             spec_candidate_ids: Optional[Sequence[int]] = None) -> None: ...
    def reserve_layerwise_cache_steps(self) -> int: ...
    def mark_layers_ready(self, n: int = 1) -> None: ...
    def active_rooms(self) -> int: ...
    def changed_rooms(self) -> Optional[list[int]]: ...
    @property
    def control_endpoint(self) -> str: ...
    @property
    def engine_endpoint(self) -> str: ...
    def metrics(self) -> dict: ...
    def metrics_text(self) -> str: ...
    def peer_paths(self) -> dict: ...
    @property
    def metrics_port(self) -> int: ...
    def shutdown(self) -> None: ...
    def __enter__(self) -> "KVManager": ...
    def __exit__(self, *exc: object) -> None: ...

class _Room:
    bootstrap_addr: str
    bootstrap_room: int
    def poll(self) -> KVPoll: ...
    def wait(self, timeout_s: float) -> KVPoll:
        """Blocks (GIL released) until the room ends or timeout_s passes; poll() then."""
    def failure_exception(self) -> None:
        """Raises KVTransferError (reason, cause, stage set) if the room failed."""
    def abort(self) -> None: ...
    def clear(self) -> None: ...

class KVSender(_Room):
    def __init__(self, mgr: KVManager, bootstrap_addr: str, bootstrap_room: int) -> None: ...
    def init(self, num_kv_indices: int, aux_index: Optional[int] = None) -> None: ...
    def send(self, kv_indices: _Indices, state_indices: _StateIndices = None,
             page_transfer_mask: _Mask = None, page_local_indices: _Indices = None,
             layerwise: Optional[bool] = None, stream: Any = None) -> None:
        """One chunk. `stream`: the CUDA stream that writes the chunk's KV (torch, CuPy,
        __cuda_stream__ or an int CUstream); pdkv's copies wait for its current point on
        the device. None: the caller synchronised. With enable_mla_l1_5_cache: page_transfer_mask (one bool per chunk
        page) and page_local_indices (the local page of each owned one, in order) are
        required; without it, passing them is a ValueError. Bad lengths or a local page
        outside the buffers: ValueError. state_indices (last chunk only): one list, or
        with state groups one list per group (a count other than the group count:
        ValueError)."""

class KVReceiver(_Room):
    def __init__(self, mgr: KVManager, bootstrap_addr: str, bootstrap_room: int) -> None: ...
    def init(self, prefill_dp_rank: Optional[int] = None) -> None: ...
    def send_metadata(self, kv_indices: _Indices, aux_index: Optional[int] = None,
                      state_indices: _StateIndices = None,
                      decode_prefix_len: Optional[int] = None,
                      page_transfer_mask: _Mask = None,
                      page_indices_mapping: _Indices = None,
                      page_local_indices: _Indices = None) -> None:
        """With enable_mla_l1_5_cache on this decode all three ownership arrays are
        required (mask: one bool per kv_indices page; mapping: for each owned page its
        position in page_local_indices; local: one page per owned page), and only owned
        pages are written; without it, passing them is a ValueError. Bad lengths,
        mappings outside the local list or used twice, pages outside the buffers:
        ValueError. state_indices: one list, or with state groups one list per group
        (a count other than the group count: ValueError)."""
    def prefill_metadata(self) -> tuple[int, Optional[list[int]]]: ...

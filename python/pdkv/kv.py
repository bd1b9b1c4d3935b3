"""The engine-facing KV transfer API (what it promises: docs/API.md).

Names and call order mirror sglang's disaggregation base classes (``KVArgs``,
``KVPoll``, ``KVManager``, ``KVSender``, ``KVReceiver``, a bootstrap server), so a serving
engine switches to pdkv with a small adapter (see examples/engine_adapter.py). All the
work happens in C++ (``pdkv._native``); this module converts arguments, names things and
turns failures into exceptions. Every native call that may wait releases the GIL.
"""
from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

import numpy as np

from pdkv import _buffers, _native, _streams
from pdkv.config import Config
from pdkv.failure import FailureCause, FailureStage
from pdkv.poll import KVPoll

__all__ = ["KVPoll", "KVArgs", "DLPackTensor", "KVTransferError", "FailureCause", "FailureStage",
           "BootstrapServer", "Config", "KVManager", "KVSender", "KVReceiver", "device_health"]


def device_health() -> dict:
    """Whether this process can still move device memory: ``{"healthy": bool, "reason":
    str}``. A sticky CUDA error (an illegal address, a launch failure: the driver fails
    every later call in the context) makes it ``healthy=False`` for the rest of the
    process, with that error as ``reason``; rooms on device memory then fail with
    ``FailureCause.DeviceFault`` and host-memory rooms go on. Restart the process."""
    return dict(_native.device_health())


class KVTransferError(RuntimeError):
    """A room failed; the message carries the room, the reason and the peer.

    ``cause`` (a FailureCause) says why, for code to branch on; ``stage`` (a FailureStage,
    equal to its label string) where the room was; ``reason`` is the human message.
    Raised by failure_exception() with all three set; constructed directly, the cause
    defaults to Internal and the stage to None (unknown)."""

    def __init__(self, room: int, reason: str, cause: FailureCause = FailureCause.Internal,
                 stage: Optional[FailureStage] = None):
        super().__init__(f"KV transfer of room {room} failed: {reason}")
        self.room = room
        self.reason = reason
        self.cause = FailureCause(cause)
        self.stage = None if stage is None else FailureStage(stage)


class DLPackTensor(Protocol):
    """What a KVArgs buffer entry may be besides an int pointer: a tensor exporting
    DLPack (torch, numpy, CuPy, JAX arrays). For type checkers only."""

    def __dlpack__(self, stream: Any = None) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


_KVARGS_DEFAULTS = {
    "engine_rank": 0,
    "tp_size": 1,
    "dp_size": 1,
    "page_size": 1,
    "kv_data_ptrs": [],
    "kv_data_lens": [],
    "kv_item_lens": [],
    "layer_buffers": [],
    "kv_layer_ids": None,
    "kv_head_num": 1,
    "total_kv_head_num": 1,
    "head_dim": 0,
    "dtype_bytes": 0,
    "page_layout": "NHD",
    "is_mla": False,
    "aux_data_ptrs": [],
    "aux_data_lens": [],
    "aux_item_lens": [],
    "state_data_ptrs": [],
    "state_data_lens": [],
    "state_item_lens": [],
    "state_layer_ids": [],
    # State groups (docs/API.md): the group of each state buffer (empty = all group 0) and
    # of each KV layer (-1 = the room's chunked pages, g = state group g's index list;
    # empty = all -1); a room then carries one state_indices list per group.
    "state_buffer_groups": [],
    "kv_layer_groups": [],
    # Bytes from one page of a KV buffer to the next (empty, or 0 for one = its
    # kv_item_lens entry): FlashInfer keeps K and V of a block side by side.
    "kv_page_strides": [],
    "enable_mla_l1_5_cache": False,
    # Speculative decoding: KV layers (layer_buffers entries) from target_layer_num on are
    # the draft model's; its head count / head size when they differ from the target's
    # (0 = the same; 0 layers = no draft).
    "target_layer_num": 0,
    "draft_kv_head_num": 0,
    "draft_total_kv_head_num": 0,
    "draft_head_dim": 0,
    # What raw-pointer buffers are made of: "auto" (ask the CUDA driver, host memory when
    # the process has none), "host" or "cuda"; gpu_id the CUDA device (-1 = the one the
    # driver reports). Tensors in the pointer lists describe themselves.
    "memory_kind": "auto",
    "gpu_id": -1,
}


class KVArgs:
    """What one rank tells pdkv about its buffers and its place in the instance.

    Plain keyword construction; an unknown keyword raises ValueError. A buffer entry is
    an int pointer (``tensor.data_ptr()``, ``array.ctypes.data``; its memory is
    ``memory_kind`` on ``gpu_id``) or a tensor with ``__dlpack__`` / ``__dlpack_device__``
    (torch CPU or CUDA tensors, numpy arrays), whose length and memory kind come from the
    tensor (its ``*_data_lens`` entry may then be omitted, or must agree). A tensor must be
    contiguous; CUDA managed memory is refused. pdkv reads CUDA buffers only when the
    caller has synchronised the stream that wrote them.
    """

    __slots__ = tuple(_KVARGS_DEFAULTS)

    def __init__(self, **fields):
        unknown = sorted(set(fields) - set(_KVARGS_DEFAULTS))
        if unknown:
            raise ValueError(f"KVArgs got unknown field(s): {', '.join(unknown)}; "
                             f"known fields: {', '.join(_KVARGS_DEFAULTS)}")
        for name, default in _KVARGS_DEFAULTS.items():
            value = fields.get(name, default)
            setattr(self, name, list(value) if isinstance(value, (list, tuple)) else value)

    def to_dict(self) -> dict:
        """The native form: tensors resolved to pointers and lengths, with each buffer's
        memory in ``<set>_data_memory`` when any entry is a tensor."""
        out = {name: getattr(self, name) for name in _KVARGS_DEFAULTS}
        out["layer_buffers"] = [[int(b) for b in layer] for layer in self.layer_buffers]
        out["enable_mla_l1_5_cache"] = bool(self.enable_mla_l1_5_cache)
        kind = self.memory_kind
        if kind not in _buffers.MEMORY_KINDS:
            raise ValueError(f"KVArgs.memory_kind must be one of {_buffers.MEMORY_KINDS}, "
                             f"not {kind!r}")
        gpu = self.gpu_id
        if isinstance(gpu, bool) or not isinstance(gpu, (int, np.integer)) or gpu < -1:
            raise ValueError(f"KVArgs.gpu_id must be an int >= -1 (-1 = any), not {gpu!r}")
        out["gpu_id"] = int(gpu)
        for name in ("kv", "aux", "state"):
            ptrs, lens, memory = _buffers.resolve(name, getattr(self, f"{name}_data_ptrs"),
                                                  getattr(self, f"{name}_data_lens"), kind,
                                                  int(gpu))
            out[f"{name}_data_ptrs"], out[f"{name}_data_lens"] = ptrs, lens
            out[f"{name}_data_memory"] = memory
        return out

    def __repr__(self) -> str:
        return "KVArgs(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in _KVARGS_DEFAULTS) + ")"


def _indices(values, what: str) -> np.ndarray:
    """int64 array from an int32/int64 array or a list of ints (ValueError otherwise)."""
    if values is None:
        return np.empty(0, dtype=np.int64)
    array = np.asarray(values)
    if array.size == 0:
        return np.empty(0, dtype=np.int64)
    if array.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{what} must hold integers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)


def _state_lists(values) -> tuple[np.ndarray, Optional[list[int]]]:
    """state_indices as (the lists concatenated, the end of each list), or (one list,
    None) for the flat form: None, an int array, or a list of ints. A list whose entries
    are arrays or lists is one list per state group (each may be empty)."""
    if isinstance(values, (list, tuple)) and values and all(
            isinstance(v, (list, tuple, np.ndarray)) for v in values):
        lists = [_indices(v, f"state_indices[{g}]") for g, v in enumerate(values)]
        ends = np.cumsum([len(v) for v in lists]).tolist()
        return (np.concatenate(lists) if lists else np.empty(0, dtype=np.int64)), ends
    if isinstance(values, (list, tuple)) and any(
            isinstance(v, (list, tuple, np.ndarray)) for v in values):
        raise ValueError("state_indices mixes lists and integers: pass one list of ints, or "
                         "one list per state group")
    return _indices(values, "state_indices"), None


def _mask(values, what: str) -> Optional[np.ndarray]:
    """0/1 bytes from a bool (or integer, non-zero = owned) array or list; None stays None."""
    if values is None:
        return None
    array = np.asarray(values)
    if array.size == 0:
        return np.empty(0, dtype=np.uint8)
    if array.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {array.shape}")
    if array.dtype != np.bool_ and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{what} must be a boolean mask, got dtype {array.dtype}")
    return np.ascontiguousarray(array != 0, dtype=np.uint8)


def _optional_indices(values, what: str) -> Optional[np.ndarray]:
    return None if values is None else _indices(values, what)


def _checked_config(config: Optional[Config]) -> Config:
    """`config`, or an empty Config (environment, then defaults) for None; anything else is
    a ValueError naming its type."""
    if config is None:
        return Config()
    if not isinstance(config, Config):
        raise ValueError(f"config must be a pdkv.Config, not {type(config).__name__}")
    return config


class BootstrapServer:
    """The HTTP rendezvous (PUT/GET /route, /health, /metrics), serving at once."""

    def __init__(self, host: str = "0.0.0.0", port: int = 0, config: Optional[Config] = None,
                 authenticate_reads: bool = False):
        integral = isinstance(port, (int, np.integer)) and not isinstance(port, bool)
        if not integral or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in [0, 65535] (0 = any free port), not {port!r}")
        # The cluster secret by a manager's rule: config.secret_file, else PDKV_SECRET_FILE.
        settings = _checked_config(config).to_settings()
        self._server = _native.BootstrapServer(host, int(port), settings,
                                               bool(authenticate_reads))

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def host(self) -> str:
        return self._server.host

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _merge_argument(config: Config, field: str, argument: Optional[str], what: str) -> Config:
    """`config` with the keyword argument `what` folded into `field`: None leaves the field
    as it is (so the environment or default still applies); a value that disagrees with
    the field is a ValueError rather than one silently winning."""
    if argument is None:
        return config
    current = getattr(config, field)
    if current is not None and current != argument:
        raise ValueError(f"KVManager({what}={argument!r}) contradicts "
                         f"config.{field}={current!r}; set one of them")
    return config.replace(**{field: argument})


class KVManager:
    """One rank's KV manager, ``mode`` "prefill" or "decode".

    Settings: ``config`` (a pdkv.Config) first, then the PDKV_* environment, then the
    defaults (docs/CONFIG.md). ``backend`` and ``local_ip`` are shorthands for
    ``config.engine_backend`` / ``config.local_ip``; None (the default) means "from the
    config, else the environment, else the default"."""

    def __init__(self, args: KVArgs, mode: str, bootstrap_addr: str,
                 backend: Optional[str] = None, layerwise_interval: int = 0,
                 local_ip: Optional[str] = None, wait_for_prefill_metadata: bool = False,
                 config: Optional[Config] = None):
        if not isinstance(args, KVArgs):
            raise ValueError("args must be a pdkv.KVArgs")
        if mode not in ("prefill", "decode"):
            raise ValueError(f"mode must be 'prefill' or 'decode', not {mode!r}")
        config = _checked_config(config)
        config = _merge_argument(config, "engine_backend", backend, "backend")
        config = _merge_argument(config, "local_ip", local_ip or None, "local_ip")
        self.args, self.mode, self.bootstrap_addr = args, mode, bootstrap_addr
        self.config = config
        native_args = args.to_dict()
        # For send(stream=...): which device a bare stream handle belongs to, asked of the
        # driver on first use only.
        self._kv_pointers, self._gpu_id = native_args["kv_data_ptrs"], native_args["gpu_id"]
        self._kv_device_known, self._kv_device = False, None
        self._native = _native.KVManager(native_args, mode, bootstrap_addr,
                                         config.to_settings(), int(layerwise_interval),
                                         bool(wait_for_prefill_metadata))
        self._shut_down = False

    def _stream_device(self) -> Optional[int]:
        """The KV buffers' CUDA device (None: host), for a stream handle that names none."""
        if not self._kv_device_known:
            self._kv_device = _streams.kv_device(self._kv_pointers, self._gpu_id)
            self._kv_device_known = True
        return self._kv_device

    def _check_open(self) -> None:
        if self._shut_down:
            raise RuntimeError(f"this {self.mode} KVManager was shut down")

    def set_prefill_metadata(self, room: int, bootstrap_token: int,
                             spec_candidate_ids: Optional[Sequence[int]] = None) -> None:
        self._check_open()
        ids = [] if spec_candidate_ids is None else [int(x) for x in spec_candidate_ids]
        self._native.set_prefill_metadata(int(room), int(bootstrap_token), ids)

    def reserve_layerwise_cache_steps(self) -> int:
        return self._native.reserve_layerwise_cache_steps()

    def mark_layers_ready(self, n: int = 1) -> None:
        """The forward finished `n` more layers (1 to the model's layer count)."""
        self._check_open()
        layers = len(self.args.layer_buffers)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= layers:
            raise ValueError(f"mark_layers_ready: n must be an int in [1, {layers}], not {n!r}")
        self._native.mark_layers_ready(int(n))

    def active_rooms(self) -> int:
        return self._native.active_rooms()

    @property
    def control_endpoint(self) -> str:
        return self._native.control_endpoint

    @property
    def engine_endpoint(self) -> str:
        return self._native.engine_endpoint

    def metrics(self) -> dict:
        """Figures of this rank: rooms by outcome, failures by cause, bytes, queue depth,
        ``stages`` (stage -> (rooms, seconds)) and ``histograms`` (``stage:<stage>``,
        ``room_bytes``, ``room_blocks`` -> bounds, per-bucket counts with +Inf last,
        count, sum), all cumulative."""
        return self._native.metrics()

    def metrics_text(self) -> str:
        """The same metrics in the Prometheus text format (what /metrics serves)."""
        return self._native.metrics_text()

    @property
    def metrics_port(self) -> int:
        """Port of this rank's own /metrics endpoint (PDKV_METRICS_PORT), -1 if none."""
        return self._native.metrics_port

    def shutdown(self) -> None:
        """Fails every open room (cause Shutdown) and stops. Idempotent; afterwards new
        senders, receivers and calls on this manager raise RuntimeError."""
        self._shut_down = True
        self._native.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


class _Room:
    def poll(self) -> KVPoll:
        return KVPoll(self._native.poll())

    def wait(self, timeout_s: float) -> KVPoll:
        """Blocks (without the GIL) until the room ends, Success or Failed, or until
        `timeout_s` seconds pass; returns poll() then. For a caller with nothing else to
        do until then: it wakes when the room ends instead of polling on a timer."""
        timeout = float(timeout_s)
        if not timeout >= 0:  # also NaN
            raise ValueError(f"timeout_s must be a number >= 0, not {timeout_s!r}")
        return KVPoll(self._native.wait(timeout))

    def failure_exception(self) -> None:
        """Raises KVTransferError with the reason, cause and stage if the room failed."""
        failure = self._native.failure()
        if failure is not None:
            reason, cause, stage = failure
            raise KVTransferError(self.bootstrap_room, reason, _cause(cause), FailureStage(stage))

    def abort(self) -> None:
        self._native.abort("aborted by the engine")

    def _refuse_after_success(self, call: str) -> None:
        if self._native.poll() == int(KVPoll.Success):
            raise RuntimeError(f"room {self.bootstrap_room}: {call}() after the room succeeded")

    def clear(self) -> None:
        """Nothing to free: the manager drops a room as soon as it ends. Idempotent."""


def _cause(value: int) -> FailureCause:
    # A cause newer than this package (a mismatched build) still raises, as Internal.
    try:
        return FailureCause(value)
    except ValueError:
        return FailureCause.Internal


class KVSender(_Room):
    """The prefill side of one request."""

    def __init__(self, mgr: KVManager, bootstrap_addr: str, bootstrap_room: int):
        if mgr.mode != "prefill":
            raise ValueError("KVSender needs a prefill KVManager")
        mgr._check_open()
        self.bootstrap_addr, self.bootstrap_room = bootstrap_addr, int(bootstrap_room)
        self._native = _native.KVSender(mgr._native, self.bootstrap_room)
        self._mgr = mgr

    def init(self, num_kv_indices: int, aux_index: Optional[int] = None) -> None:
        self._native.init(int(num_kv_indices), None if aux_index is None else int(aux_index))

    def send(self, kv_indices, state_indices=None, page_transfer_mask=None,
             page_local_indices=None, layerwise: Optional[bool] = None,
             stream: Any = None) -> None:
        """One chunk. With ``enable_mla_l1_5_cache`` the chunk's ownership (docs/API.md) is
        required: a bool mask over the chunk's pages and the local page indices of the owned
        ones (ValueError without it, and when given to a prefill without L1.5).
        `layerwise`: None = the manager's setting; False = this chunk's KV is complete
        already (e.g. a prefix-cache hit without a forward), so it is sent at once instead
        of waiting for the layer steps of the current forward.
        `stream`: the CUDA stream whose work issued so far writes this chunk's KV (a
        torch.cuda.Stream, a CuPy stream, an object with ``__cuda_stream__``, or an int
        CUstream). pdkv records its point now and its copies wait for it on the device, so
        the caller goes on at once; None: the caller has synchronised that stream. Not for
        a layerwise chunk (its layers are written after send): ValueError.
        `state_indices` (last chunk): one list, or with state groups (KVArgs
        state_buffer_groups / kv_layer_groups) one list per group; another count is a
        ValueError.
        RuntimeError after the room succeeded (every chunk was sent already); after it
        failed the call does nothing (a failure may land at any moment: poll() and
        failure_exception() report it)."""
        self._refuse_after_success("send")
        handle, device = (None, -1) if stream is None else _streams.stream_and_device(
            stream, self._mgr._stream_device())
        state, state_ends = _state_lists(state_indices)
        self._native.send(_indices(kv_indices, "kv_indices"), state,
                          state_group_ends=state_ends,
                          page_transfer_mask=_mask(page_transfer_mask, "page_transfer_mask"),
                          page_local_indices=_optional_indices(page_local_indices,
                                                               "page_local_indices"),
                          layerwise=None if layerwise is None else bool(layerwise),
                          stream=handle, device=device)


class KVReceiver(_Room):
    """The decode side of one request."""

    def __init__(self, mgr: KVManager, bootstrap_addr: str, bootstrap_room: int):
        if mgr.mode != "decode":
            raise ValueError("KVReceiver needs a decode KVManager")
        mgr._check_open()
        self.bootstrap_addr, self.bootstrap_room = bootstrap_addr, int(bootstrap_room)
        self._native = _native.KVReceiver(mgr._native, bootstrap_addr or "", self.bootstrap_room)

    def init(self, prefill_dp_rank: Optional[int] = None) -> None:
        self._native.init(None if prefill_dp_rank is None else int(prefill_dp_rank))

    def send_metadata(self, kv_indices, aux_index: Optional[int] = None, state_indices=None,
                      decode_prefix_len: Optional[int] = None, page_transfer_mask=None,
                      page_indices_mapping=None, page_local_indices=None) -> None:
        """The destination pages and slots. With ``enable_mla_l1_5_cache`` on this decode,
        the request-wide ownership (docs/API.md) is required: a bool mask with one entry per
        page of `kv_indices`, for each owned page its position in `page_local_indices`
        (``cumsum(mask) - 1`` when they are in page order), and the local pages; only owned
        pages are written, into their local pages. `state_indices`: one list, or with state
        groups one list per group (another count: ValueError). RuntimeError after the room
        succeeded."""
        self._refuse_after_success("send_metadata")
        state, state_ends = _state_lists(state_indices)
        self._native.send_metadata(
            _indices(kv_indices, "kv_indices"),
            None if aux_index is None else int(aux_index),
            state,
            int(decode_prefix_len or 0),
            state_group_ends=state_ends,
            page_transfer_mask=_mask(page_transfer_mask, "page_transfer_mask"),
            page_indices_mapping=_optional_indices(page_indices_mapping, "page_indices_mapping"),
            page_local_indices=_optional_indices(page_local_indices, "page_local_indices"))

    def prefill_metadata(self):
        """(bootstrap_token, spec_candidate_ids): -1 / None when the prefill sent none."""
        token, ids = self._native.prefill_metadata()
        return int(token), (list(ids) if ids else None)

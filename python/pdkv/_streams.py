"""The device stream a KVSender.send names: any stream object -> (CUstream handle, device).

A prefill's forward pass writes a chunk's KV on a CUDA stream; naming that stream at
send() lets pdkv record its point there and have its own copies wait for it on the
device, so the caller need not synchronise. Accepted: a torch.cuda.Stream (its
``cuda_stream`` and ``device``), a CuPy stream (``ptr`` and ``device_id``), any object
with ``__cuda_stream__`` (the CUDA array interface's ``(version, handle)`` protocol), or an
int handle. The legacy default stream (handle 0) is passed as CU_STREAM_LEGACY, because
pdkv's native side reads a null handle as "no stream named".
"""
from __future__ import annotations

from typing import Optional

from pdkv import _native

_CU_STREAM_LEGACY = 0x1


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{what} must be an int, not {type(value).__name__}")
    out = value.__index__()
    if out < 0:
        raise ValueError(f"{what} must be >= 0, not {out}")
    return out


def _handle_and_device(stream) -> tuple[int, Optional[int]]:
    if hasattr(stream, "__cuda_stream__"):
        proto = stream.__cuda_stream__()
        return _int(proto[1], "__cuda_stream__()[1]"), None
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        device = getattr(stream, "device", None)
        index = getattr(device, "index", None)
        return _int(stream.cuda_stream, "stream.cuda_stream"), index
    if hasattr(stream, "ptr") and hasattr(stream, "device_id"):  # cupy.cuda.Stream
        return _int(stream.ptr, "stream.ptr"), int(stream.device_id)
    if isinstance(stream, bool) or not hasattr(stream, "__index__"):
        raise ValueError("stream must be a CUDA stream object (torch, CuPy, __cuda_stream__) or "
                         f"an int CUstream handle, not {type(stream).__name__}")
    return _int(stream, "stream"), None


def kv_device(kv_pointers, gpu_id: int) -> Optional[int]:
    """The CUDA device a manager's KV buffers are on: ``gpu_id`` when set, else the first
    buffer's (the driver's pointer query); None for host buffers."""
    if gpu_id >= 0:
        return gpu_id
    info = _native.memory_info(int(kv_pointers[0])) if len(kv_pointers) else None
    return int(info["device"]) if info is not None and info["kind"] == "cuda" else None


def stream_and_device(stream, default_device: Optional[int]) -> tuple[int, int]:
    """(handle, device) for the native send. The device is the stream's own when it says,
    else `default_device` (kv_device's answer)."""
    handle, device = _handle_and_device(stream)
    if handle == 0:
        handle = _CU_STREAM_LEGACY
    if device is None:
        device = default_device
    if device is None:
        raise ValueError("send(stream=...) orders the KV cache after a device stream, but "
                         "this manager's KV buffers are host memory: synchronise instead")
    return handle, int(device)

"""Host-memory checks for the KV buffers an engine hands pdkv.

pdkv moves host (CPU) memory only: the TCP and shm backends read and write the buffers
with the CPU, and no backend registers GPU memory (engine/backends/ucx/ucx_backend.h:
UCX is built without CUDA here and GPU registration is not exposed). A GPU buffer given
to pdkv would be read by the CPU (a crash, or garbage on the wire), so the adapters
refuse it when the engine registers its caches, with ``HOST_MEMORY_ONLY`` in the message:

- vLLM hands torch tensors: their ``device.type`` must be ``"cpu"``.
- sglang hands raw pointers: each ``[ptr, ptr + len)`` must lie in mappings of this
  process that the CPU may read (and, on a decode, write), per ``/proc/self/maps``, and
  none of them a device file (``/dev/nvidia*``, ``/dev/kfd``, ``/dev/dri/*``,
  ``/dev/davinci*``, ``/dev/accel/*``). CUDA reserves its unified address range with
  PROT_NONE mappings, so a device pointer is refused here although the kernel reports it
  "mapped" (what pdkv's native register_memory checks, engine/mapped_memory.h). Newer
  sglang also labels each KV buffer in ``KVArgs.kv_data_mem_kinds`` ("VRAM" or
  "DRAM"); any "VRAM" is refused outright.
"""
from __future__ import annotations

import bisect
from typing import Iterable, Optional, Sequence

HOST_MEMORY_ONLY = (
    "pdkv moves host (CPU) memory only: the KV cache must live in host memory (vLLM's "
    "CPU backend, sglang's CPU device or host pools). GPU KV caches are not supported yet "
    "(they need UCX built with CUDA and GPU memory registration, which pdkv does not expose)")

_DEVICE_FILES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/", "/dev/davinci", "/dev/accel/")


def require_host_tensor(name: str, tensor) -> None:
    """ValueError unless ``tensor`` (torch) lives in host memory."""
    device = getattr(tensor, "device", None)
    kind = getattr(device, "type", None)
    if kind != "cpu":
        raise ValueError(f"{name}: KV cache tensor is on device {str(device)!r}, not host "
                         f"memory. {HOST_MEMORY_ONLY}")


class _Mappings:
    """This process's mappings, sorted by start: (start, end, perms, path)."""

    def __init__(self, maps_text: str):
        rows = []
        for line in maps_text.splitlines():
            parts = line.split(None, 5)
            if len(parts) < 5:
                continue
            lo, _, hi = parts[0].partition("-")
            rows.append((int(lo, 16), int(hi, 16), parts[1], parts[5] if len(parts) > 5 else ""))
        rows.sort()
        self.rows = rows
        self.starts = [r[0] for r in rows]

    def covering(self, addr: int, length: int) -> Iterable[tuple]:
        """The mappings covering [addr, addr + length) in order; stops at a gap (the
        caller sees a shortfall)."""
        at, end = addr, addr + length
        i = bisect.bisect_right(self.starts, at) - 1
        while at < end and 0 <= i < len(self.rows):
            lo, hi, perms, path = self.rows[i]
            if not lo <= at < hi:
                return
            yield self.rows[i]
            at = hi
            i += 1


def _read_maps() -> str:
    with open("/proc/self/maps") as f:
        return f.read()


def host_memory_problem(addr: int, length: int, writable: bool,
                        maps_text: Optional[str] = None,
                        mappings: Optional[_Mappings] = None) -> Optional[str]:
    """Why ``[addr, addr + length)`` is not host memory this process may read (and write
    if ``writable``), or None if it is."""
    if length <= 0:
        return None
    if mappings is None:
        mappings = _Mappings(maps_text if maps_text is not None else _read_maps())
    covered = addr
    for lo, hi, perms, path in mappings.covering(addr, length):
        if any(path.startswith(d) for d in _DEVICE_FILES):
            return f"it lies in a mapping of device file {path} (device memory)"
        if perms[0] != "r" or (writable and perms[1] != "w"):
            need = "readable and writable" if writable else "readable"
            return (f"it lies in a mapping with permissions {perms!r} at {lo:#x}-{hi:#x}, not "
                    f"{need} by the CPU (a GPU pointer? CUDA reserves its address range with "
                    "such mappings)")
        covered = hi
    if covered < addr + length:
        return f"no mapping of this process covers {covered:#x} (not host memory of this process)"
    return None


def require_host_buffers(what: str, ptrs: Sequence[int], lens: Sequence[int], writable: bool,
                         mem_kinds: Optional[Sequence[str]] = None,
                         maps_text: Optional[str] = None) -> None:
    """ValueError naming the first buffer of ``what`` that is not host memory."""
    if mem_kinds is not None:
        for i, kind in enumerate(mem_kinds):
            if str(kind).upper() != "DRAM":
                raise ValueError(f"{what}[{i}] is {kind} memory (the engine says so): "
                                 f"{HOST_MEMORY_ONLY}")
    mappings = _Mappings(maps_text if maps_text is not None else _read_maps())
    for i, (ptr, n) in enumerate(zip(ptrs, lens)):
        problem = host_memory_problem(int(ptr), int(n), writable, mappings=mappings)
        if problem is not None:
            raise ValueError(f"{what}[{i}] at {int(ptr):#x} (+{int(n)} bytes) is not host "
                             f"memory: {problem}. {HOST_MEMORY_ONLY}")

"""What the KV buffers an engine hands pdkv are made of, and what pdkv refuses.

pdkv moves host memory and CUDA device memory. Over the tcp backend device memory is
staged through pinned host memory by the CUDA driver's copies (the driver is loaded at
run time: libcuda.so.1, or the library PDKV_CUDA_LIBRARY names); the shm and ucx backends
refuse device memory when it is registered, with the fix in the message. The adapters
find the memory's real kind and pass it on, so registration checks it once:

- vLLM hands torch tensors: ``device.type`` "cpu" is host memory, "cuda" device memory
  on ``device.index``; any other device (meta, xpu, ...) is refused.
- sglang hands raw pointers: the CUDA driver says what each one is
  (``pdkv._native.memory_info``). sglang's own label (``kv_data_mem_kinds``, "VRAM" /
  "DRAM") is only a label: its decode writes "VRAM" under some backend names whatever
  the device, so a disagreement is logged once, never refused on its own. In a process
  without a CUDA driver a pointer the CPU cannot read is refused here, since pdkv could
  not move it (``host_memory_problem``: CUDA reserves its address range with PROT_NONE
  mappings, which the kernel reports as mapped).

Still refused, with the reason: CUDA managed (unified) memory, and buffers of one rank
on two different GPUs.
"""
from __future__ import annotations

import bisect
import logging
from typing import Iterable, Optional, Sequence

log = logging.getLogger("pdkv.integrations")

_DEVICE_FILES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/", "/dev/davinci", "/dev/accel/")
_LABELS = {"DRAM": "host", "CPU": "host", "HOST": "host", "VRAM": "cuda", "GPU": "cuda",
           "CUDA": "cuda"}
_logged_label_disagreement = False


def tensor_memory(name: str, tensor) -> tuple[str, int]:
    """("host", -1) or ("cuda", device index) of a torch tensor; ValueError otherwise."""
    device = getattr(tensor, "device", None)
    kind = getattr(device, "type", None)
    if kind == "cpu":
        return "host", -1
    if kind == "cuda":
        index = getattr(device, "index", None)
        return "cuda", -1 if index is None else int(index)
    raise ValueError(f"{name}: KV cache tensor is on device {str(device)!r}; pdkv moves host "
                     "(cpu) and CUDA memory only")


def caches_memory(named_tensors: Iterable[tuple[str, object]]) -> tuple[str, int]:
    """The one (kind, device) every tensor shares; ValueError naming the first that
    differs (a rank's KV cache lives in one place)."""
    first = None
    for name, t in named_tensors:
        memory = tensor_memory(name, t)
        if first is None:
            first = (name, memory)
        elif memory != first[1]:
            raise ValueError(f"{name}: KV cache in {memory} but {first[0]} in {first[1]}: a "
                             "rank's KV caches must all be in host memory or all on one GPU")
    return first[1] if first else ("host", -1)


def _label_kind(label) -> Optional[str]:
    return _LABELS.get(str(label).upper())


def _note_label(what: str, i: int, label, kind: str) -> None:
    global _logged_label_disagreement
    said = _label_kind(label)
    if said is not None and said != kind and not _logged_label_disagreement:
        _logged_label_disagreement = True
        log.warning("pdkv: %s[%d] is labelled %s by the engine but is %s memory; pdkv "
                    "registers what the memory is (logged once)", what, i, label, kind)


def pointer_memory(what: str, ptrs: Sequence[int], lens: Sequence[int], writable: bool,
                   labels: Optional[Sequence] = None,
                   maps_text: Optional[str] = None) -> list[tuple[str, int]]:
    """(kind, device) of each buffer, as the CUDA driver reports it (host where the
    process has none). ValueError naming the buffer for managed memory, and, without a
    driver, for a range this process's CPU cannot read (and write if ``writable``)."""
    from pdkv import _native
    driver = _native.device_driver()
    mappings = None
    out = []
    for i, (ptr, n) in enumerate(zip(ptrs, lens)):
        ptr, n = int(ptr), int(n)
        info = _native.memory_info(ptr) if driver is not None else None
        if info is not None and info["managed"]:
            raise ValueError(f"{what}[{i}] at {ptr:#x} is CUDA managed (unified) memory, which "
                             "pdkv does not move yet: allocate the KV pool with cudaMalloc")
        if info is not None and info["kind"] == "cuda":
            kind, device = "cuda", int(info["device"])
        else:
            kind, device = "host", -1
            if driver is None:
                if mappings is None:
                    mappings = _Mappings(maps_text if maps_text is not None else _read_maps())
                problem = host_memory_problem(ptr, n, writable, mappings=mappings)
                if problem is not None:
                    raise ValueError(
                        f"{what}[{i}] at {ptr:#x} (+{n} bytes) is not host memory: {problem}; "
                        "and this process has no CUDA driver "
                        f"({_native.device_driver_absent_reason()}), so pdkv cannot move it as "
                        "device memory either (set PDKV_CUDA_LIBRARY if the driver is not "
                        "libcuda.so.1)")
        if labels is not None and i < len(labels):
            _note_label(what, i, labels[i], kind)
        out.append((kind, device))
    return out


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

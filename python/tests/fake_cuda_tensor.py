"""Torch-shaped stand-ins for CUDA KV caches, over the fake CUDA driver (tests only).

torch here has no CUDA, so an engine's "GPU" cache is modelled as a pair: a CPU torch
tensor the replayed model reads and writes (the model's view, as its kernels would), and
a FakeCudaArray holding the same bytes in device memory, which is all pdkv sees.
DeviceMirror moves the bytes between the two (upload: the model's writes reach the
device; download: what pdkv landed on the device becomes visible to the checks).
FakeCudaTensor is the cache as an engine adapter sees it: torch's shape, stride, view and
permute of the CPU tensor, but ``device.type == "cuda"`` and ``data_ptr()`` into the
device copy.
"""
from __future__ import annotations

import ctypes

from fake_cuda_array import FakeCudaArray


class DeviceMirror:
    """The storage of CPU tensor `host` (contiguous or a view of contiguous storage) in
    fake device memory on `device`, initially zeros."""

    def __init__(self, host, device: int):
        storage = host.storage()
        self.host = host
        self.base = storage.data_ptr()
        self.nbytes = storage.size() * host.element_size()
        self.array = FakeCudaArray(self.nbytes, device)
        self.array.upload(bytes(self.nbytes))

    def upload(self) -> None:
        self.array.upload(ctypes.string_at(self.base, self.nbytes))

    def download(self) -> None:
        ctypes.memmove(self.base, self.array.download(), self.nbytes)

    def tensor(self) -> "FakeCudaTensor":
        return FakeCudaTensor(self.host, self)


class _Device:
    type = "cuda"

    def __init__(self, index: int):
        self.index = index

    def __str__(self) -> str:
        return f"cuda:{self.index}"


class FakeCudaTensor:
    """What vLLM's connector reads of a CUDA cache tensor (the adapter's layout code):
    shape, dim, stride, element_size, dtype, indexing and permute, data_ptr, device."""

    def __init__(self, view, mirror: DeviceMirror):
        self._view, self._mirror = view, mirror
        self.device = _Device(mirror.array.device)

    def data_ptr(self) -> int:
        return self._mirror.array.ptr + (self._view.data_ptr() - self._mirror.base)

    @property
    def shape(self):
        return self._view.shape

    @property
    def dtype(self):
        return self._view.dtype

    def dim(self) -> int:
        return self._view.dim()

    def stride(self, *dim):
        return self._view.stride(*dim)

    def element_size(self) -> int:
        return self._view.element_size()

    def __getitem__(self, index) -> "FakeCudaTensor":
        return FakeCudaTensor(self._view[index], self._mirror)

    def permute(self, *dims) -> "FakeCudaTensor":
        return FakeCudaTensor(self._view.permute(*dims), self._mirror)

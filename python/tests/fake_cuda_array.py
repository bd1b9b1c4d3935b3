"""A CUDA "tensor" over pdkv's fake CUDA driver, for tests without a GPU.

FakeCudaArray allocates device memory with the fake driver (build/lib/libpdkv_fake_cuda.so,
or PDKV_FAKE_CUDA_PATH) and exports it through DLPack as a CUDA tensor of bytes, as a torch
CUDA tensor would: ``__dlpack_device__()`` is ``(2, device)`` (kDLCUDA) and ``__dlpack__()``
returns a "dltensor" capsule. The memory is PROT_NONE to the CPU, so pdkv can only move it
with the driver's copies; a test reads and writes it with upload() / download().

The fake driver keeps its allocations in the process that loaded it: every process that
uses a FakeCudaArray must have PDKV_CUDA_LIBRARY naming the same file (fake_cuda_env())
before pdkv loads its driver, so both see one driver. Tests only; never installed.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Optional

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KDL_CUDA, KDL_CUDA_MANAGED = 2, 13
_KDL_UINT = 1
_CU_MEM_ATTACH_GLOBAL = 1


def fake_cuda_path() -> str:
    return os.environ.get("PDKV_FAKE_CUDA_PATH") or os.path.join(
        _REPO, "build", "lib", "libpdkv_fake_cuda.so")


def fake_cuda_env() -> dict:
    """The environment a process needs for pdkv to load the same fake driver."""
    return {"PDKV_CUDA_LIBRARY": fake_cuda_path()}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DELETER)]


# The DLManagedTensor structs live as long as their FakeCudaArray (which keeps every one it
# exported), so the deleter has nothing to free. The capsule has no destructor either.
_NO_OP_DELETER = _DELETER(lambda _: None)
_CAPSULE_NAME = b"dltensor"  # the capsule keeps this pointer: a module constant outlives it
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def _driver() -> ctypes.CDLL:
    global _lib
    with _lock:
        if _lib is None:
            lib = ctypes.CDLL(fake_cuda_path())
            lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
            lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
            lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
            lib.cuMemAllocManaged.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t,
                                              ctypes.c_uint]
            lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
            _check(lib.cuInit(0), "cuInit")
            _lib = lib
        return _lib


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"fake CUDA driver: {what} failed with CUresult {result}")


def _bind(lib: ctypes.CDLL, device: int) -> None:
    """The fake, like the driver, wants a current context on the calling thread."""
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    _check(lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
    _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    _check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class FakeCudaArray:
    """`nbytes` bytes of fake device memory on `device` (managed memory with managed=True:
    exported as kDLCUDAManaged, which pdkv refuses)."""

    def __init__(self, nbytes: int, device: int = 0, managed: bool = False):
        self._lib = _driver()
        self.nbytes, self.device, self.managed = int(nbytes), int(device), managed
        _bind(self._lib, self.device)
        ptr = ctypes.c_uint64()
        if managed:
            _check(self._lib.cuMemAllocManaged(ctypes.byref(ptr), self.nbytes,
                                               _CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged")
        else:
            _check(self._lib.cuMemAlloc_v2(ctypes.byref(ptr), self.nbytes), "cuMemAlloc_v2")
        self.ptr = ptr.value
        self._exports = []  # (DLManagedTensor, shape) of every capsule handed out

    def data_ptr(self) -> int:
        return self.ptr

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA_MANAGED if self.managed else KDL_CUDA, self.device)

    def __dlpack__(self, stream=None):
        shape = (ctypes.c_int64 * 1)(self.nbytes)
        t = _DLManagedTensor()
        t.dl_tensor.data = self.ptr
        t.dl_tensor.device = _DLDevice(self.__dlpack_device__()[0], self.device)
        t.dl_tensor.ndim = 1
        t.dl_tensor.dtype = _DLDataType(_KDL_UINT, 8, 1)
        t.dl_tensor.shape = shape
        t.dl_tensor.strides = None  # compact
        t.dl_tensor.byte_offset = 0
        t.deleter = _NO_OP_DELETER
        self._exports.append((t, shape))
        return _capsule_new(ctypes.addressof(t), _CAPSULE_NAME, None)

    def upload(self, data, offset: int = 0) -> None:
        """Copies `data` (bytes or a contiguous numpy array) to the device at `offset`."""
        view = memoryview(data).cast("B")
        if offset + view.nbytes > self.nbytes:
            raise ValueError("upload past the end of the array")
        buf = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        _bind(self._lib, self.device)
        _check(self._lib.cuMemcpyHtoD_v2(self.ptr + offset, buf, view.nbytes), "cuMemcpyHtoD_v2")
        # From pageable memory the driver returns once the source is staged, before the
        # bytes land; pdkv's non-blocking streams are not ordered after it.
        _check(self._lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def download(self, nbytes: Optional[int] = None, offset: int = 0) -> bytes:
        """The device's bytes from `offset` (all of them by default)."""
        n = self.nbytes - offset if nbytes is None else int(nbytes)
        buf = ctypes.create_string_buffer(n)
        _bind(self._lib, self.device)
        _check(self._lib.cuMemcpyDtoH_v2(buf, self.ptr + offset, n), "cuMemcpyDtoH_v2")
        return buf.raw

    def free(self) -> None:
        if self.ptr:
            _bind(self._lib, self.device)
            _check(self._lib.cuMemFree_v2(self.ptr), "cuMemFree_v2")
            self.ptr = 0


_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class FakeCudaStream:
    """A stream of the fake driver, standing in for a model's compute stream: work queued
    on it runs later, in order, on the fake's stream thread. ``handle`` is the CUstream a
    send names; ``cuda_stream`` and ``device`` make it look like a torch.cuda.Stream."""

    def __init__(self, device: int = 0):
        self._lib = _driver()
        self.device_index = int(device)
        _bind(self._lib, self.device_index)
        handle = ctypes.c_void_p()
        _check(self._lib.cuStreamCreate(ctypes.byref(handle), 0), "cuStreamCreate")
        self.handle = handle.value
        self._keep = []  # host buffers and callbacks the queued work still reads

    @property
    def cuda_stream(self) -> int:
        return self.handle

    @property
    def device(self):
        return type("Device", (), {"index": self.device_index, "type": "cuda"})()

    def sleep(self, ms: float) -> None:
        """Queues `ms` of "compute" (a host function that sleeps on the stream's thread)."""
        fn = _HOST_FN(lambda _: time.sleep(ms / 1000.0))
        self._keep.append(fn)
        _bind(self._lib, self.device_index)
        self._lib.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, _HOST_FN, ctypes.c_void_p]
        _check(self._lib.cuLaunchHostFunc(self.handle, fn, None), "cuLaunchHostFunc")

    def upload(self, array: FakeCudaArray, data, offset: int = 0) -> None:
        """Queues a copy of `data` into `array` at `offset` (lands when the stream gets there)."""
        view = memoryview(data).cast("B")
        buf = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        self._keep.append(buf)
        _bind(self._lib, self.device_index)
        self._lib.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p,
                                                   ctypes.c_size_t, ctypes.c_void_p]
        _check(self._lib.cuMemcpyHtoDAsync_v2(array.ptr + offset, buf, view.nbytes, self.handle),
               "cuMemcpyHtoDAsync_v2")

    def synchronize(self) -> None:
        _bind(self._lib, self.device_index)
        self._lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        _check(self._lib.cuStreamSynchronize(self.handle), "cuStreamSynchronize")
        self._keep.clear()

"""Registering buffers through KVArgs: tensors over DLPack (torch CPU, numpy, a fake CUDA
array) register as the memory they are; raw pointers take memory_kind / gpu_id; what
pdkv cannot move is refused at construction with the reason.

Every case runs in a child process whose environment names the fake CUDA driver before
pdkv loads a driver (the driver is loaded once per process), and one child has no driver
at all. Each child reports every case's outcome; the tests check them."""
import multiprocessing as mp
import os
import traceback

import pytest

from fake_cuda_array import fake_cuda_env

CTX = mp.get_context("spawn")
PAGE, PAGES = 256, 8


def _args(pdkv, ptrs, lens=None, **extra):
    """An MLA rank of one layer: buffer 0 holds PAGES pages of PAGE bytes."""
    return pdkv.KVArgs(kv_data_ptrs=ptrs, kv_data_lens=lens if lens is not None else [],
                       kv_item_lens=[PAGE], layer_buffers=[[0]], is_mla=True,
                       head_dim=PAGE, dtype_bytes=1, **extra)


def _cases(with_driver: bool) -> dict:
    import numpy as np

    import pdkv
    from fake_cuda_array import FakeCudaArray
    from pdkv import _native

    server = pdkv.BootstrapServer("127.0.0.1", 0)
    addr = f"127.0.0.1:{server.port}"
    keep = []

    def build(args, mode="decode", **kw):
        keep.append(args)
        mgr = pdkv.KVManager(args, mode, addr, **kw)
        mgr.shutdown()
        return args.to_dict()

    def send_naming(args, stream, **kw):
        """A prefill chunk of 2 pages sent with `stream` named (its manager then shut)."""
        keep.append(args)
        mgr = pdkv.KVManager(args, "prefill", addr, **kw)
        try:
            sender = pdkv.KVSender(mgr, addr, 7)
            sender.init(2)
            sender.send([0, 1], stream=stream)
        finally:
            mgr.shutdown()

    def host_array():
        a = np.zeros(PAGE * PAGES, np.uint8)
        keep.append(a)
        return a

    cases = {}
    if with_driver:
        import torch  # only here: the driverless child starts faster without it
        torch_cpu = torch.zeros(PAGES, PAGE, dtype=torch.uint8)
        cases["torch_cpu"] = lambda: (build(_args(pdkv, [torch_cpu])), torch_cpu.data_ptr())
        arr = host_array()
        cases["numpy"] = lambda: (build(_args(pdkv, [arr])), arr.ctypes.data)
        dev = FakeCudaArray(PAGE * PAGES, 1)
        cases["fake_cuda"] = lambda: (build(_args(pdkv, [dev])), dev.ptr)
        cases["fake_cuda_memory_info"] = lambda: _native.memory_info(dev.ptr + 5)
        cases["fake_cuda_int"] = lambda: build(
            _args(pdkv, [dev.ptr], [dev.nbytes], memory_kind="cuda", gpu_id=1))
        cases["fake_cuda_wrong_gpu"] = lambda: build(
            _args(pdkv, [dev.ptr], [dev.nbytes], memory_kind="cuda", gpu_id=0))
        cases["lens_disagree"] = lambda: build(_args(pdkv, [dev], [dev.nbytes - 1]))
        cases["host_as_cuda"] = lambda: build(
            _args(pdkv, [host_array().ctypes.data], [PAGE * PAGES], memory_kind="cuda"))
        managed = FakeCudaArray(PAGE * PAGES, 0, managed=True)
        cases["managed_tensor"] = lambda: build(_args(pdkv, [managed]))
        cases["managed_int"] = lambda: build(_args(pdkv, [managed.ptr], [managed.nbytes]))
        cases["strided_torch"] = lambda: build(
            _args(pdkv, [torch.zeros(PAGE, PAGES, dtype=torch.uint8).t()]))
        cases["device_on_shm"] = lambda: build(_args(pdkv, [dev]), backend="shm")
        cases["bad_kind"] = lambda: build(_args(pdkv, [dev.ptr], [dev.nbytes],
                                                memory_kind="vram!"))
        from fake_cuda_array import FakeCudaStream
        stream = FakeCudaStream(1)
        cases["stream_layerwise"] = lambda: send_naming(_args(pdkv, [dev]), stream,
                                                        layerwise_interval=1)
        cases["stream_bad_type"] = lambda: send_naming(_args(pdkv, [dev]), "stream 3")
        cases["stream_host_kv"] = lambda: send_naming(_args(pdkv, [host_array()]), 77)
    else:
        dev = FakeCudaArray(PAGE * PAGES, 0)
        cases["no_driver_description"] = lambda: _native.device_driver()
        cases["cuda_without_driver"] = lambda: build(_args(pdkv, [dev]))
    out = {}
    for name, run in cases.items():
        try:
            out[name] = ("ok", run())
        except Exception as e:  # the test checks type and message
            out[name] = ("error", type(e).__name__, str(e))
    server.stop()
    return out


def _child(env: dict, with_driver: bool, queue):
    try:
        os.environ.pop("PDKV_CUDA_LIBRARY", None)
        os.environ.update(env)
        queue.put(("ok", _cases(with_driver)))
    except Exception:
        queue.put(("crash", traceback.format_exc()))


def _run(env: dict, with_driver: bool) -> dict:
    queue = CTX.Queue()
    p = CTX.Process(target=_child, args=(env, with_driver, queue))
    p.start()
    kind, payload = queue.get(timeout=60)
    p.join(20)
    assert kind == "ok", payload
    return payload


@pytest.fixture(scope="module")
def outcomes():
    from pdkv.testing import FAST_TIMEOUTS
    return _run(dict(FAST_TIMEOUTS, **fake_cuda_env()), True)


def _ok(outcomes, name):
    got = outcomes[name]
    assert got[0] == "ok", f"{name}: {got}"
    return got[1]


def _error(outcomes, name, exc_type, *words):
    got = outcomes[name]
    assert got[0] == "error", f"{name} should fail: {got}"
    assert got[1] == exc_type, got
    for w in words:
        assert w in got[2], f"{name}: {w!r} not in {got[2]!r}"


def test_host_tensors_register_as_host_memory(outcomes):
    for name in ("torch_cpu", "numpy"):
        d, ptr = _ok(outcomes, name)
        assert d["kv_data_ptrs"] == [ptr] and d["kv_data_lens"] == [PAGE * PAGES]
        assert d["kv_data_memory"] == [("host", -1)]


def test_fake_cuda_tensor_registers_as_device_memory(outcomes):
    d, ptr = _ok(outcomes, "fake_cuda")
    assert d["kv_data_ptrs"] == [ptr] and d["kv_data_lens"] == [PAGE * PAGES]
    assert d["kv_data_memory"] == [("cuda", 1)]
    info = _ok(outcomes, "fake_cuda_memory_info")
    assert info == {"kind": "cuda", "device": 1, "managed": False, "allocation_base": ptr,
                    "allocation_size": PAGE * PAGES}


def test_raw_device_pointer_with_memory_kind_and_gpu_id(outcomes):
    d = _ok(outcomes, "fake_cuda_int")
    assert d["memory_kind"] == "cuda" and d["gpu_id"] == 1
    _error(outcomes, "fake_cuda_wrong_gpu", "ValueError", "lives on CUDA device 1, not 0")


def test_host_memory_registered_as_cuda_is_refused(outcomes):
    _error(outcomes, "host_as_cuda", "ValueError", "kv buffer 0", "registered as cuda memory",
           "reports host memory")


def test_managed_memory_is_refused(outcomes):
    _error(outcomes, "managed_tensor", "ValueError", "kv_data_ptrs[0]",
           "managed memory not supported yet")
    _error(outcomes, "managed_int", "ValueError", "managed (unified) memory")


def test_tensor_mistakes_are_named(outcomes):
    _error(outcomes, "lens_disagree", "ValueError", f"tensor of {PAGE * PAGES} bytes",
           "kv_data_lens[0]")
    _error(outcomes, "strided_torch", "ValueError", "not contiguous")
    _error(outcomes, "bad_kind", "ValueError", "memory_kind")


def test_a_named_stream_is_refused_where_it_cannot_order_the_send(outcomes):
    _error(outcomes, "stream_layerwise", "ValueError", "layerwise chunk cannot name a stream",
           "mark_layers_ready")
    _error(outcomes, "stream_bad_type", "ValueError", "CUDA stream object", "str")
    _error(outcomes, "stream_host_kv", "ValueError", "host memory", "synchronise")


def test_device_memory_on_shm_is_refused_with_the_fix(outcomes):
    _error(outcomes, "device_on_shm", "RuntimeError", "shm", "tcp")


def test_cuda_tensor_without_a_driver_is_refused_with_the_reason():
    from pdkv.testing import FAST_TIMEOUTS
    got = _run(dict(FAST_TIMEOUTS, PDKV_CUDA_LIBRARY="/nonexistent/libcuda.so.1"), False)
    assert got["no_driver_description"] == ("ok", None)
    _error(got, "cuda_without_driver", "RuntimeError", "no usable CUDA driver",
           "PDKV_CUDA_LIBRARY")

"""What the engine adapters accept as KV memory: host or CUDA (one place per rank),
never a meta tensor; sglang's labels are compared with the real kind, not obeyed; a
process without a CUDA driver refuses pointers its CPU cannot read (CUDA reserves its
address range PROT_NONE), and pdkv's own register_memory refuses an unreadable range
besides an unmapped one. The GPU paths themselves run in test_vllm_device_caches.py and
test_sglang_device_pools.py on the fake driver."""
import ctypes
import mmap

import numpy as np
import pytest

from engine_replay import use_standins

use_standins()
torch = pytest.importorskip("torch")

import pdkv  # noqa: E402
from pdkv import _native  # noqa: E402
from pdkv.integrations.memory import host_memory_problem  # noqa: E402

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


@pytest.fixture
def prot_none():
    """An address range reserved PROT_NONE, as CUDA reserves its unified address space:
    mapped (mincore accepts it) but not readable by the CPU."""
    size = 1 << 16
    addr = _libc.mmap(None, size, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)  # PROT_NONE
    assert addr not in (None, ctypes.c_void_p(-1).value)
    yield addr, size
    _libc.munmap(addr, size)


def _vllm_worker(extra=None):
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from pdkv.integrations.vllm import PdkvConnector
    ktc = KVTransferConfig(kv_connector="PdkvConnector", kv_role="kv_producer",
                           kv_connector_extra_config={"bootstrap_addr": "127.0.0.1:1",
                                                      **(extra or {})})
    return PdkvConnector(VllmConfig(ktc, CacheConfig(16), ModelConfig(4)),
                         KVConnectorRole.WORKER, None)


def test_vllm_register_kv_caches_refuses_tensors_neither_host_nor_cuda():
    worker = _vllm_worker()
    meta = torch.empty(2, 8, 16, 4, 8, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError) as e:
        worker.register_kv_caches({"model.layers.0.self_attn.attn": meta})
    msg = str(e.value)
    assert "model.layers.0.self_attn.attn" in msg and "device 'meta'" in msg, msg
    assert "host (cpu) and CUDA memory only" in msg, msg
    assert worker._worker.mgr is None  # nothing was registered
    # one stray layer is enough to refuse the whole set
    host = torch.zeros(2, 8, 16, 4, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="meta"):
        worker.register_kv_caches({"l0": host, "l1": meta})


def test_vllm_caches_in_two_places_are_refused():
    from pdkv.integrations.memory import caches_memory

    class OnGpu:
        device = torch.device("cuda", 1)
    assert caches_memory([("a", OnGpu()), ("b", OnGpu())]) == ("cuda", 1)
    with pytest.raises(ValueError, match="must all be in host memory or all on one GPU"):
        caches_memory([("a", torch.zeros(1)), ("b", OnGpu())])


def _sglang_args(ptrs, lens, item=64, mem_kinds=None):
    from sglang.srt.disaggregation.base.conn import KVArgs
    a = KVArgs()
    a.engine_rank, a.page_size, a.kv_head_num, a.total_kv_head_num = 0, 4, 2, 2
    a.kv_data_ptrs, a.kv_data_lens, a.kv_item_lens = list(ptrs), list(lens), [item] * len(ptrs)
    a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens = [], [], []
    a.state_data_ptrs = []
    if mem_kinds is not None:
        a.kv_data_mem_kinds = mem_kinds
    return a


@pytest.mark.skipif(_native.device_driver() is not None,
                    reason="with a CUDA driver the driver's answer decides")
def test_sglang_kvargs_without_a_driver_refuse_pointers_that_are_not_host_memory(prot_none):
    from sglang.srt.server_args import ServerArgs

    from pdkv.integrations.sglang.kvargs import kv_args_from_sglang
    host = [np.zeros(640, dtype=np.uint8) for _ in range(2)]
    ok = _sglang_args([b.ctypes.data for b in host], [640, 640])
    args = kv_args_from_sglang(ok, ServerArgs(), False, "decode")
    assert (args.tp_size, args.memory_kind, args.gpu_id) == (1, "auto", -1)
    # a PROT_NONE reservation: what a CUDA device pointer looks like to the CPU
    addr, size = prot_none
    bad = _sglang_args([host[0].ctypes.data, addr], [640, 640])
    with pytest.raises(ValueError) as e:
        kv_args_from_sglang(bad, ServerArgs(), False, "prefill")
    msg = str(e.value)
    assert "kv_data_ptrs[1]" in msg and "'---p'" in msg and "GPU pointer" in msg, msg
    assert "no CUDA driver" in msg and "PDKV_CUDA_LIBRARY" in msg, msg
    # an address nothing maps
    with pytest.raises(ValueError, match="no mapping of this process"):
        kv_args_from_sglang(_sglang_args([host[0].ctypes.data, 0x1000], [640, 640]),
                            ServerArgs(), False, "prefill")
    # a decode writes its buffers: read-only memory is refused there, not on a prefill
    ro = _libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    try:
        args = _sglang_args([host[0].ctypes.data, ro], [640, 640])
        assert kv_args_from_sglang(args, ServerArgs(), False, "prefill").tp_size == 1
        with pytest.raises(ValueError, match="readable and writable"):
            kv_args_from_sglang(args, ServerArgs(), False, "decode")
    finally:
        _libc.munmap(ro, 4096)


def test_sglang_vram_label_on_host_memory_is_logged_once_not_refused(caplog, monkeypatch):
    from sglang.srt.server_args import ServerArgs

    from pdkv.integrations import memory
    from pdkv.integrations.sglang.kvargs import kv_args_from_sglang
    monkeypatch.setattr(memory, "_logged_label_disagreement", False)
    host = [np.zeros(640, dtype=np.uint8) for _ in range(2)]
    with caplog.at_level("WARNING", logger="pdkv.integrations"):
        for _ in range(2):
            args = kv_args_from_sglang(_sglang_args([b.ctypes.data for b in host], [640, 640],
                                                    mem_kinds=["VRAM", "VRAM"]),
                                       ServerArgs(), False)
            assert args.kv_data_ptrs == [b.ctypes.data for b in host]
    said = [r.getMessage() for r in caplog.records if "labelled VRAM" in r.getMessage()]
    assert len(said) == 1 and "is host memory" in said[0], said


def test_device_file_mappings_are_refused():
    maps = ("7f0000000000-7f0000100000 rw-s 00000000 00:05 123  /dev/nvidia0\n"
            "7f0000100000-7f0000200000 rw-p 00000000 00:00 0\n")
    problem = host_memory_problem(0x7f0000000000 + 64, 4096, True, maps)
    assert "device file /dev/nvidia0" in problem
    assert host_memory_problem(0x7f0000100000, 4096, True, maps) is None
    # a range running past the last mapping
    assert "no mapping" in host_memory_problem(0x7f00001ff000, 8192, False, maps)


def test_native_register_memory_refuses_an_unreadable_range(prot_none, monkeypatch):
    from kv_harness import RankMemory, Shape
    monkeypatch.setenv("PDKV_LOG_LEVEL", "warn")
    mem = RankMemory(Shape(), 1, 0)
    args = mem.kv_args(pdkv, 0, 1, 1)
    addr, size = prot_none
    args.kv_data_ptrs = [addr] + args.kv_data_ptrs[1:]
    args.kv_data_lens = [min(size, args.kv_data_lens[0])] + args.kv_data_lens[1:]
    with pdkv.BootstrapServer("127.0.0.1", 0) as server:
        with pytest.raises(ValueError, match="host memory"):
            pdkv.KVManager(args, "prefill", f"127.0.0.1:{server.port}")
        args.kv_data_ptrs = [0x1000] + args.kv_data_ptrs[1:]
        with pytest.raises(ValueError, match="not mapped.*host memory only"):
            pdkv.KVManager(args, "prefill", f"127.0.0.1:{server.port}")


@pytest.mark.skipif(_native.device_driver() is not None,
                    reason="needs a process without a CUDA driver")
def test_vllm_cuda_caches_without_a_driver_fail_with_the_reason():
    # A CUDA cache (fake device memory seen as a CUDA tensor) in a process where pdkv has
    # no CUDA driver: registration says which driver is missing and how to name one.
    from fake_cuda_tensor import DeviceMirror
    mirror = DeviceMirror(torch.zeros(2, 8, 16, 4, 8, dtype=torch.float16), 0)
    worker = _vllm_worker()
    with pytest.raises(RuntimeError) as e:
        worker.register_kv_caches({"model.layers.0.self_attn.attn": mirror.tensor()})
    msg = str(e.value)
    assert "registered as cuda memory" in msg and "no usable CUDA driver" in msg, msg
    assert "PDKV_CUDA_LIBRARY" in msg, msg

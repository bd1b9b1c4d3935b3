"""Misuse of the Python API raises a clear exception instead of crashing or doing nothing
(as several calls once did): bad ports, unmapped buffer pointers, calls after shutdown, a
layer count out of range, send() after the room succeeded. Real managers, one process, loopback."""
import contextlib
import threading
import time

import numpy as np
import pytest

import pdkv
from kv_harness import RankMemory, Shape
from pdkv.testing import FAST_TIMEOUTS, wait_terminal


@pytest.fixture
def fast_env(monkeypatch):
    for k, v in FAST_TIMEOUTS.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def server():
    s = pdkv.BootstrapServer("127.0.0.1", 0)
    yield s
    s.stop()


@pytest.mark.parametrize("port", [-1, 65536, 1 << 20, "8998", 1.5, True])
def test_bootstrap_server_port_out_of_range_is_a_value_error(port):
    with pytest.raises(ValueError, match="port"):
        pdkv.BootstrapServer("127.0.0.1", port)


def test_an_unmapped_buffer_pointer_is_refused_at_construction(fast_env, server, monkeypatch):
    # With the checksum on, the pointer used to be read directly: SIGSEGV in the crc32c.
    monkeypatch.setenv("PDKV_VERIFY_CHECKSUM", "1")
    mem = RankMemory(Shape(), 1, 0)
    args = mem.kv_args(pdkv, 0, 1, 1)
    args.kv_data_ptrs = [0x1000] + args.kv_data_ptrs[1:]
    with pytest.raises(ValueError, match="not mapped"):
        pdkv.KVManager(args, "prefill", f"127.0.0.1:{server.port}")


def test_a_read_only_mapping_is_refused_as_a_decode_kv_buffer(fast_env, server):
    # pdkv writes received KV into a decode's buffers: a PROT_READ mapping used to be
    # accepted, and the first staged write into it killed the decode with SIGSEGV.
    import mmap

    mem = RankMemory(Shape(), 1, 0)
    args = mem.kv_args(pdkv, 0, 1, 1)
    length = args.kv_data_lens[1]
    ro = mmap.mmap(-1, length, prot=mmap.PROT_READ)
    try:
        addr = np.frombuffer(ro, dtype=np.uint8).ctypes.data
        args.kv_data_ptrs = [args.kv_data_ptrs[0], addr] + args.kv_data_ptrs[2:]
        with pytest.raises(ValueError, match=r"kv buffer 1: .*not writable"):
            pdkv.KVManager(args, "decode", f"127.0.0.1:{server.port}")
        # A source is only read: the same mapping is accepted on a prefill.
        prefill = pdkv.KVManager(args, "prefill", f"127.0.0.1:{server.port}")
        prefill.shutdown()
    finally:
        del addr
        ro.close()


def test_calls_after_shutdown_and_layer_counts_out_of_range_raise(fast_env, server):
    mem = RankMemory(Shape(), 1, 0)
    mgr = pdkv.KVManager(mem.kv_args(pdkv, 0, 1, 1), "prefill", f"127.0.0.1:{server.port}",
                         layerwise_interval=1)
    layers = Shape().layers
    for n in (0, -1, layers + 1, 1.0):
        with pytest.raises(ValueError, match="mark_layers_ready"):
            mgr.mark_layers_ready(n)
    mgr.shutdown()
    mgr.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="shut down"):
        pdkv.KVSender(mgr, f"127.0.0.1:{server.port}", 7)
    with pytest.raises(RuntimeError, match="shut down"):
        mgr.mark_layers_ready(1)
    with pytest.raises(RuntimeError, match="shut down"):
        mgr.set_prefill_metadata(7, 1)


class OneToOne:
    """A TP 1 prefill and decode manager on one bootstrap server."""

    def __init__(self, server):
        self.addr = f"127.0.0.1:{server.port}"
        shape = Shape()
        self.pmem, self.dmem = RankMemory(shape, 1, 0), RankMemory(shape, 1, 0)
        self.prefill = pdkv.KVManager(self.pmem.kv_args(pdkv, 0, 1, 1), "prefill", self.addr)
        self.decode = pdkv.KVManager(self.dmem.kv_args(pdkv, 0, 1, 1), "decode", self.addr)

    def open_room(self, room, src, dst):
        """(sender, receiver) of `room`: its source pages filled, both sides initialised,
        the decode's metadata sent; nothing sent by the prefill yet."""
        self.pmem.fill(room, src)
        sender = pdkv.KVSender(self.prefill, self.addr, room)
        sender.init(len(src))
        receiver = pdkv.KVReceiver(self.decode, self.addr, room)
        receiver.init()
        receiver.send_metadata(dst)
        return sender, receiver


@contextlib.contextmanager
def one_to_one(server):
    pair = OneToOne(server)
    try:
        yield pair
    finally:
        pair.prefill.shutdown()
        pair.decode.shutdown()


def test_send_after_success_raises_and_the_room_stays_succeeded(fast_env, server):
    with one_to_one(server) as pair:
        src, dst = np.arange(4, dtype=np.int64), np.arange(10, 14, dtype=np.int64)
        sender, receiver = pair.open_room(5, src, dst)
        sender.send(src)
        assert wait_terminal(receiver, 20) == pdkv.KVPoll.Success
        assert wait_terminal(sender, 20) == pdkv.KVPoll.Success
        assert pair.dmem.holds(5, dst)
        with pytest.raises(RuntimeError, match="after the room succeeded"):
            sender.send(src)
        with pytest.raises(RuntimeError, match="after the room succeeded"):
            receiver.send_metadata(dst)
        assert sender.poll() == pdkv.KVPoll.Success


def test_wait_returns_when_the_room_ends_or_at_its_timeout(fast_env, server):
    """wait() blocks without the GIL until the room ends: another Python thread sends the
    chunk meanwhile; before that, a short wait comes back at its timeout, not ended."""
    with one_to_one(server) as pair:
        src, dst = np.arange(2, dtype=np.int64), np.arange(6, 8, dtype=np.int64)
        sender, receiver = pair.open_room(9, src, dst)
        t0 = time.monotonic()
        early = receiver.wait(0.2)
        assert time.monotonic() - t0 >= 0.15
        assert early not in (pdkv.KVPoll.Success, pdkv.KVPoll.Failed)
        for bad in (-1, float("nan")):
            with pytest.raises(ValueError, match="timeout_s"):
                receiver.wait(bad)
        sending = threading.Timer(0.1, sender.send, args=(src,))
        sending.start()
        assert receiver.wait(20) == pdkv.KVPoll.Success  # the GIL is free for the timer
        sending.join()
        assert sender.wait(20) == pdkv.KVPoll.Success
        assert pair.dmem.holds(9, dst)


def test_the_registry_is_chosen_by_pdkv_config_too(fast_env, monkeypatch):
    """pdkv.Config(registry="etcd", ...) reaches the manager (every setting can come
    through the config object, not only the environment): an etcd nobody serves is named
    in the error, not the HTTP server."""
    monkeypatch.delenv("PDKV_REGISTRY", raising=False)
    mem = RankMemory(Shape(), 1, 0)
    config = pdkv.Config(registry="etcd", etcd_endpoints="127.0.0.1:9", bootstrap_timeout_s=1)
    with pytest.raises(RuntimeError, match="etcd at 127.0.0.1:9 unreachable"):
        pdkv.KVManager(mem.kv_args(pdkv, 0, 1, 1), "prefill", "instance-a", config=config)
    with pytest.raises(ValueError, match="PDKV_ETCD_PREFIX"):
        pdkv.Config(etcd_prefix="no-slash").resolved()

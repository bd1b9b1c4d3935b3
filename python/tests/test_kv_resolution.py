"""A decode's route resolution against prefill addresses that never answer, over real
sockets: a bootstrap server, a prefill and a decode manager on loopback, and addresses
that refuse connections (a closed port) or accept and never answer (a listening socket
nobody serves). The address a room names comes from the request, so a client could name
such addresses on purpose.

- Rooms naming dead addresses do not hold back another instance's rooms (they used to
  take all four resolver threads until their bootstrap deadline).
- A dead address's rooms fail with the cause within seconds (per-attempt bounds and a
  circuit breaker per address), and its later rooms fail at once.
- Once the back-off passed, one room probes a failing address again, and succeeds when a
  prefill instance serves there by then.
- At most PDKV_MAX_RESOLVING_INSTANCES instances are resolved at once; a room naming yet
  another fails at once.
- shutdown() returns within a second while rooms are still resolving (it used to wait for
  their bootstrap deadline).

Bounds are generous for a loaded 2-core CI machine; the bootstrap timeout (30 s) is far
beyond every one of them."""
import contextlib
import socket
import time

import numpy as np
import pytest

import pdkv
from kv_harness import RankMemory, Shape
from pdkv.testing import FAST_TIMEOUTS, transfer_error, wait_terminal

BOOTSTRAP_TIMEOUT_S = 30.0


@pytest.fixture
def env(monkeypatch):
    for k, v in FAST_TIMEOUTS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PDKV_BOOTSTRAP_TIMEOUT_S", str(BOOTSTRAP_TIMEOUT_S))
    # Explicit, so the test holds whatever the defaults become.
    monkeypatch.setenv("PDKV_ROUTE_ATTEMPT_TIMEOUT_S", "1")
    monkeypatch.setenv("PDKV_ROUTE_BREAKER_FAILURES", "2")
    monkeypatch.setenv("PDKV_ROUTE_BREAKER_BACKOFF_S", "60")


@pytest.fixture
def server():
    s = pdkv.BootstrapServer("127.0.0.1", 0)
    yield s
    s.stop()


@contextlib.contextmanager
def silent_listener():
    """host:port of a socket that accepts connections (the kernel's backlog) and never
    answers a byte."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    try:
        yield f"127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


def closed_port() -> str:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


class Pair:
    """A TP 1 prefill and decode manager on one bootstrap server."""

    def __init__(self, server):
        self.addr = f"127.0.0.1:{server.port}"
        shape = Shape()
        self.pmem, self.dmem = RankMemory(shape, 1, 0), RankMemory(shape, 1, 0)
        self.prefill = pdkv.KVManager(self.pmem.kv_args(pdkv, 0, 1, 1), "prefill", self.addr)
        self.decode = pdkv.KVManager(self.dmem.kv_args(pdkv, 0, 1, 1), "decode", self.addr)

    def dead_room(self, addr, room):
        receiver = pdkv.KVReceiver(self.decode, addr, room)
        receiver.init()
        return receiver

    def healthy_room(self, room, src, dst):
        self.pmem.fill(room, src)
        sender = pdkv.KVSender(self.prefill, self.addr, room)
        sender.init(len(src))
        receiver = pdkv.KVReceiver(self.decode, self.addr, room)
        receiver.init()
        receiver.send_metadata(dst)
        sender.send(src)
        return sender, receiver

    def close(self):
        self.prefill.shutdown()
        self.decode.shutdown()


def test_dead_addresses_do_not_hold_back_a_healthy_instance_and_fail_fast(env, server):
    pair = Pair(server)
    try:
        with silent_listener() as silent:
            refused = closed_port()
            # Eight rooms naming dead instances, twice as many as there used to be
            # resolver threads, all resolving when the healthy room comes.
            dead = {100 + i: pair.dead_room(silent if i % 2 else refused, 100 + i)
                    for i in range(8)}
            time.sleep(0.3)
            t0 = time.monotonic()
            src, dst = np.arange(4, dtype=np.int64), np.arange(10, 14, dtype=np.int64)
            sender, receiver = pair.healthy_room(5, src, dst)
            assert wait_terminal(receiver, 20) == pdkv.KVPoll.Success, transfer_error(receiver)
            healthy_s = time.monotonic() - t0
            assert wait_terminal(sender, 20) == pdkv.KVPoll.Success
            assert pair.dmem.holds(5, dst)
            # Well before the dead rooms' bootstrap deadline (30 s), which it used to wait
            # for.
            assert healthy_s < 5.0, f"the healthy room took {healthy_s:.2f} s"

            # The dead rooms fail with their cause: attempts of 1 s, and the breaker opens
            # after 2 of them (not at the 30 s deadline).
            for room, rx in dead.items():
                assert wait_terminal(rx, 15) == pdkv.KVPoll.Failed, room
                e = transfer_error(rx)
                assert e.cause in (pdkv.FailureCause.BootstrapFailed,), (room, e)
                assert ("127.0.0.1" in str(e)), (room, str(e))
            dead_s = time.monotonic() - t0
            assert dead_s < BOOTSTRAP_TIMEOUT_S / 2, f"dead rooms took {dead_s:.2f} s"

            # A later room naming a failing address fails at once, with the last cause.
            t1 = time.monotonic()
            late = pair.dead_room(refused, 200)
            assert wait_terminal(late, 5) == pdkv.KVPoll.Failed
            assert time.monotonic() - t1 < 1.5
            e = transfer_error(late)
            assert "is failing" in str(e) and refused in str(e), str(e)
            # The healthy instance is unaffected by the breakers of others.
            sender, receiver = pair.healthy_room(6, src, np.arange(20, 24, dtype=np.int64))
            assert wait_terminal(receiver, 20) == pdkv.KVPoll.Success, transfer_error(receiver)
    finally:
        pair.close()


@pytest.mark.parametrize("kind", ["silent", "refused", "unregistered"])
def test_shutdown_returns_within_a_second_while_rooms_resolve(env, server, kind):
    pair = Pair(server)
    with silent_listener() as silent:
        # An address that never answers, one that refuses, and a live bootstrap server at
        # which no prefill of that name ever registers (it answers 404 until the deadline).
        addr = {"silent": silent, "refused": closed_port(),
                "unregistered": None}[kind]
        if addr is None:
            other = pdkv.BootstrapServer("127.0.0.1", 0)
            addr = f"127.0.0.1:{other.port}"
        try:
            rooms = [pair.dead_room(addr, 300 + i) for i in range(3)]
            time.sleep(0.5)  # the lookups are in flight (in backoff or reading)
            t0 = time.monotonic()
            pair.decode.shutdown()
            took = time.monotonic() - t0
            assert took < 1.5, f"decode shutdown took {took:.2f} s ({kind})"
            for rx in rooms:
                assert rx.poll() == pdkv.KVPoll.Failed
        finally:
            pair.prefill.shutdown()
            if kind == "unregistered":
                other.stop()


def test_a_failing_address_is_probed_after_the_back_off_and_recovers(env, monkeypatch, server):
    """The breaker of an address refuses its rooms only for the back-off: once a prefill
    instance serves there, the next room probes it and succeeds."""
    monkeypatch.setenv("PDKV_ROUTE_BREAKER_BACKOFF_S", "1")
    pair = Pair(server)
    revived = prefill = None
    try:
        addr = closed_port()
        first = pair.dead_room(addr, 400)
        assert wait_terminal(first, 15) == pdkv.KVPoll.Failed
        refused = pair.dead_room(addr, 401)
        assert wait_terminal(refused, 5) == pdkv.KVPoll.Failed
        assert "is failing" in str(transfer_error(refused))
        # A bootstrap server and a prefill instance come up at that address.
        revived = pdkv.BootstrapServer("127.0.0.1", int(addr.rsplit(":", 1)[1]))
        pmem = RankMemory(Shape(), 1, 0)
        prefill = pdkv.KVManager(pmem.kv_args(pdkv, 0, 1, 1), "prefill", addr)
        time.sleep(1.2)  # the back-off passes
        src, dst = np.arange(4, dtype=np.int64), np.arange(30, 34, dtype=np.int64)
        pmem.fill(402, src)
        sender = pdkv.KVSender(prefill, addr, 402)
        sender.init(len(src))
        receiver = pdkv.KVReceiver(pair.decode, addr, 402)
        receiver.init()
        receiver.send_metadata(dst)
        sender.send(src)
        assert wait_terminal(receiver, 20) == pdkv.KVPoll.Success, transfer_error(receiver)
        assert pair.dmem.holds(402, dst)
    finally:
        if prefill is not None:
            prefill.shutdown()
        pair.close()
        if revived is not None:
            revived.stop()


def test_rooms_naming_more_instances_than_the_bound_fail_at_once(env, monkeypatch, server):
    """At most PDKV_MAX_RESOLVING_INSTANCES instances are resolved at once (a thread each):
    a room naming yet another fails at once, naming the setting; the others go on."""
    monkeypatch.setenv("PDKV_MAX_RESOLVING_INSTANCES", "2")
    # Attempts long enough that the first two rooms are still resolving when checked.
    monkeypatch.setenv("PDKV_ROUTE_ATTEMPT_TIMEOUT_S", "10")
    pair = Pair(server)
    try:
        with silent_listener() as a, silent_listener() as b, silent_listener() as c:
            ra, rb = pair.dead_room(a, 500), pair.dead_room(b, 501)
            t0 = time.monotonic()
            rc = pair.dead_room(c, 502)
            assert wait_terminal(rc, 5) == pdkv.KVPoll.Failed
            assert time.monotonic() - t0 < 1.5
            e = transfer_error(rc)
            assert "PDKV_MAX_RESOLVING_INSTANCES" in str(e), str(e)
            assert e.cause is pdkv.FailureCause.BootstrapFailed
            assert ra.poll() == pdkv.KVPoll.Bootstrapping
            assert rb.poll() == pdkv.KVPoll.Bootstrapping
    finally:
        pair.close()

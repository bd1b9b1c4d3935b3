"""pdkv.testing itself: the pattern catches what it must, polling fails loudly, KVArgs
built from buffers name exactly those buffers, the settings resolve as documented, and a
real transfer between two managers in this process is proved by the toolkit's check."""
import os
import time

import numpy as np
import pytest

import pdkv
from pdkv import testing
from pdkv.testing import pattern


def literal_pattern(buffer, room, n_pages, page_size, first_head, n_heads, head_bytes):
    """The pattern as the module comment states it, in int64: the reference."""
    i = np.arange(n_pages).reshape(-1, 1, 1, 1)
    t = np.arange(page_size).reshape(1, -1, 1, 1)
    h = np.arange(first_head, first_head + n_heads).reshape(1, 1, -1, 1)
    x = np.arange(head_bytes).reshape(1, 1, 1, -1)
    return ((buffer * 131 + i * 31 + room * 59 + t * 17 + h * 7 + x * 3 + 1) % 256).astype(np.uint8)


@pytest.mark.parametrize("args", [(0, 5, 3, 4, 0, 4, 16), (1, 1000, 7, 16, 7, 1, 128),
                                  (7, 2047, 4, 16, 0, 1, 1152), (3, 0, 1, 1, 2, 2, 3)])
def test_expected_pages_is_the_documented_formula(args):
    assert np.array_equal(pattern.expected_pages(*args), literal_pattern(*args))


def test_tabulated_fill_and_check_write_the_same_bytes_as_expected_pages():
    buf = np.zeros((12, 4, 2, 16), np.uint8)
    offsets = pattern.page_offsets(4, 2, 2, 16)
    pages, rooms, req = np.array([9, 2, 5, 0]), np.array([3, 3, 8, 8]), np.array([0, 1, 0, 1])
    pattern.fill(buf, 1, pages, rooms, req, offsets)
    assert np.array_equal(buf[[9, 2]], pattern.expected_pages(1, 3, 2, 4, 2, 2, 16))
    assert np.array_equal(buf[[5, 0]], pattern.expected_pages(1, 8, 2, 4, 2, 2, 16))
    assert pattern.check(buf, 1, pages, rooms, req, offsets)
    assert not pattern.check(buf, 0, pages, rooms, req, offsets)  # another buffer's bytes
    pattern.fill(buf, 1, pages, rooms, req, offsets, delta=1)  # poison: wrong everywhere
    assert not (buf[pages] == pattern.expected_pages(1, 3, 4, 4, 2, 2, 16)).any()


def test_a_flipped_byte_is_caught_and_located():
    mem = testing.RankMemory([(0, 2, 16), (0, 2, 16)], capacity=8, page_size=4)
    pages = np.array([6, 1, 3])
    mem.fill(42, pages)
    assert mem.holds(42, pages) and mem.mismatch(42, pages) is None
    offsets = mem.page_offsets(1)
    assert pattern.check(mem.bufs[1], 1, pages, [42] * 3, [0, 1, 2], offsets)
    mem.bufs[1][1, 2, 1, 5] ^= 0x01  # request page 1 is local page 1
    assert not mem.holds(42, pages)
    assert mem.holds(42, pages, buffers=[0])
    assert mem.mismatch(42, pages) == "buffer 1, request page 1 (local page 1), token 2, head 1, byte 5"
    assert not pattern.check(mem.bufs[1], 1, pages, [42] * 3, [0, 1, 2], offsets)


def test_pages_of_another_room_page_head_or_buffer_do_not_match():
    base = pattern.expected_pages(0, 7, 2, 4, 0, 2, 8)
    assert not np.array_equal(base, pattern.expected_pages(0, 8, 2, 4, 0, 2, 8))  # room
    assert not np.array_equal(base, pattern.expected_pages(1, 7, 2, 4, 0, 2, 8))  # buffer
    assert not np.array_equal(base, pattern.expected_pages(0, 7, 2, 4, 2, 2, 8))  # heads
    assert not np.array_equal(base[1], base[0])  # request page
    shifted = np.roll(base.reshape(-1), 1).reshape(base.shape)
    assert pattern.first_mismatch(shifted, base) == (0, 0, 0, 0)


def test_a_prefix_the_decode_already_had_is_not_compared():
    mem = testing.RankMemory([(0, 1, 8)], capacity=4, page_size=2)
    pages = np.array([0, 1, 2])
    mem.fill(1, pages)
    mem.bufs[0][0] = 0  # request page 0: the decode's prefix
    assert not mem.holds(1, pages) and mem.holds(1, pages, first=1)


def test_fill_value_touches_every_byte():
    mem = testing.RankMemory([(0, 1, 8)] * 2, capacity=4, page_size=2, fill_value=1)
    assert all((b == 1).all() for b in mem.bufs)
    assert mem.item_lens == [16, 16]


@pytest.mark.parametrize("heads,tp", [(8, 1), (8, 2), (8, 8), (4, 8), (1, 4)])
def test_heads_of_covers_every_head(heads, tp):
    held = [testing.heads_of(r, tp, heads) for r in range(tp)]
    covered = sorted({first + k for first, n in held for k in range(n)})
    assert covered == list(range(heads))
    if heads >= tp:  # contiguous and disjoint
        assert [first for first, _ in held] == [r * heads // tp for r in range(tp)]
    assert testing.heads_of(3, 4, 8, mla=True) == (0, 1)


def test_shuffled_pages_is_a_fixed_permutation():
    a = testing.shuffled_pages(64, "decode/1")
    assert sorted(a) == list(range(64))
    assert np.array_equal(a, testing.shuffled_pages(64, "decode/1"))
    assert not np.array_equal(a, testing.shuffled_pages(64, "decode/2"))
    assert np.array_equal(testing.shuffled_pages(10, 5),
                          np.random.default_rng(5).permutation(10))


# --- polling -------------------------------------------------------------------------------

def test_poll_until_returns_the_value_once_it_holds():
    t0 = time.monotonic()
    assert testing.poll_until(lambda: time.monotonic() - t0 > 0.05 and "ok", 5) == "ok"
    assert time.monotonic() - t0 < 2


def test_poll_until_times_out_with_a_clear_error():
    calls = []

    def rooms_left():
        calls.append(1)
        return []  # falsy: nothing ended yet

    t0 = time.monotonic()
    with pytest.raises(testing.PollTimeout, match=r"^timed out after 0.2 s waiting for the "
                                                  r"rooms to end \(last value: \[\]\)$"):
        testing.poll_until(rooms_left, 0.2, what="the rooms to end")
    assert 0.2 <= time.monotonic() - t0 < 2
    assert len(calls) >= 2


def test_wait_until_returns_the_falsy_value_at_the_deadline():
    t0 = time.monotonic()
    assert testing.wait_until(lambda: 0, 0.1) == 0
    assert 0.1 <= time.monotonic() - t0 < 2
    assert isinstance(testing.PollTimeout("x"), TimeoutError)


class FakeRoom:
    def __init__(self, states):
        self.states = list(states)

    def poll(self):
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def test_wait_terminal_stops_at_success_or_failed_and_reports_a_stuck_state():
    assert testing.wait_terminal(FakeRoom([1, 2, 3, pdkv.KVPoll.Success]), 5) == pdkv.KVPoll.Success
    assert testing.wait_terminal(FakeRoom([1, pdkv.KVPoll.Failed]), 5) == pdkv.KVPoll.Failed
    t0 = time.monotonic()
    assert testing.wait_terminal(FakeRoom([pdkv.KVPoll.WaitingForInput]), 0.1) == \
        pdkv.KVPoll.WaitingForInput
    assert time.monotonic() - t0 >= 0.1
    assert testing.SUCCESS == int(pdkv.KVPoll.Success)
    assert testing.FAILED == int(pdkv.KVPoll.Failed)


# --- KVArgs from buffers -------------------------------------------------------------------

def test_kv_args_name_exactly_the_buffers():
    kv = [np.zeros((8, 4, 2, 16), np.uint8) for _ in range(4)]
    aux = np.zeros((16, 40), np.uint8)
    state = [np.zeros((16, 96), np.uint8) for _ in range(2)]
    a = testing.kv_args_from_buffers(kv, engine_rank=1, tp_size=2, page_size=4,
                                     layer_buffers=[[0, 2], [1, 3]], kv_head_num=2,
                                     total_kv_head_num=4, head_dim=8, dtype_bytes=2,
                                     aux=[aux], state=state, page_layout="HND")
    assert a.kv_data_ptrs == [b.ctypes.data for b in kv]
    assert a.kv_data_lens == [8 * 4 * 2 * 16] * 4
    assert a.kv_item_lens == [4 * 2 * 16] * 4
    assert (a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens) == ([aux.ctypes.data], [640], [40])
    assert a.state_data_ptrs == [s.ctypes.data for s in state]
    assert a.state_item_lens == [96, 96]
    assert (a.engine_rank, a.tp_size, a.dp_size, a.page_layout) == (1, 2, 1, "HND")


def test_kv_args_refuse_what_cannot_be_registered():
    common = dict(page_size=1, layer_buffers=[[0]], kv_head_num=1, total_kv_head_num=1,
                  head_dim=32, dtype_bytes=2, is_mla=True)
    flat = np.zeros(64 * 16, np.uint8)
    assert testing.kv_args_from_buffers([flat], item_lens=[64], **common).kv_item_lens == [64]
    with pytest.raises(ValueError, match="C-contiguous"):
        testing.kv_args_from_buffers([np.zeros((16, 128), np.uint8)[:, ::2]], **common)
    with pytest.raises(ValueError, match="2 KV item lengths for 1 buffers"):
        testing.kv_args_from_buffers([flat], item_lens=[64, 64], **common)
    with pytest.raises(ValueError, match="unknown field"):
        testing.kv_args_from_buffers([flat], item_lens=[64], no_such_field=1, **common)


# --- settings ------------------------------------------------------------------------------

def test_liveness_bounds_follow_the_settings():
    assert testing.liveness_bound_s(testing.FAST_TIMEOUTS) == pytest.approx(0.2 * 3 + 1)
    d = pdkv.Config.defaults()
    assert testing.liveness_bound_s(testing.DEFAULT_LIVENESS) == pytest.approx(
        d["heartbeat_interval_s"] * d["heartbeat_max_failures"] + 1)


def test_fast_config_carries_the_fast_timeouts_and_is_valid():
    c = testing.fast_config(metrics_port=0)
    resolved = c.resolved()
    for name, value in testing.FAST_TIMEOUTS.items():
        if name != "PDKV_LOG_LEVEL":
            assert float(resolved[name][0]) == float(value), name
            assert resolved[name][1] == "explicit", name
    assert c.metrics_port == 0


def test_apply_settings_later_wins_and_override_false_keeps_the_callers(monkeypatch):
    for k in ("PDKV_BOOTSTRAP_TIMEOUT_S", "PDKV_WAITING_TIMEOUT_S", "PDKV_LOG_LEVEL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PDKV_HEARTBEAT_INTERVAL_S", "1.5")
    testing.apply_settings(testing.FAST_TIMEOUTS, {"PDKV_BOOTSTRAP_TIMEOUT_S": "3"}, None)
    assert os.environ["PDKV_HEARTBEAT_INTERVAL_S"] == "0.2"
    assert os.environ["PDKV_BOOTSTRAP_TIMEOUT_S"] == "3"
    monkeypatch.setenv("PDKV_HEARTBEAT_INTERVAL_S", "1.5")
    monkeypatch.delenv("PDKV_WAITING_TIMEOUT_S")
    testing.apply_settings(testing.FAST_TIMEOUTS, override=False)
    assert os.environ["PDKV_HEARTBEAT_INTERVAL_S"] == "1.5"
    assert os.environ["PDKV_WAITING_TIMEOUT_S"] == "30"
    assert testing.room_timeouts(40, 50) == {"PDKV_BOOTSTRAP_TIMEOUT_S": "40",
                                             "PDKV_WAITING_TIMEOUT_S": "50"}


# --- all of it, for real -------------------------------------------------------------------

def test_a_real_transfer_is_proved_by_the_toolkit(monkeypatch):
    """TP 1 -> TP 2 in this process: the decodes' head slices of the prefill's pages."""
    for k, v in testing.FAST_TIMEOUTS.items():
        monkeypatch.setenv(k, v)
    heads, head_bytes, page = 4, 16, 4

    def memory(rank, tp):
        first, n = testing.heads_of(rank, tp, heads)
        return testing.RankMemory([(first, n, head_bytes)] * 2, capacity=16, page_size=page)

    def args(mem, rank, tp):
        return testing.kv_args_from_buffers(
            mem.bufs, engine_rank=rank, tp_size=tp, page_size=page, layer_buffers=[[0, 1]],
            kv_head_num=mem.geometry[0][1], total_kv_head_num=heads, head_dim=8, dtype_bytes=2)

    pmem, dmems = memory(0, 1), [memory(r, 2) for r in range(2)]
    src = testing.shuffled_pages(16, "prefill/0")[:5]
    dsts = [testing.shuffled_pages(16, f"decode/{r}")[:5] for r in range(2)]
    with pdkv.BootstrapServer("127.0.0.1", 0) as server:
        addr = f"127.0.0.1:{server.port}"
        with pdkv.KVManager(args(pmem, 0, 1), "prefill", addr) as prefill, \
                pdkv.KVManager(args(dmems[0], 0, 2), "decode", addr) as d0, \
                pdkv.KVManager(args(dmems[1], 1, 2), "decode", addr) as d1:
            receivers = []
            for mgr, dst in zip((d0, d1), dsts):
                r = pdkv.KVReceiver(mgr, addr, 9)
                r.init()
                r.send_metadata(dst)
                receivers.append(r)
            pmem.fill(9, src)
            sender = pdkv.KVSender(prefill, addr, 9)
            sender.init(5)
            sender.send(src)
            for r in receivers:
                assert testing.wait_terminal(r, 20) == pdkv.KVPoll.Success
            assert testing.wait_terminal(sender, 20) == pdkv.KVPoll.Success
    for mem, dst in zip(dmems, dsts):
        assert mem.mismatch(9, dst) is None
        assert mem.holds(9, dst)
    assert not dmems[0].holds(9, dsts[1])  # another rank's pages hold nothing of it


# --- the processes of a cluster -------------------------------------------------------------

def test_teardown_kills_a_process_that_does_not_exit_and_skips_one_never_started():
    import signal
    import sys
    from pdkv.testing.processes import SPAWN, join_or_kill
    hung = SPAWN.Process(target=signal.pause)
    hung.start()
    never = SPAWN.Process(target=sys.exit)
    t0 = time.monotonic()
    join_or_kill([hung, never], time.monotonic() + 0.5)
    assert not hung.is_alive() and hung.exitcode == -signal.SIGKILL
    assert time.monotonic() - t0 < 10


def test_a_json_line_process_reports_ready_takes_commands_and_quits():
    import sys
    from pdkv.testing.subprocesses import JsonLineProcess
    echo = ("import json, sys\n"
            "print(json.dumps({'ev': 'ready'}), flush=True)\n"
            "for line in sys.stdin:\n"
            "    cmd = json.loads(line)\n"
            "    if cmd['op'] == 'quit':\n"
            "        break\n"
            "    print(json.dumps({'ev': 'echo', 'n': cmd['n']}), flush=True)\n")
    p = JsonLineProcess([sys.executable, "-c", echo], env=dict(os.environ))
    assert p.ready == {"ev": "ready"}
    p.send(op="echo", n=7)
    assert p.wait(lambda ev: ev["ev"] == "echo", 10)["n"] == 7
    assert p.quit() == 0 and not p.alive()


def test_a_secret_file_holds_its_bytes_as_they_are_with_mode_600(tmp_path):
    from pdkv.testing.secret_file import write_secret
    path = write_secret(tmp_path / "secret", b"\x80" * 31 + b"\n")
    assert open(path, "rb").read() == b"\x80" * 31 + b"\n"
    assert os.stat(path).st_mode & 0o777 == 0o600

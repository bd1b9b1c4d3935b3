"""A decode cancels one request while its KV is in flight: it revokes the room's write
grant, so the rest of that room's bytes are refused by its engine (a proper ACK saying
OutOfRange). That refusal is the decode's policy for one room, not a sign that it is
gone: the prefill must fail that room only. Before, the prefill took the refusal as a
failed peer and opened the circuit breaker on the decode's whole engine endpoint, so the
decode's other rooms to it failed too ("refusing to send to it for another ... ms"):
those still queued behind the refused batch, and those sent in the cooldown after it.

Real processes over loopback: one prefill and one decode rank stay up for every round.
Each round the decode opens three rooms: A, B and C. The prefill sends A, then B (queued
behind A on the one link), and C only once A has ended on its side. The decode aborts A
as soon as A's first bytes land. To make sure more of A's bytes are in flight then, the
prefill sends small batches, a few at a time, and the decode runs with the chaos fault
shim (LD_PRELOAD) stalling each ACK frame it sends: a room takes several ACKs. On the old
code about half the rounds failed B and C.
"""
import os
import re
import time
import traceback

import pdkv
from kv_harness import PipedProcess, RankMemory, Shape, apply_env, pages_for
from pdkv import testing
from pdkv.testing import wait_terminal

SUCCESS = int(pdkv.KVPoll.Success)
FAILED = int(pdkv.KVPoll.Failed)
ROUNDS = 12
# 16 KiB per page and buffer (16 tokens x 8 heads x 64 x 2 bytes), 4 buffers: a room of
# 12 pages is 48 blocks of 16 KiB, which 96 KiB batches carry in 8.
SHAPE = Shape(layers=2, heads=8, head_dim=64, dtype_bytes=2, page_size=16, capacity=64)
PAGES = 12
# The TCP engine's ACK frame header starts: magic "PDKV", version 4, type ACK (4), flags 0
# (engine/backends/tcp/tcp_frame.h).
ACK_FRAME_PREFIX = "50444b5604040000"
ENV = {
    # 96 KiB batches, about five in flight at a time, on one stream: when the decode
    # aborts A, several of A's batches are on their way, and the rest of the rooms waits
    # on the link behind them.
    "PDKV_TRANSFER_BATCH_BYTES": str(96 << 10),
    "PDKV_TRANSFER_WINDOW_BYTES": str(448 << 10),
    "PDKV_TCP_STREAMS": "1",
}


def fault_shim():
    path = os.path.join(os.path.dirname(pdkv.__file__), "_tools", "bench", "chaos",
                        "libpdkv_fault_shim.so")
    assert os.path.exists(path), f"{path}: the README build makes it (bench/chaos)"
    return path


def stall_every_ack(ms: int):
    return {"LD_PRELOAD": fault_shim(), "PDKV_FAULT_EVERY_N": "1", "PDKV_FAULT_MODE": "stall",
            "PDKV_FAULT_STALL_MS": str(ms), "PDKV_FAULT_CALLS": "send,sendmsg,write",
            "PDKV_FAULT_PREFIX": ACK_FRAME_PREFIX}


def round_rooms(r: int):
    return [1000 + 10 * r + 1, 1000 + 10 * r + 2, 1000 + 10 * r + 3]


def outcome(handle, state) -> dict:
    out = {"state": int(state), "reason": None}
    try:
        handle.failure_exception()
    except pdkv.KVTransferError as e:
        out["reason"] = str(e)
    return out


def prefill_main(addr: str, conn):
    try:
        apply_env(ENV)
        mem = RankMemory(SHAPE, 1, 0)
        mgr = pdkv.KVManager(mem.kv_args(pdkv, 0, 1, 1), "prefill", addr)
        conn.send(("ready", None))
        while (r := conn.recv()) is not None:
            rooms = round_rooms(r)
            senders, src = {}, {}
            for room in rooms:
                senders[room] = pdkv.KVSender(mgr, addr, room)
                senders[room].init(PAGES)
                src[room] = pages_for(rooms, room, 0, PAGES, SHAPE.capacity, "src")
                mem.fill(room, src[room])
            a, b, c = rooms
            senders[a].send(src[a])
            senders[b].send(src[b])
            wait_terminal(senders[a], 10)
            # A's batches still in flight when it ended come back refused meanwhile.
            time.sleep(0.1)
            senders[c].send(src[c])
            conn.send(("round", {room: outcome(s, wait_terminal(s, 10))
                                 for room, s in senders.items()}))
        mgr.shutdown()
        conn.send(("bye", None))
    except Exception:
        conn.send(("error", traceback.format_exc()))


def decode_main(addr: str, conn):
    try:
        apply_env(ENV)
        mem = RankMemory(SHAPE, 1, 0)
        mgr = pdkv.KVManager(mem.kv_args(pdkv, 0, 1, 1), "decode", addr)
        conn.send(("ready", None))
        while (r := conn.recv()) is not None:
            rooms = round_rooms(r)
            receivers, dst = {}, {}
            for room in rooms:
                dst[room] = pages_for(rooms, room, 0, PAGES, SHAPE.capacity, "dst")
                for buf in mem.bufs:  # the last round's bytes are in the same pages
                    buf[dst[room]] = 0
                receivers[room] = pdkv.KVReceiver(mgr, addr, room)
                receivers[room].init()
                receivers[room].send_metadata(dst[room])
            a = rooms[0]
            testing.wait_until(lambda: any(buf[dst[a]].any() for buf in mem.bufs), 10, 0.001)
            receivers[a].abort()
            out = {}
            for room, rcv in receivers.items():
                out[room] = outcome(rcv, wait_terminal(rcv, 10))
                out[room]["bytes_ok"] = bool(out[room]["state"] == SUCCESS
                                             and mem.holds(room, dst[room]))
            conn.send(("round", out))
        mgr.shutdown()
        conn.send(("bye", None))
    except Exception:
        conn.send(("error", traceback.format_exc()))


def test_a_room_the_decode_aborts_mid_transfer_fails_alone(capfd):
    server = pdkv.BootstrapServer("127.0.0.1", 0)
    addr = f"127.0.0.1:{server.port}"
    ranks = []
    try:
        ranks.append(PipedProcess("decode", decode_main, (addr,), stall_every_ack(10)))
        ranks.append(PipedProcess("prefill", prefill_main, (addr,)))
        decode, prefill = ranks
        decode.expect("ready", 60)
        prefill.expect("ready", 60)
        bad = []
        for r in range(ROUNDS):
            decode.conn.send(r)
            prefill.conn.send(r)
            got = {"decode": decode.expect("round", 40), "prefill": prefill.expect("round", 40)}
            a, *others = round_rooms(r)
            for side, rooms in got.items():
                # A ended failed on both sides: the abort landed while its KV was in flight.
                if rooms[a]["state"] != FAILED:
                    bad.append((r, side, a, rooms[a]))
                for room in others:
                    ok = rooms[room]["state"] == SUCCESS and rooms[room].get("bytes_ok", True)
                    if not ok:
                        bad.append((r, side, room, rooms[room]))
        failed_rounds = sorted({b[0] for b in bad})
        assert not bad, (f"{len(failed_rounds)} of {ROUNDS} rounds went wrong "
                         f"({failed_rounds}):\n" + "\n".join(map(str, bad[:6])))
    finally:
        for rank in ranks:
            rank.close()
        server.stop()
    err = capfd.readouterr().err
    assert re.search(r"pdkv_fault_shim: injected [1-9]\d* of", err), err[-2000:]
    # The decode's engine did refuse writes of an aborted room: the race was hit.
    assert "part rejected" in err, err[-2000:]

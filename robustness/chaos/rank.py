"""One pdkv rank (bootstrap, prefill or decode) driven over stdin/stdout JSON lines.

Runs anywhere the driver puts it (a network namespace via `ip netns exec`, or loopback).
Commands on stdin: {"op": "rooms", "rooms": [...], "pages": N, "send": bool,
"abort_on_bytes": [...]}, {"op": "send", "rooms": [...]}, {"op": "check"}, {"op": "paths"},
{"op": "quit"}.
A decode aborts each room of "abort_on_bytes" as soon as a byte of it landed (a request
cancelled while its KV is in flight); "send" without "rooms" sends every room held back. Events on stdout: ready (with the
registered buffers: [address, bytes, page bytes] each), state (room, state, t =
time.monotonic(), reason, bytes_ok), active (rooms left in the manager's tables), check
(whether every byte no room of this rank owned still holds its canary), paths (the
manager's peer_paths()).

Each KV buffer is registered between two unregistered guard bands, and cfg "spare" adds
pages no room ever uses after the rooms' `capacity`: all of them hold a canary pattern from
the start, so a write that lands where no room of this rank put it is caught by "check"
(the hostile-peer suite aims its attacks there).
"""
import json
import os
import queue
import sys
import threading
import time

import numpy as np

from pdkv.testing import expected_pages, kv_args_from_buffers, shuffled_pages

SHAPE = dict(layers=2, heads=4, head_dim=64, dtype_bytes=2, page_size=16, capacity=256)
# A benchmark may ask for larger KV (bench/e2e/mixed.py): JSON of SHAPE's keys.
SHAPE.update(json.loads(os.environ.get("PDKV_RANK_SHAPE", "{}")))


def emit(**ev):
    ev.setdefault("t", time.monotonic())
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def pattern(room, buf, n, first_head, n_heads):
    """pdkv.testing's byte pattern of request pages 0..n-1 of `room` in buffer `buf`."""
    s = SHAPE
    return expected_pages(buf, room, n, s["page_size"], first_head, n_heads,
                          s["head_dim"] * s["dtype_bytes"])


GUARD_BYTES = 4096


def canary(nbytes):
    """Position-dependent, so a shifted or partial write shows too."""
    return ((np.arange(nbytes, dtype=np.int64) * 7 + 0xA5) % 256).astype(np.uint8)


class GuardedPool:
    """KV buffers of n_pages pages each, every one between unregistered guard bands, all
    filled with the canary; records which pages rooms were given."""

    def __init__(self, nbuf, n_pages, page_shape):
        self.page_bytes = int(np.prod(page_shape))
        size = n_pages * self.page_bytes
        self.raw = [canary(GUARD_BYTES + size + GUARD_BYTES) for _ in range(nbuf)]
        self.bufs = [r[GUARD_BYTES:GUARD_BYTES + size].reshape((n_pages,) + tuple(page_shape))
                     for r in self.raw]
        self.n_pages = n_pages
        self.used = set()

    def layout(self):
        return [[int(b.ctypes.data), int(b.nbytes), self.page_bytes] for b in self.bufs]

    def check(self):
        """Places holding something else than the canary though no room owned them."""
        bad = []
        free = [p for p in range(self.n_pages) if p not in self.used]
        for i, r in enumerate(self.raw):
            want = canary(r.size)
            if not np.array_equal(r[:GUARD_BYTES], want[:GUARD_BYTES]):
                bad.append(f"buffer {i} guard before")
            if not np.array_equal(r[-GUARD_BYTES:], want[-GUARD_BYTES:]):
                bad.append(f"buffer {i} guard after")
            pages = r[GUARD_BYTES:r.size - GUARD_BYTES].reshape(self.n_pages, -1)
            want_pages = want[GUARD_BYTES:r.size - GUARD_BYTES].reshape(self.n_pages, -1)
            for p in free:
                if not np.array_equal(pages[p], want_pages[p]):
                    bad.append(f"buffer {i} page {p}")
        return bad


def pages_of(room, n, side, rank):
    """Shuffled pages of a room, disjoint from rooms with other room % (capacity // n)."""
    order = shuffled_pages(SHAPE["capacity"], rank * 2 + (1 if side == "dst" else 0))
    k = room % (SHAPE["capacity"] // n)
    return order[k * n:(k + 1) * n].astype(np.int64)


def main():
    cfg = json.loads(sys.argv[1])
    role = cfg["role"]
    import pdkv
    if role == "bootstrap":
        srv = pdkv.BootstrapServer(cfg.get("host", "0.0.0.0"), cfg.get("port", 0))
        emit(ev="ready", pid=os.getpid(), port=srv.port)
        for line in sys.stdin:
            if json.loads(line).get("op") == "quit":
                break
        srv.stop()
        return
    s = SHAPE
    tp, rank = cfg.get("tp", 1), cfg.get("rank", 0)
    nh = s["heads"] // tp
    first = rank * nh
    hb = s["head_dim"] * s["dtype_bytes"]
    item = s["page_size"] * nh * hb
    nbuf = 2 * s["layers"]
    pool = GuardedPool(nbuf, s["capacity"] + cfg.get("spare", 0), (s["page_size"], nh, hb))
    bufs = pool.bufs
    args = kv_args_from_buffers(
        bufs, engine_rank=rank, tp_size=tp, dp_size=1, page_size=s["page_size"],
        layer_buffers=[[l, s["layers"] + l] for l in range(s["layers"])],
        kv_head_num=nh, total_kv_head_num=s["heads"], head_dim=s["head_dim"],
        dtype_bytes=s["dtype_bytes"], page_layout="NHD", is_mla=False)
    addr = cfg["addr"]
    mgr = pdkv.KVManager(args, role, addr, local_ip=cfg.get("ip"))
    emit(ev="ready", pid=os.getpid(), ctrl=mgr.control_endpoint, eng=mgr.engine_endpoint,
         bufs=pool.layout(), capacity=s["capacity"], pages=pool.n_pages)
    rooms = {}  # room -> [obj, pages, last_state]
    pending_send = []
    abort_on_bytes = set()
    quit_at = None
    last_active = None
    cmds = queue.Queue()

    def reader():
        for line in sys.stdin:
            cmds.put(line)
        cmds.put("")

    threading.Thread(target=reader, daemon=True).start()
    while True:
        try:
            line = cmds.get(timeout=0.005)
        except queue.Empty:
            line = None
        if line is not None:
            if not line:
                break
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "quit":
                break
            if op == "check":
                bad = pool.check()
                emit(ev="check", ok=not bad, bad=bad[:8])
            if op == "paths":
                emit(ev="paths", paths=mgr.peer_paths())
            if op == "rooms":
                n = cmd["pages"]
                for room in cmd["rooms"]:
                    pool.used.update(int(p) for p in pages_of(room, n, "src" if role == "prefill"
                                                              else "dst", rank))
                    if role == "prefill":
                        o = pdkv.KVSender(mgr, cmd.get("addr", addr), room)
                        o.init(n)
                        pg = pages_of(room, n, "src", rank)
                        for b in range(nbuf):
                            bufs[b][pg] = pattern(room, b, n, first, nh)
                        rooms[room] = [o, pg, None, time.monotonic()]
                        if cmd.get("send", True):
                            o.send(pg)
                        else:
                            pending_send.append(room)
                    else:
                        o = pdkv.KVReceiver(mgr, cmd.get("addr", addr), room)
                        o.init()
                        pg = pages_of(room, n, "dst", rank)
                        for b in range(nbuf):
                            bufs[b][pg] = 0
                        if cmd.get("metadata", True):
                            o.send_metadata(pg)
                        rooms[room] = [o, pg, None, time.monotonic()]
                abort_on_bytes.update(cmd.get("abort_on_bytes", []))
                emit(ev="created", rooms=cmd["rooms"])
            elif op == "send":
                now = [r for r in pending_send if r in cmd.get("rooms", pending_send)]
                for room in now:
                    rooms[room][0].send(rooms[room][1])
                pending_send = [r for r in pending_send if r not in now]
        for room in [r for r in abort_on_bytes if any(b[rooms[r][1]].any() for b in bufs)]:
            rooms[room][0].abort()
            abort_on_bytes.discard(room)
        for room, rec in rooms.items():
            st = int(rec[0].poll())
            if st != rec[2]:
                rec[2] = st
                # t: when the state was seen, before the byte check below takes its time.
                seen_at = time.monotonic()
                ev = dict(ev="state", room=room, state=st, since=seen_at - rec[3], t=seen_at)
                if st == 0:
                    try:
                        rec[0].failure_exception()
                    except Exception as e:  # KVTransferError carries the reason
                        ev["reason"] = str(e)[:400]
                if st == 4 and role == "decode":
                    ok = all(np.array_equal(bufs[b][rec[1]],
                                            pattern(room, b, len(rec[1]), first, nh))
                             for b in range(nbuf))
                    ev["bytes_ok"] = ok
                    ev["bytes"] = int(len(rec[1]) * item * nbuf) if ok else 0
                emit(**ev)
        a = mgr.active_rooms()
        if a != last_active:
            last_active = a
            emit(ev="active", n=a)
    t_quit = time.monotonic()
    mgr.shutdown()
    emit(ev="bye", shutdown_s=time.monotonic() - t_quit)


if __name__ == "__main__":
    main()

"""`pdkv bench e2e --case mixed` (P11): one prefill, one decode on the prefill's host and
one decode in another network namespace, every engine on the automatic path choice
(PDKV_ENGINE_BACKEND=auto). Each pair must get its own path (the same-host pair shm, the
remote pair tcp: JSON `paths`, peer -> path, from the prefill's peer_paths()), every byte
of every room is verified on its decode, and the same-host pair's throughput while the
remote decode is loaded too must stay >= 0.9 x its throughput with no remote traffic,
both measured in this run, in alternating rounds (median of each).

Hosts are network namespaces joined by a bridge (robustness/chaos/topo.py, root needed);
ranks are the chaos suite's rank processes (robustness/chaos/rank.py) with a larger KV
shape (PDKV_RANK_SHAPE). Without network namespaces the case says why and writes a JSON
whose figure is null."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHAOS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "robustness", "chaos")
sys.path[:0] = [CHAOS]

from topo import Rank, Topology, netns_available  # noqa: E402

from pdkv.testing import DEFAULT_LIVENESS, QUIET, SUCCESS, room_timeouts, wait_until  # noqa: E402

# 8 layers x (K, V) of 8 heads x 128 x bf16, page 16: 32 KiB per page and buffer, so a
# 64-page room moves 32 MiB (llama3-8b's per-page geometry, fewer layers to fit the pools).
SHAPE = dict(layers=8, heads=8, head_dim=128, dtype_bytes=2, page_size=16, capacity=512)
ENV = dict(DEFAULT_LIVENESS, **room_timeouts(60, 60), **QUIET, PDKV_ENGINE_BACKEND="auto",
           PDKV_RANK_SHAPE=json.dumps(SHAPE))


def parse(argv):
    ap = argparse.ArgumentParser(prog="pdkv bench e2e --case mixed")
    ap.add_argument("--case", choices=["mixed"], default="mixed")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of each arm (alternating)")
    ap.add_argument("--rooms", type=int, default=4, help="rooms per pair and round")
    ap.add_argument("--pages", type=int, default=64, help="pages per room (at most 64)")
    ap.add_argument("--json", help="write the P11 figure here")
    return ap.parse_args(argv)


class Mixed:
    def __init__(self, topo):
        self.topo, self.next_room = topo, 1
        self.boot = Rank(topo, 0, {"role": "bootstrap", "port": 0}, env=ENV)
        self.addr = f"{topo.ip(0)}:{self.boot.ready['port']}"
        self.prefill = Rank(topo, 0, {"role": "prefill", "addr": self.addr}, env=ENV)
        self.near = Rank(topo, 0, {"role": "decode", "addr": self.addr}, env=ENV)
        self.far = Rank(topo, 1, {"role": "decode", "addr": self.addr}, env=ENV)

    def rooms(self, decode, n, pages):
        rooms = list(range(self.next_room, self.next_room + n))
        self.next_room += n
        decode.send(op="rooms", rooms=rooms, pages=pages, addr=self.addr)
        self.prefill.send(op="rooms", rooms=rooms, pages=pages, send=False)
        return rooms

    def round(self, n, pages, with_far):
        """Seconds until the near decode has all its rooms (and the far one, when loaded),
        and whether every room of the round succeeded with its bytes verified."""
        near = self.rooms(self.near, n, pages)
        far = self.rooms(self.far, n, pages) if with_far else []
        # Both decodes' metadata first, so the clock measures the transfers.
        wait_until(lambda: all(self.near.states().get(r, {}).get("state", 0) >= 2 for r in near)
                   and all(self.far.states().get(r, {}).get("state", 0) >= 2 for r in far), 60,
                   0.005)
        t0 = time.monotonic()
        self.prefill.send(op="send")
        done = wait_until(lambda: all(r in self.near.states() and self.near.states()[r]["state"]
                                      in (0, SUCCESS) for r in near)
                          and all(r in self.far.states() and self.far.states()[r]["state"]
                                  in (0, SUCCESS) for r in far), 120, 0.002)
        st = self.near.states()
        end = max(st[r]["t"] for r in near) if done else time.monotonic()
        ok = bool(done)
        for rk, rs in ((self.near, near), (self.far, far)):
            for r in rs:
                ev = rk.states().get(r)
                ok = ok and ev is not None and ev["state"] == SUCCESS and bool(ev.get("bytes_ok"))
        return end - t0, ok

    def paths(self):
        self.prefill.send(op="paths")
        wait_until(lambda: any(e["ev"] == "paths" for e in self.prefill.events), 10, 0.01)
        rows = [e["paths"] for e in self.prefill.events if e["ev"] == "paths"]
        return rows[-1] if rows else {}

    def engine_of(self, rank):
        return rank.ready["eng"]

    def close(self):
        for rk in (self.prefill, self.near, self.far, self.boot):
            rk.quit()


def run(a) -> dict:
    room_bytes = a.pages * SHAPE["page_size"] * SHAPE["heads"] * SHAPE["head_dim"] * \
        SHAPE["dtype_bytes"] * 2 * SHAPE["layers"]
    fig = {"ratio": None, "value": None, "baseline": None, "unit": "GB/s",
           "verified_bytes_ok": False, "paths": {}, "room_bytes": room_bytes,
           "rooms_per_round": a.rooms, "rounds": a.rounds}
    ok, why = netns_available()
    if not ok:
        fig["skipped"] = f"needs network namespaces ({why})"
        print(f"case mixed: {fig['skipped']}")
        return fig
    topo = Topology(2, netns=True)
    m = None
    try:
        m = Mixed(topo)
        all_ok = True
        m.round(a.rooms, a.pages, True)  # warm-up: sessions opened, paths chosen
        alone, mixed = [], []
        for i in range(a.rounds):
            for with_far, out in ((False, alone), (True, mixed))[::1 if i % 2 == 0 else -1]:
                secs, good = m.round(a.rooms, a.pages, with_far)
                all_ok = all_ok and good
                out.append(a.rooms * room_bytes / secs / 1e9)
                print(f"round {i + 1} {'with' if with_far else 'without'} the remote decode: "
                      f"{out[-1]:.2f} GB/s to the same-host decode{'' if good else ' (FAILED)'}")
        paths = m.paths()
        named = {"same_host_decode": m.engine_of(m.near), "remote_decode": m.engine_of(m.far)}
        fig["paths"] = {role: paths.get(ep, {}).get("path") for role, ep in named.items()}
        fig["paths_why"] = {role: paths.get(ep, {}).get("why") for role, ep in named.items()}
        fig["value"] = statistics.median(mixed)
        fig["baseline"] = statistics.median(alone)
        fig["ratio"] = fig["value"] / fig["baseline"]
        fig["samples"] = {"with_remote": mixed, "without_remote": alone}
        fig["verified_bytes_ok"] = all_ok
        fig["own_path_per_pair"] = fig["paths"] == {"same_host_decode": "shm",
                                                    "remote_decode": "tcp"}
    finally:
        if m is not None:
            m.close()
        topo.teardown()
    return fig


def main(argv) -> int:
    a = parse(argv)
    print(f"case mixed: 1 prefill + 1 decode on its host + 1 decode in another network "
          f"namespace, {a.rooms} rooms x {a.pages} pages per pair and round, {a.rounds} rounds "
          f"per arm; load {os.getloadavg()[0]:.1f}")
    fig = run(a)
    print(json.dumps({"P11": fig}, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"P11": fig}, f, indent=1)
    ok = fig.get("skipped") or (fig["verified_bytes_ok"] and fig.get("own_path_per_pair"))
    return 0 if ok else 1

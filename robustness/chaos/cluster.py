"""A P/D deployment on a Topology: bootstrap servers, prefill and decode instances (each
with tp ranks), room placement, and the checks every case shares."""
from pdkv.testing import DEFAULT_LIVENESS, FAILED, QUIET, SUCCESS, room_timeouts, wait_until

from topo import Rank

# Liveness at pdkv's defaults: R1-R3 are measured at the values pdkv ships (R2_BOUND in
# cases.py follows them). Rooms no fault ends fail within 10 s, inside every case's wait.
RANK_ENV = dict(DEFAULT_LIVENESS, **room_timeouts(10, 10), **QUIET)
ALL = []  # every Cluster built by the running case (the driver reads their crash counts)


class Cluster:
    """n_p prefill instances (TP p_tp) on host 0 with one bootstrap server each; n_d decode
    instances (TP d_tp), decode instance j on host 1 + j % (hosts - 1) (host 0 without
    netns)."""

    def __init__(self, topo, n_p=1, n_d=1, p_tp=1, d_tp=1, env=None, preload=None,
                 preload_roles=("prefill", "decode"), pages=8):
        self.topo, self.n_p, self.n_d, self.p_tp, self.d_tp = topo, n_p, n_d, p_tp, d_tp
        self.env = dict(RANK_ENV, **(env or {}))
        self.preload, self.preload_roles, self.pages = preload, preload_roles, pages
        self.boot, self.prefill, self.decode = [], [], []
        self.next_room = 1
        self.crashes = 0
        ALL.append(self)
        try:
            for i in range(n_p):
                self.start_bootstrap(i)
            for i in range(n_p):
                self.prefill.append([self.start_rank("prefill", i, r) for r in range(p_tp)])
            for j in range(n_d):
                self.decode.append([self.start_rank("decode", j, r) for r in range(d_tp)])
        except Exception:
            self.close()
            raise

    def host_of(self, role, inst):
        if role in ("bootstrap", "prefill") or not self.topo.netns:
            return 0
        return 1 + inst % (self.topo.n - 1)

    def start_bootstrap(self, i, port=0):
        b = Rank(self.topo, 0, {"role": "bootstrap", "port": port}, env=self.env)
        return self._set_boot(i, b, f"{self.topo.ip(0)}:{b.ready['port']}")

    def _set_boot(self, i, b, addr):
        """Bootstrap server i is `b` at `addr` now (a restart replaces it); returns b."""
        if i < len(self.boot):
            self.boot[i] = (b, addr)
        else:
            self.boot.append((b, addr))
        return b

    def start_rank(self, role, inst, r):
        tp = self.p_tp if role == "prefill" else self.d_tp
        addr = self.boot[inst if role == "prefill" else 0][1]
        pre = self.preload if role in self.preload_roles else None
        return Rank(self.topo, self.host_of(role, inst),
                    {"role": role, "tp": tp, "rank": r, "addr": addr}, env=self.env, preload=pre)

    def restart_decode(self, j):
        self.decode[j] = [self.start_rank("decode", j, r) for r in range(self.d_tp)]

    def ranks(self):
        return [r for inst in self.prefill + self.decode for r in inst]

    def place(self, k):
        """(prefill instance, decode instance) of the k-th room of a batch."""
        return k % self.n_p, (k // self.n_p) % self.n_d if self.n_p > 1 else k % self.n_d

    def submit(self, n_rooms, send=True, only_decode=None, decode_metadata=True):
        """Creates n_rooms rooms over all P/D pairs; returns {room: (p, d)}."""
        rooms = {}
        for k in range(n_rooms):
            p, d = self.place(k)
            if only_decode is not None:
                d = only_decode
            rooms[self.next_room] = (p, d)
            self.next_room += 1
        for (p, d) in set(rooms.values()):
            mine = [r for r, pd in rooms.items() if pd == (p, d)]
            addr = self.boot[p][1]
            for rk in self.decode[d]:
                rk.send(op="rooms", rooms=mine, pages=self.pages, addr=addr,
                        metadata=decode_metadata)
            for rk in self.prefill[p]:
                rk.send(op="rooms", rooms=mine, pages=self.pages, send=send)
        return rooms

    def send_pending(self, p=None):
        for i, inst in enumerate(self.prefill):
            if p is None or i == p:
                for rk in inst:
                    rk.send(op="send")

    @staticmethod
    def wait_rooms(ranks, rooms, timeout):
        """Waits until every rank reports every room terminal; returns False on timeout."""
        return bool(wait_until(
            lambda: all(rooms_terminal(rk, rooms) for rk in ranks if rk.alive()), timeout, 0.02))

    def ranks_of(self, rooms, sides=("prefill", "decode")):
        out = []
        for (p, d) in set(rooms.values()):
            if "prefill" in sides:
                out += [rk for rk in self.prefill[p] if rk not in out]
            if "decode" in sides:
                out += [rk for rk in self.decode[d] if rk not in out]
        return out

    def verdict(self, rooms, ranks=None):
        """(all Success with bytes_ok, bytes verified, n_wrong_bytes) of rooms on the
        decode ranks of their pairs (and Success on the prefill side)."""
        ok, nbytes, wrong = True, 0, 0
        for room, (p, d) in rooms.items():
            for rk in self.decode[d]:
                ev = rk.states().get(room)
                if not ev or ev["state"] != SUCCESS:
                    ok = False
                    continue
                if not ev.get("bytes_ok"):
                    wrong += 1
                    ok = False
                nbytes += ev.get("bytes", 0)
            for rk in self.prefill[p]:
                ev = rk.states().get(room)
                if not ev or ev["state"] != SUCCESS:
                    ok = False
        return ok, nbytes, wrong

    def leaks(self, timeout=6.0):
        """Rooms left in live managers' tables after every room ended."""
        def left():
            return sum((rk.active() or 0) for rk in self.ranks() if rk.alive())

        wait_until(lambda: left() == 0, timeout, 0.05)
        return left()

    def close(self):
        """Quits every rank; returns the number that hung on quit or died with a signal."""
        bad = 0
        for rk in self.ranks() + [b for b, _ in self.boot]:
            rc = rk.quit()
            if rc == "hang" or (rc != 0 and not getattr(rk, "killed", False)):
                bad += 1
        return bad


def wait_past_bootstrap(pairs, timeout=10) -> bool:
    """Until every (rank, room) of `pairs` reports its room WaitingForInput or later."""
    return bool(wait_until(lambda: all(rk.states().get(r, {}).get("state", 0) >= 2
                                       for rk, r in pairs), timeout, 0.01))


def rooms_terminal(rk, rooms):
    st = rk.states()
    return all(r in st and st[r]["state"] in (FAILED, SUCCESS) for r in rooms if r in rk.assigned)

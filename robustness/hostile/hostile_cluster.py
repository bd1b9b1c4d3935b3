"""The victims of the hostile-peer suite: a real `pdkv bootstrap` server
process, one prefill and one decode rank (robustness/chaos/rank.py, each its own process) on
loopback, optionally sharing a cluster secret; plus what the suite measures on them
(RSS, open descriptors, threads) and asks of them (rooms with verified bytes, canaries).

Used by robustness/hostile/hostile.py (the attacks), which python/tests/test_hostile_peers.py
and `pdkv chaos --hostile` run."""
import os
import threading
import time

from pdkv.testing import wait_until
from pdkv.testing.bootstrap import BootstrapProcess
from pdkv.testing.secret_file import write_secret as write_secret_file

from cluster import FAILED, SUCCESS, Cluster, wait_past_bootstrap
from topo import Rank

# Victim settings: cluster.RANK_ENV's, a small connection cap and a short I/O
# timeout so the engine-level attacks (400 idle connections, stalled headers) show the
# cap and the first-byte timeout within a few seconds.
VICTIM_ENV = {"PDKV_TCP_MAX_CONNECTIONS": "128", "PDKV_TCP_IO_TIMEOUT_MS": "2000"}
SPARE_PAGES = 4  # registered pages no room uses: the raw writes aim there


# The victims' cluster secret: raw bytes whose last one is a line feed, as
# `head -c 32 /dev/urandom` writes one time in 256. It is no text secret (those are
# printable ASCII), so all 32 bytes are the secret: a reader that strips the line ending
# anyway finds 31 and refuses to start, and every case with a secret fails.
RAW_SECRET = bytes(range(0x80, 0x80 + 31)) + b"\n"


def write_secret(path, content=RAW_SECRET):
    """A secret file (mode 0600) holding `content`, the victims' secret unless told."""
    return write_secret_file(path, content)


class Victims(Cluster):
    """1P1D on loopback with a `pdkv bootstrap` process; every rank with guard bands and
    SPARE_PAGES canary pages (rank.py). `secret_file`: the cluster secret of all three."""

    def __init__(self, topo, secret_file=None, env=None, decode_env=None):
        self.secret_file = secret_file
        self.decode_env = decode_env or {}  # the decode's own settings on top of env
        env = dict(VICTIM_ENV, **(env or {}))
        if secret_file:
            env["PDKV_SECRET_FILE"] = secret_file
        super().__init__(topo, 1, 1, env=env)

    def start_bootstrap(self, i, port=0):
        b = BootstrapProcess(self.topo.ip(0), port, self.secret_file, env=self.env)
        return self._set_boot(i, b, f"{self.topo.ip(0)}:{b.port}")

    def start_rank(self, role, inst, r):
        env = dict(self.env, **self.decode_env) if role == "decode" else self.env
        return Rank(self.topo, 0, {"role": role, "tp": 1, "rank": r, "addr": self.boot[0][1],
                                   "spare": SPARE_PAGES}, env=env)

    # --- what attacks aim at ---------------------------------------------------------
    @property
    def p(self):
        return self.prefill[0][0]

    @property
    def d(self):
        return self.decode[0][0]

    @property
    def bootstrap_addr(self):
        return self.boot[0][1]

    def processes(self):
        """name -> pid of every victim process."""
        return {"prefill": self.p.pid, "decode": self.d.pid, "bootstrap": self.boot[0][0].pid}

    def alive(self):
        return {"prefill": self.p.alive(), "decode": self.d.alive(),
                "bootstrap": self.boot[0][0].alive()}

    def replace_decode(self):
        """A new decode process (it resolves its route anew through the bootstrap server)."""
        for rk in self.decode[0]:
            rk.quit()
        self.restart_decode(0)

    # --- legitimate work -------------------------------------------------------------
    def open_rooms(self, n=1, prefill_first=False, send=True, decode_lead_s=0.0,
                   abort_on_bytes=()):
        """n rooms over the pair; the prefill's KVSender first if prefill_first (its rooms
        are then never "pending" there). decode_lead_s: the decode opens its side that long
        before the prefill (its pre-allocation arrives first, as when the prefill is still
        computing). abort_on_bytes: indices (into the n) of rooms the decode aborts as soon
        as their first bytes land."""
        rooms = list(range(self.next_room, self.next_room + n))
        self.next_room += n
        addr = self.bootstrap_addr
        aborted = [rooms[i] for i in abort_on_bytes]
        sides = [(self.p, dict(send=send)), (self.d, dict(addr=addr, abort_on_bytes=aborted))]
        if not prefill_first:
            sides.reverse()
        for i, (rk, extra) in enumerate(sides):
            if i and decode_lead_s and not prefill_first:
                time.sleep(decode_lead_s)
            rk.send(op="rooms", rooms=rooms, pages=self.pages, **extra)
        return {r: (0, 0) for r in rooms}

    def wait_bootstrapped(self, rooms, timeout=10):
        """Until both sides report the rooms past bootstrapping (WaitingForInput or later)."""
        return wait_past_bootstrap([(rk, r) for r in rooms for rk in (self.p, self.d)], timeout)

    def finish(self, rooms, timeout=20):
        """(all Success with verified bytes, bytes verified, wrong rooms, reasons)."""
        self.wait_rooms([self.p, self.d], rooms, timeout)
        ok, nbytes, wrong = self.verdict(rooms)
        return ok, nbytes, wrong, "" if ok else describe(self, rooms)

    def check_canaries(self, timeout=10):
        """{rank: [places changed though no room owned them]} ([] = intact)."""
        out = {}
        for name, rk in (("prefill", self.p), ("decode", self.d)):
            n = sum(1 for ev in rk.events if ev["ev"] == "check")
            rk.send(op="check")
            evs = wait_until(lambda: [ev for ev in rk.events if ev["ev"] == "check"][n:],
                             timeout, 0.01)
            out[name] = evs[-1]["bad"] if evs else ["no answer" if rk.alive() else "dead"]
        return out


def describe(c, rooms):
    out = []
    for rk in (c.p, c.d):
        for r in rooms:
            ev = rk.states().get(r)
            if ev is None or ev["state"] not in (FAILED, SUCCESS):
                out.append(f"{rk.cfg['role']} room {r}: not terminal "
                           f"(state {ev and ev['state']})")
            elif ev["state"] == FAILED:
                out.append(f"{rk.cfg['role']} room {r}: {ev.get('reason', '')[:160]}")
            elif rk.cfg["role"] == "decode" and not ev.get("bytes_ok"):
                out.append(f"decode room {r}: WRONG BYTES")
    return " | ".join(out[:4])


# --- measurements of a victim process ------------------------------------------------
def proc_status(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_kib(pid):
    return proc_status(pid, "VmRSS")


def threads(pid):
    return proc_status(pid, "Threads")


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def snapshot(c):
    """{process: {"pid", "rss_kib", "fds", "threads"}} of every victim."""
    return {name: {"pid": pid, "rss_kib": rss_kib(pid), "fds": fds(pid), "threads": threads(pid)}
            for name, pid in c.processes().items()}


class Sampler:
    """Samples the victims' threads and descriptors every 20 ms while an attack runs
    (peaks: idle connections are closed again before the attack ends)."""

    def __init__(self, c):
        self.c, self.peak, self._stop = c, {}, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for name, m in snapshot(self.c).items():
                p = self.peak.setdefault(name, {})
                for k, v in m.items():
                    if v is not None:
                        p[k] = max(p.get(k, 0), v)
            time.sleep(0.02)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

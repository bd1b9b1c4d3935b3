"""Hosts for the chaos suite: network namespaces joined by veth pairs (or plain loopback),
and rank processes (robustness/chaos/rank.py) started inside them, reporting JSON lines."""
import atexit
import ctypes
import json
import os
import subprocess
import threading

from pdkv.testing.subprocesses import JsonLineProcess

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
CLONE_NEWNET = 0x40000000


def sh(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


def netns_available():
    if os.geteuid() != 0:
        return False, "not root"
    name = f"pdkvprobe{os.getpid()}"
    r = sh("ip", "netns", "add", name, check=False)
    if r.returncode != 0:
        return False, "ip netns add failed: " + r.stderr.strip()
    sh("ip", "netns", "del", name, check=False)
    return True, ""


class Topology:
    """A star: host namespaces h0..h{n-1}, each joined to a bridge namespace by a veth
    pair; host i has 10.77.0.(i+1)/24. link(i) is host i's veth end in the bridge ns, so
    cutting/netem on it affects only host i. A case may add hosts of its own (add_host:
    etcd members), outside the n that ranks are placed on."""

    def __init__(self, n_hosts, netns=True):
        self.netns = netns
        self.tag = f"{os.getpid() % 100000}"
        self.hosts = []
        self.created = []
        self.n = n_hosts
        if netns:
            atexit.register(self.teardown)
            self._build()

    def _build(self):
        br = f"pkbr{self.tag}"
        sh("ip", "netns", "add", br)
        self.created.append(br)
        self.br = br
        sh("ip", "netns", "exec", br, "ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "netns", "exec", br, "ip", "link", "set", "br0", "up")
        for _ in range(self.n):
            self._add_host()

    def _add_host(self):
        i = len(self.hosts)
        ns = f"pkh{i}_{self.tag}"
        sh("ip", "netns", "add", ns)
        self.created.append(ns)
        a, b = f"pkv{i}a{self.tag}", f"pkv{i}b{self.tag}"
        sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        sh("ip", "link", "set", a, "netns", ns)
        sh("ip", "link", "set", b, "netns", self.br)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", a, "name", "eth0")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.77.0.{i + 1}/24", "dev", "eth0")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        sh("ip", "netns", "exec", self.br, "ip", "link", "set", b, "master", "br0")
        sh("ip", "netns", "exec", self.br, "ip", "link", "set", b, "up")
        self.hosts.append((ns, f"10.77.0.{i + 1}", b))
        return i

    def add_host(self):
        """One more host on the star (network namespaces only); its index."""
        assert self.netns, "add_host needs network namespaces"
        return self._add_host()

    def call_in(self, i, fn):
        """fn() with the sockets it opens in host i's network: run on a thread of its own
        that joined host i's namespace (setns changes only the calling thread's), so this
        process (the driver, outside every namespace) can reach the host's services."""
        if not self.netns:
            return fn()
        box = {}

        def run():
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/run/netns/{self.hosts[i][0]}", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {self.hosts[i][0]}")
                finally:
                    os.close(fd)
                box["value"] = fn()
            except BaseException as e:  # handed to the caller's thread
                box["error"] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join()
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def ip(self, i):
        return self.hosts[i][1] if self.netns else "127.0.0.1"

    def prefix(self, i):
        return ["ip", "netns", "exec", self.hosts[i][0]] if self.netns else []

    def link_down(self, i):
        sh("ip", "netns", "exec", self.br, "ip", "link", "set", self.hosts[i][2], "down")

    def link_up(self, i):
        sh("ip", "netns", "exec", self.br, "ip", "link", "set", self.hosts[i][2], "up")

    def netem(self, i, *spec):
        """netem on host i's egress (its eth0); spec () removes it."""
        ns = self.hosts[i][0]
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        if spec:
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", *spec)

    def tc_supports(self, kind):
        """Whether this kernel has the qdisc `kind` (netem is a module some kernels lack)."""
        ns = self.hosts[0][0]
        r = sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", kind,
               *(["delay", "1ms"] if kind == "netem" else []), check=False)
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "lo", "root", check=False)
        return r.returncode == 0

    def tbf(self, i, rate):
        ns = self.hosts[i][0]
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        if rate:
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
               "rate", rate, "burst", "32kbit", "latency", "400ms")

    def teardown(self):
        for ns in reversed(self.created):
            sh("ip", "netns", "del", ns, check=False)
        self.created = []


class Rank(JsonLineProcess):
    """A rank process (rank.py) on host i; events arrive on a queue."""

    def __init__(self, topo, host, cfg, env=None, preload=None):
        self.cfg = dict(cfg)
        self.cfg.setdefault("ip", topo.ip(host))
        e = dict(os.environ)
        e.update(env or {})
        pre = [f"LD_PRELOAD={preload}"] if preload else []
        cmd = topo.prefix(host) + ["env", f"PYTHONPATH={e.get('PYTHONPATH', '')}"] + pre + [PY,
                                   os.path.join(HERE, "rank.py"), json.dumps(self.cfg)]
        self.assigned = set()  # rooms this rank was told to create
        # The `ip netns exec` process execs into python: its pid is the rank's.
        super().__init__(cmd, env=e, ready_timeout=30, what=f"rank {cfg}")

    def send(self, **cmd):
        if cmd.get("op") == "rooms":
            self.assigned.update(cmd["rooms"])
        super().send(**cmd)

    def states(self):
        out = {}
        for ev in self.events:
            if ev["ev"] == "state":
                out[ev["room"]] = ev
        return out

    def active(self):
        a = [ev["n"] for ev in self.events if ev["ev"] == "active"]
        return a[-1] if a else None

"""Real etcd members for tests and benchmarks of the etcd registry (PDKV_REGISTRY=etcd).

`EtcdCluster(n)` starts n members of /usr/bin/etcd (or $PDKV_ETCD_BIN) on free loopback
ports with their data in a temporary directory, and `close()` kills them and removes it.
A `placement` puts members elsewhere: `pdkv chaos` runs each in its own network namespace,
so that cutting one member's link is a real partition.
etcd's default heartbeat (100 ms) and election (1 s) timeouts: shorter ones made elections
churn on a loaded machine.
Not for production: it is how pdkv's own tests get a database, never a mock.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from typing import Callable, Optional, TypeVar

from .ports import free_port

T = TypeVar("T")


def etcd_binary() -> Optional[str]:
    """Path of the etcd server binary, or None when it is not installed."""
    path = os.environ.get("PDKV_ETCD_BIN") or "/usr/bin/etcd"
    return path if os.access(path, os.X_OK) else None


def _b64(text: str) -> str:
    """etcd's JSON gateway takes keys and values base64-encoded."""
    return base64.b64encode(text.encode()).decode()


class Loopback:
    """Where members run and how this process reaches them: here, on 127.0.0.1. Another
    placement gives member i an address, a command prefix that starts a process where it
    lives (e.g. `ip netns exec NS`) and a way to run a call with sockets there."""

    def ip(self, i: int) -> str:
        return "127.0.0.1"

    def command(self, i: int) -> list:
        return []

    def call(self, i: int, fn: Callable[[], T]) -> T:
        return fn()


class EtcdCluster:
    """`members` etcd processes forming one cluster; a context manager."""

    def __init__(self, members: int = 1, placement: Optional[Loopback] = None) -> None:
        binary = etcd_binary()
        if binary is None:
            raise FileNotFoundError("etcd is not installed (/usr/bin/etcd, package etcd-server)")
        if members < 1:
            raise ValueError(f"members must be >= 1, got {members}")
        self.binary = binary
        self.placement = placement or Loopback()
        self.dir = tempfile.mkdtemp(prefix="pdkv-etcd-")
        self.names = [f"m{i}" for i in range(members)]
        self.client_ports = [free_port() for _ in range(members)]
        self.peer_ports = [free_port() for _ in range(members)]
        self.procs: list[Optional[subprocess.Popen]] = [None] * members
        self.initial_cluster = ",".join(
            f"{n}=http://{self.placement.ip(i)}:{p}"
            for i, (n, p) in enumerate(zip(self.names, self.peer_ports)))
        try:
            for i in range(members):
                self._launch(i, "new")
            for i in range(members):
                self.wait_healthy(i)
        except Exception:
            self.close()
            raise

    @property
    def endpoints(self) -> str:
        """PDKV_ETCD_ENDPOINTS of the whole cluster."""
        return ",".join(self.endpoint(i) for i in range(len(self.names)))

    def endpoint(self, i: int) -> str:
        return f"{self.placement.ip(i)}:{self.client_ports[i]}"

    def _launch(self, i: int, state: str) -> None:
        client = f"http://{self.placement.ip(i)}:{self.client_ports[i]}"
        peer = f"http://{self.placement.ip(i)}:{self.peer_ports[i]}"
        log = open(os.path.join(self.dir, f"{self.names[i]}.log"), "ab")
        # A prefix such as `ip netns exec` execs etcd in its own process: same pid.
        self.procs[i] = subprocess.Popen(
            self.placement.command(i) + [self.binary, "--name", self.names[i],
             "--data-dir", os.path.join(self.dir, self.names[i]),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", self.initial_cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", self.dir,
             "--heartbeat-interval", "100", "--election-timeout", "1000"],
            stdout=log, stderr=log)
        log.close()

    def _post(self, i: int, path: str, body: dict, timeout: float = 1.0) -> dict:
        req = urllib.request.Request(f"http://{self.endpoint(i)}{path}",
                                     data=json.dumps(body).encode(), method="POST")

        def post() -> dict:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        return self.placement.call(i, post)

    def _healthy(self, i: int) -> bool:
        def get() -> bool:
            with urllib.request.urlopen(f"http://{self.endpoint(i)}/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        return self.placement.call(i, get)

    def wait_healthy(self, i: int, timeout: float = 20.0) -> None:
        """Returns once member i answers /health; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self._healthy(i):
                    return
            except Exception:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"etcd member {self.names[i]} not healthy within {timeout} s "
                           f"(log in {self.dir})")

    def leader(self) -> int:
        """Index of the member that leads now."""
        for i, p in enumerate(self.procs):
            if p is None:
                continue
            try:
                st = self._post(i, "/v3/maintenance/status", {})
            except Exception:
                continue
            if st.get("leader") == st.get("header", {}).get("member_id"):
                return i
        raise RuntimeError("no etcd member leads")

    def registry_env(self, prefix: str, lease_ttl_s: float, **more: str) -> dict:
        """The PDKV_* settings of a rank (or `pdkv bootstrap`) that registers in this
        cluster under `prefix` with leases of `lease_ttl_s`; `more` adds settings."""
        return dict({"PDKV_REGISTRY": "etcd", "PDKV_ETCD_ENDPOINTS": self.endpoints,
                     "PDKV_ETCD_PREFIX": prefix, "PDKV_ETCD_LEASE_TTL_S": str(lease_ttl_s)},
                    **more)

    def get(self, key: str, i: int = 0) -> Optional[tuple[str, int]]:
        """(value, lease id) of `key` as member i has it (lease 0: none), or None."""
        kvs = self._post(i, "/v3/kv/range", {"key": _b64(key)})
        kv = (kvs.get("kvs") or [None])[0]
        return None if kv is None else (base64.b64decode(kv["value"]).decode(),
                                        int(kv.get("lease", 0)))

    def put(self, key: str, value: str, i: int = 0) -> None:
        """Puts `value` at `key` without a lease, as any client allowed to write may."""
        self._post(i, "/v3/kv/put", {"key": _b64(key), "value": _b64(value)})

    def keys(self, prefix: str, i: Optional[int] = None) -> list[str]:
        """Every key starting with `prefix` (asked of member i, or the first alive)."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        body = {"key": _b64(prefix), "range_end": _b64(end), "keys_only": True}
        members = [i] if i is not None else [k for k, p in enumerate(self.procs) if p]
        for k in members:
            try:
                out = self._post(k, "/v3/kv/range", body)
            except Exception:
                continue
            return [base64.b64decode(kv["key"]).decode() for kv in out.get("kvs", [])]
        raise RuntimeError("no etcd member answered")

    def kill(self, i: int) -> None:
        """SIGKILL member i and wait for it."""
        p = self.procs[i]
        if p is not None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            self.procs[i] = None

    def freeze(self, i: int) -> None:
        """SIGSTOP member i: connections stay open, nothing is answered (as a member cut
        off by a partition looks to its clients)."""
        p = self.procs[i]
        if p is not None:
            p.send_signal(signal.SIGSTOP)

    def thaw(self, i: int) -> None:
        """SIGCONT member i."""
        p = self.procs[i]
        if p is not None:
            p.send_signal(signal.SIGCONT)

    def restart(self, i: int) -> None:
        """Start member i again on its data and ports; waits until it answers."""
        self.kill(i)
        self._launch(i, "existing")
        self.wait_healthy(i)

    def close(self) -> None:
        for i in range(len(self.procs)):
            self.kill(i)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "EtcdCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

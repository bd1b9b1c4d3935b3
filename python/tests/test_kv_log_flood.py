"""A peer cannot flood a rank's log: every line a peer's messages trigger is rate-limited
per call site, with a count of the lines it dropped.

Real victim processes (a prefill and a decode rank, each with its stderr in a file) and
no cluster secret, so anyone may send them messages: 100,000 garbage control messages to
each rank, then a registered stranger's 20,000 pre-allocations of rooms nobody opened
(pdkv_hostile_peer), which end when the stranger leaves. Before, each garbage message
logged a line (about 17 MB per rank) and the pre-allocations a line per refused message
and per room failed (several MB).
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest

import pdkv

GARBAGE = 100_000
PRE_ALLOCATIONS = 20_000
# Ten lines a second per call site over the few seconds of the floods is a few dozen
# lines; the floods themselves would write megabytes.
MAX_LOG_BYTES = 128 << 10
BIN_DIR = os.environ.get("PDKV_BIN_DIR", os.path.join("build", "bin"))


def victim_main(role: str, addr: str):
    """One rank of the hostile peer's default shape; answers "alive" on stdin until EOF."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kv_harness import RankMemory, Shape, apply_env
    apply_env(None)
    shape = Shape(layers=2, heads=4, head_dim=64, dtype_bytes=2, page_size=16, capacity=260)
    mem = RankMemory(shape, 1, 0)
    mgr = pdkv.KVManager(mem.kv_args(pdkv, 0, 1, 1), role, addr)
    print(json.dumps({"ctrl": mgr.control_endpoint}), flush=True)
    for line in sys.stdin:
        print(json.dumps({"alive": line.strip()}), flush=True)
    mgr.shutdown()


class Victim:
    def __init__(self, role: str, addr: str, log_path: str):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), role, addr],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        self.ctrl = json.loads(self.proc.stdout.readline())["ctrl"]

    def log_bytes(self) -> int:
        return os.path.getsize(self.log_path)

    def answers(self) -> bool:
        self.proc.stdin.write("ping\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline()) == {"alive": "ping"}

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
            self.log.close()


def send_garbage(endpoint: str, count: int):
    zmq = pytest.importorskip("zmq")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(endpoint)
    for i in range(count):
        sock.send(b"not a pdkv message %d" % i)
    sock.close(linger=10_000)
    ctx.term()


def test_floods_of_garbage_and_pre_allocations_write_a_bounded_log(tmp_path):
    peer = os.path.join(BIN_DIR, "pdkv_hostile_peer")
    assert os.path.exists(peer), f"{peer}: the README build makes it"
    server = pdkv.BootstrapServer("127.0.0.1", 0)
    addr = f"127.0.0.1:{server.port}"
    victims = {}
    try:
        for role in ("prefill", "decode"):
            victims[role] = Victim(role, addr, str(tmp_path / f"{role}.log"))
        before = {role: v.log_bytes() for role, v in victims.items()}
        for v in victims.values():
            send_garbage(v.ctrl, GARBAGE)
        seen = subprocess.run([peer, "--control", victims["prefill"].ctrl, "--count",
                               str(PRE_ALLOCATIONS), "--pages", "260", "--hold-ms", "1000",
                               "pre-allocation-flood"], capture_output=True, text=True,
                              timeout=60)
        assert seen.returncode == 0, seen.stderr[-2000:]
        # The stranger left: the prefill fails the rooms it held once it sees it gone.
        time.sleep(3)
        # A second window: the next line let through says how many were dropped.
        for v in victims.values():
            send_garbage(v.ctrl, 1)
        time.sleep(0.5)
        for role, v in victims.items():
            assert v.answers(), f"the {role} victim stopped answering"
            grew = v.log_bytes() - before[role]
            with open(v.log_path, "rb") as f:
                f.seek(before[role])
                text = f.read().decode(errors="replace")
            assert grew < MAX_LOG_BYTES, f"the {role}'s log grew {grew} bytes:\n{text[-3000:]}"
            # The lines were dropped, and counted, not just never triggered.
            assert re.search(r"\((\d{5}) similar lines suppressed\)\n[^\n]*dropped a malformed",
                             text), text[-3000:]
        text = open(victims["prefill"].log_path, errors="replace").read()
        assert "PDKV_MAX_PENDING_ROOMS_PER_DECODE" in text, text[-3000:]
    finally:
        for v in victims.values():
            v.close()
        server.stop()


if __name__ == "__main__":
    victim_main(sys.argv[1], sys.argv[2])

"""Same-run baselines: raw ZeroMQ PUSH/PULL round trip (P5), iperf3 loopback (reported),
`pdkv bench engine` P1 (P6)."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import tempfile
import time

import numpy as np

CTX = mp.get_context("spawn")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _zmq_echo(port_in: int, port_out: int, n: int) -> None:
    import zmq
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind(f"tcp://127.0.0.1:{port_in}")
    push.connect(f"tcp://127.0.0.1:{port_out}")
    for _ in range(n):
        push.send(pull.recv())
    ctx.destroy(linger=1000)


def zmq_rtt_us(n: int = 2000, size: int = 64) -> dict:
    """Ping-pong over two PUSH/PULL pairs between two processes; RTT percentiles in us."""
    import zmq
    a, b = _free_port(), _free_port()
    proc = CTX.Process(target=_zmq_echo, args=(a, b, n + 50))
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"tcp://127.0.0.1:{b}")
    proc.start()
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{a}")
    msg, rtts = b"x" * size, []
    for i in range(n + 50):
        t0 = time.monotonic()
        push.send(msg)
        pull.recv()
        if i >= 50:  # warm-up: connection setup
            rtts.append((time.monotonic() - t0) * 1e6)
    proc.join(10)
    ctx.destroy(linger=0)
    r = np.array(rtts)
    return {"p50": float(np.percentile(r, 50)), "p99": float(np.percentile(r, 99)), "n": n}


def iperf3_gbps(seconds: int = 2, streams: int = 4):
    """iperf3 loopback, receiver side GB/s; None when iperf3 fails."""
    port = _free_port()
    srv = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", str(streams),
                              "-t", str(seconds), "-J"], capture_output=True, text=True,
                             timeout=seconds + 30)
        return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 8e9
    except Exception:
        return None
    finally:
        srv.wait(10) if srv.poll() is None and not srv.kill() else None


def engine_p1(bin_dir: str, rounds: int = 3) -> dict:
    """`pdkv bench engine` P1 (tcp, llama3-8b, 4 k tokens, page 16) in this run."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p1.json")
        subprocess.run([os.path.join(bin_dir, "pdkv"), "bench", "engine", "--backend", "tcp",
                        "--model", "llama3-8b", "--tokens", "4096", "--page", "16",
                        "--rounds", str(rounds), "--iperf-seconds", "2", "--json", path],
                       check=True, stdout=subprocess.DEVNULL, timeout=900)
        with open(path) as f:
            return json.load(f)["P1"]

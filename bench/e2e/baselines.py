"""Same-run baselines: raw ZeroMQ PUSH/PULL round trip (P5), iperf3 loopback (reported),
`pdkv bench engine` P1 (P6's target) and the engines alone moving P6's own round (what
bounds P6)."""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

import numpy as np

from pdkv.testing.ports import free_port
from pdkv.testing.processes import SPAWN


def _zmq_echo(port_in: int, port_out: int) -> None:
    """Echoes every message back until an empty one."""
    import zmq
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind(f"tcp://127.0.0.1:{port_in}")
    push.connect(f"tcp://127.0.0.1:{port_out}")
    while True:
        msg = pull.recv()
        if not msg:
            break
        push.send(msg)
    ctx.destroy(linger=1000)


class ZmqPingPong:
    """A ZeroMQ ping-pong over two PUSH/PULL pairs between this process and an echo
    process, kept up between calls of sample(), so a bench can take its baseline in
    stretches between its own samples (P5: the same minutes of this shared host for both).
    A context manager; the first 50 round trips (connection set-up) are never samples."""

    def __init__(self, size: int = 64):
        import zmq
        a, b = free_port(), free_port()
        self._proc = SPAWN.Process(target=_zmq_echo, args=(a, b))
        self._ctx = zmq.Context()
        self._pull = self._ctx.socket(zmq.PULL)
        self._pull.bind(f"tcp://127.0.0.1:{b}")
        self._proc.start()
        self._push = self._ctx.socket(zmq.PUSH)
        self._push.connect(f"tcp://127.0.0.1:{a}")
        self._msg = b"x" * size
        self.sample(50)

    def sample(self, n: int, gap_s: float = 0.0) -> list:
        """n round trips, back to back or each after gap_s of idle; their times in us."""
        rtts = []
        for _ in range(n):
            if gap_s > 0:
                time.sleep(gap_s)
            t0 = time.monotonic()
            self._push.send(self._msg)
            self._pull.recv()
            rtts.append((time.monotonic() - t0) * 1e6)
        return rtts

    def close(self) -> None:
        self._push.send(b"")
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
        self._ctx.destroy(linger=0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def rtt_summary(rtts: list, gap_s: float = 0.0, **extra) -> dict:
    r = np.array(rtts)
    return {"p50": float(np.percentile(r, 50)), "p99": float(np.percentile(r, 99)),
            "n": len(rtts), "gap_ms": gap_s * 1e3, **extra}


def zmq_rtt_us(n: int = 2000, size: int = 64, gap_s: float = 0.0) -> dict:
    """Ping-pong over two PUSH/PULL pairs between two processes; RTT percentiles in us.
    gap_s > 0 idles that long before each ping, as P5's cold samples idle between rounds:
    on this VM a woken idle vCPU costs tens of us, so a round trip after 10 ms of idle
    measured 2-3 x a back-to-back one (BENCHMARKS.md, P5)."""
    with ZmqPingPong(size) as pp:
        return rtt_summary(pp.sample(n, gap_s), gap_s)


def iperf3_gbps(seconds: int = 2, streams: int = 4):
    """iperf3 loopback, receiver side GB/s; None when iperf3 fails."""
    port = free_port()
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


def engine_figure(bin_dir: str, args: list, rounds: int = 3) -> dict:
    """The one figure `pdkv bench engine <args>` writes (tcp) in this run."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "engine.json")
        subprocess.run([os.path.join(bin_dir, "pdkv"), "bench", "engine", "--backend", "tcp",
                        *args, "--rounds", str(rounds), "--iperf-seconds", "2", "--json", path],
                       check=True, stdout=subprocess.DEVNULL, timeout=900)
        with open(path) as f:
            figures = json.load(f)
        return next(iter(figures.values()))


def engine_p1(bin_dir: str, rounds: int = 3) -> dict:
    """`pdkv bench engine` P1 (tcp, llama3-8b, 4 k tokens, page 16) in this run."""
    return engine_figure(bin_dir, ["--model", "llama3-8b", "--tokens", "4096", "--page", "16"], rounds)


def topology_args(model: str, tokens: int, page: int, prefill_tp: int, decode_tp: int):
    """`pdkv bench engine` arguments that move exactly what the scale case moves in a round
    (`tokens` = requests x tokens each, per prefill rank), with nothing else: one
    sender/receiver pair per prefill rank, all moving at once (--pairs), each pair the
    blocks of one prefill rank (512 B head-split pieces for llama3-8b TP 4 -> 2). No
    managers, control plane or Python: on the same cores, this bounds what the whole
    system can reach. None when the engine bench cannot express the geometry (prefill TP
    < decode TP: one prefill rank feeds several decode ranks)."""
    if prefill_tp % decode_tp:
        return None
    return ["--model", model, "--tokens", str(tokens), "--page", str(page),
            "--decode-tp", str(decode_tp), "--head-split", str(prefill_tp // decode_tp),
            "--pairs", str(prefill_tp)]

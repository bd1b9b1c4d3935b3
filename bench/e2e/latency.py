"""P5's two kinds of latency samples (`--latency-mode`) and their ZeroMQ baselines."""
from __future__ import annotations

import copy

import baselines

# P5's samples (--latency-mode). Its baseline is a back-to-back ZeroMQ ping-pong, so the
# headline figure is taken the same way ("warm"): a round's rooms are all pre-allocated,
# then sent one at a time, each right after the previous one ended on the prefill (one
# transfer in flight, nothing idle in between). "cold" is the figure this bench reported
# until 2026-12-05: one room per round, so every sample follows ~10 ms of idle (the
# driver's round trip through the ranks' queues); on this VM a woken idle vCPU costs tens
# of us, and a ZeroMQ round trip after 10 ms of idle measured 2-3 x a back-to-back one.
# The cold figure is reported beside its own idle-gap baseline (baselines.zmq_rtt_us).
MODES = ("warm", "cold", "both")


def modes(a) -> dict:
    """{mode: the options its rounds run with} for --latency-mode (MODES)."""
    out = {}
    if a.latency_mode in ("warm", "both"):
        out["warm"] = copy.copy(a)
        out["warm"].sequential = True
    if a.latency_mode in ("cold", "both"):
        out["cold"] = copy.copy(a)
        out["cold"].concurrency, out["cold"].rounds = [1], a.cold_samples
    return out


def zmq_baseline(idle: bool, gap_ms: float) -> dict:
    """P5's ZeroMQ round trip in this run: back-to-back, or `gap_ms` of idle before each
    ping (200 pings then, to keep the run short)."""
    try:
        if idle:
            return baselines.zmq_rtt_us(n=200, gap_s=gap_ms / 1e3)
        return baselines.zmq_rtt_us()
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}

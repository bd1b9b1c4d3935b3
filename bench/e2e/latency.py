"""P5's two kinds of latency samples (`--latency-mode`) and their ZeroMQ baselines."""
from __future__ import annotations

import copy

import baselines
import rounds

# P5's samples (--latency-mode). Its baseline is a back-to-back ZeroMQ ping-pong, so the
# headline figure is taken the same way ("warm"): a round's rooms are all pre-allocated,
# then sent one at a time, each right after the previous one ended on the prefill (one
# transfer in flight, nothing idle in between). "cold" is the figure this bench reported
# until 2026-12-05: one room per round, so every sample follows ~10 ms of idle (the
# driver's round trip through the ranks' queues); on this VM a woken idle vCPU costs tens
# of us, and a ZeroMQ round trip after 10 ms of idle measured 2-3 x a back-to-back one.
# The cold figure is reported beside its own idle-gap baseline (baselines.zmq_rtt_us).
MODES = ("warm", "cold", "both")
# Round trips in the back-to-back baseline. With warm samples they are taken in equal
# stretches before each timed round and after the last (the cluster up and idle), so the
# baseline and the samples share the same minutes of this shared, noisy host: a slow
# stretch then slows both instead of only one of them.
ZMQ_SAMPLES = 2000


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


def run(pdkv, a, modes: dict, rrs: dict, log, extra: dict) -> None:
    """Runs the rounds of each mode (latency.modes) into rrs and fills in `extra` what the
    figures need besides them: "zmq" (the target's baseline) and, with cold samples,
    "cold". Filled as it goes, so a run cut short still reports what it measured."""
    if "warm" in modes:
        o, rtts = modes["warm"], []
        per_stretch = -(-ZMQ_SAMPLES // (o.rounds + 1))
        try:
            with baselines.ZmqPingPong() as pp:
                rounds.run_rounds(pdkv, o, log, rrs["warm"],
                                  between=lambda: rtts.extend(pp.sample(per_stretch)))
        finally:
            extra["zmq"] = (baselines.rtt_summary(rtts, interleaved_stretches=o.rounds + 1)
                            if rtts else {"error": "no ZeroMQ round trip was taken"})
    else:
        extra["zmq"] = zmq_baseline(False, a.idle_gap_ms)
    if "cold" in modes:
        extra["cold"] = {"rr": rrs["cold"], "zmq_idle": zmq_baseline(True, a.idle_gap_ms)}
        rounds.run_rounds(pdkv, modes["cold"], log, rrs["cold"])

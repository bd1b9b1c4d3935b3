"""One run of a round-based case (latency, scale, layerwise): a fresh cluster, every
concurrency of the sweep, a warm-up round then --rounds timed rounds each.

Failures of any round, the warm-up included, go to the run's FailureLog (the warm-up
faults pages in and is left out of the figures, not out of the failure count). The run
stops at the first harness problem (a rank died, raised or went silent): the cluster is
then in an unknown state and later rounds would measure the wreck, not pdkv."""
from __future__ import annotations

import signal
import threading

import cluster
import cpu_cost
import report


def rank_cfg(a, pages_per_req: int, capacity: int) -> dict:
    """What every rank needs (cluster.py adds role, rank, tp and the bootstrap address)."""
    return dict(model=a.model, page=a.page, pages_per_req=pages_per_req, capacity=capacity,
                backend=a.backend, timeout=a.timeout, decode_poll=a.decode_poll,
                poll_sleep_us=a.poll_sleep_us, sequential=a.sequential, layer_ms=a.layer_ms,
                env=a.rank_env,
                layerwise_interval=a.layerwise_interval if a.case == "layerwise" else 0)


def arm_kill(cl, a):
    """--kill-rank: SIGKILL that rank --kill-after-s seconds after the cluster is up (to
    check that a failed run still reports why)."""
    if not a.kill_rank:
        return None
    sig = getattr(signal, "SIG" + a.kill_signal.upper().removeprefix("SIG"))
    t = threading.Timer(a.kill_after_s, cl.kill, args=(a.kill_rank, sig))
    t.daemon = True
    t.start()
    return t


def new_result(a) -> dict:
    """What run_rounds fills in as it goes, so an interrupted run keeps its rounds.
    round_figs (one round_figure per timed round) feeds --plot, not the JSON."""
    return {"rows": [], "round_figs": [], "rss_rounds": [], "cpu_rounds": [], "rounds_run": 0,
            "rounds_planned": len(a.concurrency) * (a.rounds + 1)}


def run_rounds(pdkv, a, log, rr: dict, between=None) -> None:
    """Fills `rr` (new_result): rows (one per concurrency), RSS per round, rounds run.
    `between()`, if given, runs before each timed round and after the last one, with the
    cluster up and idle (P5 takes its ZeroMQ baseline there: latency.py)."""
    ppr = a.tokens // a.page
    cfg = rank_cfg(a, ppr, max(a.concurrency) * ppr)
    cl = cluster.Cluster(pdkv, cfg, a.prefill_tp, a.decode_tp, log)
    killer = arm_kill(cl, a)
    room = 1
    try:
        for conc in a.concurrency:
            timed = []
            try:
                for i in range(a.rounds + 1):  # round 0: warm-up (faults pages in), not timed
                    if not cl.healthy:
                        break
                    rooms = list(range(room, room + conc))
                    room += conc
                    if i and between:
                        between()
                    done = cl.run_round(rooms, a.timeout)
                    s = report.summarize(done, rooms, log, sequential=a.sequential)
                    if i and conc == max(a.concurrency):
                        cpu_cost.add_round(rr["cpu_rounds"], done, conc)  # P13
                    rr["rounds_run"] += 1
                    if i:
                        timed.append(s)
                        rr["round_figs"].append(round_figure(conc, i, s))
                    if conc == max(a.concurrency):
                        rr["rss_rounds"].append(s["rss"])
                    show_round(a, conc, i, s, log)
            finally:  # also when interrupted: the rounds done so far are a result
                rr["rows"].append(report.merge(timed, conc))
            if not cl.healthy:
                break
        if between and cl.healthy:
            between()
    finally:
        if killer:
            killer.cancel()
        cl.close()


def round_figure(conc: int, i: int, s: dict) -> dict:
    """One timed round's own figures (report.summarize's `s`), for --plot (plot.py)."""
    return {"concurrency": conc, "round": i, "gbps": s["gbps"], "req_per_s": s["req_per_s"],
            "lat_p50_us": report.pct(s["lat_us"], 50), "lat_p99_us": report.pct(s["lat_us"], 99)}


def show_round(a, conc, i, s, log) -> None:
    gbps = f"{s['gbps']:.3f} GB/s" if s["gbps"] is not None else "no room succeeded"
    fails = f", {log.count} failed rooms so far" if log.count else ""
    cluster.progress(f"{a.case} c={conc}", i, a.rounds, gbps + fails)


def rss_growth(rss_rounds):
    """Worst rank's (last - first after warm-up) / first; ranks lost midway are skipped."""
    if len(rss_rounds) < 3:
        return 0.0
    first, last = rss_rounds[1], rss_rounds[-1]
    common = [k for k in first if k in last and first[k]]
    return max(((last[k] - first[k]) / first[k] for k in common), default=None)

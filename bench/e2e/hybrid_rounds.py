"""One run of the hybrid scale case (P12): one cluster whose ranks hold both arms
(hybrid_ranks.py), the hybrid arm's rooms and the plain arm's rooms of about the same bytes
in alternating rounds, ABBA (hybrid plain, plain hybrid, ...) after one warm-up round of
each, so a change of load during the run weighs on both arms alike. Separate runs on this
shared machine spread by far more than the difference being measured.

The figure is the hybrid arm's median round throughput over the plain arm's (`ratio_to_plain`),
beside the median of the per-pair ratios. A rank problem stops the run, as in rounds.py."""
from __future__ import annotations

import time

from pdkv.testing.bootstrap import LoopbackBootstrap

import cluster
import failures
import hybrid_ranks
import report
import results
import rounds
from hybrid_presets import HYBRID, plain_preset


def presets(a):
    """(hybrid preset at this request size, its plain arm)."""
    hybrid = HYBRID[a.model].scaled(a.tokens)
    return hybrid, plain_preset(hybrid, a.tokens, a.page, a.decode_tp,
                                a.plain_heads == "model")


def run_round(cl, rooms, arm: str, timeout: float) -> dict:
    """cluster.Cluster.run_round with the arm named in each command."""
    cl.collect("prepared", cl.send("decode", ("prepare", rooms, arm)), timeout, rooms)
    cl.collect("prepared", cl.send("prefill", ("prepare", rooms, arm)), timeout, rooms)
    cl.send("prefill", ("go", arm))
    return cl.collect("done", [k for k in cl.procs if k not in cl.lost],
                      timeout + cluster.DONE_MARGIN_S, rooms)


def one_run(pdkv, a) -> dict:
    """The figures of one run on fresh rank processes (an exception is the run's failure)."""
    log, t0 = failures.FailureLog(), time.monotonic()
    conc, ppr = a.concurrency[-1], a.tokens // a.page
    rrs = {arm: rounds.new_result(a) for arm in hybrid_ranks.ARMS}
    timed = {arm: [] for arm in hybrid_ranks.ARMS}
    pair_ratios, cl, plain_server = [], None, None
    try:
        plain_server = LoopbackBootstrap(pdkv)
        cfg = dict(rounds.rank_cfg(a, ppr, conc * ppr), tokens=a.tokens, concurrency=conc,
                   decode_tp=a.decode_tp, plain_addr=plain_server.addr,
                   plain_heads=a.plain_heads)
        cl = cluster.Cluster(pdkv, cfg, a.prefill_tp, a.decode_tp, log,
                             rank_main=hybrid_ranks.rank_main)
        room = 1
        for i in range(a.rounds + 1):  # round 0 of each arm: warm-up (faults pages in)
            order = hybrid_ranks.ARMS if i % 2 == 0 else hybrid_ranks.ARMS[::-1]
            for arm in order:
                if not cl.healthy:
                    raise RuntimeError("the cluster lost a rank")
                rooms = list(range(room, room + conc))
                room += conc
                s = report.summarize(run_round(cl, rooms, arm, a.timeout), rooms, log)
                rrs[arm]["rounds_run"] += 1
                if i:
                    timed[arm].append(s)
                if arm == "hybrid":
                    rrs[arm]["rss_rounds"].append(s["rss"])
            h, p = (timed[arm][-1]["gbps"] if i else None for arm in hybrid_ranks.ARMS)
            if h and p:
                pair_ratios.append(h / p)
            shown = f"hybrid {h:.3f} plain {p:.3f} GB/s" if h and p else "warm-up"
            cluster.progress(f"scale {a.model} hybrid/plain", i, a.rounds,
                             shown + (f", {log.count} failed rooms" if log.count else ""))
    except Exception as e:
        log.problem("driver", f"bench raised {type(e).__name__}: {e}", time.monotonic())
    finally:
        for arm in hybrid_ranks.ARMS:
            rrs[arm]["rows"].append(report.merge(timed[arm], conc))
        if cl is not None:
            cl.close()
        if plain_server is not None:
            plain_server.stop()
    for arm in hybrid_ranks.ARMS:
        print(report.table(rrs[arm]["rows"], f"pdkv bench e2e --case scale --model {a.model} "
                           f"({arm} arm)"))
    return figures(rrs, pair_ratios, log, time.monotonic() - t0)


def figures(rrs, pair_ratios, log, seconds) -> dict:
    """One run's dict: the scale case's fields of the hybrid arm, the plain arm's
    throughput as the baseline, and the ratios."""
    hyb, plain = rrs["hybrid"], rrs["plain"]
    top, ptop = hyb["rows"][-1], plain["rows"][-1]
    value, base = top.get("gbps"), ptop.get("gbps")
    ratio = value / base if value is not None and base else None
    checked = all(rr["rounds_run"] == rr["rounds_planned"] and
                  all(r["bytes_ok"] for r in rr["rows"]) for rr in (hyb, plain))
    fig = {"value": value, "baseline": base, "ratio": ratio, "ratio_to_plain": ratio,
           "pair_ratios": pair_ratios, "pair_ratio_median": report.med(pair_ratios),
           "unit": "GB/s", "rss_growth": rounds.rss_growth(hyb["rss_rounds"]),
           "lat_p50_us": top.get("lat_p50_us"), "lat_p99_us": top.get("lat_p99_us"),
           "plain_lat_p50_us": ptop.get("lat_p50_us"), "plain_lat_p99_us": ptop.get("lat_p99_us"),
           "req_per_s": top.get("req_per_s"), "per_rank_gbps": top.get("per_rank_gbps"),
           "rss_per_round": hyb["rss_rounds"], "rows": hyb["rows"], "plain_rows": plain["rows"],
           "rounds_run": hyb["rounds_run"] + plain["rounds_run"],
           "rounds_planned": hyb["rounds_planned"] + plain["rounds_planned"],
           "seconds": seconds}
    fig.update(results.outcome(log, checked))
    return fig

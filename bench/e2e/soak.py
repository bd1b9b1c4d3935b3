"""Soak (P8), driver side: the schedule, the pool size, one run, its figures.

Workload: request sizes 1..--max-tokens (4096) tokens, log-uniform: tokens =
floor(exp(U(0, ln(max + 1)))), so each doubling of the size (1, 2-3, 4-7, ..., 2048-4096)
is about equally likely (mean ~490 tokens for 4096), as prompt lengths spread over orders
of magnitude in serving. Arrivals are Poisson at --rate requests/s for --minutes. Sizes and
gaps come from two streams of one --seed, so a different rate keeps the same sizes. The
rank side is soak_rank.py."""
from __future__ import annotations

import math
import time

import numpy as np

import cluster
import polling
import report
import rounds
from memory import page_bytes
from presets import PRESETS

DISTRIBUTION = "log-uniform tokens = floor(exp(U(0, ln(max_tokens + 1))))"
T0_LEAD_S = 2.0  # the schedule starts this long after it is sent: every rank has it by then
POOL_HEADROOM = 4  # x the mean pages in flight (Little's law), beside two largest requests


def draw_schedule(seed: int, rate: float, seconds: float, max_tokens: int, page: int) -> list:
    """[(room, tokens, pages, arrival offset s)], rooms numbered from 1."""
    size_rng, gap_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    out, t = [], 0.0
    while True:
        t += float(gap_rng.exponential(1.0 / rate))
        if t >= seconds:
            return out
        tokens = int(min(max_tokens, max(1, math.floor(math.exp(
            size_rng.uniform(0.0, math.log(max_tokens + 1)))))))
        out.append((len(out) + 1, tokens, -(-tokens // page), t))


def largest_page_bytes(a) -> int:
    preset = PRESETS[a.model]
    return max(page_bytes(preset, a.page, tp, r)
               for tp in (a.prefill_tp, a.decode_tp) for r in range(tp))


def pool_pages(a, schedule) -> int:
    """Pages per rank: two of the largest requests (one can wait for the other to end)
    plus POOL_HEADROOM x the pages in flight on average, rate x --expect-latency-s requests
    (Little's law) of the schedule's mean size."""
    max_pages = -(-a.max_tokens // a.page)
    mean_pages = float(np.mean([e[2] for e in schedule])) if schedule else 0.0
    in_flight = a.rate * a.expect_latency_s
    return 2 * max_pages + math.ceil(POOL_HEADROOM * in_flight * mean_pages)


def check_fits(a) -> str | None:
    """Why this configuration cannot run within --pool-limit-gib per rank, or None."""
    schedule = draw_schedule(a.seed, a.rate, a.minutes * 60, a.max_tokens, a.page)
    pages, pb = pool_pages(a, schedule), largest_page_bytes(a)
    limit = a.pool_limit_gib * 2**30
    if pages * pb > limit:
        return (f"soak: the page pool would need {pages} pages x {pb / 2**20:.1f} MiB = "
                f"{pages * pb / 2**30:.2f} GiB on the largest rank (rate {a.rate}/s x expected "
                f"latency {a.expect_latency_s} s, {POOL_HEADROOM}x headroom, plus two "
                f"{a.max_tokens}-token requests), above --pool-limit-gib {a.pool_limit_gib}; "
                f"lower --rate, --max-tokens or --expect-latency-s, or raise the limit")
    return None


def run_soak(pdkv, a, log) -> dict:
    seconds = a.minutes * 60
    schedule = draw_schedule(a.seed, a.rate, seconds, a.max_tokens, a.page)
    cfg = dict(rounds.rank_cfg(a, 0, pool_pages(a, schedule)), prefault=True)
    cl = cluster.Cluster(pdkv, cfg, a.prefill_tp, a.decode_tp, log)
    killer = rounds.arm_kill(cl, a)
    try:
        t0 = time.monotonic() + T0_LEAD_S
        deadline = t0 + seconds + a.timeout
        keys = cl.send(None, ("soak", schedule, t0, seconds, deadline))
        n = len(schedule)

        def show(_, p):
            cluster.progress("soak", min(int(p["t"]), int(seconds)), int(seconds),
                             f"{p['succeeded']}/{n} ok, {p['failed']} failed, "
                             f"{p['in_flight']} in flight, {p['pool_used']} pages used")

        # rooms=(): a lost rank does not fail every room here; figures() fails the rooms
        # no decode rank vouches for (a decode's verified Success is proof of delivery).
        done = cl.collect("done", keys, deadline - time.monotonic() + cluster.DONE_MARGIN_S,
                          (), on_progress=show)
        cluster.progress("soak", int(seconds), int(seconds), "drained")
    finally:
        if killer:
            killer.cancel()
        cl.close()
    return figures(done, schedule, a, t0, log)


def rss_growth(done: dict, seconds: float) -> tuple:
    """Per rank: (last sample - first sample after min(60 s, 20 % of the run)) / that one,
    and the same difference in bytes (the fraction is diluted by a GiB-sized pool).
    Earlier samples include start-up (imports, first connections), not a leak."""
    settle = min(60.0, 0.2 * seconds)
    frac, grown = {}, {}
    for (role, rank), v in done.items():
        after = [rss for t, rss in v["rss_samples"] if t >= settle]
        if len(after) >= 2 and after[0]:
            frac[f"{role}{rank}"] = (after[-1] - after[0]) / after[0]
            grown[f"{role}{rank}"] = after[-1] - after[0]
    return frac, grown


SIZE_CLASSES = ((1, 64), (65, 512), (513, 4096))


def by_size(lat_of: dict, tokens_of: dict) -> dict:
    """Latency percentiles per request size: a p99 set by 4096-token requests (hundreds of
    MiB) says nothing about whether small requests wait behind them; this does."""
    out = {}
    for lo, hi in SIZE_CLASSES:
        x = [v for r, v in lat_of.items() if lo <= tokens_of[r] <= hi]
        out[f"{lo}-{hi}"] = {"n": len(x), "p50_us": report.pct(x, 50), "p99_us": report.pct(x, 99)}
    return out


def figures(done: dict, schedule: list, a, t0: float, log) -> dict:
    report.log_failures(done, log)
    seconds = a.minutes * 60
    pre = [v for k, v in done.items() if k[0] == "prefill"]
    dec = [v for k, v in done.items() if k[0] == "decode"]
    preset = PRESETS[a.model]
    decode_page_bytes = sum(page_bytes(preset, a.page, a.decode_tp, r) for r in range(a.decode_tp))
    pages = {e[0]: e[2] for e in schedule}
    ok = [r for r in pages if r not in log.rooms and len(dec) == a.decode_tp
          and all(v["states"].get(r) == polling.SUCCESS for v in dec)]
    lost = [r for r in pages if r not in ok and r not in log.rooms]
    if lost:
        log.problem("driver", "no outcome: a decode rank of the room was lost", time.monotonic(),
                    lost)
    # A lost prefill rank took its send times along: the others' (same schedule) stand in.
    lat_of = {r: (max(v["times"][r] for v in dec) - max(v["send_t"][r] for v in pre
                                                        if r in v["send_t"])) * 1e6
              for r in ok if any(r in v["send_t"] for v in pre)}
    lat = list(lat_of.values())
    end = max((max(v["times"][r] for v in dec) for r in ok), default=t0)
    span = max(end - t0, 1e-9)
    offered = sum(pages.values()) * decode_page_bytes
    delivered = sum(pages[r] for r in ok) * decode_page_bytes
    growth, grown_bytes = rss_growth(done, seconds)
    tokens = [e[1] for e in schedule]
    value, baseline = delivered / span / 1e9, offered / seconds / 1e9
    return {
        "value": value, "baseline": baseline, "ratio": value / baseline if baseline else None,
        "unit": "GB/s", "achieved_gbps": value, "offered_gbps": baseline,
        "achieved_req_per_s": len(ok) / span, "offered_req_per_s": len(schedule) / seconds,
        "requests": len(schedule), "succeeded": len(ok), "seconds_to_drain": span if ok else None,
        "lat_p50_us": report.pct(lat, 50), "lat_p99_us": report.pct(lat, 99),
        "lat_max_us": max(lat) if lat else None,
        "lat_by_tokens": by_size(lat_of, {e[0]: e[1] for e in schedule}),
        "negative_samples": sum(1 for x in lat if x < 0),
        "verified_rooms": sum(v["verified"] for v in dec),
        "rss_growth": max(growth.values(), default=None), "rss_growth_per_rank": growth,
        "rss_growth_bytes_per_rank": grown_bytes,
        "rss_samples": {f"{k[0]}{k[1]}": v["rss_samples"] for k, v in done.items()},
        "pool": {f"{k[0]}{k[1]}": v["pool"] for k, v in done.items()},
        "workload": {"distribution": DISTRIBUTION, "seed": a.seed, "rate": a.rate,
                     "minutes": a.minutes, "max_tokens": a.max_tokens,
                     "tokens_mean": float(np.mean(tokens)) if tokens else None,
                     "tokens_p50": report.pct(tokens, 50), "tokens_max": max(tokens, default=None),
                     "bytes_offered": offered}}

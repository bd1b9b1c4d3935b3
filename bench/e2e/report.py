"""Per-round figures -> rows -> table, JSON (plot.py draws them).

Figures are computed over the rooms that succeeded at every rank; the others go to the
run's FailureLog with their reasons. A figure that cannot be computed (no room
succeeded) is None, never NaN (NaN is not JSON)."""
from __future__ import annotations

import json
import math
import os

import numpy as np

BYTES_DIFFER = "reached Success but its destination bytes differ from the pattern"


def pct(values, q):
    return float(np.percentile(values, q)) if len(values) else None


def med(values):
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def log_failures(done: dict, log) -> None:
    """Every room a rank reported as not succeeded (or with wrong bytes) -> log."""
    for (role, rank), v in done.items():
        where = f"{role}{rank}"
        for room, (t, reason) in v["reasons"].items():
            log.room(room, where, reason, t)
        for room in v.get("bad_rooms", []):
            log.room(room, where, BYTES_DIFFER, v["times"][room])


def summarize(done: dict, rooms: list, log, sequential: bool = False) -> dict:
    """Figures of one round from the ranks' payloads; failures go to `log`. `sequential`
    (rooms sent one at a time, each right after the previous ended): the round's first room
    is no latency sample, since nothing ended right before it: its send follows the
    round's set-up, an idle gap (it measured 310-360 us against ~115 us for the others)."""
    log_failures(done, log)
    pre = [v for k, v in done.items() if k[0] == "prefill"]
    dec = [v for k, v in done.items() if k[0] == "decode"]
    ok = [r for r in rooms if r not in log.rooms] if pre and dec else []
    out = {"rooms": len(rooms), "succeeded": len(ok), "all_succeeded": len(ok) == len(rooms),
           "bytes_ok": len(ok) == len(rooms) and all(v["bytes_ok"] for v in dec),
           "rss": {f"{k[0]}{k[1]}": v["rss"] for k, v in done.items()},
           "seconds": None, "bytes": 0, "gbps": None, "req_per_s": None,
           "lat_us": [], "per_rank_gbps": {}}
    if not ok:
        return out
    last_send = {r: max(v["send_t"][r] for v in pre) for r in ok}
    success = {r: max(v["times"][r] for v in dec) for r in ok}
    first_send = min(min(v["send_t"].values()) for v in pre)
    span = max(max(success.values()) - first_send, 1e-9)
    total = sum(v["room_bytes"] for v in dec) * len(ok)
    out.update(seconds=span, bytes=total, gbps=total / span / 1e9, req_per_s=len(ok) / span,
               lat_us=[(success[r] - last_send[r]) * 1e6 for r in ok
                       if not (sequential and r == rooms[0])],
               per_rank_gbps={f"decode{k[1]}": v["room_bytes"] * len(ok) / span / 1e9
                              for k, v in done.items() if k[0] == "decode"})
    fwd = [v["forward_end"] for v in pre if v.get("forward_end")]
    if fwd:
        out["tail_us"] = (max(success.values()) - max(fwd)) * 1e6
    return out


def merge(rounds: list, conc: int) -> dict:
    """Timed rounds of one concurrency: median throughput; latency percentiles over every
    sample of every round (pooled, so P5's p99 is a p99 and not the worst round)."""
    lat = [x for r in rounds for x in r["lat_us"]]
    out = {"concurrency": conc, "rounds": len(rounds),
           "gbps": med([r["gbps"] for r in rounds]),
           "req_per_s": med([r["req_per_s"] for r in rounds]),
           "lat_p50_us": pct(lat, 50), "lat_p99_us": pct(lat, 99),
           "lat_min_us": min(lat) if lat else None, "lat_max_us": max(lat) if lat else None,
           "lat_samples": len(lat), "negative_samples": sum(1 for x in lat if x < 0),
           "all_succeeded": bool(rounds) and all(r["all_succeeded"] for r in rounds),
           "bytes_ok": bool(rounds) and all(r["bytes_ok"] for r in rounds),
           "per_rank_gbps": {k: med([r["per_rank_gbps"].get(k) for r in rounds])
                             for k in (rounds[-1]["per_rank_gbps"] if rounds else {})}}
    if rounds and all("tail_us" in r for r in rounds):
        out["tail_us"] = med([r["tail_us"] for r in rounds])
    return out


def _f(v, width, prec):
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.{prec}f}"


def table(rows: list, title: str) -> str:
    head = f"{'conc':>6} {'GB/s':>8} {'req/s':>9} {'p50 us':>10} {'p99 us':>10} {'ok':>4}"
    lines = [title, head]
    for r in rows:
        lines.append(f"{r['concurrency']:>6} {_f(r['gbps'], 8, 3)} {_f(r['req_per_s'], 9, 1)} "
                     f"{_f(r['lat_p50_us'], 10, 1)} {_f(r['lat_p99_us'], 10, 1)} "
                     f"{'yes' if r['bytes_ok'] and r['all_succeeded'] else 'NO':>4}")
        lines.append("       per decode rank GB/s: " + ", ".join(
            f"{k} {v:.3f}" for k, v in r["per_rank_gbps"].items() if v is not None))
    return "\n".join(lines)


def _clean(obj):
    """NaN / inf -> None, tuple keys -> strings: the JSON must load anywhere."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        return _clean(obj.item())
    return obj


def write_json(path: str, obj: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(_clean(obj), f, indent=2, allow_nan=False)
    os.replace(path + ".tmp", path)  # never a half-written file under the final name


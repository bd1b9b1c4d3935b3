"""Per-run figures of each case and their aggregate over --repeat runs: the JSON object
under the case's target key (P5 latency, P6 scale, P7 layerwise, P8 soak).

Each run carries the fields every benchmark key has (ratio, value, baseline, unit,
verified_bytes_ok) plus its failures; the aggregate takes the median of the figures over
the runs (the machine is shared and noisy, one slow run should not set the figure), the
worst RSS growth, the lowest P5 sample, sums of failures, and says how many runs failed."""
from __future__ import annotations

import cpu_cost
import failures
import report
import rounds

KEYS = {"latency": "P5", "scale": "P6", "layerwise": "P7", "soak": "P8"}
MEDIAN = ("ratio", "ratio_to_engine_at_topology", "value", "baseline", "p99_us", "p99_ratio", "lat_p50_us", "lat_p99_us",
          "tail_us", "achieved_gbps", "offered_gbps", "achieved_req_per_s",
          "offered_req_per_s", "seconds")
WORST = ("rss_growth", "lat_max_us")
LOWEST = ("min_us",)
SUMS = ("failed_rooms", "negative_samples", "corrupt_rooms")


def outcome(log, bytes_checked: bool) -> dict:
    """Failure fields of one run. verified_bytes_ok: every room succeeded and every
    destination byte was checked and matched (R8: every benchmark checks the bytes)."""
    corrupt = {e[2] for e in log.events if e[3] == report.BYTES_DIFFER}
    clean = not log.events
    return {"all_succeeded": clean, "failed_rooms": log.count, "first_failures": log.first(),
            "verified_bytes_ok": clean and bytes_checked, "corrupt_rooms": len(corrupt)}


def _top(rr):
    return rr["rows"][-1] if rr and rr["rows"] else {}


def _complete(rr) -> bool:
    return bool(rr) and rr["rounds_run"] == rr["rounds_planned"] and all(
        r["bytes_ok"] for r in rr["rows"])


def _ratio(value, baseline):
    return value / baseline if value is not None and baseline else None


def latency_run(rr, zmq, cold=None) -> dict:
    """P5: the headline samples `rr` against the back-to-back round trip `zmq`; `cold`
    ({"rr", "zmq_idle"}, main.py LATENCY_MODES) adds the idle-between-samples figure,
    against both that round trip and one taken after the same kind of idle."""
    top, zb = _top(rr), (zmq or {}).get("p50")
    p50, p99 = top.get("lat_p50_us"), top.get("lat_p99_us")
    fig = {"value": p50, "baseline": zb, "ratio": _ratio(p50, zb), "unit": "us",
           "p99_us": p99, "p99_ratio": _ratio(p99, zb), "min_us": top.get("lat_min_us"),
           "lat_max_us": top.get("lat_max_us"), "samples": top.get("lat_samples", 0),
           "negative_samples": top.get("negative_samples", 0), "zmq_rtt_us": zmq,
           "baseline_what": "ZeroMQ PUSH/PULL RTT p50"}
    if cold:
        c, zi = _top(cold["rr"]), (cold["zmq_idle"] or {}).get("p50")
        cp50, cp99 = c.get("lat_p50_us"), c.get("lat_p99_us")
        fig["cold"] = {"value": cp50, "p99_us": cp99, "min_us": c.get("lat_min_us"),
                       "samples": c.get("lat_samples", 0), "ratio": _ratio(cp50, zb),
                       "p99_ratio": _ratio(cp99, zb), "idle_baseline": zi,
                       "ratio_to_idle_rtt": _ratio(cp50, zi),
                       "p99_ratio_to_idle_rtt": _ratio(cp99, (cold["zmq_idle"] or {}).get("p99")),
                       "zmq_idle_rtt_us": cold["zmq_idle"],
                       "negative_samples": c.get("negative_samples", 0)}
        if cold["rr"] is not rr:  # --latency-mode cold: the headline is these samples
            fig["negative_samples"] += fig["cold"]["negative_samples"]
    return fig


def scale_run(rr, p1, topology) -> dict:
    """`topology`: the engines alone moving this case's whole round at once, in this run
    (baselines.topology_args); the target's ratio stays the one to P1."""
    top = _top(rr)
    return {"value": top.get("gbps"), "baseline": p1, "ratio": _ratio(top.get("gbps"), p1),
            "ratio_to_engine_at_topology": _ratio(top.get("gbps"), topology),
            "unit": "GB/s", "rss_growth": rounds.rss_growth(rr["rss_rounds"]) if rr else None,
            "lat_p50_us": top.get("lat_p50_us"), "lat_p99_us": top.get("lat_p99_us"),
            "req_per_s": top.get("req_per_s"), "per_rank_gbps": top.get("per_rank_gbps"),
            "rss_per_round": rr["rss_rounds"] if rr else []}


def layerwise_run(rr, layer_us) -> dict:
    tail = _top(rr).get("tail_us")
    return {"value": tail, "baseline": layer_us, "ratio": _ratio(tail, layer_us), "unit": "us",
            "tail_us": tail}


def run_figures(case, rr, log, extra) -> dict:
    """One run's dict for the JSON's `runs` list."""
    if case == "soak":
        fig = extra["soak"] or {"value": None, "baseline": None, "ratio": None, "unit": "GB/s"}
        want = fig.get("requests", 0) * extra["decode_tp"]  # every room on every decode rank
        checked = bool(extra["soak"]) and fig["verified_rooms"] == want
    else:
        fig = {"latency": lambda: latency_run(rr, extra.get("zmq"), extra.get("cold")),
               "scale": lambda: dict(scale_run(rr, extra.get("p1"),
                                                extra.get("engine_at_topology")),
                                     P13=cpu_cost.figure(rr["cpu_rounds"] if rr else [],
                                                         extra.get("engine_figure"),
                                                         extra.get("rooms"))),
               "layerwise": lambda: layerwise_run(rr, extra["layer_ms"] * 1000.0)}[case]()
        checked = _complete(rr) and (not extra.get("cold") or _complete(extra["cold"]["rr"]))
        if rr:
            fig.update(rows=rr["rows"], rounds_run=rr["rounds_run"],
                       rounds_planned=rr["rounds_planned"])
    fig.update(outcome(log, checked))
    return fig


def aggregate(runs: list, base: dict) -> dict:
    """The target key's object over every run (see the module comment)."""
    def vals(k):
        return [r[k] for r in runs if r.get(k) is not None]

    out = {"unit": runs[0]["unit"] if runs else None}
    for k in MEDIAN:
        if any(k in r for r in runs):
            out[k] = report.med(vals(k))
    for k in WORST:
        if any(k in r for r in runs):
            out[k] = max(vals(k), default=None)
    for k in LOWEST:
        if any(k in r for r in runs):
            out[k] = min(vals(k), default=None)
    for k in SUMS:
        out[k] = sum(vals(k))
    colds = [r["cold"] for r in runs if r.get("cold")]
    if colds:  # P5's cold figure: the median of each of its numbers over the runs
        out["cold"] = {k: report.med([c[k] for c in colds if c.get(k) is not None])
                       for k, v in colds[0].items() if isinstance(v, (int, float))}
    out.update(verified_bytes_ok=bool(runs) and all(r["verified_bytes_ok"] for r in runs),
               all_succeeded=bool(runs) and all(r["all_succeeded"] for r in runs),
               runs_with_failures=sum(1 for r in runs if not r["all_succeeded"]),
               repeat=len(runs), first_failures=failures.merge_first(runs))
    out.update(base)
    out["runs"] = runs
    return out

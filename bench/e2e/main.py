"""`pdkv bench e2e`: P5 (latency), P6 (scale), P7 (layerwise) over real processes.

Run as `build/bin/pdkv bench e2e --case latency|scale|layerwise [...]`; the CLI sets
PYTHONPATH=build/python and PDKV_BIN_DIR."""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import baselines  # noqa: E402
import cluster  # noqa: E402
import report  # noqa: E402
from presets import PRESETS  # noqa: E402

# Per case: model, tokens, page, prefill TP, decode TP, concurrency, rounds.
CASE_DEFAULTS = {
    # One page of one token: 64 x 2 KiB blocks, so latency is not dominated by bandwidth.
    "latency": ("llama3-8b", 1, 1, 1, 1, "1", 200),
    # 1024 concurrent requests of llama3-8b x 16 tokens = 2 MiB each, 2 GiB per round on each
    # side: 4 k tokens each would be 0.5 TB, far above the machine's 24 GiB.
    "scale": ("llama3-8b", 16, 16, 4, 2, "1024", 10),
    "layerwise": ("llama3-8b", 1024, 16, 1, 1, "1", 5),
}


def parse():
    ap = argparse.ArgumentParser(prog="pdkv bench e2e", description=__doc__)
    ap.add_argument("--case", choices=sorted(CASE_DEFAULTS), default="scale")
    ap.add_argument("--model", choices=sorted(PRESETS))
    ap.add_argument("--tokens", type=int, help="prompt length (tokens) of each request")
    ap.add_argument("--page", type=int, help="page size (tokens)")
    ap.add_argument("--prefill-tp", type=int)
    ap.add_argument("--decode-tp", type=int)
    ap.add_argument("--concurrency", help="requests per round; a list (1,8,64) sweeps")
    ap.add_argument("--rounds", type=int, help="timed rounds per concurrency (+1 warm-up)")
    ap.add_argument("--backend", default="tcp", choices=["tcp", "shm"])
    ap.add_argument("--layer-ms", type=float, default=5.0, help="simulated ms per layer (P7)")
    ap.add_argument("--layerwise-interval", type=int, default=1)
    ap.add_argument("--no-baselines", action="store_true", help="skip iperf3 / P1 (quick runs)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json")
    ap.add_argument("--plot")
    a = ap.parse_args()
    d = CASE_DEFAULTS[a.case]
    for name, v in zip(("model", "tokens", "page", "prefill_tp", "decode_tp", "concurrency",
                        "rounds"), d):
        if getattr(a, name) is None:
            setattr(a, name, v)
    if a.tokens % a.page:
        ap.error("--tokens must be a multiple of --page")
    a.concurrency = [int(c) for c in str(a.concurrency).split(",")]
    return a


def run_sweep(pdkv, a):
    """Every concurrency of the sweep on one cluster; returns (rows, rss per round)."""
    ppr = a.tokens // a.page
    cap = max(a.concurrency) * ppr
    cfg = dict(model=a.model, page=a.page, pages_per_req=ppr, capacity=cap,
               backend=a.backend, timeout=a.timeout, spin=a.case == "latency",
               layer_ms=a.layer_ms,
               layerwise_interval=a.layerwise_interval if a.case == "layerwise" else 0)
    cl = cluster.Cluster(pdkv, cfg, a.prefill_tp, a.decode_tp)
    rows, rss_rounds, room = [], [], 1
    try:
        for conc in a.concurrency:
            rounds = []
            for i in range(a.rounds + 1):  # round 0: warm-up (faults pages in), not reported
                rooms = list(range(room, room + conc))
                room += conc
                s = report.summarize(cl.run_round(rooms, a.timeout), rooms)
                if i:
                    rounds.append(s)
                if conc == max(a.concurrency):
                    rss_rounds.append(s["rss"])
                cluster.progress(f"{a.case} c={conc}", i, a.rounds,
                                 f"{s['gbps']:.3f} GB/s p50 {s['lat_p50_us']:.0f} us")
            rows.append(merge(rounds, conc))
    finally:
        cl.close()
    return rows, rss_rounds


def merge(rounds, conc):
    """Rounds of one concurrency: median throughput, latency percentiles over all rounds."""
    import numpy as np
    med = lambda k: float(np.median([r[k] for r in rounds]))  # noqa: E731
    out = {"concurrency": conc, "rounds": len(rounds), "gbps": med("gbps"),
           "req_per_s": med("req_per_s"), "lat_p50_us": med("lat_p50_us"),
           "lat_p99_us": float(np.max([r["lat_p99_us"] for r in rounds])),
           "all_succeeded": all(r["all_succeeded"] for r in rounds),
           "bytes_ok": all(r["bytes_ok"] for r in rounds),
           "per_rank_gbps": {k: float(np.median([r["per_rank_gbps"][k] for r in rounds]))
                             for k in rounds[0]["per_rank_gbps"]}}
    if "tail_us" in rounds[0]:
        out["tail_us"] = med("tail_us")
    return out


def rss_growth(rss_rounds):
    """Worst rank's (last - first after warm-up) / first."""
    if len(rss_rounds) < 3:
        return 0.0
    first, last = rss_rounds[1], rss_rounds[-1]
    return max((last[k] - first[k]) / first[k] for k in first)


def main():
    a = parse()
    import pdkv
    bin_dir = os.environ.get("PDKV_BIN_DIR", os.path.join(os.getcwd(), "build", "bin"))
    print(f"case {a.case}: model {a.model}, {a.tokens} tokens x page {a.page}, prefill TP "
          f"{a.prefill_tp} -> decode TP {a.decode_tp}, backend {a.backend}, concurrency "
          f"{a.concurrency}, {a.rounds} rounds (+1 warm-up), destination pages shuffled")
    result, base = {}, {}
    if a.case == "latency":
        base["zmq_rtt_us"] = baselines.zmq_rtt_us()
    if not a.no_baselines:
        base["iperf3_gbps"] = baselines.iperf3_gbps()
        if a.case == "scale":
            base["P1"] = baselines.engine_p1(bin_dir)
    rows, rss_rounds = run_sweep(pdkv, a)
    print(report.table(rows, f"pdkv bench e2e --case {a.case}"))
    print("baselines:", base)
    top = rows[-1]
    ok = all(r["bytes_ok"] and r["all_succeeded"] for r in rows)
    if a.case == "latency":
        zb = base["zmq_rtt_us"]["p50"]
        result["P5"] = {"ratio": top["lat_p50_us"] / zb, "value": top["lat_p50_us"],
                        "baseline": zb, "unit": "us", "verified_bytes_ok": ok,
                        "p99_us": top["lat_p99_us"], "baseline_what": "ZeroMQ PUSH/PULL RTT p50"}
    elif a.case == "scale":
        p1 = base.get("P1", {}).get("value")
        growth = rss_growth(rss_rounds)
        result["P6"] = {"ratio": top["gbps"] / p1 if p1 else None, "value": top["gbps"],
                        "baseline": p1, "unit": "GB/s", "verified_bytes_ok": ok,
                        "all_succeeded": all(r["all_succeeded"] for r in rows),
                        "rss_growth": growth, "requests_per_round": top["concurrency"],
                        "request_bytes": PRESETS[a.model].bytes_per_token() * a.tokens}
    else:
        layer_us = a.layer_ms * 1000.0
        result["P7"] = {"ratio": top["tail_us"] / layer_us, "value": top["tail_us"],
                        "baseline": layer_us, "unit": "us", "verified_bytes_ok": ok}
    for k, v in result.items():
        print(k, v)
    extra = {"case": a.case, "args": {k: v for k, v in vars(a).items()}, "rows": rows,
             "baselines": base, "rss_per_round": rss_rounds}
    if a.json:
        report.write_json(a.json, dict(result, e2e=extra))
    if a.plot:
        report.plot(a.plot, rows, f"pdkv e2e {a.case} ({a.model}, {a.tokens} tok)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

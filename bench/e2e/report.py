"""Per-round figures -> table, JSON, plot."""
from __future__ import annotations

import json

import numpy as np


def summarize(done: dict, rooms: list, spin_latency=False) -> dict:
    """Figures of one round from the ranks' payloads."""
    pre = {k: v for k, v in done.items() if k[0] == "prefill"}
    dec = {k: v for k, v in done.items() if k[0] == "decode"}
    last_send = {r: max(v["send_t"][r] for v in pre.values()) for r in rooms}
    success = {r: max(v["times"][r] for v in dec.values()) for r in rooms}
    first_send = min(min(v["send_t"].values()) for v in pre.values())
    end = max(success.values())
    lat = np.array([(success[r] - last_send[r]) * 1e6 for r in rooms])
    total = sum(v["bytes"] for v in dec.values())
    ok_all = all(st == 4 for v in done.values() for st in v["states"].values())
    fwd = [v["forward_end"] for v in pre.values() if v.get("forward_end")]
    out = {"seconds": end - first_send, "bytes": total,
           "gbps": total / max(end - first_send, 1e-9) / 1e9,
           "req_per_s": len(rooms) / max(end - first_send, 1e-9),
           "lat_p50_us": float(np.percentile(lat, 50)), "lat_p99_us": float(np.percentile(lat, 99)),
           "all_succeeded": ok_all, "bytes_ok": all(v["bytes_ok"] for v in dec.values()),
           "rss": {f"{k[0]}{k[1]}": v["rss"] for k, v in done.items()},
           "per_rank_gbps": {f"decode{k[1]}": v["bytes"] / max(end - first_send, 1e-9) / 1e9
                             for k, v in dec.items()}}
    if fwd:
        out["tail_us"] = (end - max(fwd)) * 1e6
    return out


def table(rows: list, title: str) -> str:
    head = f"{'conc':>6} {'GB/s':>8} {'req/s':>9} {'p50 us':>10} {'p99 us':>10} {'ok':>4}"
    lines = [title, head]
    for r in rows:
        lines.append(f"{r['concurrency']:>6} {r['gbps']:>8.3f} {r['req_per_s']:>9.1f} "
                     f"{r['lat_p50_us']:>10.1f} {r['lat_p99_us']:>10.1f} "
                     f"{'yes' if r['bytes_ok'] and r['all_succeeded'] else 'NO':>4}")
        lines.append("       per decode rank GB/s: " + ", ".join(
            f"{k} {v:.3f}" for k, v in r["per_rank_gbps"].items()))
    return "\n".join(lines)


def write_json(path: str, obj: dict) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


def plot(path: str, rows: list, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    c = [r["concurrency"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(c, [r["lat_p50_us"] for r in rows], "o-", label="p50")
    a.plot(c, [r["lat_p99_us"] for r in rows], "s--", label="p99")
    a.set_xscale("log", base=2)
    a.set_xlabel("concurrency")
    a.set_ylabel("latency (us)")
    a.legend()
    b.plot(c, [r["gbps"] for r in rows], "o-")
    b.set_xscale("log", base=2)
    b.set_xlabel("concurrency")
    b.set_ylabel("throughput (GB/s)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)

#!/usr/bin/env python3
"""`pdkv chaos`: fault injection over network namespaces and an LD_PRELOAD syscall shim.

    build/bin/pdkv chaos [--short | --hostile] [--json FILE] [--only SUBSTR] [--no-netns]

Prints a table (fault, config, rooms affected, detection time vs bound, bytes verified,
leaks, crashes/hangs) and writes {"R1": {...}, ..., "R4": {...}, "cases": [...]} to FILE.
--hostile runs only the hostile-peer cases (every attack of pdkv_hostile_peer on
real victims, without and with a cluster secret; robustness/hostile/hostile.py); the full plan
ends with them, --short leaves them out (CI runs them as python_test_hostile_peers).
Exit status 1 when any case fails. See RELIABILITY.md."""
import argparse
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
# The hostile-peer cases live beside this suite (robustness/hostile, in the source tree
# and in the package's _tools alike) and build their victims from its modules.
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "hostile")]

import cases  # noqa: E402
import cluster  # noqa: E402
import hostile  # noqa: E402
from topo import Topology, netns_available  # noqa: E402

from pdkv._progress import Progress  # noqa: E402
from pdkv.testing.processes import end_children_when_stopped  # noqa: E402


def find_shim():
    """The CMake-built shim beside this script (pdkv/_tools/robustness/chaos in the package),
    else compile it into /tmp."""
    p = os.path.join(HERE, "libpdkv_fault_shim.so")
    if os.path.exists(p):
        return p
    out = f"/tmp/pdkv_fault_shim_{os.getpid()}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", out, os.path.join(HERE, "fault_shim.c"),
                    "-ldl"], check=True)
    return out


# A case's network-namespace need: True = skipped without them, False = loopback only,
# PREFERS_NETNS = namespaces when available, else its loopback fallback.
PREFERS_NETNS = "prefer"


def hostile_plan():
    """Every attack in both modes, on loopback (the attacker needs no namespace)."""
    return [(False, f"hostile {name} {mode}", lambda t, n=name, m=mode: hostile.case(t, n, m))
            for mode in ("open", "secret") for name in hostile.cases(mode)]


def unswept_cases():
    """The cases that run once, in one configuration, in the short plan and the full one."""
    return [(True, "garbage", cases.case_garbage),
            (False, "R4", cases.case_timeouts),
            (False, "hol", cases.case_resolve_hol),
            (False, "resolve-shutdown", cases.case_resolve_shutdown),
            (PREFERS_NETNS, "registry", cases.case_registry_etcd)]


def plan(short, netns, shim, only_hostile=False):
    """(needs_netns, label, fn) of every case to run."""
    if only_hostile:
        return hostile_plan()
    c = []
    sweep = [(1, 1, 1, 1), (1, 2, 1, 1), (2, 1, 1, 1), (2, 2, 1, 1), (1, 1, 1, 2)]
    shims = [("fail", 5, "send,sendmsg,write"), ("fail", 5, "recv,recvmsg,read"),
             ("short", 3, "send,sendmsg,write"), ("short", 3, "recv,recvmsg,read"),
             ("stall", 4, "send,sendmsg,recv,recvmsg"), ("fail", 2, "connect")]
    # Transient: a few faults per process, then none; later rounds must all succeed.
    bursts = [("fail", 5, "send,sendmsg,write"), ("fail", 5, "recv,recvmsg,read"),
              ("fail", 1, "connect")]
    if short:
        c.append((True, "R1", lambda t: cases.case_kill_decode(t, 1, 2)))
        c.append((True, "R2", lambda t: cases.case_kill_prefill(t, 2, 1)))
        c.append((True, "R3", lambda t: cases.case_link_cut(t, "down")))
        c.append((True, "netem", lambda t: cases.case_netem_slow(t, 4)))
        c += unswept_cases()
        for mode, n, calls in shims[:3]:
            c.append((False, "shim", lambda t, m=mode, n=n, k=calls:
                      cases.case_shim(t, shim, m, n, k, rounds=3)))
        c.append((False, "shim", lambda t: cases.case_shim(t, shim, "fail", 5, "send,sendmsg,write",
                                                           1, 1, 1, 2, rounds=2)))
        for mode, n, calls in bursts:
            c.append((False, "shim-burst", lambda t, m=mode, n=n, k=calls: cases.case_shim(
                t, shim, m, n, k, 1, 2, 1, 1, rounds=3, max_faults=3)))
        return c
    for (p, d, ptp, dtp) in sweep:
        if d >= 2 or True:
            c.append((True, "R1", lambda t, a=(p, max(d, 1), ptp, dtp): cases.case_kill_decode(t, *a)))
    for (p, d, ptp, dtp) in [(1, 1, 1, 1), (2, 1, 1, 1), (2, 2, 1, 1)]:
        c.append((True, "R2", lambda t, a=(p, d, ptp, dtp): cases.case_kill_prefill(t, *a)))
    c.append((True, "R3", lambda t: cases.case_link_cut(t, "down")))
    c.append((True, "R3", lambda t: cases.case_link_cut(t, "loss")))
    c.append((True, "netem", lambda t: cases.case_netem_slow(t, 8)))
    c.append((True, "bootstrap", cases.case_bootstrap_restart))
    c += unswept_cases()
    for (p, d, ptp, dtp) in sweep:
        for mode, n, calls in shims:
            c.append((False, "shim", lambda t, m=mode, n=n, k=calls, a=(p, d, ptp, dtp):
                      cases.case_shim(t, shim, m, n, k, *a)))
        for mode, n, calls in bursts:
            c.append((False, "shim-burst", lambda t, m=mode, n=n, k=calls, a=(p, d, ptp, dtp):
                      cases.case_shim(t, shim, m, n, k, *a, max_faults=3)))
    return c + hostile_plan()


def fmt(v, nd=2):
    return "-" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def main():
    ap = argparse.ArgumentParser(prog="pdkv chaos", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here as JSON (one object per "
                    "requirement, R1-R4, and every case)")
    ap.add_argument("--short", action="store_true", help="CI subset (~3 min)")
    ap.add_argument("--hostile", action="store_true",
                    help="only the hostile-peer cases, without and with a secret")
    ap.add_argument("--only", help="run only cases whose label/fault contains this")
    ap.add_argument("--no-netns", action="store_true",
                    help="no network namespaces: cases that need them are skipped, the etcd "
                         "registry case freezes a member (SIGSTOP) instead of cutting its link")
    ap.add_argument("--repeat", type=int, default=1, help="run the whole plan this many times")
    a = ap.parse_args()
    # Stopped (`timeout`, a closed terminal), the run must not leave ranks or a
    # bootstrap server holding its port behind: they run in sessions of their own.
    end_children_when_stopped()
    ok_ns, why = (False, "--no-netns") if a.no_netns else netns_available()
    if not ok_ns:
        print(f"pdkv chaos: network namespaces not available ({why}): netns cases SKIPPED, "
              "shim/loopback cases still run", flush=True)
    shim = find_shim()
    rows = []
    t_start = time.monotonic()
    todo = [(needs_ns, label, fn) for _ in range(a.repeat)
            for needs_ns, label, fn in plan(a.short, ok_ns, shim, a.hostile)
            if not (needs_ns is True and not ok_ns) and not (a.only and a.only not in label)]
    # A bar on a terminal, plain lines in a captured log; the case lines go through it so
    # they never tear the bar.
    bar = Progress("chaos", len(todo), unit="case")
    for i, (needs_ns, label, fn) in enumerate(todo):
        topo = Topology(3, netns=ok_ns and bool(needs_ns))
        cluster.ALL.clear()
        t0 = time.monotonic()
        try:
            r = fn(topo)
        except Exception:
            r = cases.row(label, "-", ok=False, note="driver error: "
                          + traceback.format_exc().strip().splitlines()[-1][:200])
            traceback.print_exc()
        finally:
            topo.teardown()
        r["crashes"] = sum(c.crashes for c in cluster.ALL)
        r["ok"] = bool(r["ok"] and r["crashes"] == 0)
        r.setdefault("skipped", False)
        r["label"] = label
        r["wall_s"] = time.monotonic() - t0
        rows.append(r)
        verdict = "SKIP" if r["skipped"] else "PASS" if r["ok"] else "FAIL"
        bar.write(f"[{verdict}] {r['fault']} / {r['config']}: detect "
                  f"{fmt(r['detect_s'])}s (bound {fmt(r['bound_s'])}) bytes {r['bytes_verified']}"
                  f" leaks {r['leaks']} crashes {r['crashes']} ({r['wall_s']:.1f}s) {r['note']}")
        failed = sum(not x["ok"] for x in rows)
        bar.update(i + 1, f"{label}, {failed} failed" if failed else label)
    bar.close()
    hdr = ["fault", "config", "rooms", "detect_s", "bound_s", "bytes_ok", "leaks",
           "crash/hang", "ok"]
    lines = [[r["fault"], r["config"], str(r["rooms_affected"]), fmt(r["detect_s"]),
              fmt(r["bound_s"]), f"{r['bytes_verified']}" + (f" ({r['wrong_bytes']} WRONG)"
                                                             if r["wrong_bytes"] else ""),
              str(r["leaks"]), str(r["crashes"]), "SKIP" if r["skipped"] else "PASS" if r["ok"] else "FAIL"] for r in rows]
    w = [max(len(x) for x in col) for col in zip(hdr, *lines)] if lines else [len(h) for h in hdr]
    print()
    for l in [hdr] + lines:
        print("  ".join(x.ljust(n) for x, n in zip(l, w)))
    print(f"\n{sum(r['ok'] for r in rows)}/{len(rows)} cases passed in "
          f"{time.monotonic() - t_start:.0f}s" + ("" if ok_ns else " (netns cases skipped)"))
    out = {}
    for rid in ("R1", "R2", "R3", "R4"):
        rs = [r for r in rows if r["label"] == rid and not r["skipped"]]
        if not rs:
            out[rid] = {"ok": False, "skipped": True, "detect_s": None, "bound_s": None,
                        "note": "not run" + ("" if ok_ns else f" (netns unavailable: {why})")}
            continue
        worst = max(rs, key=lambda r: (r["detect_s"] if r["detect_s"] is not None else 1e9))
        out[rid] = {"ok": all(r["ok"] for r in rs), "detect_s": worst["detect_s"],
                    "bound_s": worst["bound_s"], "cases": len(rs),
                    "rooms_affected": sum(r["rooms_affected"] for r in rs),
                    "bytes_verified": sum(r["bytes_verified"] for r in rs),
                    "leaks": sum(r["leaks"] for r in rs),
                    "crashes": sum(r["crashes"] for r in rs),
                    "verified_bytes_ok": all(r["wrong_bytes"] == 0 for r in rs)}
        if rid == "R4":
            out[rid]["detail"] = worst.get("detail")
            out[rid]["worst_rel_err"] = worst.get("worst_rel_err")
    out["cases"] = rows
    out["netns"] = ok_ns
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    ran_fail = [r for r in rows if not r["ok"]]
    return 1 if ran_fail or not rows else 0


if __name__ == "__main__":
    sys.exit(main())

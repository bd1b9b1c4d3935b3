"""`pdkv bench e2e --case scale --auth-ab`: what the cluster secret costs P6, measured so
that this shared machine's noise cancels instead of deciding the figure (the secret may
cost P1 and P6 at most 3 %, same run).

Two clusters live side by side in one run, each with its own bootstrap server and rank
processes: one without a secret, one with PDKV_SECRET_FILE (ranks and server). Their
timed rounds alternate in ABBA order (off on, on off, ...), so a change of load during
the run weighs on both alike; the figure is the median of the per-pair on/off ratios of
round throughput (key "P6_auth"). Separate runs of each arm spread by 10-20 % here, far
more than the cost being measured. Every room's bytes are verified, as in the scale case."""
from __future__ import annotations

import os
import statistics

from pdkv.testing.processes import scoped_env

import cluster
import failures
import report
import rounds

TARGET = 0.97


class Arm:
    """One cluster of the comparison and its figures."""

    def __init__(self, pdkv, a, name: str, secret: str, cfg: dict):
        self.name, self.log, self.gbps, self.bytes_ok = name, failures.FailureLog(), [], True
        cfg = dict(cfg, env=dict(cfg["env"], PDKV_SECRET_FILE=secret))
        # The bootstrap server is built in this process and reads PDKV_SECRET_FILE then.
        with scoped_env({"PDKV_SECRET_FILE": secret}):
            self.cl = cluster.Cluster(pdkv, cfg, a.prefill_tp, a.decode_tp, self.log)

    def round(self, rooms, timeout, timed: bool) -> None:
        s = report.summarize(self.cl.run_round(rooms, timeout), rooms, self.log)
        self.bytes_ok = self.bytes_ok and s["bytes_ok"]
        if timed:
            self.gbps.append(s["gbps"])


def run(pdkv, a) -> dict:
    """The figures of one interleaved run (the P6_auth JSON object)."""
    secret = os.environ.get("PDKV_SECRET_FILE", "")
    if not secret and not a.auth_ab_control:
        raise SystemExit("--auth-ab needs PDKV_SECRET_FILE: the secret of the authenticated arm")
    if a.auth_ab_control:
        secret = ""  # A/A: both arms without a secret; any ratio off 1 is the method's bias
    conc = max(a.concurrency)
    ppr = a.tokens // a.page
    cfg = rounds.rank_cfg(a, ppr, conc * ppr)
    arms = []
    try:
        # The cluster started second ran 2-3 % faster in an A/A run (no secret on either):
        # --auth-ab-first lets runs alternate which arm that favours.
        starts = [("off", ""), ("on", secret)]
        if a.auth_ab_first == "on":
            starts.reverse()
        for name, arm_secret in starts:
            arms.append(Arm(pdkv, a, name, arm_secret, cfg))
        by_name = {arm.name: arm for arm in arms}
        off, on = by_name["off"], by_name["on"]
        room = 1
        ratios = []
        for i in range(a.rounds + 1):  # round 0 of each arm: warm-up, not timed
            order = (off, on) if i % 2 == 0 else (on, off)
            for arm in order:
                if not arm.cl.healthy:
                    raise RuntimeError(f"the {arm.name} arm's cluster lost a rank")
                arm.round(list(range(room, room + conc)), a.timeout, timed=i > 0)
                room += conc
            if i > 0 and on.gbps[-1] and off.gbps[-1]:
                ratios.append(on.gbps[-1] / off.gbps[-1])
                cluster.progress("scale auth on/off", i, a.rounds,
                                 f"off {off.gbps[-1]:.3f} on {on.gbps[-1]:.3f} GB/s, "
                                 f"{ratios[-1]:.3f}")
        failed = off.log.count + on.log.count
        med = lambda v: statistics.median(v) if v else None  # noqa: E731
        return {"ratio": med(ratios), "value": med([g for g in on.gbps if g]),
                "baseline": med([g for g in off.gbps if g]), "unit": "GB/s",
                "verified_bytes_ok": failed == 0 and off.bytes_ok and on.bytes_ok,
                "all_succeeded": failed == 0, "failed_rooms": failed,
                "first_failures": off.log.first() + on.log.first(),
                "target_ratio": TARGET, "pair_ratios": ratios,
                "on_rounds": on.gbps, "off_rounds": off.gbps,
                "baseline_kind": "the same scale case on a second cluster without a cluster "
                                 "secret, rounds interleaved ABBA in the same run; ratio = "
                                 "median of the per-pair on/off ratios",
                "requests_per_round": conc, "started_first": starts[0][0],
                "control": bool(a.auth_ab_control)}
    finally:
        for arm in arms:
            arm.cl.close()

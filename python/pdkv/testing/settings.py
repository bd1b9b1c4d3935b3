"""PDKV_* settings of test, benchmark and demo processes, in one place.

Two profiles, for two different questions:

FAST_TIMEOUTS: "does it work, and does a failure surface quickly?" (python/tests, the
  demo). A dead peer is found in 0.2 s x 3 + 1 s = 1.6 s (liveness_bound_s), and a room
  that can never finish fails in tens of seconds instead of the shipping 120 / 300 s, so
  a broken run fails inside the test's own timeout with pdkv's reason.
DEFAULT_LIVENESS: "does liveness hold at the values we ship?" (robustness/chaos's R1-R3
  bounds, the concurrency tests beside CPU hogs, bench e2e's scale and soak cases, where
  a saturated host must not be declared dead). The values are set to "", which pdkv reads
  as its documented default (docs/CONFIG.md), so nothing inherited from the caller's
  environment changes the liveness under test.

Choices where the copies these replace disagreed:
- PDKV_HEARTBEAT_MAX_FAILURES: 3 (the demo had 5, the tests 3). 3 is pdkv's default and
  what the tests' 1.6 s detection bound is computed from; the demo moves one request on
  an idle loopback, and a stall of the local process never counts against a peer
  (docs/CONFIG.md), so it gained nothing from 5 but a slower failure.
- PDKV_WAITING_TIMEOUT_S: 30 (test_metrics had 20, the rest 30). The longer one: no
  healthy room in these tests takes more than a few seconds, and none waits for this
  timeout to fire.
- PDKV_LOG_LEVEL: warn (robustness/chaos had error). A chaos rank's stderr is kept only to
  explain a failed case, where the warnings are the explanation.
- Liveness of robustness/chaos: the defaults, through DEFAULT_LIVENESS (it spelled them out as
  0.5 s x 3, so its R2 bound was a copy that a change of default would have left stale;
  it now follows liveness_bound_s(DEFAULT_LIVENESS)). bench e2e took the liveness of
  whatever environment it was started from; now the defaults too (--rank-env still wins).
Room timeouts beside DEFAULT_LIVENESS (room_timeouts()) stay per harness: each must
outlast that harness's longest healthy room and end a lost one inside its own wait
(chaos waits 20-40 s per case, the concurrency tests run under CTest's 120 s, a 1024-room
scale round beside CPU hogs needs a minute), so one value would be wrong for two of them.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

FAST_TIMEOUTS = {
    "PDKV_HEARTBEAT_INTERVAL_S": "0.2",
    "PDKV_HEARTBEAT_MAX_FAILURES": "3",
    "PDKV_BOOTSTRAP_TIMEOUT_S": "20",
    "PDKV_WAITING_TIMEOUT_S": "30",
    "PDKV_LOG_LEVEL": "warn",
}

QUIET = {"PDKV_LOG_LEVEL": FAST_TIMEOUTS["PDKV_LOG_LEVEL"]}

DEFAULT_LIVENESS = {"PDKV_HEARTBEAT_INTERVAL_S": "", "PDKV_HEARTBEAT_MAX_FAILURES": ""}

# pdkv.Config field of each variable FAST_TIMEOUTS sets (for code that passes a Config).
_CONFIG_FIELDS = {
    "PDKV_HEARTBEAT_INTERVAL_S": ("heartbeat_interval_s", float),
    "PDKV_HEARTBEAT_MAX_FAILURES": ("heartbeat_max_failures", int),
    "PDKV_BOOTSTRAP_TIMEOUT_S": ("bootstrap_timeout_s", float),
    "PDKV_WAITING_TIMEOUT_S": ("waiting_timeout_s", float),
}


def room_timeouts(bootstrap_s: float, waiting_s: float) -> dict:
    """PDKV_BOOTSTRAP_TIMEOUT_S / PDKV_WAITING_TIMEOUT_S of a harness (see the module
    comment for why these are per harness)."""
    return {"PDKV_BOOTSTRAP_TIMEOUT_S": f"{bootstrap_s:g}",
            "PDKV_WAITING_TIMEOUT_S": f"{waiting_s:g}"}


def apply_settings(*envs: Optional[Mapping[str, str]], override: bool = True) -> None:
    """os.environ.update with each of `envs` in turn (later ones win). override=False
    keeps variables the caller already set (the demo: a user's PDKV_* choice beats ours).
    Call it before the process builds its first KVManager: each manager reads the
    environment when it is built."""
    merged: dict = {}
    for env in envs:
        merged.update(env or {})
    for k, v in merged.items():
        if override or k not in os.environ:
            os.environ[k] = v


def fast_config(**fields):
    """pdkv.Config with FAST_TIMEOUTS' values (for code that passes settings in code, not
    in the environment); `fields` add to or replace them."""
    import pdkv
    base = {field: conv(FAST_TIMEOUTS[name]) for name, (field, conv) in _CONFIG_FIELDS.items()}
    base.update(fields)
    return pdkv.Config(**base)


def liveness_bound_s(env: Mapping[str, str] = FAST_TIMEOUTS) -> float:
    """R2 (BENCHMARKS.md): a dead peer's rooms fail within heartbeat interval x max failures
    + 1 s. Unset or "" values are pdkv's defaults (pdkv.Config.defaults())."""
    import pdkv
    defaults = pdkv.Config.defaults()

    def value(name: str) -> float:
        field, conv = _CONFIG_FIELDS[name]
        raw = env.get(name, "")
        return conv(raw) if raw != "" else conv(defaults[field])

    return (value("PDKV_HEARTBEAT_INTERVAL_S") * value("PDKV_HEARTBEAT_MAX_FAILURES")) + 1.0

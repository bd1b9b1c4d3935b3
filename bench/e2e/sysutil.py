"""Small Linux helpers shared by the driver and the rank processes: RSS, timer slack,
and the parent-death signal (pdkv.testing.processes). Each degrades to a no-op where the
call is unavailable."""
from __future__ import annotations

import ctypes

from pdkv.testing.processes import die_with_parent, prctl

__all__ = ["rss_bytes", "settled_rss_bytes", "die_with_parent", "set_timer_slack_ns"]

_PR_SET_TIMERSLACK = 29


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def settled_rss_bytes() -> int:
    """RSS after garbage collection and malloc_trim(0): memory that is free but still
    cached by the allocators (this round's numpy temporaries of the byte check, a freed
    plan vector) is handed back first, so what is compared across rounds is memory still
    in use, where a leak shows, not where the allocator's cache happened to stand."""
    import gc
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return rss_bytes()


def set_timer_slack_ns(ns: int) -> bool:
    """Linux rounds a sleep up by the thread's timer slack (50 us by default), so
    time.sleep(20e-6) takes ~90 us; a 1 us slack makes short poll sleeps real (~40 us)."""
    return prctl(_PR_SET_TIMERSLACK, ns)

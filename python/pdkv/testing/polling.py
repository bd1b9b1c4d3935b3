"""Waiting in tests: poll a condition until it holds or a deadline passes.

pdkv's API is non-blocking (`poll()` returns at once), so every harness loops; one loop
here keeps the deadline arithmetic (time.monotonic, never wall time) and the failure
message in one place. Two flavours, because callers differ in what a timeout means:
- poll_until: the caller cannot go on without the condition; a timeout raises
  PollTimeout naming what was awaited, how long, and the last value seen.
- wait_until / wait_terminal / wait_flag: the caller reports what it saw either way
  (a rank sends its rooms' states to the test, which asserts on them), so a timeout
  returns the last value instead of raising inside a child process."""
from __future__ import annotations

import time
from typing import Any, Callable

# KVPoll values (pdkv.KVPoll, sglang's numbering): Failed 0 ... Success 4.
FAILED, SUCCESS = 0, 4


class PollTimeout(TimeoutError):
    """poll_until's condition did not hold in time."""


def wait_until(predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.005) -> Any:
    """Calls predicate() until it returns a truthy value or timeout_s passes; returns the
    last value (falsy on timeout). The predicate runs at least once, and once more at the
    deadline, so a condition that became true during the last sleep is not missed."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            return predicate()
        time.sleep(min(interval_s, left))


def poll_until(predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.005,
               what: str = "the condition") -> Any:
    """wait_until, but a timeout raises PollTimeout("timed out after 2 s waiting for
    <what> (last value: ...)"); returns the truthy value otherwise."""
    last = []

    def probe():
        last[:] = [predicate()]
        return last[0]

    value = wait_until(probe, timeout_s, interval_s)
    if not value:
        raise PollTimeout(f"timed out after {timeout_s:g} s waiting for {what} "
                          f"(last value: {last[0]!r})")
    return value


def is_terminal(state) -> bool:
    """Whether a KVPoll state is final (Success or Failed)."""
    return int(state) in (FAILED, SUCCESS)


def wait_terminal(obj, timeout_s: float, interval_s: float = 0.002):
    """Polls a KVSender / KVReceiver until Success or Failed; returns that state, or the
    state it is in at the timeout (the caller's assertion on it then says which)."""
    seen = []

    def probe():
        seen[:] = [obj.poll()]
        return is_terminal(seen[0])

    wait_until(probe, timeout_s, interval_s)
    return seen[0]


def wait_flag(flag, timeout_s: float, interval_s: float = 0.005) -> bool:
    """Waits for a shared multiprocessing Value to become non-zero. Harnesses use such
    flags, not mp.Event: an Event's set() waits for every waiter to wake, so it would
    hang on a waiter the test killed with SIGKILL."""
    return bool(wait_until(lambda: flag.value, timeout_s, interval_s))

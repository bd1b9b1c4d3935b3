"""Failure bookkeeping of one run: which rooms failed, where, why, and when.

Sources: a rank's failed KVSender / KVReceiver (`failure_exception()`), a room a rank still
held when the bench gave up on it, and problems of the harness itself (a rank process died,
a stage timed out, the driver raised). The JSON gets the count of distinct failed rooms
and the first few distinct reasons, so a run that failed still says why."""
from __future__ import annotations

import re

MAX_REASONS = 5
MAX_ROOMS_LISTED = 10


def room_reason(obj, pdkv, state_name: str, waited_s: float) -> str:
    """Why a room that did not reach Success ended: the manager's own reason when it
    failed, otherwise the state it was still in when the bench stopped waiting."""
    try:
        obj.failure_exception()
    except pdkv.KVTransferError as e:
        extra = [f"{k}={getattr(e, k)}" for k in ("cause", "stage") if getattr(e, k, None)]
        return e.reason + (f" [{', '.join(extra)}]" if extra else "")
    except Exception as e:  # the binding's contract says KVTransferError; be robust anyway
        return f"failure_exception() raised {type(e).__name__}: {e}"
    return f"still {state_name} after {waited_s:.0f} s (the bench stopped waiting)"


class FailureLog:
    """Failed rooms of one run (over every round, the warm-up included)."""

    def __init__(self):
        self.rooms: set = set()
        self.events: list = []  # (t, where, room or None, reason, rooms it affects)

    def room(self, room, where: str, reason: str, t: float) -> None:
        self.rooms.add(room)
        self.events.append((t, where, room, reason, [room]))

    def problem(self, where: str, reason: str, t: float, rooms=()) -> None:
        """A harness-level failure (rank died, timeout, exception); `rooms` it leaves
        without an outcome count as failed."""
        rooms = sorted(set(rooms) - self.rooms)
        self.rooms.update(rooms)
        self.events.append((t, where, None, reason, rooms))

    @property
    def count(self) -> int:
        return len(self.rooms)

    def first(self, n: int = MAX_REASONS) -> list:
        return first_reasons(self.events, n)


def _normalise(reason: str) -> str:
    """Grouping key: reasons name their room, peer ports and waited ms ("refusing to send
    for another 794 ms"); rooms failing the same way share one entry (its text is the
    first one seen, `where` lists the ranks that reported it)."""
    return re.sub(r"\d+(\.\d+)?", "#", reason)


def first_reasons(events, n: int = MAX_REASONS) -> list:
    """Up to n distinct reasons, earliest first, each with the rooms that failed so and
    where (which ranks) it was seen."""
    out, index, seen = [], {}, []
    for t, where, room, reason, affected in sorted(events, key=lambda e: e[0]):
        key = _normalise(reason)
        if key not in index:
            if len(out) >= n:
                continue
            index[key] = len(out)
            out.append({"reason": reason, "where": [], "rooms": [], "count": 0})
            seen.append(set())
        i = index[key]
        entry = out[i]
        if where not in entry["where"]:
            entry["where"].append(where)
        for r in affected:  # count: distinct rooms (several ranks report the same room)
            if r not in seen[i]:
                seen[i].add(r)
                if len(entry["rooms"]) < MAX_ROOMS_LISTED:
                    entry["rooms"].append(r)
        entry["count"] = len(seen[i])
    return out


def merge_first(runs: list, n: int = MAX_REASONS) -> list:
    """First reasons over several runs' `first_failures` lists (run order)."""
    out = []
    for i, r in enumerate(runs):
        for f in r.get("first_failures", []):
            if len(out) >= n:
                return out
            out.append(dict(f, run=i + 1))
    return out

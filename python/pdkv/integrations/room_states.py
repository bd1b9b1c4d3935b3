"""RoomStates: a serving engine's per-step polls answered from the rooms that changed.

sglang's schedulers poll every queued request's sender or receiver on every step, and
vLLM's connector every request it holds; at a thousand rooms in flight those native
``poll()`` calls were a large part of what a room costs a rank. KVManager.changed_rooms()
names the rooms whose state moved since it was last asked, so a room's state is kept here
while it is not terminal and polled again only once the manager says it changed. The
list is taken at most once per ``refresh_s`` (every poll of one scheduler step shares
one take); a room that changes during a step is seen at the next, as it would be if
polled then. A terminal state is never kept (the engine drops the room on seeing it).

Thread safety: meant for the one thread that runs the engine's scheduler (several
threads stay correct, but one may see a change a step later)."""
from __future__ import annotations

import time

import pdkv

_TERMINAL = (pdkv.KVPoll.Success, pdkv.KVPoll.Failed)
# More live rooms than any rank holds: past it the states kept are dropped and polled again.
_MAX_KEPT = 65536


class RoomStates:
    def __init__(self, mgr, refresh_s: float = 1e-4):
        self._mgr, self._refresh_s = mgr, refresh_s
        self._kept: dict[int, pdkv.KVPoll] = {}
        self._taken_at = float("-inf")

    def poll(self, room) -> pdkv.KVPoll:
        """``room.poll()`` (a KVSender or KVReceiver of this manager), natively only when
        the room may have changed since its state was kept."""
        now = time.monotonic()
        if now - self._taken_at >= self._refresh_s:
            self._taken_at = now
            self._take()
        key = room.bootstrap_room
        state = self._kept.get(key)
        if state is None:
            state = room.poll()
            if state not in _TERMINAL:
                if len(self._kept) >= _MAX_KEPT:
                    self._kept.clear()
                self._kept[key] = state
        return state

    def forget(self, room) -> None:
        """The engine dropped `room` (aborted, cleared) before it ended."""
        self._kept.pop(room.bootstrap_room, None)

    def _take(self) -> None:
        take = getattr(self._mgr, "changed_rooms", None)  # a stand-in manager may lack it
        changed = take() if take is not None else None
        if changed is None:  # the first call, or too many changed: poll them all
            self._kept.clear()
            return
        for key in changed:
            self._kept.pop(key, None)

"""``pdkv.KVPoll``: the states a room's ``poll()`` returns, with sglang's numbering (an
engine compares them with its own KVPoll values). Pure Python, in its own module so that
kv.pyi re-exports this one definition instead of repeating it."""
from __future__ import annotations

import enum

__all__ = ["KVPoll"]


class KVPoll(enum.IntEnum):
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4

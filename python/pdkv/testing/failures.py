"""Why a room failed, as its KVSender / KVReceiver tells it: failure_exception() raises
the room's KVTransferError, so every rank that reports its rooms would otherwise wrap it
in the same try / except."""
from __future__ import annotations

from typing import Optional


def transfer_error(obj) -> Optional[Exception]:
    """The KVTransferError (reason, cause, stage) that obj.failure_exception() raises, or
    None where the room has not failed."""
    # Imported when called: rank processes set their PDKV_* settings before pdkv loads.
    from pdkv import KVTransferError
    try:
        obj.failure_exception()
    except KVTransferError as e:
        return e
    return None


def failed_rooms(objs: dict) -> tuple:
    """({room: reason}, {room: (cause, stage)}) of the failed rooms of `objs`, a dict of
    room -> KVSender / KVReceiver."""
    reasons, causes = {}, {}
    for room, obj in objs.items():
        e = transfer_error(obj)
        if e is not None:
            reasons[room] = str(e)
            causes[room] = (e.cause, e.stage)
    return reasons, causes

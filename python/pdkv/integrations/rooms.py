"""Request ids (strings) -> pdkv rooms (integers), without collisions among live rooms.

A room is the first 63 bits of BLAKE2b over (instance id, request id): the same on every
rank of an instance, so all TP ranks agree without talking, and spread over 2^63 values,
so two instances' rooms meet with negligible probability. vLLM's instance id (its
``engine_id``) is a random UUID unless an operator sets one, so a room is not computable
from a request id alone (docs/SECURITY.md: without a cluster secret a stranger who knows a
room id can register as a decode and be pushed that room's KV). Within one process a second
live request hashing to a room in use gets the next free value instead (the room travels
to the decode in the transfer parameters, so both sides still agree); ``release`` frees it.
"""
from __future__ import annotations

import hashlib
import threading

_ROOM_MASK = (1 << 63) - 1


def room_hash(instance_id: str, request_id: str) -> int:
    """Stable 63-bit, non-zero room of a request (0 is sglang's "no room")."""
    digest = hashlib.blake2b(f"{instance_id}\0{request_id}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & _ROOM_MASK) or 1


class RoomTable:
    """Live request id <-> room map of one scheduler. Thread-safe."""

    def __init__(self, instance_id: str):
        self._instance_id = instance_id
        self._lock = threading.Lock()
        self._room_of: dict[str, int] = {}
        self._owner_of: dict[int, str] = {}

    def assign(self, request_id: str, room: int | None = None) -> int:
        """The request's room: ``room`` if given (ValueError if another live request holds
        it), else its hash, moved to the next free value on a collision."""
        with self._lock:
            if request_id in self._room_of:
                return self._room_of[request_id]
            if room is not None:
                room = int(room)
                if not 0 < room <= _ROOM_MASK:
                    raise ValueError(f"room must be in [1, 2^63), got {room}")
                if self._owner_of.get(room, request_id) != request_id:
                    raise ValueError(f"room {room} of request {request_id!r} is in use by "
                                     f"request {self._owner_of[room]!r}")
            else:
                room = room_hash(self._instance_id, request_id)
                while room in self._owner_of:
                    room = (room % _ROOM_MASK) + 1
            self._room_of[request_id] = room
            self._owner_of[room] = request_id
            return room

    def release(self, request_id: str) -> None:
        with self._lock:
            room = self._room_of.pop(request_id, None)
            if room is not None:
                self._owner_of.pop(room, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._room_of)

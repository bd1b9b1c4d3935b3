"""Why and where a room failed: ``pdkv.FailureCause`` and ``pdkv.FailureStage``.

They mirror ``kv/room/failure_cause.h``: a cause's value is the one the C++ side uses (and
sends on the wire), its ``label`` the stable snake_case name used as the metric label
(``pdkv_*_failures_total{cause="..."}``). ``KVTransferError.cause`` / ``.stage`` carry
them. Pure Python, so importing it needs no native module.
"""
from __future__ import annotations

import enum

__all__ = ["FailureCause", "FailureStage"]


class FailureCause(enum.IntEnum):
    """Why a room failed. Values are stable (append only)."""

    Internal = 0          # anything not named below
    BootstrapTimeout = 1  # not bootstrapped within PDKV_BOOTSTRAP_TIMEOUT_S
    WaitingTimeout = 2    # bootstrapped, transfer not done within PDKV_WAITING_TIMEOUT_S
    MetadataTimeout = 3   # bytes written, first token not published in time (prefill)
    PeerDead = 4          # the other side stopped answering or its process is gone
    PeerRestarted = 5     # the other side is a new process at the same endpoint
    LinkLost = 6          # the transfer connection failed after every retry
    AbortedByPeer = 7     # the other side aborted the room
    AbortedLocally = 8    # this side's abort()
    LayoutMismatch = 9    # the two sides' layouts differ (registration refused)
    BadPreAllocation = 10  # a malformed pre-allocation
    OutOfRange = 11       # a destination outside registered memory; a rejected batch
    ChecksumMismatch = 12  # PDKV_VERIFY_CHECKSUM: the bytes that landed differ
    BootstrapFailed = 13  # the registry had no usable route, or it vanished while bootstrapping
    Shutdown = 14         # this rank's KVManager shut down with the room open
    Unauthenticated = 15  # the peer refused our control handshake: cluster secrets differ
    DeviceFault = 16      # this process's CUDA context failed for good (pdkv.device_health())

    @property
    def label(self) -> str:
        """The stable snake_case name, e.g. ``"peer_dead"`` (the metric label)."""
        return _snake(self.name)


class FailureStage(str, enum.Enum):
    """Where the room was when it failed; compares equal to its label string."""

    Bootstrap = "bootstrap"    # finding peers, registering, exchanging pre-allocations
    Waiting = "waiting"        # bootstrapped, waiting for chunks / for the prefill
    Transfer = "transfer"      # bytes in flight
    Completion = "completion"  # bytes written: status, first token, end-to-end check

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        return self.value


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)

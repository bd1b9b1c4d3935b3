"""pdkv.testing: what every pdkv test, benchmark and demo process needs to stand up a
rank and prove the bytes it moved, in one copy: the byte pattern (pattern), a rank's
numpy KV memory (memory), why a room failed (failures), KVArgs from those buffers (kv_args), the PDKV_* settings of
test processes (settings), polling with deadlines (polling) and the fault shim aimed at
the engine's ACK frames (fault_shim, imported from there: it is not needed by most).

The processes of a multi-process cluster, imported from their modules as well: spawned
ranks, their environment and teardown (processes), reading what they report on a shared
queue (reports), command-line processes and JSON-line reporters (subprocesses), the
bootstrap server in this process or as `pdkv bootstrap` (bootstrap), free loopback ports
(ports), cluster secret files (secret_file), CPU hogs (hogs) and real etcd members (etcd).

Used by python/tests, bench/e2e, robustness/ and demo/. Shipped in the package (the CLI's
driver scripts run from an installed pdkv and import it), but not part of pdkv's API for
engines: names here may change with the tests that use them."""
from .failures import failed_rooms, transfer_error
from .kv_args import kv_args_from_buffers
from .memory import RankMemory, heads_of, shuffled_pages
from .pattern import expected_pages, first_mismatch, page_bases, page_offsets
from .polling import (FAILED, SUCCESS, PollTimeout, is_terminal, poll_until, wait_flag,
                      wait_terminal, wait_until)
from .settings import (DEFAULT_LIVENESS, FAST_TIMEOUTS, QUIET, apply_settings, fast_config,
                       liveness_bound_s, room_timeouts)

__all__ = [
    "failed_rooms", "transfer_error", "kv_args_from_buffers", "RankMemory", "heads_of", "shuffled_pages", "expected_pages",
    "first_mismatch", "page_bases", "page_offsets", "FAILED", "SUCCESS", "PollTimeout",
    "is_terminal", "poll_until", "wait_flag", "wait_terminal", "wait_until",
    "DEFAULT_LIVENESS", "FAST_TIMEOUTS", "QUIET", "apply_settings", "fast_config",
    "liveness_bound_s", "room_timeouts",
]

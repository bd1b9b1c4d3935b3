"""Opt-in bridge of pdkv's log lines into Python's ``logging``.

By default pdkv (C++) writes its log to stderr. ``bridge_logging()`` hands every line to
a Python logger instead (default ``logging.getLogger("pdkv")``), so it goes wherever the
engine's logging goes. A line about one room carries the room id as the record field
``room`` (else None): ``%(room)s`` in a format, or ``record.room`` in a filter.

pdkv's threads never call into Python: they queue lines (bounded; a full queue drops
lines and counts them in ``dropped()``), and one daemon thread of this module emits
them. The level filter stays pdkv's own (``PDKV_LOG_LEVEL``, or ``level=`` here), so
lines below it cost nothing.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Optional, Union

from pdkv import _native

__all__ = ["bridge_logging", "LogBridge", "dropped"]

# spdlog levels (trace .. critical) -> logging levels.
_LEVELS = (5, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
_ROOM = re.compile(r"\broom (\d+)")
_PDKV_LEVEL = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn",
               logging.ERROR: "error", logging.CRITICAL: "critical"}


class LogBridge:
    """The running bridge; stop() ends it and sends pdkv's lines to stderr again."""

    def __init__(self, logger: logging.Logger, capacity: int, keep_stderr: bool):
        self.logger = logger
        self._stopping = threading.Event()
        _native.log_capture_enable(capacity, keep_stderr)
        self._thread = threading.Thread(target=self._run, name="pdkv-log-bridge", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            for level, message, thread_id, when in _native.log_capture_take(200):
                self._emit(level, message.decode("utf-8", "replace"), thread_id, when)

    def _emit(self, level: int, message: str, thread_id: int, when: float) -> None:
        py_level = _LEVELS[min(max(level, 0), len(_LEVELS) - 1)]
        if not self.logger.isEnabledFor(py_level):
            return
        room = _ROOM.search(message)
        record = self.logger.makeRecord(
            self.logger.name, py_level, "pdkv", 0, message, None, None,
            extra={"room": int(room.group(1)) if room else None, "pdkv_thread": thread_id})
        record.created = when
        record.msecs = (when - int(when)) * 1000
        self.logger.handle(record)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        _native.log_capture_disable()


_bridge: Optional[LogBridge] = None
_bridge_lock = threading.Lock()


def bridge_logging(logger: Union[logging.Logger, str, None] = None,
                   level: Optional[int] = None, keep_stderr: bool = False,
                   capacity: int = 10000) -> LogBridge:
    """Sends pdkv's log lines to `logger` (a Logger or its name; default "pdkv") from now
    on; returns the bridge (one per process: a second call replaces the first).
    `level` (a logging level) also sets pdkv's own threshold; `keep_stderr` keeps the
    stderr copy; at most `capacity` lines wait to be emitted."""
    global _bridge
    if capacity < 1:
        raise ValueError("capacity must be at least 1")
    if isinstance(logger, str) or logger is None:
        logger = logging.getLogger(logger or "pdkv")
    if level is not None:
        if level not in _PDKV_LEVEL:
            raise ValueError(f"level must be one of logging.DEBUG .. logging.CRITICAL, not {level!r}")
        _native.set_log_level(_PDKV_LEVEL[level])
    with _bridge_lock:
        if _bridge is not None:
            _bridge.stop()
        _bridge = LogBridge(logger, capacity, keep_stderr)
        return _bridge


def dropped() -> int:
    """Lines dropped because the bridge's queue was full (since the process started)."""
    return _native.log_capture_dropped()

"""Progress of the CLI's long runs (`pdkv bench e2e`, `pdkv chaos`); not part of pdkv's API.

On a terminal it is a tqdm bar (Debian's python3-tqdm). When the stream is not a terminal
(a CI log, `| tee`, a file) it degrades to plain, complete lines: the first update, then at
most one every PLAIN_EVERY_S, then the last, so a captured log holds a few readable lines
instead of a carriage-return flood. Without tqdm installed, plain lines everywhere.

Thread safety: one thread drives a display.
"""
from __future__ import annotations

import math
import sys
import time
from typing import IO, Optional

PLAIN_EVERY_S = 10.0


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def _tqdm_class():
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


class Progress:
    """One labelled count from 0 to `total`, drawn on `stream` (default sys.stderr)."""

    def __init__(self, label: str, total: int, stream: Optional[IO[str]] = None,
                 unit: str = "it") -> None:
        if total < 0:
            raise ValueError(f"progress total must be >= 0, got {total}")
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self._last_line_at = -math.inf
        self._lines = 0
        tqdm = _tqdm_class() if _is_terminal(self.stream) else None
        self._bar = None if tqdm is None else tqdm(
            total=total, desc=label, file=self.stream, unit=unit, dynamic_ncols=True, leave=True)

    @property
    def is_bar(self) -> bool:
        """True when drawing a tqdm bar, False when writing plain lines."""
        return self._bar is not None

    def update(self, done: int, note: str = "") -> None:
        """Shows `done` of `total` (clamped to it) with an optional note."""
        done = max(0, min(done, self.total))
        if self._bar is not None:
            self._bar.n = done
            self._bar.set_postfix_str(note, refresh=False)
            self._bar.refresh()
            if done >= self.total:
                self.close()
            return
        now = time.monotonic()
        if self._lines == 0 or done >= self.total or now - self._last_line_at >= PLAIN_EVERY_S:
            self.stream.write(f"{self.label}: {done}/{self.total} {note}".rstrip() + "\n")
            self.stream.flush()
            self._last_line_at = now
            self._lines += 1

    def write(self, line: str, stream: Optional[IO[str]] = None) -> None:
        """Prints a whole line (to `stream`, default stdout) without tearing the bar."""
        out = stream if stream is not None else sys.stdout
        if self._bar is not None:
            self._bar.write(line, file=out)
        else:
            out.write(line + "\n")
            out.flush()

    def close(self) -> None:
        """Ends the bar (it stays on screen); plain mode needs nothing."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


_current: Optional[Progress] = None


def show(label: str, done: int, total: int, note: str = "") -> None:
    """Stateless form for loops that report (label, done, total): a new label or total
    ends the previous display and starts another."""
    global _current
    if _current is None or _current.label != label or _current.total != total:
        if _current is not None:
            _current.close()
        _current = Progress(label, total)
    _current.update(done, note)
    if done >= total:
        _current.close()
        _current = None

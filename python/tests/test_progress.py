"""pdkv._progress: a tqdm bar on a terminal, plain lines (no carriage returns) otherwise."""
import io
import os
import select
import time

import pytest

from pdkv import _progress


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    p = _progress.Progress("rounds", 50, stream=out)
    assert not p.is_bar
    for i in range(51):
        p.update(i, f"{i} done")
    text = out.getvalue()
    assert "\r" not in text
    # The first and the last update; the ones between fall inside PLAIN_EVERY_S.
    assert text.splitlines() == ["rounds: 0/50 0 done", "rounds: 50/50 50 done"]


def test_plain_lines_are_rate_limited_not_dropped(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(_progress, "PLAIN_EVERY_S", 0.0)
    p = _progress.Progress("soak", 3, stream=out)
    for i in range(4):
        p.update(i)
    assert out.getvalue().splitlines() == [f"soak: {i}/3" for i in range(4)]


def test_bar_on_a_terminal():
    master, slave = os.openpty()
    try:
        with open(slave, "w", closefd=True) as tty:
            p = _progress.Progress("chaos", 4, stream=tty, unit="case")
            assert p.is_bar
            for i in range(1, 5):
                p.update(i, "case")
            tty.flush()
            # The pty hands written bytes to the reading side through a kernel work queue,
            # so one read may see only the first redraws: read until the last one arrives.
            drawn, deadline = "", time.monotonic() + 10
            while "4/4" not in drawn and time.monotonic() < deadline:
                if select.select([master], [], [], 0.1)[0]:
                    drawn += os.read(master, 65536).decode(errors="replace")
    finally:
        os.close(master)
    assert "\r" in drawn and "chaos" in drawn and "4/4" in drawn


def test_write_keeps_whole_lines_in_plain_mode():
    out, lines = io.StringIO(), io.StringIO()
    p = _progress.Progress("chaos", 2, stream=out)
    p.write("[PASS] R1", stream=lines)
    assert lines.getvalue() == "[PASS] R1\n"


def test_show_restarts_on_a_new_label(monkeypatch, capsys):
    _progress.show("scale c=1", 0, 2)
    _progress.show("scale c=1", 2, 2)
    _progress.show("scale c=8", 0, 2)
    _progress.show("scale c=8", 2, 2)
    err = capsys.readouterr().err  # pytest's capture is not a terminal: plain lines
    assert err.splitlines() == ["scale c=1: 0/2", "scale c=1: 2/2", "scale c=8: 0/2",
                                "scale c=8: 2/2"]


def test_negative_total_is_rejected():
    with pytest.raises(ValueError):
        _progress.Progress("x", -1, stream=io.StringIO())

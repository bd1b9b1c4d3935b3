"""What spawned ranks report on one shared multiprocessing queue, read by the driver
until it has what it waits for: the loop every multi-process cluster runs for the ranks'
readiness, results and errors, while what a message means stays with the cluster."""
from __future__ import annotations

import time


def drain_reports(results, done, deadline: float, on_message, on_idle=None,
                  poll_s: float = 0.1) -> bool:
    """Hands each message taken from `results` to on_message(msg) until done() holds or
    `deadline` (monotonic) has passed; returns done(). on_idle() runs whenever the queue
    stayed empty for poll_s, and only then: a rank that exited may still have a message
    in the queue, so that is where a caller looks for dead ranks. A message that cannot
    be read (a rank killed while it wrote one) is skipped like an empty poll."""
    while not done() and time.monotonic() < deadline:
        try:
            msg = results.get(timeout=poll_s)
        except Exception:  # queue.Empty, or a message a killed rank left half-written
            if on_idle is not None:
                on_idle()
            continue
        on_message(msg)
    return done()

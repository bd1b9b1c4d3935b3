"""pdkv's log lines reach Python logging when asked (pdkv.log.bridge_logging), with the
room id as a record field; without the bridge nothing is captured."""
import logging
import time

import numpy as np

import pdkv
import pdkv.log
from orphan_room import decode_args, room_without_prefill


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_room_failure_is_logged_to_python_with_the_room_field():
    handler = Records()
    logger = logging.getLogger("pdkv.test_bridge")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    bridge = pdkv.log.bridge_logging(logger, level=logging.INFO)
    try:
        with room_without_prefill(4242, bootstrap_timeout_s=0.3):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not any(
                    r.room == 4242 for r in handler.records):
                time.sleep(0.02)
        ready = [r for r in handler.records if "decode rank 0 ready" in r.getMessage()]
        assert ready and ready[0].levelno == logging.INFO and ready[0].room is None
        failed = [r for r in handler.records if r.room == 4242]
        assert failed, [r.getMessage() for r in handler.records]
        assert failed[0].levelno == logging.WARNING
        assert "room 4242 failed" in failed[0].getMessage()
        assert failed[0].name == "pdkv.test_bridge"
        assert abs(failed[0].created - time.time()) < 30
    finally:
        bridge.stop()
        logger.removeHandler(handler)
    # Stopped: later lines go to stderr only.
    count = len(handler.records)
    buf = np.zeros(64 * 16, np.uint8)
    pdkv.KVManager(decode_args(buf), "decode", "127.0.0.1:1").shutdown()
    time.sleep(0.3)
    assert len(handler.records) == count

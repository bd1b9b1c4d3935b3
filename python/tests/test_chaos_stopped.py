"""`pdkv chaos` stopped by SIGTERM (as `timeout` stops it) ends every process it started:
its ranks and bootstrap servers run in sessions of their own, so the signal the driver
gets reaches none of them, and a bootstrap server left behind keeps holding its port.
The real driver (robustness/chaos/main.py, which `pdkv chaos` runs in its own process)
on loopback; its children are found by a marker in their environment."""
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CHAOS = os.path.join(ROOT, "robustness", "chaos", "main.py")
BIN_DIR = os.environ.get("PDKV_BIN_DIR", os.path.join(ROOT, "build", "bin"))


def _marked(marker: str, command: str = "") -> list[int]:
    """Pids of live processes with `marker` in their environment and `command` in their
    command line (zombies excluded)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in env and command.encode() in cmdline and state != "Z":
            found.append(int(pid))
    return found


# The hostile-peer cases run `pdkv bootstrap` as a process of its own, which reads no
# stdin, so unlike the ranks it does not notice its driver is gone; the timeouts case
# runs its bootstrap server and ranks as rank.py processes.
@pytest.mark.parametrize("plan, started", [
    (["--hostile"], "bootstrap"),
    (["--short", "--only", "R4"], "rank.py"),
])
def test_sigterm_ends_every_process_a_chaos_run_started(plan, started):
    if not os.access(os.path.join(BIN_DIR, "pdkv"), os.X_OK):
        pytest.skip(f"no pdkv binary in {BIN_DIR} (PDKV_BIN_DIR)")
    marker = f"PDKV_CHAOS_STOP_TEST={uuid.uuid4().hex}"
    name, value = marker.split("=")
    env = dict(os.environ, **{name: value}, PDKV_LOG_LEVEL="error", PDKV_BIN_DIR=BIN_DIR)
    driver = subprocess.Popen([sys.executable, CHAOS, "--no-netns", "--repeat", "50", *plan],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        # Wait until the run has started what this plan starts.
        deadline = time.monotonic() + 60
        while not _marked(marker, started):
            assert driver.poll() is None, "the chaos run ended before it started a case"
            assert time.monotonic() < deadline, f"no {started} process within 60 s"
            time.sleep(0.2)
        time.sleep(1.0)
        children = [p for p in _marked(marker) if p != driver.pid]
        driver.send_signal(signal.SIGTERM)  # the driver alone, as `timeout` signals it
        driver.wait(30)
        deadline = time.monotonic() + 10
        while (left := _marked(marker)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == [], f"still running after the run was stopped: {left} (of {children})"
    finally:
        for pid in _marked(marker):  # whatever a failing run left
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except OSError:
                pass
        if driver.poll() is None:
            driver.kill()
            driver.wait(5)

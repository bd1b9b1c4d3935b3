"""The bootstrap server of a test or benchmark cluster: in this process on a free loopback
port (LoopbackBootstrap), or the `pdkv bootstrap` command as a process of its own
(BootstrapProcess), as a deployment runs it."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

from .subprocesses import SessionProcess


def bin_dir() -> str:
    """Where the pdkv binaries are: $PDKV_BIN_DIR (set by CTest and the CLI), else
    build/bin under the current directory."""
    return os.environ.get("PDKV_BIN_DIR", os.path.join(os.getcwd(), "build", "bin"))


class LoopbackBootstrap:
    """pdkv.BootstrapServer on 127.0.0.1 and a free port; `addr` is what ranks are given.
    stop() never raises: a cluster's results matter more than a clean server stop."""

    def __init__(self, pdkv):
        self.server = pdkv.BootstrapServer("127.0.0.1", 0)
        self.port = self.server.port
        self.addr = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        try:
            self.server.stop()
        except Exception as e:
            sys.stderr.write(f"bootstrap server stop: {e}\n")


class BootstrapProcess(SessionProcess):
    """`pdkv bootstrap` as its own process; quit() is SIGTERM (its clean shutdown)."""

    def __init__(self, host, port=0, secret_file=None, env=None, args=()):
        cmd = [os.path.join(bin_dir(), "pdkv"), "bootstrap", "--host", host, "--port", str(port)]
        if secret_file:
            cmd += ["--secret-file", secret_file]
        cmd += list(args)
        super().__init__(cmd, env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
        line = self._first_line(10)
        if "listening on" not in line:
            self.kill()
            raise RuntimeError(f"pdkv bootstrap did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])
        self.ready = {"port": self.port}

    def _first_line(self, timeout):
        out = []
        t = threading.Thread(target=lambda: out.append(self.p.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        return out[0].strip() if out else ""

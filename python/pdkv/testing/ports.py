"""Free loopback ports for servers a test or benchmark starts (etcd members, a ZeroMQ
echo, iperf3) that must be told their port instead of binding port 0 themselves. The port
is free when this returns; a process elsewhere may still take it before the server binds,
which on a test machine is rare enough to be a retry, not a design."""
from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

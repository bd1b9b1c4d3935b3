"""One bounded HTTP request to a peer the integrations do not control (a bootstrap server
named in a request): the answer is hostile until validated.

fetch() gives the peer one total deadline for everything (connect, status line, headers,
body), so an answer dripped a byte at a time cannot hold the caller (an engine's
scheduler loop) past it; reads at most `max_bytes` of body, so a huge answer costs no
memory; and never follows a redirect (http.client has no redirect logic: a 3xx is just a
status the caller refuses), so the request goes to the address it was given and nowhere
else. json_object() parses an answer without letting any parse error escape.

Thread safety: fetch() holds no shared state; call it from any thread.
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import threading
import time
from typing import Optional

DEFAULT_MAX_BYTES = 1 << 20  # the integrations' answers are a few hundred bytes
_READ_CHUNK = 64 << 10


class FetchError(Exception):
    """No usable answer: unreachable, past the deadline, too large, or not HTTP."""


@dataclasses.dataclass
class Answer:
    status: int
    body: bytes


def fetch(method: str, host_port: str, path: str, body: Optional[bytes] = None,
          deadline_s: float = 2.0, max_bytes: int = DEFAULT_MAX_BYTES,
          headers: Optional[dict] = None) -> Answer:
    """`method` `path` to http://`host_port`, answered within `deadline_s` in total.

    Raises FetchError for every failure to get a whole answer of at most `max_bytes`."""
    host, port = split_host_port(host_port)
    end = time.monotonic() + deadline_s
    conn = http.client.HTTPConnection(host, port, timeout=deadline_s)
    expired = threading.Event()

    def cut_off():
        # A recv blocked on a dripping peer returns at once when the socket is shut down;
        # per-recv timeouts alone would let each byte restart the clock.
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(deadline_s, cut_off)
    timer.daemon = True
    timer.start()
    try:
        conn.request(method, path, body=body, headers=headers or {})
        res = conn.getresponse()
        declared = res.getheader("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise FetchError(f"answer of {declared} bytes (at most {max_bytes} taken)")
        data = bytearray()
        while True:
            if time.monotonic() >= end:
                raise FetchError(f"no whole answer within {deadline_s} s")
            chunk = res.read(min(_READ_CHUNK, max_bytes + 1 - len(data)))
            if not chunk:
                break
            data += chunk
            if len(data) > max_bytes:
                raise FetchError(f"answer over {max_bytes} bytes")
        if expired.is_set():
            raise FetchError(f"no whole answer within {deadline_s} s")
        return Answer(res.status, bytes(data))
    except FetchError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as e:
        if expired.is_set():
            raise FetchError(f"no whole answer within {deadline_s} s") from e
        raise FetchError(f"{type(e).__name__}: {e}") from e
    finally:
        timer.cancel()
        conn.close()


def split_host_port(host_port: str) -> tuple[str, int]:
    """("host", port) of "host:port" or "[v6]:port"; ValueError when malformed."""
    host, sep, port = host_port.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {host_port[:100]!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c in host for c in "/?#@[] \t\r\n") or not host.isascii():
        raise ValueError(f"not a host:port address: {host_port[:100]!r}")
    return host, int(port)


def json_object(body: bytes) -> Optional[dict]:
    """The answer as a JSON object, or None when it is anything else (not UTF-8, not
    JSON, nested too deep, a number too long to convert, not an object)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def positive_int(value, limit: int) -> Optional[int]:
    """`value` when it is an int (not a bool) in [1, limit], else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= limit:
        return value
    return None

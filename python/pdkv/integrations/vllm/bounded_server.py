"""The proxy's HTTP server: a ThreadingHTTPServer that holds a bounded number of client
connections (one more is answered 503 and closed gracefully) under the process's
descriptor limit. proxy.py says what the proxy does with the requests it admits."""
from __future__ import annotations

import resource
import selectors
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Optional

# Descriptors kept free of connections: the listening socket, the bootstrap server's,
# logs, Python's own files.
_SPARE_DESCRIPTORS = 64


class _Lingerer:
    """Closes refused connections gracefully: after the 503 is sent the socket's write
    side is shut and whatever the client is still sending (its request) is read and
    dropped for up to LINGER_S, so the close does not reset the connection and destroy
    the 503 before the client read it (a client still writing would see a broken pipe
    instead). One thread for all of them; at most MAX_LINGERING at once, older ones
    closed at once past that, so a flood holds no more descriptors than that."""

    LINGER_S = 1.0
    MAX_LINGERING = 256

    def __init__(self):
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._deadlines: dict = {}  # socket -> monotonic deadline
        self._thread: Optional[threading.Thread] = None

    def add(self, sock) -> None:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            sock.close()
            return
        with self._lock:
            if len(self._deadlines) >= self.MAX_LINGERING:
                sock.close()
                return
            self._deadlines[sock] = time.monotonic() + self.LINGER_S
            self._selector.register(sock, selectors.EVENT_READ)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pdkv-proxy-linger",
                                                daemon=True)
                self._thread.start()

    def _close(self, sock) -> None:
        self._selector.unregister(sock)
        del self._deadlines[sock]
        sock.close()

    def _run(self) -> None:
        while True:
            with self._lock:
                empty = not self._deadlines
            events = self._selector.select(timeout=0.1) if not empty else []
            if empty:
                time.sleep(0.1)
            with self._lock:
                for key, _ in events:
                    try:
                        data = key.fileobj.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        self._close(key.fileobj)
                now = time.monotonic()
                for sock in [s for s, d in self._deadlines.items() if d <= now]:
                    self._close(sock)


class BoundedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer holding at most `max_connections` connections: one more is
    answered 503 at once and closed, so a flood of idle connections can neither take the
    last descriptor (accept() would then fail on every loop, spinning a core, and no
    client would get in) nor starve the clients already connected."""
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, handler, max_connections: int):
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lingerer = _Lingerer()
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            try:
                request.setblocking(False)
                request.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")
            except OSError:
                self.shutdown_request(request)
                return
            self._lingerer.add(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def fit_descriptor_limit(max_connections: int) -> int:
    """The connections this process can hold: each takes a descriptor for the client and
    one for the instance it is relayed to. Raises the soft limit toward the hard one when
    that is what it takes; else fewer connections than asked (said on stderr)."""
    need = 2 * max_connections + _SPARE_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        want = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < need:
        fitted = max(1, (soft - _SPARE_DESCRIPTORS) // 2)
        print(f"pdkv proxy: {soft} descriptors allowed: --max-connections {max_connections} "
              f"lowered to {fitted}", file=sys.stderr, flush=True)
        return fitted
    return max_connections

"""sglang's decode asks a bootstrap server named in a request for the prefill's parallel
info (fetch_prefill_info, from sglang's scheduler loop). The server here is hostile, a
real HTTP server on loopback: whatever it answers (not JSON, the wrong JSON, a redirect
to another host, a huge answer, an answer dripped a byte at a time) must come back as a
failed query (None, as upstream's own query returns), promptly and without reading more
than a bounded amount, never as an exception in the scheduler."""
import resource
import socket
import threading
import time

import pytest

from pdkv.integrations import http_fetch
from pdkv.integrations.sglang.prefill_info import HTTP_TIMEOUT_S, fetch_prefill_info

GOOD = b'{"prefill_dp_size": 2, "prefill_tp_size": 4, "page_size": 16}'


class HostileServer:
    """Answers every connection with `answer(conn)`; counts the connections it got."""

    def __init__(self, answer):
        self.answer, self.connections = answer, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            try:
                conn.recv(65536)  # the request
                self.answer(conn)
            except OSError:
                pass  # the client gave up on us: what the test wants

    def close(self):
        self._stop = True
        self.sock.close()


def _reply(body: bytes, status: str = "200 OK", extra: bytes = b""):
    def answer(conn):
        conn.sendall(b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: application/json\r\n"
                     + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return answer


@pytest.fixture
def hostile():
    servers = []

    def start(answer):
        servers.append(HostileServer(answer))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_a_well_formed_answer_is_taken(hostile):
    info = fetch_prefill_info(hostile(_reply(GOOD)).addr)
    assert (info.dp_size, info.attn_tp_size, info.page_size) == (2, 2, 16)
    assert info.follow_bootstrap_room is False


@pytest.mark.parametrize("body", [
    b"not json", b"", b"\xff\xfe", b"[1, 2]", b"null", b'"text"',
    b'{"prefill_tp_size": 4, "page_size": 16}',                        # a key missing
    b'{"prefill_dp_size": "2", "prefill_tp_size": 4, "page_size": 16}',  # a string
    b'{"prefill_dp_size": [2], "prefill_tp_size": 4, "page_size": 16}',  # a list
    b'{"prefill_dp_size": 0, "prefill_tp_size": 4, "page_size": 16}',    # divides by zero
    b'{"prefill_dp_size": -2, "prefill_tp_size": 4, "page_size": 16}',
    b'{"prefill_dp_size": 3, "prefill_tp_size": 4, "page_size": 16}',    # no whole groups
    b'{"prefill_dp_size": 1, "prefill_tp_size": 1, "page_size": 0}',
    b'{"prefill_dp_size": true, "prefill_tp_size": 1, "page_size": 16}',
    b'{"prefill_dp_size": 1.5, "prefill_tp_size": 3, "page_size": 16}',
    b'{"prefill_dp_size": 1, "prefill_tp_size": 1, "page_size": ' + b"9" * 5000 + b"}",
    b"[" * 100000 + b"]" * 100000,                                     # nested too deep
    b'{"prefill_dp_size": 1, "prefill_tp_size": 1, "page_size": 16, "pp_size": 65}',
    b'{"prefill_dp_size": 1, "prefill_tp_size": 1, "page_size": 16, "pp_size": "2"}',
    # two stages, but the same answer for stage 1 lists no KV buffers
    b'{"prefill_dp_size": 1, "prefill_tp_size": 1, "page_size": 16, "pp_size": 2}',
], ids=lambda b: b[:40].decode(errors="replace"))
def test_a_malformed_answer_is_a_failed_query(hostile, body):
    assert fetch_prefill_info(hostile(_reply(body)).addr) is None


def test_a_redirect_is_not_followed(hostile):
    target = hostile(_reply(GOOD))
    redirect = hostile(_reply(b"", "302 Found",
                              b"Location: http://%s/route\r\n" % target.addr.encode()))
    assert fetch_prefill_info(redirect.addr) is None
    time.sleep(0.2)
    assert target.connections == 0


def test_a_huge_answer_is_cut_off_without_being_read(hostile):
    def huge(conn):  # 256 MiB announced and streamed until the client hangs up
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (256 << 20))
        block = b"{" * (1 << 20)
        for _ in range(256):
            conn.sendall(block)

    def huge_unannounced(conn):  # no length: only reading tells how big it is
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        block = b" " * (1 << 20)
        for _ in range(256):
            conn.sendall(block)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for answer in (huge, huge_unannounced):
        t0 = time.monotonic()
        assert fetch_prefill_info(hostile(answer).addr) is None
        assert time.monotonic() - t0 < HTTP_TIMEOUT_S + 1
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 32, f"peak memory grew {grown_mib:.0f} MiB"


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_dripped_answer_is_bounded_by_one_total_deadline(hostile, where):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    if where == "body":
        head += b"Content-Length: %d\r\n\r\n" % len(GOOD)
        drip = GOOD
    else:
        drip = b"X-Pad: " + b"a" * 200 + b"\r\n"

    def slow(conn):
        conn.sendall(head)
        for byte in drip:  # a byte every 0.2 s: each read alone is well inside 2 s
            time.sleep(0.2)
            conn.sendall(bytes([byte]))

    t0 = time.monotonic()
    assert fetch_prefill_info(hostile(slow).addr) is None
    assert time.monotonic() - t0 < HTTP_TIMEOUT_S + 1


def test_an_address_that_is_not_host_port_is_a_failed_query():
    for addr in ("127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", "user@127.0.0.1:80",
                 "127.0.0.1:80/x", ":80", "127.0.0.1:8a"):
        assert fetch_prefill_info(addr) is None, addr


def test_fetch_caps_the_body_it_returns(hostile):
    srv = hostile(_reply(b"x" * 5000))
    assert http_fetch.fetch("GET", srv.addr, "/", max_bytes=5000).body == b"x" * 5000
    with pytest.raises(http_fetch.FetchError):
        http_fetch.fetch("GET", srv.addr, "/", max_bytes=4999)

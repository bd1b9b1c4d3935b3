"""The vLLM proxy facing hostile clients and a hostile backend, as a real process over real
sockets: where it listens, a flood of idle connections, request smuggling (a body framed
both by Content-Length and Transfer-Encoding), folded headers, oversized bodies, too many
requests at once, a backend's redirect, and request ids that are no ids."""
import json
import re
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_vllm_proxy import Engine

FLOOD = 1026  # the finding: one over the 1,024 descriptors of a default soft limit


def _limit_descriptors_to_1024():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(
        resource.RLIMIT_NOFILE)[1]))


@pytest.fixture
def proxy():
    """proxy(*flags, host=...) -> (process, "host:port") with a prefill and a decode
    Engine (proxy.prefill, proxy.decode); each process is stopped at the end."""
    procs = []
    prefill, decode = Engine("prefill"), Engine("decode")

    def start(*flags, host="127.0.0.1", prefill_url=None, decode_url=None):
        argv = [sys.executable, "-m", "pdkv.integrations.vllm.proxy", "--port", "0",
                "--prefill", prefill_url or prefill.url, "--decode", decode_url or decode.url,
                *flags]
        if host is not None:
            argv += ["--host", host]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                             preexec_fn=_limit_descriptors_to_1024)
        procs.append(p)
        line = p.stdout.readline()
        assert "listening on" in line, line
        return p, line.strip().rsplit("//", 1)[1]

    start.prefill, start.decode = prefill, decode
    yield start
    for p in procs:
        p.kill()
        p.wait(5)


def _exchange(addr: str, raw: bytes, timeout: float = 5.0) -> bytes:
    """Sends `raw` on one connection and returns all the proxy answers until it closes
    or is quiet for `timeout`."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(raw)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except socket.timeout:
            pass
    return out


def _post(addr: str, body: dict, headers=None, timeout: float = 5.0):
    req = urllib.request.Request(f"http://{addr}/v1/completions", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def _statuses(answer: bytes) -> list[int]:
    return [int(m) for m in re.findall(rb"^HTTP/1\.[01] (\d{3})", answer, re.M)]


def _prompts(engine) -> list:
    return [body.get("prompt") for _, body in engine.bodies]


def test_listens_on_loopback_unless_told_otherwise(proxy):
    _, addr = proxy(host=None)
    host, port = addr.rsplit(":", 1)
    assert host == "127.0.0.1"
    # The kernel's own table of listening sockets: bound to 127.0.0.1, not 0.0.0.0.
    listening = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.split(":")[1], 16) == int(port):
                listening.append(local.split(":")[0])
    assert listening == ["0100007F"]


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks


def test_a_flood_of_idle_connections_leaves_it_answering(proxy):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 256:
        pytest.skip(f"this test needs {FLOOD + 256} descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FLOOD + 256), hard))
    p, addr = proxy()
    host, port = addr.rsplit(":", 1)
    idle = []
    try:
        for _ in range(FLOOD):
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(1.0)
        # A client arriving now is answered at once (served, or 503: the proxy is full)
        # rather than left to time out.
        t0 = time.monotonic()
        status, _, _ = _post(addr, {"prompt": "late"})
        assert status in (200, 503) and time.monotonic() - t0 < 5
        # And the proxy is not spinning on a failing accept().
        cpu0 = _cpu_s(p.pid)
        time.sleep(2.0)
        assert _cpu_s(p.pid) - cpu0 < 0.4, "the proxy burns CPU while flooded"
    finally:
        for s in idle:
            s.close()
    # The flood gone, its slots are free again.
    deadline = time.monotonic() + 10
    while (status := _post(addr, {"prompt": "after"})[0]) != 200 and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == 200


def test_an_idle_connection_is_closed_after_the_idle_timeout(proxy):
    _, addr = proxy("--idle-timeout-s", "1")
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        t0 = time.monotonic()
        assert s.recv(1) == b""  # closed by the proxy
        assert time.monotonic() - t0 < 5


def _smuggled(tag: bytes) -> bytes:
    body = b'{"prompt": "%s"}' % tag
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def test_a_body_framed_both_ways_is_refused_and_nothing_is_smuggled(proxy):
    _, addr = proxy()
    front = b'{"prompt": "front"}'
    # Framed by Content-Length, `front` is the body and the smuggled request follows it;
    # framed as chunked (what a server in front may have done) it is all one body.
    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(front)
           + front + _smuggled(b"smuggled"))
    answer = _exchange(addr, raw)
    assert _statuses(answer) == [400]
    time.sleep(0.3)
    assert "smuggled" not in _prompts(proxy.prefill) + _prompts(proxy.decode)


def test_a_chunked_body_alone_is_refused_and_its_bytes_are_not_a_request(proxy):
    _, addr = proxy()
    hidden = _smuggled(b"hidden")
    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           + hidden)
    answer = _exchange(addr, raw)
    assert _statuses(answer) == [411]
    time.sleep(0.3)
    assert "hidden" not in _prompts(proxy.prefill) + _prompts(proxy.decode)


@pytest.mark.parametrize("header", [
    b"X-Request-Id: abc\r\n evil-continued\r\n",   # obsolete line folding
    b"X-Request-Id: abc\r\n\tevil-continued\r\n",
    b"Not A Header Line\r\n",                      # ends the headers early
])
def test_folded_or_malformed_headers_are_refused(proxy, header):
    _, addr = proxy()
    body = b'{"prompt": "folded"}'
    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + header +
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    answer = _exchange(addr, raw)
    assert _statuses(answer) == [400]
    assert b"evil" not in answer
    assert proxy.prefill.requests == [] and proxy.decode.requests == []


@pytest.mark.parametrize("sent", [
    "a" * 129, "has space", "tab\there", "caf\u00e9", "", None])
def test_a_request_id_that_is_no_id_is_replaced(proxy, sent):
    _, addr = proxy()
    raw_id = b"" if sent is None else b"X-Request-Id: " + sent.encode("latin-1") + b"\r\n"
    body = b'{"prompt": "p"}'
    answer = _exchange(addr, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + raw_id +
                       b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    assert _statuses(answer) == [200]
    echoed = re.search(rb"^X-Request-Id: ([^\r\n]*)\r$", answer, re.M | re.I).group(1)
    assert re.fullmatch(rb"[0-9a-f]{32}", echoed), echoed
    for engine in (proxy.prefill, proxy.decode):
        assert engine.requests[-1][2]["X-Request-Id"] == echoed.decode()


def test_a_well_formed_request_id_is_kept(proxy):
    _, addr = proxy()
    status, headers, _ = _post(addr, {"prompt": "p"}, {"X-Request-Id": "req-42/a.b"})
    assert status == 200 and headers["X-Request-Id"] == "req-42/a.b"
    assert proxy.decode.requests[-1][2]["X-Request-Id"] == "req-42/a.b"


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024


def test_an_oversized_body_is_refused_before_it_is_read(proxy):
    p, addr = proxy()
    size = 59 << 20
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % size)
    # The answer comes on the headers alone: the proxy does not wait for 59 MiB.
    assert _statuses(_exchange(addr, head, timeout=5)) == [413]

    def upload():
        host, port = addr.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(head)
                block = b'"' + b"x" * ((1 << 20) - 1)
                for _ in range(59):
                    s.sendall(block)
        except OSError:
            pass  # refused mid-upload: the proxy closed on us, as it should

    threads = [threading.Thread(target=upload) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert _peak_rss_mib(p.pid) < 150
    assert proxy.prefill.requests == []


def test_requests_past_the_concurrency_cap_are_refused_with_503(proxy):
    _, addr = proxy("--max-concurrent", "1")
    proxy.decode.gate = threading.Event()
    first = {}

    def stream():
        first["answer"] = _post(addr, {"prompt": "a", "stream": True}, timeout=20)

    t = threading.Thread(target=stream)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while not proxy.decode.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        status, _, body = _post(addr, {"prompt": "b"})
        assert status == 503 and time.monotonic() - t0 < 2, body
    finally:
        proxy.decode.gate.set()
        t.join(20)
    assert first["answer"][0] == 200
    assert _post(addr, {"prompt": "c"})[0] == 200  # the slot came back


class _Recorder:
    """Any host a redirect could point at: records whatever reaches it."""

    def __init__(self):
        self.seen = []
        rec = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self):
                rec.seen.append((self.command, self.path, dict(self.headers)))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _redirecting_to(target: str):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(302)
            self.send_header("Location", target + "/v1/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_a_backend_redirect_is_not_followed(proxy, role):
    elsewhere = _Recorder()
    redirector = _redirecting_to(elsewhere.url)
    _, addr = proxy(**{f"{role}_url": redirector})
    status, _, body = _post(addr, {"prompt": "p"}, {"Authorization": "Bearer secret-key"})
    assert status == 502, body
    assert b"redirect" in body
    time.sleep(0.3)
    assert elsewhere.seen == []

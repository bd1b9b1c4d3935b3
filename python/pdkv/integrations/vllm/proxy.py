"""A small disaggregated-serving proxy for vLLM instances running PdkvConnector.

    python -m pdkv.integrations.vllm.proxy --port 8000 \
        --prefill http://10.0.0.1:8100 --decode http://10.0.0.2:8200 [--serve-bootstrap 8998]

For each OpenAI completion or chat request it picks a prefill and a decode instance
(round robin), asks the prefill for one token with ``kv_transfer_params``
``{"do_remote_decode": true, "pdkv_room": R}`` (R: a fresh random 63-bit room; no stream,
and without ``min_tokens`` / ``min_completion_tokens`` / ``stream_options``, which vLLM
rejects next to ``max_tokens=1``), then sends the original request to the decode with the
``kv_transfer_params`` the prefill returned, and relays the decode's answer (streamed when
the client asked for a stream). A prefill that returns no transfer parameters (its first
token ended the request) still hands the request on: the decode gets it without them and
computes the prompt itself. The client's ``Authorization`` and ``X-Request-Id`` go to both
instances (one id is made up when the client sent none) and the id comes back on the
answer. An instance's error answer reaches the client as sent (status, content type,
body); an instance that cannot be reached, or that answers with a redirect (never
followed: it would carry the client's ``Authorization`` to another host), is a 502 naming
it. ``--serve-bootstrap PORT`` also runs pdkv's bootstrap server in this process (on
``--bootstrap-host``, every interface by default: instances on other hosts register there).

Clients are not trusted (docs/SECURITY.md): the proxy listens on loopback unless
``--host`` says otherwise; holds at most ``--max-connections`` connections (the next is
answered 503 and closed, so descriptors never run out) and closes one idle for
``--idle-timeout-s``; refuses a request whose body is framed both by Content-Length and
Transfer-Encoding, or by Transfer-Encoding alone, or whose headers are folded or malformed
(400, then the connection closes, so no bytes of it are read as another request); refuses
a body over ``--max-body-bytes`` (413) and a request past ``--max-concurrent`` in flight
(503); and forwards an ``X-Request-Id`` only when it is 1-128 printable ASCII characters,
else makes one up. Standard library only (http.server, urllib); one thread per connection.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import re
import secrets
import sys
import threading
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler

from pdkv.integrations.vllm.bounded_server import BoundedServer, fit_descriptor_limit

_ROUTES = ("/v1/completions", "/v1/chat/completions")
DEFAULT_MAX_BODY_BYTES = 16 << 20  # a long prompt as token ids is a few MiB
DEFAULT_MAX_CONCURRENT = 256
DEFAULT_MAX_CONNECTIONS = 512
DEFAULT_IDLE_TIMEOUT_S = 30.0
# A request id is echoed in headers and written to two instances' logs: printable ASCII
# without spaces, bounded, so it cannot split a header or a log line.
_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")
# vLLM validates these against the token limit (min_tokens <= max_tokens) or against
# streaming (stream_options needs stream=True), so with max_tokens=1 and no stream the
# prefill would answer 400. The decode still gets them: it produces the real answer.
_PREFILL_DROPS = ("min_tokens", "min_completion_tokens", "stream_options")
# Servers started with --api-key refuse requests without the key, and the id lets one
# request be followed through both instances' logs.
_FORWARDED_HEADERS = ("Authorization", "X-Request-Id")


class _Upstreams:
    def __init__(self, prefills: list[str], decodes: list[str]):
        self._prefill = itertools.cycle([u.rstrip("/") for u in prefills])
        self._decode = itertools.cycle([u.rstrip("/") for u in decodes])
        self._lock = threading.Lock()

    def pick(self) -> tuple[str, str]:
        with self._lock:
            return next(self._prefill), next(self._decode)


def prefill_request(body: dict, room: int) -> dict:
    """The request the prefill sees: one token, no stream, the transfer parameters."""
    out = {k: v for k, v in body.items() if k not in _PREFILL_DROPS}
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    out["stream"] = False
    out["kv_transfer_params"] = {"do_remote_decode": True, "pdkv_room": room}
    return out


def decode_request(body: dict, params: dict | None) -> dict:
    """The request the decode sees: the client's, with the prefill's transfer parameters.

    Without them (the prefill's first token was a stop token, or it finished the request
    otherwise, so no KV was kept for the decode) none are sent, not even the client's own,
    and the decode computes the prompt itself, as vLLM's own proxy lets it."""
    out = {k: v for k, v in body.items() if k != "kv_transfer_params"}
    if params:
        out["kv_transfer_params"] = params
    return out


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A backend's 3xx is not followed: urllib then raises it as an HTTPError."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_RefuseRedirects)


class _Unreachable(Exception):
    """No HTTP answer from an upstream (refused, reset, timed out, not HTTP)."""


def _post(url: str, body: dict, headers: dict[str, str], timeout: float):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        return _OPENER.open(req, timeout=timeout)
    except urllib.error.HTTPError:
        raise  # an answer: the caller relays it
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise _Unreachable(getattr(e, "reason", e)) from e


@dataclasses.dataclass
class Limits:
    """What one client may hold of the proxy (flags of the same names)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S


def request_id_of(values: list[str] | None) -> str:
    """The client's X-Request-Id when it sent exactly one well-formed id, else a new one."""
    if values and len(values) == 1 and _REQUEST_ID.fullmatch(values[0]):
        return values[0]
    return uuid.uuid4().hex


def framing_error(headers) -> tuple[int, str] | None:
    """(status, why) when the request's headers cannot frame its body unambiguously.

    RFC 9112: a message with both Content-Length and Transfer-Encoding may have been
    framed otherwise by a server in front of this one (the rest would be a smuggled
    request), so it is refused, and so is obsolete line folding (6.3, 5.2). A chunked
    body alone is refused too (411): these endpoints take JSON with a length."""
    if headers.defects:  # a line that is no header ended the headers early
        return 400, "malformed header line"
    for name, value in headers.items():
        if "\r" in value or "\n" in value:
            return 400, f"obsolete line folding in {name}"
    lengths = headers.get_all("Content-Length") or []
    if headers.get_all("Transfer-Encoding"):
        if lengths:
            return 400, "both Content-Length and Transfer-Encoding"
        return 411, "Transfer-Encoding bodies are not accepted: send Content-Length"
    if len(lengths) != 1 or not _CONTENT_LENGTH.fullmatch(lengths[0]):
        return 411, "exactly one decimal Content-Length is needed"
    return None


def make_handler(upstreams: _Upstreams, timeout_s: float, limits: Limits | None = None):
    limits = limits or Limits()
    in_flight = threading.BoundedSemaphore(limits.max_concurrent)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Every read and write on the client's socket: an idle or stalled client frees
        # its connection (and descriptor) after this long.
        timeout = limits.idle_timeout_s

        def log_message(self, fmt, *args):  # quiet: one line per error only
            pass

        def _log(self, what: str) -> None:
            print(f"pdkv proxy: {self.path}: {what}", file=sys.stderr, flush=True)

        def _send(self, status: int, ctype: str, data: bytes, request_id: str | None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            if request_id:
                self.send_header("X-Request-Id", request_id)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _reply(self, status: int, payload: dict, request_id: str | None = None) -> None:
            self._send(status, "application/json", json.dumps(payload).encode(), request_id)

        def _refuse(self, status: int, why: str) -> None:
            """An error before the body was read: the connection closes after it, so no
            byte of the unread body is taken for the next request."""
            self.close_connection = True
            self._reply(status, {"error": why})

        def _bad_gateway(self, why: str, request_id: str) -> None:
            """An upstream that could not be used at all: logged, and a 502 saying why."""
            self._log(why)
            self._reply(502, {"error": why}, request_id)

        def _relay_error(self, who: str, e: urllib.error.HTTPError, request_id: str) -> None:
            # The upstream's own answer (a 400 for a bad parameter, a 401 for a missing
            # key, a 503 when overloaded) tells the client more than a 502 would.
            with e:
                try:
                    data = e.read(limits.max_body_bytes)
                except OSError:
                    data = b""
            if 300 <= e.code < 400:
                return self._bad_gateway(f"{who} answered a redirect ({e.code}), which the "
                                         "proxy does not follow", request_id)
            self._log(f"{who} answered {e.code}")
            self._send(e.code, e.headers.get("Content-Type", "application/json"), data,
                       request_id)

        def do_GET(self):
            error = framing_error(self.headers)
            if error is not None and error[1].startswith(("malformed", "obsolete")):
                return self._refuse(*error)
            if self.headers.get_all("Transfer-Encoding") or \
                    self.headers.get("Content-Length", "0") != "0":
                return self._refuse(400, "a GET carries no body")
            if self.path == "/health":
                self._reply(200, {"status": "ok"})
            else:
                self._reply(404, {"error": f"no route {self.path}"})

        def do_POST(self):
            error = framing_error(self.headers)
            if error is not None:
                return self._refuse(*error)
            length = int(self.headers["Content-Length"])
            if self.path not in _ROUTES:
                return self._refuse(404, f"no route {self.path}")
            if length > limits.max_body_bytes:
                return self._refuse(413, f"body of {length} bytes; at most "
                                         f"{limits.max_body_bytes} are taken")
            if not in_flight.acquire(blocking=False):
                return self._refuse(503, f"{limits.max_concurrent} requests in flight "
                                         "already; try again")
            try:
                self._proxy(length)
            finally:
                in_flight.release()

        def _proxy(self, length: int):
            try:
                body = json.loads(self.rfile.read(length))
                if not isinstance(body, dict):
                    raise ValueError("body is not a JSON object")
            except (ValueError, RecursionError) as e:
                return self._reply(400, {"error": f"bad request: {str(e)[:200]}"})
            # Both instances get the same id, so their logs name the request alike.
            request_id = request_id_of(self.headers.get_all("X-Request-Id"))
            headers = {h: self.headers[h] for h in _FORWARDED_HEADERS if self.headers.get(h)}
            headers["X-Request-Id"] = request_id
            prefill, decode = upstreams.pick()
            room = secrets.randbits(63) or 1
            try:
                with _post(prefill + self.path, prefill_request(body, room), headers,
                           timeout_s) as r:
                    answer = json.loads(r.read(limits.max_body_bytes))
                params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
            except urllib.error.HTTPError as e:
                return self._relay_error(f"prefill {prefill}", e, request_id)
            except _Unreachable as e:
                return self._bad_gateway(f"prefill {prefill} unreachable: {e}", request_id)
            except OSError as e:  # connected, then the answer broke off or timed out
                return self._bad_gateway(f"prefill {prefill} failed mid-answer: {e}",
                                         request_id)
            except ValueError as e:
                return self._bad_gateway(f"prefill {prefill} answered without JSON: {e}",
                                         request_id)
            if not params:
                # Normal when the first token ended the request; on every request it means
                # the prefill is not running PdkvConnector as kv_producer.
                self._log(f"prefill {prefill} returned no kv_transfer_params: decode {decode} "
                          "computes the prompt")
            try:
                upstream = _post(decode + self.path, decode_request(body, params), headers,
                                 timeout_s)
            except urllib.error.HTTPError as e:
                return self._relay_error(f"decode {decode}", e, request_id)
            except _Unreachable as e:
                return self._bad_gateway(f"decode {decode} unreachable: {e}", request_id)
            with upstream:
                # Chunked and flushed per read, so a streamed answer reaches the client
                # token by token rather than when the decode is done.
                self.send_response(upstream.status)
                self.send_header("Content-Type", upstream.headers.get("Content-Type",
                                                                      "application/json"))
                self.send_header("X-Request-Id", request_id)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while True:
                        chunk = upstream.read1(65536)
                        if not chunk:
                            break
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError as e:
                    # The status is sent already: closing without the last chunk is how
                    # the client learns the answer is cut short.
                    self._log(f"decode {decode} answer cut short: {e}")
                    self.close_connection = True

    return Handler


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
        return value
    return parse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pdkv.integrations.vllm.proxy",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default loopback only; 0.0.0.0 = every "
                         "interface: put it behind a firewall or an authenticating gateway)")
    ap.add_argument("--port", type=int, default=8000, help="0 = any free port (printed)")
    ap.add_argument("--prefill", action="append", required=True, help="prefill base URL")
    ap.add_argument("--decode", action="append", required=True, help="decode base URL")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--max-body-bytes", type=_positive(int), default=DEFAULT_MAX_BODY_BYTES,
                    help="larger request bodies are refused with 413")
    ap.add_argument("--max-concurrent", type=_positive(int), default=DEFAULT_MAX_CONCURRENT,
                    help="requests in flight at once; more are refused with 503")
    ap.add_argument("--max-connections", type=_positive(int), default=DEFAULT_MAX_CONNECTIONS,
                    help="client connections held at once; more are answered 503 and closed")
    ap.add_argument("--idle-timeout-s", type=_positive(float), default=DEFAULT_IDLE_TIMEOUT_S,
                    help="a client connection silent this long is closed")
    ap.add_argument("--serve-bootstrap", type=int, metavar="PORT", default=None,
                    help="also run pdkv's bootstrap server on this port")
    ap.add_argument("--bootstrap-host", default="0.0.0.0",
                    help="address the bootstrap server listens on (default every interface: "
                         "instances on other hosts register there; the cluster secret "
                         "authenticates them)")
    args = ap.parse_args(argv)
    limits = Limits(args.max_body_bytes, args.max_concurrent,
                    fit_descriptor_limit(args.max_connections), args.idle_timeout_s)
    bootstrap = None
    if args.serve_bootstrap is not None:
        import pdkv
        bootstrap = pdkv.BootstrapServer(args.bootstrap_host, args.serve_bootstrap)
        print(f"pdkv bootstrap server on port {bootstrap.port}", flush=True)
    server = BoundedServer((args.host, args.port),
                           make_handler(_Upstreams(args.prefill, args.decode), args.timeout_s,
                                        limits), limits.max_connections)
    print(f"pdkv proxy listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if bootstrap is not None:
            bootstrap.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A small disaggregated-serving proxy for vLLM instances running PdkvConnector.

    python -m pdkv.integrations.vllm.proxy --port 8000 \
        --prefill http://10.0.0.1:8100 --decode http://10.0.0.2:8200 [--serve-bootstrap 8998]

For each OpenAI completion or chat request it picks a prefill and a decode instance
(round robin), asks the prefill for one token with ``kv_transfer_params``
``{"do_remote_decode": true, "pdkv_room": R}`` (R: a fresh random 63-bit room), then
sends the original request to the decode with the ``kv_transfer_params`` the prefill
returned, and relays the decode's answer (streamed when the client asked for a stream).
``--serve-bootstrap PORT`` also runs pdkv's bootstrap server in this process. Standard
library only (http.server, urllib); one thread per connection.
"""
from __future__ import annotations

import argparse
import itertools
import json
import secrets
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_ROUTES = ("/v1/completions", "/v1/chat/completions")
_MAX_BODY_BYTES = 64 << 20


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
    out = dict(body)
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    out["stream"] = False
    out.pop("stream_options", None)
    out["kv_transfer_params"] = {"do_remote_decode": True, "pdkv_room": room}
    return out


def _post(url: str, body: dict, timeout: float):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def make_handler(upstreams: _Upstreams, timeout_s: float):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: one line per error only
            pass

        def _reply(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._reply(200, {"status": "ok"})
            else:
                self._reply(404, {"error": f"no route {self.path}"})

        def do_POST(self):
            if self.path not in _ROUTES:
                return self._reply(404, {"error": f"no route {self.path}"})
            try:
                length = int(self.headers.get("Content-Length", "0"))
                if not 0 < length <= _MAX_BODY_BYTES:
                    raise ValueError(f"body of {length} bytes")
                body = json.loads(self.rfile.read(length))
                if not isinstance(body, dict):
                    raise ValueError("body is not a JSON object")
            except ValueError as e:
                return self._reply(400, {"error": f"bad request: {e}"})
            prefill, decode = upstreams.pick()
            room = secrets.randbits(63) or 1
            try:
                with _post(prefill + self.path, prefill_request(body, room), timeout_s) as r:
                    params = json.loads(r.read()).get("kv_transfer_params")
            except (urllib.error.URLError, OSError, ValueError) as e:
                return self._reply(502, {"error": f"prefill {prefill} failed: {e}"})
            if not params:
                return self._reply(502, {"error": f"prefill {prefill} returned no "
                                                  "kv_transfer_params (is PdkvConnector on?)"})
            decode_body = dict(body, kv_transfer_params=params)
            try:
                upstream = _post(decode + self.path, decode_body, timeout_s)
            except urllib.error.HTTPError as e:
                return self._reply(e.code, {"error": f"decode {decode}: {e.read()[:500]!r}"})
            except (urllib.error.URLError, OSError) as e:
                return self._reply(502, {"error": f"decode {decode} failed: {e}"})
            with upstream:
                self.send_response(upstream.status)
                self.send_header("Content-Type", upstream.headers.get("Content-Type",
                                                                      "application/json"))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    chunk = upstream.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

    return Handler


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pdkv.integrations.vllm.proxy",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=8000, help="0 = any free port (printed)")
    ap.add_argument("--prefill", action="append", required=True, help="prefill base URL")
    ap.add_argument("--decode", action="append", required=True, help="decode base URL")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--serve-bootstrap", type=int, metavar="PORT", default=None,
                    help="also run pdkv's bootstrap server on this port")
    args = ap.parse_args(argv)
    bootstrap = None
    if args.serve_bootstrap is not None:
        import pdkv
        bootstrap = pdkv.BootstrapServer(args.host, args.serve_bootstrap)
        print(f"pdkv bootstrap server on port {bootstrap.port}", flush=True)
    server = ThreadingHTTPServer((args.host, args.port),
                                 make_handler(_Upstreams(args.prefill, args.decode),
                                              args.timeout_s))
    server.daemon_threads = True
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

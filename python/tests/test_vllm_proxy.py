"""The vLLM proxy as a real process over real HTTP, between stand-in engine HTTP servers
that answer as vLLM's OpenAI server with PdkvConnector does: they check the API key the
way ``vllm serve --api-key`` does, reject what vLLM's request validation rejects, echo
``X-Request-Id``, and can be told to return no transfer parameters or an error."""
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port: connection refused


def _vllm_error(message: str, status: int) -> bytes:
    return json.dumps({"error": {"message": message, "type": "BadRequestError", "param": None,
                                 "code": status}}).encode()


class Engine:
    """Records every request (path, body, headers); answers like a prefill or a decode.

    api_key: reject requests without ``Authorization: Bearer <key>`` (401).
    no_params: a prefill answers without kv_transfer_params (its first token was a stop
    token), as vLLM does. error: (status, content type, body) answered to every request.
    gate: a streamed decode sends its first event, then waits for this event to be set.
    """

    def __init__(self, role: str, api_key: str | None = None):
        self.role, self.api_key, self.requests = role, api_key, []
        self.no_params, self.error, self.gate = False, None, None
        engine = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, ctype, data):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                if self.headers.get("X-Request-Id"):
                    self.send_header("X-Request-Id", self.headers["X-Request-Id"])
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.requests.append((self.path, body, dict(self.headers)))
                if engine.api_key is not None and \
                        self.headers.get("Authorization") != f"Bearer {engine.api_key}":
                    return self._send(401, "application/json", b'{"error": "Unauthorized"}')
                if engine.error is not None:
                    return self._send(*engine.error)
                # vLLM's own request validation, for the options a max_tokens=1 request trips
                limit = body.get("max_completion_tokens", body.get("max_tokens"))
                least = body.get("min_tokens", body.get("min_completion_tokens"))
                if limit is not None and least is not None and least > limit:
                    return self._send(400, "application/json", _vllm_error(
                        f"min_tokens must be less than or equal to max_tokens={limit}, "
                        f"got {least}.", 400))
                if body.get("stream_options") and not body.get("stream"):
                    return self._send(400, "application/json", _vllm_error(
                        "Stream options can only be defined when `stream=True`.", 400))
                if engine.role == "prefill":
                    params = None if engine.no_params else {
                        "do_remote_prefill": True, "do_remote_decode": False,
                        "pdkv_room": body["kv_transfer_params"]["pdkv_room"],
                        "pdkv_bootstrap_addr": "10.1.1.1:8998", "pdkv_num_blocks": 3}
                    out = {"choices": [{"text": "x"}], "kv_transfer_params": params}
                    return self._send(200, "application/json", json.dumps(out).encode())
                if not body.get("stream"):
                    return self._send(200, "application/json",
                                      json.dumps({"choices": [{"text": "decoded"}]}).encode())
                # a stream: no length, ended by closing the connection, as an SSE reply is
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.close_connection = True
                for i in range(3):
                    self.wfile.write(b"data: {\"text\": \"t%d\"}\n\n" % i)
                    self.wfile.flush()
                    if i == 0 and engine.gate is not None:
                        assert engine.gate.wait(10)
                self.wfile.write(b"data: [DONE]\n\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def bodies(self):
        return [(path, body) for path, body, _ in self.requests]


@pytest.fixture
def start_proxy():
    """start_proxy(prefills, decodes) -> the proxy's URL; every process stopped at the end."""
    procs = []

    def start(prefills, decodes):
        argv = [sys.executable, "-m", "pdkv.integrations.vllm.proxy", "--host", "127.0.0.1",
                "--port", "0"]
        for url in prefills:
            argv += ["--prefill", url]
        for url in decodes:
            argv += ["--decode", url]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        line = p.stdout.readline()
        assert "listening on" in line, line
        return line.strip().rsplit(" ", 1)[1]

    yield start
    for p in procs:
        p.kill()
        p.wait(5)


@pytest.fixture
def proxy(start_proxy):
    prefill, decode = Engine("prefill"), Engine("decode")
    # round robin: the second prefill listed is a closed port
    yield start_proxy([prefill.url, DEAD], [decode.url]), prefill, decode
    prefill.server.shutdown()
    decode.server.shutdown()


def _post(url, body, headers=None):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read()


def _error(url, body, headers=None) -> urllib.error.HTTPError:
    with pytest.raises(urllib.error.HTTPError) as err:
        _post(url, body, headers)
    return err.value


def test_completion_goes_to_prefill_then_decode_with_the_transfer_params(proxy):
    url, prefill, decode = proxy
    status, _, data = _post(url + "/v1/completions",
                            {"model": "m", "prompt": "hello", "max_tokens": 20})
    assert status == 200 and json.loads(data) == {"choices": [{"text": "decoded"}]}
    (path, p_body), = prefill.bodies
    assert path == "/v1/completions" and p_body["max_tokens"] == 1 and p_body["stream"] is False
    room = p_body["kv_transfer_params"]["pdkv_room"]
    assert p_body["kv_transfer_params"]["do_remote_decode"] is True and 0 < room < 2 ** 63
    (_, d_body), = decode.bodies
    assert d_body["max_tokens"] == 20 and d_body["prompt"] == "hello"
    assert d_body["kv_transfer_params"] == {
        "do_remote_prefill": True, "do_remote_decode": False, "pdkv_room": room,
        "pdkv_bootstrap_addr": "10.1.1.1:8998", "pdkv_num_blocks": 3}


def test_streamed_chat_is_relayed_and_a_dead_prefill_is_a_502(proxy):
    url, prefill, decode = proxy
    status, ctype, data = _post(url + "/v1/chat/completions",
                                {"model": "m", "messages": [], "stream": True,
                                 "max_completion_tokens": 9})
    assert status == 200 and ctype == "text/event-stream"
    assert data.count(b"data: ") == 4 and data.endswith(b"data: [DONE]\n\n")
    assert prefill.bodies[0][1]["max_completion_tokens"] == 1
    assert decode.bodies[0][1]["stream"] is True
    err = _error(url + "/v1/completions", {"model": "m", "prompt": "x"})
    assert err.code == 502 and b"prefill http://127.0.0.1:9 " in err.read()


def test_a_completion_stream_reaches_the_client_as_the_decode_writes_it(proxy):
    url, prefill, decode = proxy
    decode.gate = threading.Event()
    req = urllib.request.Request(url + "/v1/completions", json.dumps(
        {"model": "m", "prompt": "p", "stream": True, "max_tokens": 5}).encode(),
        {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers.get("Content-Type") == "text/event-stream"
        # the decode holds the rest of its stream until the first event is through
        assert r.readline() == b'data: {"text": "t0"}\n'
        decode.gate.set()
        rest = r.read()
    assert rest.count(b"data: ") == 3 and rest.endswith(b"data: [DONE]\n\n")
    assert prefill.bodies[0][1]["stream"] is False and decode.bodies[0][1]["stream"] is True


def test_options_vllm_rejects_with_max_tokens_1_are_left_out_of_the_prefill_only(start_proxy):
    prefill, decode = Engine("prefill"), Engine("decode")
    url = start_proxy([prefill.url], [decode.url])
    status, _, _ = _post(url + "/v1/completions",
                         {"model": "m", "prompt": "p", "max_tokens": 20, "min_tokens": 5,
                          "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200
    (_, p_body), = prefill.bodies
    assert p_body["max_tokens"] == 1
    assert not {"min_tokens", "min_completion_tokens", "stream_options"} & p_body.keys()
    (_, d_body), = decode.bodies
    assert d_body["min_tokens"] == 5 and d_body["stream_options"] == {"include_usage": True}

    status, _, _ = _post(url + "/v1/chat/completions",
                         {"model": "m", "messages": [], "max_completion_tokens": 20,
                          "min_completion_tokens": 4})
    assert status == 200
    assert "min_completion_tokens" not in prefill.bodies[1][1]
    assert decode.bodies[1][1]["min_completion_tokens"] == 4
    prefill.server.shutdown()
    decode.server.shutdown()


def test_a_prefill_without_transfer_params_leaves_the_prompt_to_the_decode(proxy):
    url, prefill, decode = proxy
    prefill.no_params = True
    status, _, data = _post(url + "/v1/completions",
                            {"model": "m", "prompt": "hello", "max_tokens": 20,
                             "kv_transfer_params": {"stale": True}})
    assert status == 200 and json.loads(data) == {"choices": [{"text": "decoded"}]}
    assert len(prefill.bodies) == 1
    (_, d_body), = decode.bodies
    # the original request, with no transfer parameters: the decode computes the prompt
    assert d_body == {"model": "m", "prompt": "hello", "max_tokens": 20}


def test_authorization_and_request_id_reach_both_engines(start_proxy):
    prefill, decode = Engine("prefill", api_key="sk-1"), Engine("decode", api_key="sk-1")
    url = start_proxy([prefill.url], [decode.url])
    req = urllib.request.Request(url + "/v1/completions", json.dumps(
        {"model": "m", "prompt": "p", "max_tokens": 4}).encode(),
        {"Content-Type": "application/json", "Authorization": "Bearer sk-1",
         "X-Request-Id": "client-req-7"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200 and r.headers.get("X-Request-Id") == "client-req-7"
        r.read()
    for engine in (prefill, decode):
        (_, _, headers), = engine.requests
        assert headers["Authorization"] == "Bearer sk-1"
        assert headers["X-Request-Id"] == "client-req-7"

    # without an id from the client, both engines see one and the same, and so does it
    with urllib.request.urlopen(urllib.request.Request(
            url + "/v1/completions", json.dumps({"model": "m", "prompt": "p"}).encode(),
            {"Content-Type": "application/json", "Authorization": "Bearer sk-1"}),
            timeout=10) as r:
        given = r.headers.get("X-Request-Id")
        r.read()
    assert given and prefill.requests[1][2]["X-Request-Id"] == given
    assert decode.requests[1][2]["X-Request-Id"] == given

    # a wrong key is the engine's own 401, not a 502
    err = _error(url + "/v1/completions", {"model": "m", "prompt": "p"},
                 {"Authorization": "Bearer wrong"})
    assert err.code == 401 and json.loads(err.read()) == {"error": "Unauthorized"}
    assert len(decode.requests) == 2
    prefill.server.shutdown()
    decode.server.shutdown()


def test_upstream_errors_reach_the_client_as_the_upstream_sent_them(proxy):
    url, prefill, decode = proxy
    bad = _vllm_error("This model's maximum context length is 8 tokens.", 400)
    prefill.error = (400, "application/json", bad)
    err = _error(url + "/v1/completions", {"model": "m", "prompt": "p" * 99},
                 {"X-Request-Id": "r1"})
    assert (err.code, err.headers.get("Content-Type"), err.read()) == \
        (400, "application/json", bad)
    assert err.headers.get("X-Request-Id") == "r1"
    assert decode.requests == []

    prefill.error = None
    _error(url + "/v1/completions", {"model": "m", "prompt": "p"})  # the dead prefill's turn
    decode.error = (503, "text/plain; charset=utf-8", b"overloaded, try later")
    err = _error(url + "/v1/chat/completions", {"model": "m", "messages": [], "stream": True})
    assert (err.code, err.headers.get("Content-Type"), err.read()) == \
        (503, "text/plain; charset=utf-8", b"overloaded, try later")


def test_an_unreachable_decode_is_a_502_that_names_it(start_proxy):
    prefill = Engine("prefill")
    url = start_proxy([prefill.url], [DEAD])
    err = _error(url + "/v1/completions", {"model": "m", "prompt": "p"})
    body = json.loads(err.read())
    assert err.code == 502 and body["error"].startswith("decode http://127.0.0.1:9 ")
    assert len(prefill.requests) == 1
    prefill.server.shutdown()

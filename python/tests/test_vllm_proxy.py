"""The vLLM proxy as a real process over real HTTP, between two stand-in engine HTTP
servers that answer as vLLM's OpenAI server with PdkvConnector does."""
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Engine:
    """Records every request body; answers like a prefill or a decode instance."""

    def __init__(self, role: str):
        self.role, self.bodies = role, []
        engine = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.bodies.append((self.path, body))
                if engine.role == "prefill":
                    room = body["kv_transfer_params"]["pdkv_room"]
                    out = {"choices": [{"text": "x"}], "kv_transfer_params": {
                        "do_remote_prefill": True, "do_remote_decode": False,
                        "pdkv_room": room, "pdkv_bootstrap_addr": "10.1.1.1:8998",
                        "pdkv_num_blocks": 3}}
                    data = json.dumps(out).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                elif body.get("stream"):
                    data = b"".join(b"data: {\"text\": \"t%d\"}\n\n" % i for i in range(3)) + \
                        b"data: [DONE]\n\n"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                else:
                    data = json.dumps({"choices": [{"text": "decoded"}]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def proxy():
    prefill, decode = Engine("prefill"), Engine("decode")
    p = subprocess.Popen([sys.executable, "-m", "pdkv.integrations.vllm.proxy", "--host",
                          "127.0.0.1", "--port", "0", "--prefill", prefill.url, "--decode",
                          decode.url, "--prefill", "http://127.0.0.1:9"],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert "listening on" in line, line
    yield line.strip().rsplit(" ", 1)[1], prefill, decode
    p.kill()
    p.wait(5)
    prefill.server.shutdown()
    decode.server.shutdown()


def _post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read()


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
    # round robin: the second prefill listed is a closed port
    with pytest.raises(urllib.error.HTTPError) as err:
        _post(url + "/v1/completions", {"model": "m", "prompt": "x"})
    assert err.value.code == 502 and b"prefill http://127.0.0.1:9 failed" in err.value.read()

"""The whole vLLM path a user runs: OpenAI requests to pdkv's proxy (a real process),
which sends them to a prefill instance and then to a decode instance (real HTTP servers
driving PdkvConnector over real KV caches, in separate processes); the decode answers
once the KV landed and reports whether every byte is right."""
import json
import subprocess
import sys
import urllib.request

import pytest

torch = pytest.importorskip("torch")  # imported once here; the forked ranks inherit it
from engine_replay import Ranks  # noqa: E402
from vllm_http_engine import serve_main  # noqa: E402


def test_completions_through_the_proxy_land_the_prefill_kv_on_the_decode():
    with Ranks() as ranks:
        base = dict(heads=4, layout="NHD", block_size=4, rank=0, tp=1, extra={})
        ranks.start("p0", serve_main, dict(base, role="prefill"))
        ranks.start("d0", serve_main, dict(base, role="decode"))
        ranks.serve_bootstrap()
        urls = {m[1]: m[2] for m in ranks.expect("url", 2)}
        proxy = subprocess.Popen(
            [sys.executable, "-m", "pdkv.integrations.vllm.proxy", "--host", "127.0.0.1",
             "--port", "0", "--prefill", urls["p0"], "--decode", urls["d0"]],
            stdout=subprocess.PIPE, text=True)
        try:
            url = proxy.stdout.readline().strip().rsplit(" ", 1)[1]
            for seed, n_tokens in ((3, 13), (8, 20)):
                prompt = [seed] + list(range(100, 100 + n_tokens - 1))
                req = urllib.request.Request(
                    url + "/v1/completions", json.dumps({"model": "m", "prompt": prompt,
                                                         "max_tokens": 8}).encode(),
                    {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=60) as r:
                    out = json.loads(r.read())
                assert out["bytes_ok"] is True and out["load_errors"] == [], out
        finally:
            proxy.kill()
            proxy.wait(5)

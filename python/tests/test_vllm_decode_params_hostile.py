"""A client that reaches a vLLM decode instance directly writes its ``kv_transfer_params``
itself. Malformed ones (a room that is no integer, a page count out of range, an address
that is no host:port) must fail that request alone (the decode computes the prompt
itself) and leave the engine serving; and the decode loads KV only from a bootstrap
server it trusts: without a cluster secret its own or a listed one (never one a client
named), under a secret only with parameters a prefill of the cluster signed. Real
prefill and decode instances (HTTP servers driving PdkvConnector in separate processes,
vllm_http_engine.py), a real bootstrap server and the real proxy."""
import json
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest

torch = pytest.importorskip("torch")  # imported once here; the forked ranks inherit it
from engine_replay import Ranks  # noqa: E402
from pdkv.testing.secret_file import write_secret  # noqa: E402
from vllm_http_engine import serve_main  # noqa: E402


def _post(url: str, body: dict, timeout: float = 20.0) -> dict:
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class _Listener:
    """A well-formed address no one trusts: counts the connections it gets."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture
def cluster():
    """(urls by name, bootstrap address, proxy URL): a prefill p0, a decode d0."""
    with Ranks() as ranks:
        base = dict(heads=4, layout="NHD", block_size=4, rank=0, tp=1, extra={})
        ranks.start("p0", serve_main, dict(base, role="prefill"))
        ranks.start("d0", serve_main, dict(base, role="decode"))
        boot = ranks.serve_bootstrap()
        urls = {m[1]: m[2] for m in ranks.expect("url", 2)}
        proxy = subprocess.Popen(
            [sys.executable, "-m", "pdkv.integrations.vllm.proxy", "--host", "127.0.0.1",
             "--port", "0", "--prefill", urls["p0"], "--decode", urls["d0"]],
            stdout=subprocess.PIPE, text=True)
        try:
            yield urls, boot, proxy.stdout.readline().strip().rsplit(" ", 1)[1]
        finally:
            proxy.kill()
            proxy.wait(5)


def _lands(proxy_url: str, seed: int) -> None:
    """A request through the proxy: the prefill's KV lands on the decode, every byte."""
    out = _post(proxy_url, {"model": "m", "prompt": [seed, 100, 101, 102, 103],
                            "max_tokens": 4}, timeout=60)
    assert out.get("bytes_ok") is True and out["load_errors"] == [], out


def _hostile_params(boot: str, stranger: str) -> list[dict]:
    good = {"do_remote_prefill": True, "do_remote_decode": False, "pdkv_room": 12345,
            "pdkv_bootstrap_addr": boot, "pdkv_num_blocks": 1}
    return [dict(good, **change) for change in (
        {"pdkv_room": "abc"}, {"pdkv_room": -1}, {"pdkv_room": 1 << 64}, {"pdkv_room": 1.5},
        {"pdkv_room": True}, {"pdkv_room": None}, {"pdkv_room": [1]},
        {"pdkv_num_blocks": "1"}, {"pdkv_num_blocks": -1}, {"pdkv_num_blocks": 1 << 40},
        {"pdkv_num_blocks": 2.0},
        {"pdkv_bootstrap_addr": "evil"}, {"pdkv_bootstrap_addr": 12},
        {"pdkv_bootstrap_addr": "127.0.0.1:99999"}, {"pdkv_bootstrap_addr": "a b:80"},
        {"pdkv_bootstrap_addr": stranger},  # well-formed, but no one said to trust it
    )]


def test_malformed_or_untrusted_params_fail_only_their_request(cluster):
    urls, boot, proxy_url = cluster
    _lands(proxy_url, 3)
    stranger = _Listener()
    for params in _hostile_params(boot, stranger.addr):
        out = _post(urls["d0"], {"model": "m", "prompt": [7, 1], "max_tokens": 4,
                                 "kv_transfer_params": params})
        assert out.get("remote_kv") is False, (params, out)
    assert stranger.connections == 0
    _lands(proxy_url, 8)  # the engine still serves


def test_under_a_secret_only_signed_params_are_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("PDKV_SECRET_FILE", write_secret(tmp_path / "secret", b"s" * 32))
    with Ranks() as ranks:
        base = dict(heads=4, layout="NHD", block_size=4, rank=0, tp=1, extra={})
        ranks.start("p0", serve_main, dict(base, role="prefill"))
        ranks.start("d0", serve_main, dict(base, role="decode"))
        boot = ranks.serve_bootstrap()
        urls = {m[1]: m[2] for m in ranks.expect("url", 2)}
        prompt = [5, 100, 101, 102, 103]
        prefilled = _post(urls["p0"], {"model": "m", "prompt": prompt, "max_tokens": 1,
                                       "kv_transfer_params": {"do_remote_decode": True}})
        signed = prefilled["kv_transfer_params"]
        assert signed["pdkv_bootstrap_addr"] == boot and signed.get("pdkv_sig"), signed
        unsigned = {k: v for k, v in signed.items() if k != "pdkv_sig"}
        for forged in (unsigned, dict(signed, pdkv_sig="00" * 32), dict(signed, pdkv_sig="zz"),
                       dict(signed, pdkv_room=signed["pdkv_room"] + 1),
                       dict(signed, pdkv_num_blocks=signed["pdkv_num_blocks"] + 1)):
            out = _post(urls["d0"], {"model": "m", "prompt": prompt, "max_tokens": 4,
                                     "kv_transfer_params": forged})
            assert out.get("remote_kv") is False, (forged, out)
        out = _post(urls["d0"], {"model": "m", "prompt": prompt, "max_tokens": 4,
                                 "kv_transfer_params": signed}, timeout=60)
        assert out.get("bytes_ok") is True and out["load_errors"] == [], out


def test_a_listed_bootstrap_server_is_trusted_without_a_secret():
    from pdkv.integrations.settings import TransferSettings
    from pdkv.integrations.vllm.params import BootstrapTrust
    settings = TransferSettings.from_mapping({"bootstrap_addr": "10.0.0.1:8998",
                                              "trusted_bootstrap_addrs": ["10.0.0.2:8998"]})
    trust = BootstrapTrust(settings.bootstrap_addr, settings.trusted_bootstrap_addrs)
    params = {"pdkv_room": 1, "pdkv_num_blocks": 2}
    for addr, trusted in (("10.0.0.1:8998", True), ("10.0.0.2:8998", True),
                          ("10.0.0.3:8998", False), (None, True)):
        why = trust.refusal(dict(params, pdkv_bootstrap_addr=addr) if addr else params,
                            settings.bootstrap_addr)
        assert (why is None) == trusted, (addr, why)
    with pytest.raises(ValueError):
        TransferSettings.from_mapping({"bootstrap_addr": "10.0.0.1:8998",
                                       "trusted_bootstrap_addrs": ["no-port"]})

"""A route whose rank_ip hides a NUL byte ("127.0.0.1\\0evil") is refused by a real
`pdkv bootstrap` server (no cluster secret, so anyone may write a route), never stored and
never served to a decode. The host check read the address as a C string, which ends at
the NUL, so the whole string passed as 127.0.0.1 and was served back as it came.
"""
import json
import os
import subprocess
import urllib.error
import urllib.request

CLI = os.path.join(os.environ.get("PDKV_BIN_DIR", os.path.join("build", "bin")), "pdkv")


def registration(rank_ip: str) -> dict:
    return {"role": "Prefill", "world_size": 1, "dp_size": 1, "engine_rank": 0,
            "rank_ip": rank_ip, "rank_port": 30000, "enable_mla_l1_5_cache": False,
            "kv_item_lens": [4096, 4096], "kv_unit_lens": [256, 256], "state_item_lens": [],
            "state_unit_lens": [], "page_size": 16, "kv_head_num": 2, "total_kv_head_num": 2,
            "head_dim": 128, "dtype_bytes": 2, "page_layout": "NHD", "is_mla": False,
            "target_layer_num": 0, "draft_total_kv_head_num": 0, "draft_head_dim": 0}


def http(addr: str, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{addr}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_rank_ip_with_a_nul_byte_is_refused_and_never_served():
    env = dict(os.environ, PDKV_SECRET_FILE="")
    proc = subprocess.Popen([CLI, "bootstrap", "--host", "127.0.0.1", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on 127.0.0.1:" in line, line
        addr = "127.0.0.1:" + line.split("127.0.0.1:")[1].split()[0]
        route = "/route?engine_rank=0&target_dp_group=0"
        for bad in ("127.0.0.1\0evil", "127.0.0.1\0", "::1\0x", "localhost\0"):
            status, body = http(addr, "PUT", "/route", registration(bad))
            assert status == 400 and "rank_ip" in body, (repr(bad), status, body)
            status, body = http(addr, "GET", route)
            assert status == 404, (repr(bad), status, body)
        # The same registration with a clean address is stored and served as it came.
        status, body = http(addr, "PUT", "/route", registration("127.0.0.1"))
        assert status == 200, body
        status, body = http(addr, "GET", route)
        assert status == 200 and json.loads(body) == {"rank_ip": "127.0.0.1",
                                                      "rank_port": 30000}, body
    finally:
        proc.terminate()
        proc.wait(10)

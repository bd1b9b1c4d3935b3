"""Under a cluster secret, a prefill's report of which DP group serves a room (the
sglang decode's ``POST /query_dp_ranks`` reads it) is signed by the manager's native
bootstrap client, so the bootstrap server, which refuses unsigned writes, takes it; the
same report sent unsigned is refused with 401. A real bootstrap server and a real prefill
KVManager in this process, over loopback HTTP."""
import json
import logging
import urllib.error
import urllib.request

import numpy as np

import pdkv
from pdkv.integrations.sglang.prefill_info import RoomPlacementReporter
from pdkv.testing.secret_file import write_secret


def _post(addr: str, path: str, body: dict):
    req = urllib.request.Request(f"http://{addr}{path}", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, None


def test_room_placement_reports_are_signed_under_a_cluster_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("PDKV_SECRET_FILE", write_secret(tmp_path / "secret", b"p" * 32))
    server = pdkv.BootstrapServer("127.0.0.1", 0)
    addr = f"127.0.0.1:{server.port}"
    pool = np.zeros((8, 256), np.uint8)
    args = pdkv.KVArgs(kv_data_ptrs=[pool.ctypes.data], kv_data_lens=[pool.nbytes],
                       kv_item_lens=[256], layer_buffers=[[0]], is_mla=True, head_dim=256,
                       dtype_bytes=1, dp_size=2, tp_size=1, engine_rank=1)
    mgr = pdkv.KVManager(args, "prefill", addr)
    try:
        # Unsigned, as a stranger (or the old plain-HTTP reporter) would send it.
        assert _post(addr, "/register_dp_rank", {"bootstrap_room": 41, "dp_rank": 0})[0] == 401
        reporter = RoomPlacementReporter(mgr)
        reporter.report(addr, 42, 1)
        reporter.close()  # drains the queue
        status, placed = _post(addr, "/query_dp_ranks", {"bootstrap_rooms": [41, 42]})
        assert status == 200
        assert placed.get("42") == 1 and "41" not in placed, placed
    finally:
        mgr.shutdown()
        server.stop()


def test_a_refused_report_is_logged_not_raised(caplog):
    # No bootstrap server listens there: the reporter's thread logs and goes on.
    pool = np.zeros((8, 256), np.uint8)
    server = pdkv.BootstrapServer("127.0.0.1", 0)
    addr = f"127.0.0.1:{server.port}"
    args = pdkv.KVArgs(kv_data_ptrs=[pool.ctypes.data], kv_data_lens=[pool.nbytes],
                       kv_item_lens=[256], layer_buffers=[[0]], is_mla=True, head_dim=256,
                       dtype_bytes=1)
    mgr = pdkv.KVManager(args, "prefill", addr)
    try:
        reporter = RoomPlacementReporter(mgr)
        with caplog.at_level(logging.ERROR):
            reporter.report("127.0.0.1:1", 7, 0)
            reporter.close()
        assert any("could not tell bootstrap 127.0.0.1:1 room 7" in r.message
                   for r in caplog.records), caplog.text
    finally:
        mgr.shutdown()
        server.stop()

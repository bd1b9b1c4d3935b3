"""pdkv's Prometheus metrics, scraped for real: a prefill rank in its own process and two
decode ranks in this one move real KV over loopback; both processes' endpoints are read
over HTTP, and an engine's own prometheus_client registry carries the same families.

Checked: the exposition parses, every family has # HELP and # TYPE, counters end in
_total, durations are _seconds and sizes _bytes (no _ms), role / cause / stage are
labels, every counter only grows between scrapes, histograms are consistent, one
endpoint serves every manager of a process. `promtool check metrics` runs when installed
(Debian's prometheus package; not in install-deps.sh, ~100 MB, so usually skipped)."""
import multiprocessing as mp
import re
import shutil
import subprocess
import threading
import traceback
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

import pdkv
import pdkv.metrics
from pdkv.testing import fast_config, kv_args_from_buffers, wait_terminal

CTX = mp.get_context("spawn")
PAGES = 8


def _args(buffers, rank, dp_size=1):
    """MLA, one page = 512 bytes per buffer. Decodes here are two DP ranks (rank 0 and 1),
    each receiving whole rooms."""
    return kv_args_from_buffers(buffers, engine_rank=rank, dp_size=dp_size, page_size=4,
                                layer_buffers=[[i] for i in range(len(buffers))],
                                kv_head_num=1, total_kv_head_num=1, head_dim=64,
                                dtype_bytes=2, is_mla=True)


def _buffers(seed=None):
    bufs = [np.zeros((32, 4 * 64 * 2), np.uint8) for _ in range(2)]
    if seed is not None:
        for i, b in enumerate(bufs):
            b[:] = (np.arange(b.size).reshape(b.shape) * 7 + i + seed) % 251
    return bufs


def prefill_process(addr, commands, replies):
    """A prefill rank with its own metrics endpoint; sends the rooms it is told to."""
    try:
        bufs = _buffers(seed=3)
        with pdkv.KVManager(_args(bufs, 0), "prefill", addr,
                            config=fast_config(metrics_port=0, engine_backend="tcp")) as mgr:
            replies.put(("ready", mgr.metrics_port))
            while True:
                rooms = commands.get(timeout=60)
                if rooms is None:
                    break
                senders = []
                for room in rooms:
                    s = pdkv.KVSender(mgr, addr, room)
                    s.init(PAGES)
                    s.send(np.arange(PAGES))
                    senders.append(s)
                replies.put(("sent", [int(wait_terminal(s, 20.0)) for s in senders]))
    except Exception:
        replies.put(("error", traceback.format_exc()))


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        return r.read().decode()


def listening_addresses(port):
    """IPv4 addresses a socket of this host listens on at `port` (/proc/net/tcp)."""
    found = set()
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
                found.add(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def samples(text):
    """{(sample name, sorted labels): value} and the parsed families."""
    families = list(text_string_to_metric_families(text))
    out = {}
    for f in families:
        for s in f.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out, families


def check_conventions(text):
    """What Prometheus' naming and exposition conventions ask of every family."""
    helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert helps == set(types), "every family needs both # HELP and # TYPE"
    _, families = samples(text)
    assert families
    for f in families:
        declared = f.name + "_total" if f.type == "counter" else f.name
        assert declared in types, f.name
        assert f.name.startswith("pdkv_")
        assert not re.search(r"_(ms|millis|us|kb|mb|kib|mib)(_|$)", f.name), f.name
        assert "prefill" not in f.name and "decode" not in f.name, f"role in name: {f.name}"
        if f.type == "counter":
            assert types[declared] == "counter"
        for s in f.samples:
            assert s.labels.get("role") in ("prefill", "decode"), s
            assert s.value >= 0, s
        if f.type == "histogram":
            by_series = {}
            for s in f.samples:
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                by_series.setdefault(key, {}).setdefault(s.name, []).append(s)
            for series in by_series.values():
                buckets = [s.value for s in series[f.name + "_bucket"]]
                assert buckets == sorted(buckets), "buckets are cumulative"
                assert series[f.name + "_bucket"][-1].labels["le"] == "+Inf"
                assert buckets[-1] == series[f.name + "_count"][0].value
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                           capture_output=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr


def assert_counters_grew(before, after):
    """Every counter, histogram bucket, _sum and _count of `before` is in `after`, >=."""
    _, families = samples(after)
    monotonic = {s.name for f in families if f.type in ("counter", "histogram")
                 for s in f.samples}
    for key, value in before.items():
        if key[0] in monotonic:
            assert key in samples(after)[0], key
            assert samples(after)[0][key] >= value, (key, value)


def value(text, name, **labels):
    return samples(text)[0].get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def cluster():
    """(bootstrap addr, prefill commands, prefill replies, prefill metrics port)."""
    server = pdkv.BootstrapServer("127.0.0.1", 0)
    addr = f"127.0.0.1:{server.port}"
    commands, replies = CTX.Queue(), CTX.Queue()
    proc = CTX.Process(target=prefill_process, args=(addr, commands, replies))
    proc.start()
    kind, port = replies.get(timeout=60)
    assert kind == "ready", port
    yield addr, commands, replies, port
    commands.put(None)
    proc.join(30)
    if proc.is_alive():
        proc.kill()
    server.stop()


def run_round(addr, decodes, commands, replies, rooms):
    """Each room to one of the decode managers (by parity); checks the bytes landed."""
    receivers = []
    for room in rooms:
        mgr, bufs = decodes[room % 2]
        r = pdkv.KVReceiver(mgr, addr, room)
        r.init()
        dst = np.arange(PAGES) + PAGES * (room % 4)  # rooms of one round never share pages
        r.send_metadata(dst)
        receivers.append((r, bufs, dst))
    commands.put(list(rooms))
    kind, states = replies.get(timeout=60)
    assert kind == "sent", states
    assert states == [int(pdkv.KVPoll.Success)] * len(rooms)
    expected = _buffers(seed=3)
    for r, bufs, dst in receivers:
        assert wait_terminal(r, 20.0) == pdkv.KVPoll.Success
        for b, e in zip(bufs, expected):
            np.testing.assert_array_equal(b[dst], e[:PAGES])


def test_endpoints_follow_conventions_and_counters_only_grow(cluster):
    addr, commands, replies, prefill_port = cluster
    bufs0, bufs1 = _buffers(), _buffers()
    cfg = fast_config(metrics_port=0, engine_backend="tcp")
    with pdkv.KVManager(_args(bufs0, 0, 2), "decode", addr, config=cfg) as d0, \
            pdkv.KVManager(_args(bufs1, 1, 2), "decode", addr, config=cfg) as d1:
        # One endpoint per process: the second manager joined the first one's port.
        assert d0.metrics_port == d1.metrics_port > 0
        # Loopback unless PDKV_METRICS_HOST opens it: the kernel's own listening table.
        assert listening_addresses(d0.metrics_port) == {"127.0.0.1"}
        decodes = {0: (d0, bufs0), 1: (d1, bufs1)}

        run_round(addr, decodes, commands, replies, [11, 12])
        p1, d1_text = scrape(prefill_port), scrape(d0.metrics_port)
        run_round(addr, decodes, commands, replies, [13, 14, 15])
        # A failure on the decode side: counted under its cause label.
        aborted = pdkv.KVReceiver(d0, addr, 99)
        aborted.abort()
        p2, d2_text = scrape(prefill_port), scrape(d0.metrics_port)

        for text in (p1, d1_text, p2, d2_text):
            check_conventions(text)
        assert_counters_grew(samples(p1)[0], p2)
        assert_counters_grew(samples(d1_text)[0], d2_text)

        assert value(p2, "pdkv_rooms_total", role="prefill", rank="0", outcome="success") == 5
        assert value(p2, "pdkv_written_bytes_total", role="prefill", rank="0") == \
            5 * PAGES * 2 * 512
        for stage in ("queue_wait", "planning", "wire", "status_delivery", "end_to_end"):
            assert value(p2, "pdkv_room_stage_seconds_count", role="prefill", rank="0",
                         stage=stage) == 5, stage
        assert value(p2, "pdkv_room_bytes_sum", role="prefill", rank="0") == 5 * PAGES * 1024
        assert value(p2, "pdkv_room_bytes_count", role="prefill", rank="0") == 5
        # Both decode managers of this process are on its one endpoint.
        assert value(d2_text, "pdkv_rooms_total", role="decode", rank="0",
                     outcome="success") == 2
        assert value(d2_text, "pdkv_rooms_total", role="decode", rank="1",
                     outcome="success") == 3
        assert value(d2_text, "pdkv_room_failures_total", role="decode", rank="0",
                     cause="aborted_locally") == 1
        assert value(d2_text, "pdkv_room_stage_seconds_count", role="decode", rank="1",
                     stage="end_to_end") == 3
        # Each room has one decode rank, so its Success status rode its last data batch
        # (PDKV_STATUS_IN_BAND, on by default; a tcp path: notes ride tcp only, so these
        # managers name it) and was counted on both sides.
        assert value(p2, "pdkv_statuses_in_band_total", role="prefill", rank="0") == 5
        assert value(d2_text, "pdkv_statuses_in_band_total", role="decode", rank="0") == 2
        assert value(d2_text, "pdkv_statuses_in_band_total", role="decode", rank="1") == 3
        # A fixed port other than the running one is refused, naming the running one.
        with pytest.raises(RuntimeError, match=f"port {d0.metrics_port}"):
            pdkv.metrics.serve(port=1 if d0.metrics_port != 1 else 2)
        with pdkv.metrics.serve(port=0) as joined:
            assert joined.port == d0.metrics_port


def test_collector_puts_pdkv_on_the_engines_own_registry(cluster):
    addr, commands, replies, _ = cluster
    registry = CollectorRegistry()
    pdkv.metrics.register(registry)
    app = make_wsgi_app(registry)

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    httpd = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        bufs0, bufs1 = _buffers(), _buffers()
        with pdkv.KVManager(_args(bufs0, 0, 2), "decode", addr, config=fast_config(engine_backend="tcp")) as d0, \
                pdkv.KVManager(_args(bufs1, 1, 2), "decode", addr,
                               config=fast_config(engine_backend="tcp")) as d1:
            assert d0.metrics_port == -1  # no pdkv port: the engine's registry serves them
            run_round(addr, {0: (d0, bufs0), 1: (d1, bufs1)}, commands, replies, [21, 22])
            text = scrape(httpd.server_port)
            assert value(text, "pdkv_rooms_total", role="decode", rank="0",
                         outcome="success") == 1
            assert value(text, "pdkv_rooms_total", role="decode", rank="1",
                         outcome="success") == 1
            _, families = samples(text)
            types = {f.name: f.type for f in families}
            assert types["pdkv_rooms"] == "counter"
            assert types["pdkv_room_stage_seconds"] == "histogram"
            assert types["pdkv_active_rooms"] == "gauge"
            assert "# HELP pdkv_room_failures_total" in generate_latest(registry).decode()
    finally:
        httpd.shutdown()

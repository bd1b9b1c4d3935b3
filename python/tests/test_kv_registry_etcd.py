"""The etcd registry (PDKV_REGISTRY=etcd) across real processes and a real etcd: prefill
and decode ranks find each other through etcd alone (no bootstrap server runs), routes of
a killed rank expire with its lease, a live decode follows a rank that was killed and
restarted, and rooms survive the loss of an etcd leader. (A route rewritten in etcd by
someone else is a case of the hostile-peer suite, python/tests/test_hostile_peers.py.)
Skipped only when /usr/bin/etcd is absent (Debian package etcd-server)."""
import time
import uuid

import pytest

import pdkv
from pdkv.testing.etcd import EtcdCluster, etcd_binary
from pdkv.testing import poll_until
from kv_harness import Cluster, SerialDecode, Shape
from test_kv_e2e import assert_all_succeeded

pytestmark = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd is not installed (/usr/bin/etcd, etcd-server)")

SUCCESS, FAILED = int(pdkv.KVPoll.Success), int(pdkv.KVPoll.Failed)
TTL_S = 2


def registry_env(etcd: EtcdCluster, prefix: str, **more) -> dict:
    return etcd.registry_env(prefix, TTL_S, **more)


def unique_prefix() -> str:
    return "/pdkv-test-" + uuid.uuid4().hex[:8]


def wait_keys(etcd: EtcdCluster, prefix: str, present: bool, timeout: float) -> float:
    """Seconds until some key under prefix exists (present) or none does; fails at timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if bool(etcd.keys(prefix + "/")) == present:
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"keys under {prefix} still {'absent' if present else 'present'} "
                         f"after {timeout} s: {etcd.keys(prefix + '/')}")


def test_heterogeneous_tp_ranks_find_each_other_through_etcd():
    with EtcdCluster(1) as etcd:
        prefix = unique_prefix()
        env = registry_env(etcd, prefix)
        # No bootstrap server: the instance name is only a key in etcd.
        with Cluster(pdkv, Shape(heads=8), p_tp=4, d_tp=2, rooms=(11, 12, 13), pages=6,
                     addr="prefill-a:0", env=env) as c:
            assert_all_succeeded(c.start().run())
            keys = etcd.keys(prefix + "/")
            assert keys == [f"{prefix}/instances/prefill-a:0/ranks/{r}" for r in range(4)]
        # A clean shutdown revokes the leases at once, long before their TTL.
        wait_keys(etcd, prefix, present=False, timeout=1.0)


def test_kill_9_of_a_prefill_rank_removes_its_route_within_the_ttl():
    with EtcdCluster(1) as etcd:
        prefix = unique_prefix()
        env = registry_env(etcd, prefix, PDKV_BOOTSTRAP_TIMEOUT_S="1.5")
        with Cluster(pdkv, Shape(), p_tp=1, d_tp=0, rooms=(21,), addr="prefill-k:0",
                     env=env, timeout=5) as prefill:
            prefill.start()
            assert etcd.keys(prefix + "/")
            prefill.kill("prefill", 0)
            gone_after = wait_keys(etcd, prefix, present=False, timeout=TTL_S + 1.0)
            assert gone_after <= TTL_S + 1.0
            # A new room to the dead instance fails with a reason naming etcd, not a hang.
            with Cluster(pdkv, Shape(), p_tp=0, d_tp=1, rooms=(22,), addr="prefill-k:0",
                         env=env, timeout=10) as decode:
                start = time.monotonic()
                done = decode.start().run(timeout=20)
                report = done[("decode", 0)]
                assert report["states"][22] == FAILED
                assert "registered in etcd at" in report["reasons"][22], report["reasons"]
                assert time.monotonic() - start < 10


def test_a_live_decode_fails_its_next_room_to_a_killed_rank_then_uses_its_restart():
    with EtcdCluster(1) as etcd:
        prefix = unique_prefix()
        # Timeouts far beyond what the test allows itself: a room that fails here failed by
        # liveness or by the registry's watch, not by waiting them out.
        env = registry_env(etcd, prefix, PDKV_BOOTSTRAP_TIMEOUT_S="20",
                           PDKV_WAITING_TIMEOUT_S="30")
        rooms = (61, 62, 63)
        with SerialDecode(Shape(), "prefill-r:0", env) as decode:
            with Cluster(pdkv, Shape(), p_tp=1, d_tp=0, rooms=(61,), addr="prefill-r:0",
                         env=env, timeout=30) as first:
                first.start()
                first.go.value = 1
                served = decode.room(61, rooms)  # the decode caches the rank's route
                assert served["state"] == SUCCESS and served["bytes_ok"], served
                first.kill("prefill", 0)
                # Its next room, opened while etcd may still hold the dead rank's route:
                # failed with a reason (liveness, or the route's expiry), not a hang.
                lost = decode.room(62, rooms, timeout=25)
                assert lost["state"] == FAILED, lost
                assert lost["cause"] in (pdkv.FailureCause.PeerDead,
                                         pdkv.FailureCause.BootstrapFailed), lost
                assert "prefill" in lost["reason"], lost
                assert lost["elapsed"] < TTL_S + 3.0, lost
            wait_keys(etcd, prefix, present=False, timeout=TTL_S + 1.0)
            # The rank restarts: a new process, a new control endpoint, a new route.
            with Cluster(pdkv, Shape(), p_tp=1, d_tp=0, rooms=(63,), addr="prefill-r:0",
                         env=env, timeout=30) as second:
                second.start()
                second.go.value = 1
                again = decode.room(63, rooms)
                assert again["state"] == SUCCESS and again["bytes_ok"], again


def test_rooms_survive_the_kill_9_of_the_etcd_leader():
    with EtcdCluster(3) as etcd:
        prefix = unique_prefix()
        env = registry_env(etcd, prefix)
        with Cluster(pdkv, Shape(), p_tp=2, d_tp=0, rooms=(31, 32, 33, 34), addr="prefill-l:0",
                     env=env, timeout=30) as prefill:
            prefill.start()
            prefill.go.value = 1
            with Cluster(pdkv, Shape(), p_tp=0, d_tp=1, rooms=(31, 32), addr="prefill-l:0",
                         env=env, timeout=30) as first:
                first.start(wait_ready=False)
                etcd.kill(etcd.leader())  # while the first decode resolves its rooms
                assert_all_succeeded(first.run(timeout=40))
            # A decode that starts after the loss reads and watches the surviving members.
            with Cluster(pdkv, Shape(), p_tp=0, d_tp=1, rooms=(33, 34), addr="prefill-l:0",
                         env=env, timeout=30) as second:
                assert_all_succeeded(second.start().run(timeout=40))
            prefill.collect(lambda: ("prefill", 0) in prefill.done and ("prefill", 1) in
                            prefill.done, 30)
            assert_all_succeeded(prefill.done)


def test_etcd_down_spares_bootstrapped_rooms_fails_new_ones_and_recovers():
    with EtcdCluster(1) as etcd:
        prefix = unique_prefix()
        env = registry_env(etcd, prefix, PDKV_BOOTSTRAP_TIMEOUT_S="40")
        with Cluster(pdkv, Shape(), p_tp=1, d_tp=0, rooms=(41, 42), addr="prefill-d:0",
                     env=env, timeout=40) as prefill:
            prefill.start()
            with Cluster(pdkv, Shape(), p_tp=0, d_tp=1, rooms=(41,), addr="prefill-d:0",
                         env=env, timeout=30) as bootstrapped:
                bootstrapped.start()
                time.sleep(1.0)  # room 41 resolved its route and pre-allocated
                etcd.kill(0)
                prefill.go.value = 1
                assert_all_succeeded(bootstrapped.run(timeout=30))
            # etcd fully down: a new room fails within its bootstrap timeout, naming etcd.
            bootstrap_timeout_s = 2.0
            short = dict(env, PDKV_BOOTSTRAP_TIMEOUT_S=str(bootstrap_timeout_s))
            with Cluster(pdkv, Shape(), p_tp=0, d_tp=1, rooms=(43,), addr="prefill-d:0",
                         env=short, timeout=10) as refused:
                done = refused.start().run(timeout=20)
                report = done[("decode", 0)]
                assert report["states"][43] == FAILED
                assert "etcd at" in report["reasons"][43], report["reasons"]
                assert "not reachable" in report["reasons"][43], report["reasons"]
                # Within the timeout, measured from the KVReceiver's construction (slack:
                # the 2 ms poll loop and a loaded machine's scheduling).
                assert report["elapsed"][43] <= bootstrap_timeout_s + 0.75, report["elapsed"]
            # etcd back: the same prefill is found again and room 42 succeeds.
            etcd.restart(0)
            with Cluster(pdkv, Shape(), p_tp=0, d_tp=1, rooms=(42,), addr="prefill-d:0",
                         env=env, timeout=30) as after:
                assert_all_succeeded(after.start().run(timeout=40))
            prefill.collect(lambda: ("prefill", 0) in prefill.done, 30)
            assert_all_succeeded(prefill.done)


def start_bootstrap_from_etcd(env: dict, instance: str):
    """`pdkv bootstrap --registry etcd --instance NAME --port 0`; (process, "host:port")."""
    import os
    import subprocess
    binary = os.path.join(os.environ.get("PDKV_BIN_DIR", "build/bin"), "pdkv")
    proc = subprocess.Popen([binary, "bootstrap", "--registry", "etcd", "--instance", instance,
                             "--host", "127.0.0.1", "--port", "0"],
                            env=dict(os.environ, **env), stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert "listening on 127.0.0.1:" in line, line
    port = int(line.split("127.0.0.1:")[1].split()[0])
    return proc, f"127.0.0.1:{port}"


def http_get(addr: str, path: str):
    import json
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_bootstrap_serves_the_etcd_routes_to_http_only_decodes():
    with EtcdCluster(1) as etcd:
        prefix = unique_prefix()
        env = registry_env(etcd, prefix)
        proc, addr = start_bootstrap_from_etcd(env, "prefill-h:0")
        try:
            with Cluster(pdkv, Shape(), p_tp=2, d_tp=0, rooms=(51,), addr="prefill-h:0",
                         env=env, timeout=30) as prefill:
                prefill.start()
                prefill.go.value = 1
                # The server learns the ranks through its etcd watch: a moment after they
                # registered, not at once (reading at once saw 1 of 2 under load).
                def both_ranks():
                    got = http_get(addr, "/route?engine_rank=-1&target_dp_group=-1")
                    return got if got[0] == 200 and got[1].get("registered_ranks") == 2 else None
                status, info = poll_until(both_ranks, 5.0, 0.02,
                                          "the bootstrap server to see both prefill ranks")
                assert status == 200 and info["registered_ranks"] == 2, info
                status, rank = http_get(addr, "/route?engine_rank=1&target_dp_group=0")
                assert status == 200 and rank["rank_port"] > 0, rank
                status, _ = http_get(addr, "/instances")
                assert status == 200
                # A decode on the plain HTTP registry finds the etcd-registered ranks.
                with Cluster(pdkv, Shape(), p_tp=0, d_tp=1, rooms=(51,), addr=addr,
                             timeout=30) as decode:
                    assert_all_succeeded(decode.start().run(timeout=40))
            # The prefill ranks shut down cleanly: their routes are gone from etcd at once.
            wait_keys(etcd, prefix, present=False, timeout=1.0)
            deadline = time.monotonic() + 1.0  # the server's watch reports it
            while True:
                status, err = http_get(addr, "/route?engine_rank=-1&target_dp_group=-1")
                if status == 404 or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            assert status == 404 and "etcd" in err["error"], err
        finally:
            proc.terminate()
            assert proc.wait(10) == 0

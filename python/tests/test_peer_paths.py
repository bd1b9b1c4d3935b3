"""Which path each peer's bytes take, as the KV managers report it: a prefill rank in its
own process writes real KV into a decode rank in this one (one host, one namespace: shm);
both sides report the path in peer_paths() and in the pdkv_peer_path metric, and a decode
that requires a path the pair cannot have (ucx, not offered) is refused by its prefill.
Every byte is checked."""
import multiprocessing as mp
import traceback

import numpy as np

import pdkv
from pdkv.testing import fast_config, kv_args_from_buffers, wait_terminal

CTX = mp.get_context("spawn")
PAGES = 8


def _args(buffers, rank=0):
    return kv_args_from_buffers(buffers, engine_rank=rank, dp_size=1, page_size=4,
                                layer_buffers=[[i] for i in range(len(buffers))],
                                kv_head_num=1, total_kv_head_num=1, head_dim=64,
                                dtype_bytes=2, is_mla=True)


def _buffers(seed=None):
    bufs = [np.zeros((32, 4 * 64 * 2), np.uint8) for _ in range(2)]
    if seed is not None:
        for i, b in enumerate(bufs):
            b[:] = (np.arange(b.size).reshape(b.shape) * 7 + i + seed) % 251
    return bufs


def prefill_process(addr, require_path, replies):
    try:
        cfg = fast_config(engine_backend="auto", engine_require_path=require_path)
        bufs = _buffers(seed=3)  # alive as long as the manager sends from them
        with pdkv.KVManager(_args(bufs), "prefill", addr, config=cfg) as mgr:
            replies.put(("ready", mgr.engine_endpoint))
            s = pdkv.KVSender(mgr, addr, 1)
            s.init(PAGES)
            s.send(np.arange(PAGES))
            state = int(wait_terminal(s, 20.0))
            replies.put(("done", state, mgr.peer_paths(), mgr.metrics_text()))
    except Exception:
        replies.put(("error", traceback.format_exc()))


def run_pair(require_path="tcp"):  # tcp: any path
    server = pdkv.BootstrapServer("127.0.0.1", 0)
    addr = f"127.0.0.1:{server.port}"
    replies = CTX.Queue()
    p = CTX.Process(target=prefill_process, args=(addr, require_path, replies))
    p.start()
    try:
        kind, *rest = replies.get(timeout=60)
        assert kind == "ready", rest
        prefill_endpoint = rest[0]
        bufs = _buffers()
        with pdkv.KVManager(_args(bufs), "decode", addr,
                            config=fast_config(engine_backend="auto")) as mgr:
            r = pdkv.KVReceiver(mgr, addr, 1)
            r.init()
            r.send_metadata(np.arange(PAGES))
            decode_state = int(wait_terminal(r, 20.0))
            kind, *rest = replies.get(timeout=60)
            assert kind == "done", rest
            return dict(prefill_endpoint=prefill_endpoint, decode_endpoint=mgr.engine_endpoint,
                        decode_state=decode_state, prefill_state=rest[0], prefill_paths=rest[1],
                        prefill_metrics=rest[2], decode_paths=mgr.peer_paths(),
                        decode_metrics=mgr.metrics_text(), bytes_ok=all(
                            np.array_equal(b[:PAGES], e[:PAGES])
                            for b, e in zip(bufs, _buffers(seed=3))))
    finally:
        p.join(30)
        server.stop()


def _metric(text, role, path):
    for line in text.splitlines():
        if line.startswith("pdkv_peer_path{") and f'role="{role}"' in line and \
                f'path="{path}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no pdkv_peer_path sample for {role}/{path} in:\n{text}")


def test_one_host_pair_takes_shm_and_both_sides_say_so():
    r = run_pair()
    assert r["decode_state"] == int(pdkv.KVPoll.Success)
    assert r["prefill_state"] == int(pdkv.KVPoll.Success)
    assert r["bytes_ok"]
    to_decode = r["prefill_paths"][r["decode_endpoint"]]
    assert to_decode["path"] == "shm" and to_decode["direction"] == "to", to_decode
    from_prefill = r["decode_paths"][r["prefill_endpoint"]]
    assert from_prefill["path"] == "shm" and from_prefill["direction"] == "from", from_prefill
    assert _metric(r["prefill_metrics"], "prefill", "shm") == 1
    assert _metric(r["prefill_metrics"], "prefill", "tcp") == 0
    assert _metric(r["decode_metrics"], "decode", "shm") == 1


def test_a_path_below_the_required_one_is_refused():
    # No cuda_ipc between host buffers: the prefill refuses the decode rather than use shm,
    # the room fails, and the decode's pages keep their zeros.
    r = run_pair(require_path="cuda_ipc")
    assert r["prefill_state"] == int(pdkv.KVPoll.Failed)
    assert not r["bytes_ok"]
    assert r["decode_endpoint"] not in r["prefill_paths"]


def test_a_floor_below_the_best_path_changes_nothing():
    r = run_pair(require_path="ucx")  # one host: shm ranks above ucx
    assert r["decode_state"] == int(pdkv.KVPoll.Success) and r["bytes_ok"]
    assert r["prefill_paths"][r["decode_endpoint"]]["path"] == "shm"


def test_config_names_the_path_floor():
    assert pdkv.Config(engine_require_path="shm").engine_require_path == "shm"
    try:
        pdkv.Config(engine_require_path="rdma")
    except ValueError as e:
        assert "PDKV_ENGINE_REQUIRE_PATH" in str(e)
    else:
        raise AssertionError("an unknown path floor was accepted")

"""pdkv's sglang classes across real processes, selected through sglang's own
get_kv_class after install(): TP 1->2 and 2->1 with per-layer K and V buffers, MLA, and a
killed prefill reaching the decode as KVPoll.Failed with its reason."""
import time

import pytest

torch = pytest.importorskip("torch")  # imported once here; the forked ranks inherit it
import pdkv  # noqa: E402
from engine_replay import FAILURE_BOUND_S, Ranks  # noqa: E402
from sglang_replay import decode_main, prefill_main  # noqa: E402

SUCCESS, FAILED = int(pdkv.KVPoll.Success), int(pdkv.KVPoll.Failed)
REQUESTS = [(101, 21, 1), (202, 8, 2)]


def _run(p_tp, d_tp, heads, mla, requests, chunk_pages=2, hang=False, device=False,
         env=None):
    with Ranks() as ranks:
        base = dict(heads=heads, mla=mla, page_size=4, requests=requests,
                    chunk_pages=chunk_pages, device=device, env=env)
        for r in range(p_tp):
            ranks.start(f"p{r}", prefill_main, dict(base, rank=r, tp=p_tp, hang=hang))
        for r in range(d_tp):
            ranks.start(f"d{r}", decode_main, dict(base, rank=r, tp=d_tp))
        ranks.serve_bootstrap()
        ranks.expect("ready", p_tp + d_tp)
        if hang:
            ranks.expect("waiting", d_tp)
            ranks.expect("in_forward", p_tp)
            time.sleep(0.2)
            killed_at = time.time()
            for r in range(p_tp):
                ranks.kill(f"p{r}")
            return {m[1]: m[2] for m in ranks.expect("done", d_tp)}, killed_at
        return {m[1]: m[2] for m in ranks.expect("done", p_tp + d_tp)}, None


@pytest.mark.parametrize("p_tp,d_tp,heads,mla", [(1, 2, 4, False), (2, 1, 4, False),
                                                 (1, 2, 1, True)])
def test_prefill_to_decode_lands_every_byte(p_tp, d_tp, heads, mla):
    done, _ = _run(p_tp, d_tp, heads, mla, REQUESTS)
    for r in range(p_tp):
        for room, (state, latency, total) in done[f"p{r}"]["outcome"].items():
            assert state == SUCCESS, (r, room)
            assert latency is not None and latency > 0 and total > 0
    for r in range(d_tp):
        for room, o in done[f"d{r}"]["outcome"].items():
            assert o["state"] == SUCCESS, (r, room, o["reason"])
            assert o["bytes_ok"], f"decode {r} room {room}: wrong KV bytes"
            assert o["meta_ok"], f"decode {r} room {room}: wrong metadata row"


@pytest.mark.parametrize("p_tp,d_tp,heads,mla", [(1, 2, 4, False), (1, 1, 1, True)])
def test_device_pools_land_every_byte(p_tp, d_tp, heads, mla):
    """KV pools in (fake) CUDA memory on both sides, labelled VRAM as sglang does, aux in
    host memory, checksum on; the decode's bytes are read back from its device pools."""
    from fake_cuda_array import fake_cuda_env
    env = dict(fake_cuda_env(), PDKV_VERIFY_CHECKSUM="1")
    done, _ = _run(p_tp, d_tp, heads, mla, REQUESTS, device=True, env=env)
    for r in range(p_tp):
        for room, (state, _, total) in done[f"p{r}"]["outcome"].items():
            assert state == SUCCESS and total > 0, (r, room)
    for r in range(d_tp):
        for room, o in done[f"d{r}"]["outcome"].items():
            assert o["state"] == SUCCESS, (r, room, o["reason"])
            assert o["bytes_ok"], f"decode {r} room {room}: wrong KV bytes in device pools"
            assert o["meta_ok"], f"decode {r} room {room}: wrong metadata row"


def test_killed_prefill_is_kvpoll_failed_with_reason():
    done, killed_at = _run(1, 1, 4, False, [(303, 12, 3)], hang=True)
    o = done["d0"]["outcome"][303]
    assert o["state"] == FAILED
    assert "room 303" in o["reason"], o["reason"]
    took = done["d0"]["when"][303] - killed_at
    print(f"killed prefill -> sglang KVPoll.Failed after {took:.3f} s (bound {FAILURE_BOUND_S} s)")
    assert took < FAILURE_BOUND_S, f"KVPoll.Failed after {took:.2f} s"

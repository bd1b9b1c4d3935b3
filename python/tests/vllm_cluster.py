"""One prefill and one decode vLLM instance around a real bootstrap server; the test
plays vLLM's disaggregated proxy (prefill first, its kv_transfer_params to the decode)."""
from __future__ import annotations

from engine_replay import Ranks
from vllm_replay import decode_main, prefill_main


def run_prefill_then_decode(p_tp: int, d_tp: int, layout: str, heads: int, requests,
                            chunk: int, extra_p=None, extra_d=None, prefix_blocks=None,
                            block_size: int = 4, device: bool = False, env=None,
                            prefill=None, decode=None):
    """requests: [(id, tokens, seed, room or None)]; prefill / decode: more settings of
    those ranks (vllm_replay.prefill_main / decode_main). Returns ({rank name: report},
    {request id: params the prefill returned})."""
    with Ranks() as ranks:
        # device: CUDA caches on the fake driver (vllm_replay.on_device); env: every rank's
        base = dict(heads=heads, layout=layout, block_size=block_size, device=device,
                    env=env)
        for r in range(p_tp):
            ranks.start(f"p{r}", prefill_main, dict(base, rank=r, tp=p_tp, extra=extra_p or {},
                                                   requests=requests, chunk=chunk,
                                                   **(prefill or {})))
        for r in range(d_tp):
            ranks.start(f"d{r}", decode_main, dict(base, rank=r, tp=d_tp, extra=extra_d or {},
                                                   **(decode or {})))
        ranks.serve_bootstrap()
        ranks.expect("ready", p_tp + d_tp)
        params = {m[1]: m[2] for m in ranks.expect("params", len(requests))}
        for req_id, n_tokens, seed, _ in requests:
            for r in range(d_tp):
                ranks.send(f"d{r}", ("req", "decode-" + req_id, n_tokens, seed,
                                     params[req_id], (prefix_blocks or {}).get(req_id, 0)))
        for r in range(d_tp):
            ranks.send(f"d{r}", ("go",))
        done = {m[1]: m[2] for m in ranks.expect("done", p_tp + d_tp)}
        return done, params


def assert_delivered(done: dict, requests, p_tp: int, d_tp: int) -> None:
    ids = sorted(r[0] for r in requests)
    for r in range(p_tp):
        report = done[f"p{r}"]
        assert report["failures"] == {}, report["failures"]
        assert report["finished_sending"] == ids
        assert report["stats"]["rooms_succeeded"] == len(ids), report["stats"]
        assert report["stats"]["bytes_written"] > 0
        assert report["pending_push_work"] is False  # what let the engine loop stop
    for r in range(d_tp):
        report = done[f"d{r}"]
        assert report["failures"] == {}, report["failures"]
        assert report["finished_recving"] == ["decode-" + i for i in ids]
        assert report["load_errors"] == []
        assert all(report["bytes_ok"].values()), f"d{r}: wrong bytes {report['bytes_ok']}"
        assert all(report["prefix_ok"].values()), f"d{r}: prefix overwritten"
        assert report["pending_push_work"] is False


def start_stalled_prefill_and_decode(ranks: Ranks, request, decode=None) -> dict:
    """Starts a layerwise prefill rank p0 whose forward stops after saving layer 0 (until
    it is sent "resume"), serving request (id, tokens, seed, room), and a decode rank d0
    with the settings `decode`; waits until both are ready. Returns the kv_transfer_params a
    router that knows the room gives the decode's request (see request_on_decode)."""
    room = request[3]
    base = dict(heads=4, layout="NHD", block_size=4, rank=0, tp=1)
    ranks.start("p0", prefill_main, dict(base, extra={"layerwise": True}, chunk=32,
                                         requests=[request], hang_in_forward=True))
    ranks.start("d0", decode_main, dict(base, extra={}, **(decode or {})))
    addr = ranks.serve_bootstrap()
    ranks.expect("ready", 2)
    return {"do_remote_prefill": True, "pdkv_room": room, "pdkv_bootstrap_addr": addr}


def request_on_decode(ranks: Ranks, req_id: str, tokens: int, seed: int, params: dict) -> None:
    """Gives decode rank d0 the request `req_id` (no prefix cached) and lets it schedule."""
    ranks.send("d0", ("req", req_id, tokens, seed, params, 0))
    ranks.send("d0", ("go",))

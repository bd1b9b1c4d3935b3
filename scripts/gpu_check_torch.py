"""The torch part of the real-GPU check (scripts/gpu_check.sh runs it when torch sees CUDA).

Two processes over loopback tcp, KV pools that are torch CUDA tensors handed to KVArgs
through DLPack (no pointers, no lengths):
  1. GPU -> GPU, the prefill's "forward" written on a side stream behind ~50 ms of GPU
     work (torch.cuda._sleep) and sent with only that stream named: the decode must find
     the forward's bytes, not the stale ones the pool held before (ordering on the device).
  2. host -> GPU: a pinned CPU tensor pool on the prefill, CUDA on the decode.
Every byte is compared on the decode. Prints one line per case and exits non-zero on any
mismatch or failure.

  PYTHONPATH=build-gpu/python python3 scripts/gpu_check_torch.py
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import time

PAGES, PAGE_BYTES, LAYERS, ROOM_PAGES = 256, 16384, 4, 64
CTX = mp.get_context("spawn")


def _args(pdkv, pool):
    return pdkv.KVArgs(kv_data_ptrs=list(pool), kv_data_lens=[], kv_item_lens=[PAGE_BYTES] * LAYERS,
                       layer_buffers=[[i] for i in range(LAYERS)], is_mla=True,
                       head_dim=PAGE_BYTES, dtype_bytes=1, page_size=1)


def _pool(torch, device: str, fill: int):
    pin = device == "cpu"
    return [torch.full((PAGES, PAGE_BYTES), fill, dtype=torch.uint8, device=device,
                       pin_memory=pin and torch.cuda.is_available()) for _ in range(LAYERS)]


def _forward_bytes(torch, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (ROOM_PAGES, PAGE_BYTES), generator=g, dtype=torch.uint8)
            for _ in range(LAYERS)]


def _prefill(addr: str, room: int, src: str, queue) -> None:
    try:
        import torch

        import pdkv
        pool = _pool(torch, src, 0x11)
        mgr = pdkv.KVManager(_args(pdkv, pool), "prefill", addr)
        sender = pdkv.KVSender(mgr, addr, room)
        sender.init(ROOM_PAGES)
        pages = torch.arange(ROOM_PAGES, dtype=torch.int64) * 2  # every other page
        fresh = _forward_bytes(torch, room)
        stream = None
        if src == "cuda":
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                torch.cuda._sleep(50_000_000)  # ~50 ms of GPU work before the writes
                for buf, data in zip(pool, fresh):
                    buf[pages.cuda()] = data.cuda(non_blocking=True)
        else:
            for buf, data in zip(pool, fresh):
                buf[pages] = data
        sender.send(pages.numpy(), stream=stream)  # returns at once; the stream is named
        state = sender.wait(60)
        queue.put(("prefill", int(state), None))
        mgr.shutdown()
    except Exception as e:  # reported to the parent
        queue.put(("prefill", -1, repr(e)))


def _case(name: str, src: str, room: int) -> bool:
    import torch

    import pdkv
    server = pdkv.BootstrapServer("127.0.0.1", 0)
    addr = f"127.0.0.1:{server.port}"
    pool = _pool(torch, "cuda", 0)
    mgr = pdkv.KVManager(_args(pdkv, pool), "decode", addr)
    queue = CTX.Queue()
    proc = CTX.Process(target=_prefill, args=(addr, room, src, queue))
    proc.start()
    receiver = pdkv.KVReceiver(mgr, addr, room)
    receiver.init()
    dst_pages = torch.arange(ROOM_PAGES, dtype=torch.int64) + 100
    started = time.monotonic()
    receiver.send_metadata(dst_pages.numpy())
    state = receiver.wait(60)
    seconds = time.monotonic() - started
    _, prefill_state, error = queue.get(timeout=90)
    proc.join(30)
    expected = _forward_bytes(torch, room)
    ok = state == int(pdkv.KVPoll.Success) and prefill_state == int(pdkv.KVPoll.Success)
    for buf, data in zip(pool, expected):
        ok = ok and torch.equal(buf[dst_pages.cuda()].cpu(), data)
    gib = LAYERS * ROOM_PAGES * PAGE_BYTES / 2**30
    print(f"gpu_check_torch: {name}: {'OK' if ok else 'FAILED'} ({gib * 1024:.0f} MiB in "
          f"{seconds:.3f} s; decode state {state}, prefill state {prefill_state}"
          f"{', ' + error if error else ''})")
    mgr.shutdown()
    server.stop()
    return ok


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print("gpu_check_torch: torch sees no CUDA device: skipped")
        return 0
    results = [_case("GPU->GPU, forward on a named side stream", "cuda", 901),
               _case("host->GPU (pinned CPU tensors)", "cpu", 902)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())

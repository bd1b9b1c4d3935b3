"""Ordering a push after the model's writes to a CUDA KV cache.

pdkv's contract for CUDA buffers without a stream argument is "the caller has
synchronised": the driver's copies that read a source run on pdkv's own streams, which do
not wait for the model's kernels. So an adapter, before it lets pdkv push bytes the
forward just wrote, waits for the current stream of the cache's device. Called through
this module (tests replace it to observe the order).
"""
from __future__ import annotations


def synchronize_current_stream(device: int) -> None:
    """Blocks until everything issued on `device`'s current torch stream ran (-1: the
    current device's)."""
    import torch
    torch.cuda.current_stream(device if device >= 0 else None).synchronize()

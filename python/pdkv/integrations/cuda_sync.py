"""Ordering a push after the model's writes to a CUDA KV cache.

pdkv's contract for CUDA buffers without a stream argument is "the caller has
synchronised": the driver's copies that read a source run on pdkv's own streams, which do
not wait for the model's kernels. An adapter either names the model's stream when it
sends (pdkv's copies then wait for it on the device: current_stream) or, where pdkv takes
no stream (a layer marked ready), waits for that stream on the host. Called through this
module (tests replace it to observe the order).
"""
from __future__ import annotations


def current_stream(device: int):
    """`device`'s current torch stream (-1: the current device's), for a send to name."""
    import torch
    return torch.cuda.current_stream(device if device >= 0 else None)


def synchronize_current_stream(device: int) -> None:
    """Blocks until everything issued on `device`'s current torch stream ran (-1: the
    current device's)."""
    import torch
    torch.cuda.current_stream(device if device >= 0 else None).synchronize()

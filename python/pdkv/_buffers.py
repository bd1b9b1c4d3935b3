"""KVArgs buffer entries -> (pointer, length, memory) for the native KvArgs.

An entry of ``kv_data_ptrs`` / ``aux_data_ptrs`` / ``state_data_ptrs`` is either an int
(a raw pointer, whose memory is ``KVArgs.memory_kind`` on ``KVArgs.gpu_id``) or a tensor
exporting DLPack (``__dlpack__`` and ``__dlpack_device__``: torch, numpy, CuPy, JAX...),
which knows its own pointer, size, kind and device; pdkv's native reader takes them from
the DLPack capsule without consuming it. The tensor must stay alive while pdkv uses it:
the KVArgs (and so the KVManager holding it) keeps a reference.
"""
from __future__ import annotations

from typing import Optional, Sequence

from pdkv import _native

MEMORY_KINDS = ("auto", "host", "cuda")


def is_tensor(entry) -> bool:
    """True for a DLPack exporter (an entry whose pointer and size pdkv reads itself)."""
    return hasattr(entry, "__dlpack__") and hasattr(entry, "__dlpack_device__")


def _raw_pointer(entry, what: str) -> int:
    if isinstance(entry, bool) or not hasattr(entry, "__index__"):
        raise ValueError(f"{what} must be an int pointer or a tensor with __dlpack__ and "
                         f"__dlpack_device__, not {type(entry).__name__}")
    return entry.__index__()


def resolve(name: str, ptrs: Sequence, lens: Sequence, memory_kind: str,
            gpu_id: int) -> tuple[list, list, Optional[list]]:
    """(pointers, lengths, per-buffer (kind, device) pairs or None when every entry is an
    int). ValueError naming the entry for a tensor pdkv cannot register, or a length or
    memory kind that contradicts the tensor."""
    if not any(is_tensor(p) for p in ptrs):
        return list(ptrs), list(lens), None
    lens = [] if lens is None else list(lens)  # numpy arrays too (no truth value)
    if lens and len(lens) != len(ptrs):
        raise ValueError(f"{name}_data_lens has {len(lens)} entries for {len(ptrs)} buffers "
                         "(omit it to take each tensor's size)")
    out_ptrs, out_lens, memory = [], [], []
    for i, entry in enumerate(ptrs):
        what = f"{name}_data_ptrs[{i}]"
        given = lens[i] if lens else None
        if not is_tensor(entry):
            if given is None:
                raise ValueError(f"{what} is a raw pointer: {name}_data_lens must give its "
                                 "length")
            out_ptrs.append(_raw_pointer(entry, what))
            out_lens.append(given)
            memory.append((memory_kind, gpu_id))
            continue
        try:
            ptr, nbytes, kind, device = _native.dlpack_buffer(entry)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        if given is not None and int(given) != nbytes:
            raise ValueError(f"{what} is a tensor of {nbytes} bytes but {name}_data_lens[{i}] "
                             f"says {given}")
        if memory_kind != "auto" and memory_kind != kind:
            raise ValueError(f"{what} is {kind} memory but KVArgs.memory_kind says "
                             f"{memory_kind!r} (memory_kind describes raw pointers)")
        if kind == "cuda" and gpu_id != -1 and gpu_id != device:
            raise ValueError(f"{what} is on CUDA device {device} but KVArgs.gpu_id is {gpu_id}")
        out_ptrs.append(ptr)
        out_lens.append(nbytes)
        memory.append((kind, device))
    return out_ptrs, out_lens, memory

"""pdkv.KVArgs from numpy buffers: the pointer, length and item-size lists an engine
fills from its own tensors, derived from the arrays so they cannot drift apart.

Every buffer's first axis is its item index (a KV page, an aux row, a state slot), so an
item is `buf[0].nbytes` unless `item_lens` says otherwise (a flat buffer). The arrays
must stay alive, unmoved, while any manager registered with the result runs: KVArgs
holds raw addresses, not references."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def _regions(bufs: Sequence[np.ndarray], item_lens: Optional[Sequence[int]], what: str):
    for b in bufs:
        if not (b.flags.c_contiguous and b.flags.writeable):
            raise ValueError(f"{what} buffers must be C-contiguous and writable numpy arrays")
    ptrs = [int(b.ctypes.data) for b in bufs]
    lens = [int(b.nbytes) for b in bufs]
    items = list(item_lens) if item_lens is not None else [int(b[0].nbytes) for b in bufs]
    if len(items) != len(bufs):
        raise ValueError(f"{len(items)} {what} item lengths for {len(bufs)} buffers")
    return ptrs, lens, items


def kv_args_from_buffers(bufs: Sequence[np.ndarray], *, page_size: int, layer_buffers,
                         kv_head_num: int, total_kv_head_num: int, head_dim: int,
                         dtype_bytes: int, engine_rank: int = 0, tp_size: int = 1,
                         dp_size: int = 1, item_lens: Optional[Sequence[int]] = None,
                         aux: Sequence[np.ndarray] = (), state: Sequence[np.ndarray] = (),
                         **fields):
    """KVArgs registering `bufs` as the KV buffers (and `aux` rows / `state` slots when
    given). `fields` are any other KVArgs fields (page_layout, is_mla, target_layer_num,
    ...), passed through unchanged, so an unknown name fails as KVArgs fails."""
    import pdkv

    ptrs, lens, items = _regions(bufs, item_lens, "KV")
    if aux:
        fields["aux_data_ptrs"], fields["aux_data_lens"], fields["aux_item_lens"] = \
            _regions(aux, None, "aux")
    if state:
        fields["state_data_ptrs"], fields["state_data_lens"], fields["state_item_lens"] = \
            _regions(state, None, "state")
    return pdkv.KVArgs(engine_rank=engine_rank, tp_size=tp_size, dp_size=dp_size,
                       page_size=page_size, kv_data_ptrs=ptrs, kv_data_lens=lens,
                       kv_item_lens=items, layer_buffers=layer_buffers,
                       kv_head_num=kv_head_num, total_kv_head_num=total_kv_head_num,
                       head_dim=head_dim, dtype_bytes=dtype_bytes, **fields)

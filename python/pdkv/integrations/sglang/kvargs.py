"""sglang's ``KVArgs`` + ``ServerArgs`` -> ``pdkv.KVArgs``.

sglang describes a rank's KV pool as flat lists: ``kv_data_ptrs`` holds every layer's K
buffer, then every layer's V buffer (MHA), or one latent buffer per layer (MLA); each
buffer is token-major ``(tokens, heads, head_dim)`` (pdkv's "NHD"), one page being
``page_size`` tokens (``kv_item_lens``). The attention TP size and DP size come from
``server_args``. sglang does not pass ``head_dim`` or the dtype, so a head is described to
pdkv as ``head_bytes`` one-byte elements: the bytes moved and every head slice are the
same, and both sides derive it the same way.

KV and aux buffers may be host memory or CUDA device memory (device pools). sglang's
KVArgs carries raw pointers, plus ``gpu_id`` (set on CPU and GPU deployments alike) and,
in newer versions, ``kv_data_mem_kinds`` ("VRAM" / "DRAM" labels that its decode sets by
backend name, not by device): neither says where a buffer really lives, so the CUDA
driver is asked for each pointer (``pdkv.integrations.memory.pointer_memory``) and a label
that disagrees is logged once. The KVArgs then register every buffer as what it is
(memory_kind "auto") on the device its CUDA buffers share (gpu_id).
"""
from __future__ import annotations

import pdkv
from pdkv.integrations.memory import pointer_memory
from pdkv.integrations.sglang.kv_heads import kv_heads


def attention_parallelism(server_args) -> tuple[int, int]:
    """(attention TP size, attention DP size) of this instance."""
    tp = int(server_args.tp_size)
    dp = int(getattr(server_args, "dp_size", 1) or 1)
    if getattr(server_args, "enable_dp_attention", False):
        if tp % dp:
            raise ValueError(f"tp_size {tp} is not a multiple of dp_size {dp}")
        return tp // dp, dp
    return tp, 1


def _has_state_buffers(args) -> bool:
    """True when any state component lists a buffer (newer sglang: one list per state
    type, possibly empty; older: a flat list)."""
    for entry in getattr(args, "state_data_ptrs", None) or []:
        if not isinstance(entry, (list, tuple)) or entry:
            return True
    return False


def kv_args_from_sglang(args, server_args, is_mla: bool, mode: str = "prefill") -> pdkv.KVArgs:
    """ValueError for buffers pdkv cannot move (managed memory; without a CUDA driver,
    anything but host memory, which a decode must be able to write), for pools on two
    GPUs, and for what this adapter does not carry yet (hybrid-model state buffers, DeepSeek-V4
    compressed pools, pipeline parallelism, context parallelism)."""
    if _has_state_buffers(args):
        raise ValueError("pdkv's sglang adapter does not carry hybrid-model state buffers "
                         "(mamba/SWA/DSA) yet")
    if int(getattr(server_args, "pp_size", 1) or 1) != 1:
        raise ValueError("pdkv's sglang adapter supports pp_size 1 only")
    if int(getattr(args, "dcp_size", 1) or 1) != 1:
        raise ValueError("pdkv's sglang adapter supports dcp_size 1 only")
    if int(getattr(server_args, "attn_cp_size", 1) or 1) != 1:
        raise ValueError("pdkv's sglang adapter supports attn_cp_size 1 only")
    if getattr(args, "mla_compression_ratios", None):
        # DeepSeek-V4's pools are organised by compression ratio, and their C4/C128 slots
        # are picked by token position (what send()'s token_position_offset is for).
        raise ValueError("pdkv's sglang adapter does not carry compressed-MLA (DeepSeek-V4) "
                         "KV pools yet")
    ptrs, lens, items = list(args.kv_data_ptrs), list(args.kv_data_lens), list(args.kv_item_lens)
    if not ptrs or not len(ptrs) == len(lens) == len(items):
        raise ValueError("kv_data_ptrs, kv_data_lens and kv_item_lens must be non-empty and "
                         "of equal length")
    mem_kinds = getattr(args, "kv_data_mem_kinds", None)
    memory = pointer_memory("kv_data_ptrs", ptrs, lens, writable=mode == "decode",
                            labels=list(mem_kinds) if mem_kinds is not None else None)
    memory += pointer_memory("aux_data_ptrs", list(getattr(args, "aux_data_ptrs", []) or []),
                             list(getattr(args, "aux_data_lens", []) or []),
                             writable=mode == "decode")
    gpus = sorted({device for kind, device in memory if kind == "cuda"})
    if len(gpus) > 1:
        raise ValueError(f"this rank's KV and aux buffers lie on CUDA devices {gpus}; pdkv "
                         "registers one rank's device buffers on one GPU")
    page_size = int(args.page_size)
    tp, dp = attention_parallelism(server_args)
    common = dict(engine_rank=int(args.engine_rank), tp_size=tp, dp_size=dp,
                  page_size=page_size, kv_data_ptrs=ptrs, kv_data_lens=lens,
                  kv_item_lens=items, page_layout="NHD", dtype_bytes=1,
                  aux_data_ptrs=list(getattr(args, "aux_data_ptrs", []) or []),
                  aux_data_lens=list(getattr(args, "aux_data_lens", []) or []),
                  aux_item_lens=list(getattr(args, "aux_item_lens", []) or []),
                  memory_kind="auto", gpu_id=gpus[0] if gpus else -1)
    if is_mla:
        if items[0] % page_size:
            raise ValueError(f"kv_item_lens {items[0]} is not a multiple of page_size")
        return pdkv.KVArgs(layer_buffers=[[i] for i in range(len(ptrs))], kv_head_num=1,
                           total_kv_head_num=1, head_dim=items[0] // page_size, is_mla=True,
                           **common)
    if len(ptrs) % 2:
        raise ValueError("an MHA pool lists K then V buffers: an even count is needed")
    heads, total_heads = kv_heads(args, server_args, tp)
    if items[0] % (page_size * heads):
        raise ValueError(f"kv_item_lens {items[0]} is not page_size x kv_head_num x head bytes")
    layers = len(ptrs) // 2
    return pdkv.KVArgs(layer_buffers=[[i, layers + i] for i in range(layers)],
                       kv_head_num=heads, total_kv_head_num=total_heads,
                       head_dim=items[0] // (page_size * heads), **common)

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

Hybrid models' state (Mamba slots, SWA pages, DSA indexer pages) becomes pdkv's state
groups as state_layout.py describes. A pipeline stage's KVArgs list its own layers only;
the stage travels in ``pp_rank`` / ``pp_size`` (pipeline.py).
"""
from __future__ import annotations

from typing import Optional

import pdkv
from pdkv.integrations.memory import pointer_memory
from pdkv.integrations.sglang.kv_heads import kv_heads
from pdkv.integrations.sglang.pipeline import pp_size_of
from pdkv.integrations.sglang.state_layout import StateLayout, state_layout


def attention_parallelism(server_args) -> tuple[int, int]:
    """(attention TP size, attention DP size) of this instance."""
    tp = int(server_args.tp_size)
    dp = int(getattr(server_args, "dp_size", 1) or 1)
    if getattr(server_args, "enable_dp_attention", False):
        if tp % dp:
            raise ValueError(f"tp_size {tp} is not a multiple of dp_size {dp}")
        return tp // dp, dp
    return tp, 1


def _refuse_unsupported_parallelism(args, server_args, mode: str) -> None:
    """What pdkv cannot place, refused at start-up with the reason."""
    if int(getattr(args, "dcp_size", 1) or 1) != 1:
        # Decode context parallelism stores token loc on DCP rank loc % dcp_size: a page's
        # tokens are spread over the DCP ranks. sglang's common backend refuses DCP unless a
        # backend remaps each token (its Mooncake backend has such a relayout); pdkv moves
        # whole pages or head slices of them, never single tokens, so it refuses too.
        raise ValueError("pdkv's sglang adapter supports dcp_size 1 only: decode context "
                         "parallelism keeps token loc on rank loc % dcp_size, and pdkv "
                         "moves whole pages (or head slices), not single tokens")
    if int(getattr(server_args, "attn_cp_size", 1) or 1) != 1:
        if mode == "decode":
            # sglang's own rank mapping asserts a decode attention CP size of 1.
            raise ValueError("a decode's attn_cp_size must be 1, as sglang's disaggregation "
                             "backends require")
        # A prefill's CP ranks each hold a slice of the request's tokens (or, with the DSA
        # layer split, of its layers); sglang's backends send from CP rank 0 or gather
        # from every CP rank, and pdkv registers one rank per attention TP rank.
        raise ValueError("pdkv's sglang adapter supports attn_cp_size 1 only on a prefill: "
                         "pdkv registers one rank per attention TP rank and does not gather "
                         "a request from several context-parallel ranks")
    if getattr(args, "mla_compression_ratios", None):
        # DeepSeek-V4's pools are organised by compression ratio, and their C4/C128 slots
        # are picked by token position (what send()'s token_position_offset is for).
        raise ValueError("pdkv's sglang adapter does not carry compressed-MLA (DeepSeek-V4) "
                         "KV pools yet")
    if int(getattr(args, "kv_buf_groups", 1) or 1) > 1:
        raise ValueError("pdkv's sglang adapter does not carry KV pools with several buffers "
                         "per MLA layer (kv_buf_groups, sglang's NPU MLA pool)")


def kv_args_from_sglang(args, server_args, is_mla: bool, mode: str = "prefill") -> pdkv.KVArgs:
    return kv_args_and_state(args, server_args, is_mla, mode)[0]


def kv_args_and_state(args, server_args, is_mla: bool, mode: str = "prefill",
                      stage: Optional[tuple[int, int]] = None
                      ) -> tuple[pdkv.KVArgs, StateLayout]:
    """The rank's pdkv.KVArgs and how its sglang state components map onto pdkv's state
    groups (state_layout.py). ValueError for buffers pdkv cannot move (managed memory;
    without a CUDA driver, anything but host memory, which a decode must be able to
    write), for pools on two GPUs, and for what this adapter does not carry (the state
    types and parallel layouts refused in state_layout.py and above)."""
    _refuse_unsupported_parallelism(args, server_args, mode)
    ptrs, lens, items = list(args.kv_data_ptrs), list(args.kv_data_lens), list(args.kv_item_lens)
    if not ptrs or not len(ptrs) == len(lens) == len(items):
        raise ValueError("kv_data_ptrs, kv_data_lens and kv_item_lens must be non-empty and "
                         "of equal length")
    page_size = int(args.page_size)
    # A hybrid linear-attention pool whose full-attention layers are MLA: sglang's
    # is_mla_backend() looks at the hybrid pool and says False, and setup_state_kv_args
    # records the full pool's kind here; its KV buffers are latent, one per layer.
    is_mla = bool(is_mla) or bool(getattr(args, "is_hybrid_mla_backend", False))
    state = state_layout(args, is_mla, page_size, int(items[0]))
    # (pp_rank, pp_size): this rank's pipeline stage, or for a decode of one stage the
    # prefill stage a manager receives from (pipeline.py).
    pp_rank, pp_size = stage if stage is not None else (
        int(getattr(args, "pp_rank", 0) or 0), pp_size_of(server_args))
    if pp_size > 1 and state.groups:
        raise ValueError("pdkv's sglang adapter does not carry hybrid state (Mamba, SWA, DSA "
                         "pools) with pipeline parallelism: a stage's state pools hold its "
                         "own layers, which pdkv does not map onto another stage split")
    writable = mode == "decode"
    mem_kinds = getattr(args, "kv_data_mem_kinds", None)
    memory = pointer_memory("kv_data_ptrs", ptrs, lens, writable=writable,
                            labels=list(mem_kinds) if mem_kinds is not None else None)
    memory += pointer_memory("aux_data_ptrs", list(getattr(args, "aux_data_ptrs", []) or []),
                             list(getattr(args, "aux_data_lens", []) or []), writable=writable)
    memory += pointer_memory("state_data_ptrs", state.kv_data_ptrs + state.state_data_ptrs,
                             state.kv_data_lens + state.state_data_lens, writable=writable)
    gpus = sorted({device for kind, device in memory if kind == "cuda"})
    if len(gpus) > 1:
        raise ValueError(f"this rank's KV, aux and state buffers lie on CUDA devices {gpus}; "
                         "pdkv registers one rank's device buffers on one GPU")
    tp, dp = attention_parallelism(server_args)
    common = dict(engine_rank=int(args.engine_rank), tp_size=tp, dp_size=dp,
                  page_size=page_size, kv_data_ptrs=ptrs + state.kv_data_ptrs,
                  kv_data_lens=lens + state.kv_data_lens,
                  kv_item_lens=items + state.kv_item_lens, page_layout="NHD", dtype_bytes=1,
                  aux_data_ptrs=list(getattr(args, "aux_data_ptrs", []) or []),
                  aux_data_lens=list(getattr(args, "aux_data_lens", []) or []),
                  aux_item_lens=list(getattr(args, "aux_item_lens", []) or []),
                  memory_kind="auto", gpu_id=gpus[0] if gpus else -1,
                  pp_rank=pp_rank, pp_size=pp_size)
    if is_mla:
        if items[0] % page_size:
            raise ValueError(f"kv_item_lens {items[0]} is not a multiple of page_size")
        layers = [[i] for i in range(len(ptrs))]
        shape = dict(kv_head_num=1, total_kv_head_num=1, head_dim=items[0] // page_size,
                     is_mla=True)
    else:
        if len(ptrs) % 2:
            raise ValueError("an MHA pool lists K then V buffers: an even count is needed")
        heads, total_heads = kv_heads(args, server_args, tp)
        if items[0] % (page_size * heads):
            raise ValueError(f"kv_item_lens {items[0]} is not page_size x kv_head_num x "
                             "head bytes")
        half = len(ptrs) // 2
        layers = [[i, half + i] for i in range(half)]
        shape = dict(kv_head_num=heads, total_kv_head_num=total_heads,
                     head_dim=items[0] // (page_size * heads))
    return pdkv.KVArgs(layer_buffers=layers + [[len(ptrs) + b for b in layer]
                                               for layer in state.layer_buffers],
                       **shape, **common, **_group_fields(state, len(layers))), state


def _group_fields(state: StateLayout, full_layers: int) -> dict:
    """pdkv's state fields, only for a rank with state, and the group fields only where
    one group of state buffers is not enough (one group is the core's plain state: every
    state buffer in group 0, one flat index list)."""
    if not state.groups:
        return {}
    fields = dict(state_data_ptrs=state.state_data_ptrs, state_data_lens=state.state_data_lens,
                  state_item_lens=state.state_item_lens)
    if state.needs_groups:
        fields.update(state_buffer_groups=state.state_buffer_groups,
                      kv_layer_groups=[-1] * full_layers + state.layer_groups,
                      window_state_groups=state.window_groups)
    return fields

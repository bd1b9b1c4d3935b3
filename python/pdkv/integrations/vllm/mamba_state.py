"""A Mamba / linear-attention layer's state page as pieces that TP shards one by one.

vLLM's model runner gives a Mamba layer one raw allocation, block i at ``base + i *
page``, viewed as a conv state tensor and a temporal (SSM) state tensor at offsets inside
the page. Between prefill and decode of different TP sizes a page is not one contiguous
shard: the conv state's channel dimension concatenates sub-projections that the layer's
column-parallel projection shards *separately*, and the temporal state is sharded along
its first dimension. Per model type (``MambaSpec.mamba_type``), rank r of TP T holds:

- Mamba2: conv channels ``[x | B | C]`` (x of ``heads * head_dim`` channels, B and C of
  ``n_groups * d_state`` each), its ``1/T``-th of each; temporal ``(heads, head_dim,
  d_state)``, its heads.
- Mamba1: conv channels ``[x]``; temporal ``(intermediate, d_state)``, its rows.
- Gated DeltaNet (Qwen3-Next): conv channels ``[Q | K | V]`` (Q and K of equal width);
  temporal ``(v_heads, v_dim, k_dim)``, its heads.

The conv state is ``(dim, state_len)`` per block ("DS", channels outermost:
``VLLM_SSM_CONV_STATE_LAYOUT=DS``) or ``(state_len, dim)`` ("SD", vLLM's default). Each
piece below is one run of bytes that rank r's shard of it is the r-th contiguous
``1/T``-th of: in DS a whole sub-projection (every conv row of its channels), in SD one
sub-projection of one conv row; the temporal state is one piece. pdkv registers every
piece as a state buffer striding by the page (``state_page_strides``), which its core
shards contiguously between TP sizes (``item_p * P == item_d * D``) or copies whole
when both sides have the same TP size (consecutive pieces then merge into one copy).

Other state types (short conv, MiniMax's linear attention) are one whole-page piece:
they move between equal TP sizes only, as with vLLM's NIXL connector.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

from pdkv.integrations.vllm.layout import Buffer, state_page

# Model types whose state TP splits piece by piece (vLLM's MambaSpec.mamba_type, as the
# model's string or the MambaAttentionBackendEnum member's name).
# split_kind() of its own answer is that answer.
_TYPES = {"mamba1": "mamba1", "mamba2": "mamba2", "gdn_attention": "gdn", "gdn_attn": "gdn",
          "gdn": "gdn"}


def split_kind(mamba_type) -> Optional[str]:
    """"mamba1", "mamba2" or "gdn" for a state type whose pieces shard by TP, else None."""
    name = getattr(mamba_type, "name", mamba_type)
    return _TYPES.get(str(name).lower()) if name is not None else None


def conv_dim_first() -> bool:
    """vLLM's conv state layout: (dim, state_len) per block with
    ``VLLM_SSM_CONV_STATE_LAYOUT=DS``, else (state_len, dim)."""
    return os.environ.get("VLLM_SSM_CONV_STATE_LAYOUT", "SD").upper() == "DS"


def _block_shape(t) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape[1:])


def _proj_dims(kind: str, conv_dim: int, temporal: tuple[int, ...], name: str) -> list[int]:
    """Local channel widths of the conv state's sub-projections, in channel order."""
    if kind == "mamba1":
        return [conv_dim]
    if kind == "mamba2":
        if len(temporal) < 2:
            raise ValueError(f"{name}: a Mamba2 temporal state of shape {temporal}")
        x = temporal[0] * temporal[1]  # heads * head_dim
        rest = conv_dim - x
        if rest <= 0 or rest % 2:
            raise ValueError(f"{name}: conv dim {conv_dim} is not x ({x}) + B + C")
        return [x, rest // 2, rest // 2]
    if len(temporal) < 2:
        raise ValueError(f"{name}: a Gated DeltaNet temporal state of shape {temporal}")
    v = temporal[0] * temporal[1]  # v_heads * v_dim
    rest = conv_dim - v
    if rest <= 0 or rest % 2:
        raise ValueError(f"{name}: conv dim {conv_dim} is not Q + K + V ({v})")
    return [rest // 2, rest // 2, v]


def state_pieces(tensors: Sequence, name: str, mamba_type=None,
                 dim_first: Optional[bool] = None) -> list[Buffer]:
    """The state buffers of one Mamba layer ``[conv, temporal]``: the TP-sharded pieces
    (see the module doc) striding by the page, or the whole page for other types."""
    tensors = list(tensors)
    page = state_page(tensors, name)  # checks the tensors lie inside one page each
    kind = split_kind(mamba_type)
    if kind is None or len(tensors) != 2:
        return [page]
    conv, temporal = tensors
    shape = _block_shape(conv)
    if len(shape) != 2:
        raise ValueError(f"{name}: a conv state of block shape {shape}, not 2-D")
    dim_first = conv_dim_first() if dim_first is None else dim_first
    conv_dim, rows = shape if dim_first else shape[::-1]
    es = conv.element_size()
    dims = _proj_dims(kind, conv_dim, _block_shape(temporal), name)
    base = page.ptr
    conv_at = conv.data_ptr() - base
    pieces = []  # (offset in the page, bytes)
    if dim_first:  # channel-major: each sub-projection's rows are contiguous
        at = conv_at
        for d in dims:
            pieces.append((at, d * rows * es))
            at += d * rows * es
    else:  # row-major: each row holds every sub-projection's channels
        for r in range(rows):
            at = conv_at + r * conv_dim * es
            for d in dims:
                pieces.append((at, d * es))
                at += d * es
    temporal_bytes = temporal.element_size()
    for size in _block_shape(temporal):
        temporal_bytes *= size
    pieces.append((temporal.data_ptr() - base, temporal_bytes))
    count = page.length // page.stride
    return [Buffer(base + off, (count - 1) * page.stride + size, size, page.stride)
            for off, size in pieces]

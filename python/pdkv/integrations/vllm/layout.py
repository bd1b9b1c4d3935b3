"""vLLM's per-layer KV cache tensors: their geometry as pdkv buffers.

vLLM hands ``register_kv_caches`` one value per layer, allocated by the attention
backend (block = vLLM's page). The layouts understood here:

- ``(2, num_blocks, block_size, heads, head_dim)``, K then V (FlashAttention and most
  backends). Its strides say the layout inside a block: token-major is pdkv's "NHD";
  vLLM's HND cache layout (``VLLM_KV_CACHE_LAYOUT=HND``) allocates
  ``(2, num_blocks, heads, block_size, head_dim)`` and permutes it to the same logical
  shape, which is pdkv's "HND".
- ``(num_blocks, 2, block_size, heads, head_dim)``: FlashInfer keeps K and V inside one
  block. K and V are then two pdkv buffers whose pages are a K (or V) half each, spaced
  by the whole block (``kv_page_strides``): the planner reads the strided pieces in
  place, head-sliced between TP sizes like any other page, no copy into a temporary.
  NHD and HND alike (HND permutes dims 2 and 3 physically, as above).
- ``(2, num_blocks, heads, block_size, head_dim)`` as the *logical* shape: vLLM's CPU
  backend (CPU_ATTN, ``get_kv_cache_shape``) allocates it so, unpermuted; a K or V half
  is then pdkv's "HND". Which of dims 2 and 3 holds the tokens is read from the
  configured block size and this rank's KV head count; when both are equal (e.g. 16
  heads, block 16) the platform decides (``heads_first`` hint: vLLM on CPU).
- ``(num_blocks, block_size, latent_dim)``: MLA, one latent buffer per layer.
- a list of tensors ``(num_blocks, *state_shape)``: a Mamba / linear-attention layer's
  states (conv, temporal), views of one raw per-layer allocation whose block i is at
  ``base + i * page``; the whole page is one pdkv state slot (``state_page``), or its
  pieces that TP shards one by one (mamba_state.py).

Every tensor must be in host memory (``device.type == "cpu"``) or on one CUDA device
(``"cuda"``), all of a worker's in the same place (``pdkv.integrations.memory``).
"""
from __future__ import annotations

import dataclasses
from typing import Optional



@dataclasses.dataclass(frozen=True)
class RankTopology:
    """Where this worker sits: its TP rank and size, and the model's KV heads."""

    tp_rank: int
    tp_size: int
    total_kv_heads: int
    # vLLM's block size (cache_config.block_size); None skips the shape checks below
    block_size: Optional[int] = None
    # (2, blocks, heads, block_size, dim) when block_size == local heads (vLLM on CPU)
    heads_first: bool = False

    @property
    def local_kv_heads(self) -> int:
        """KV heads per rank as vLLM splits them (replicated when TP exceeds them)."""
        return max(1, self.total_kv_heads // self.tp_size)


@dataclasses.dataclass(frozen=True)
class Buffer:
    """One pdkv buffer: page i of ``item`` bytes starts at ``ptr + i * stride``."""

    ptr: int
    length: int
    item: int
    stride: int


def _block_elements(t) -> int:
    """Elements of one block of a tensor whose dim 0 is the block index."""
    n = 1
    for size in t.shape[1:]:
        n *= size
    return n


def _buffer(t, what: str) -> Buffer:
    """A tensor whose dim 0 is the block index, each block contiguous."""
    block_elems = _block_elements(t)
    es = t.element_size()
    if t.stride(0) < block_elems:
        raise ValueError(f"{what}: blocks overlap (stride {t.stride(0)} elements, block of "
                         f"{block_elems})")
    item, stride = block_elems * es, t.stride(0) * es
    return Buffer(t.data_ptr(), (t.shape[0] - 1) * stride + item, item, stride)


def _inner_layout(t, what: str) -> str:
    """NHD or HND of one K or V half ``(num_blocks, block_size, heads, head_dim)``."""
    s_tok, s_head, s_dim = t.stride(1), t.stride(2), t.stride(3)
    bs, heads, dim = t.shape[1], t.shape[2], t.shape[3]
    if s_dim == 1 and s_head == dim and s_tok == heads * dim:
        return "NHD"
    if s_dim == 1 and s_tok == dim and s_head == bs * dim:
        return "HND"
    raise ValueError(f"{what}: a block is neither NHD nor HND (strides {tuple(t.stride())})")


def _kv_first(t) -> bool:
    """(2, blocks, ...) rather than FlashInfer's (blocks, 2, ...): the K/V dimension is
    the outer one. Read from the strides, so a cache of 2 blocks is not mistaken."""
    if t.shape[0] == 2 and t.shape[1] != 2:
        return True
    if t.shape[1] == 2 and t.shape[0] != 2:
        return False
    return t.stride(0) > t.stride(1)


def _halves(t, name: str, topo: RankTopology):
    """K and V of a 5-D cache as (num_blocks, block_size, heads, head_dim) views."""
    k, v = (t[0], t[1]) if _kv_first(t) else (t[:, 0], t[:, 1])
    if topo.block_size is None:
        return k, v
    bs, heads = topo.block_size, topo.local_kv_heads
    x, y = k.shape[1], k.shape[2]
    tokens_first, heads_first = (x, y) == (bs, heads), (x, y) == (heads, bs)
    if tokens_first and heads_first:
        tokens_first = not topo.heads_first
    elif not tokens_first and not heads_first:
        raise ValueError(f"{name}: dims of {tuple(t.shape)} are not block_size {bs} "
                         f"and {heads} local KV heads (in either order)")
    if tokens_first:
        return k, v
    return k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)


@dataclasses.dataclass(frozen=True)
class AttentionLayer:
    """One attention layer's buffers and the geometry every layer must share."""

    buffers: tuple[Buffer, ...]  # (K, V), or (latent,) for MLA
    geometry: tuple  # ("mha", block_size, heads, head_dim, dtype bytes) or ("mla", ...)
    layout: str  # "NHD" or "HND"


def attention_layer(t, name: str, topo: RankTopology) -> AttentionLayer:
    if t.dim() == 3:
        return AttentionLayer((_buffer(t, name),),
                              ("mla", t.shape[1], t.shape[2], t.element_size()), "NHD")
    if t.dim() == 5 and 2 in (t.shape[0], t.shape[1]):
        k, v = _halves(t, name, topo)
        inner = _inner_layout(k, name)
        if _inner_layout(v, name) != inner:
            raise ValueError(f"{name}: K and V halves use different block layouts")
        return AttentionLayer((_buffer(k, name + " K"), _buffer(v, name + " V")),
                              ("mha", k.shape[1], k.shape[2], k.shape[3], t.element_size()),
                              inner)
    raise ValueError(f"{name}: unsupported KV cache shape {tuple(t.shape)}")


def _block_contiguous(t) -> bool:
    """One block of `t` is dense and row-major (read from shape and strides, so a
    tensor-like cache such as a device array's view works too)."""
    expected = 1
    for size, stride in reversed(list(zip(t.shape[1:], t.stride()[1:]))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def state_page(tensors, name: str) -> Buffer:
    """One Mamba layer's states (views of one raw allocation, block i at base + i * page)
    as one buffer whose slot is the whole page."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{name}: a state layer with no state tensors")
    blocks = {t.shape[0] for t in tensors}
    strides = {t.stride(0) * t.element_size() for t in tensors}
    if len(blocks) != 1 or len(strides) != 1:
        raise ValueError(f"{name}: state tensors differ in block count or block stride "
                         f"({sorted(blocks)}, {sorted(strides)} bytes)")
    page, count = strides.pop(), blocks.pop()
    base = min(t.data_ptr() for t in tensors)
    for t in tensors:
        end = t.data_ptr() - base + _block_elements(t) * t.element_size()
        if not _block_contiguous(t) or end > page:
            raise ValueError(f"{name}: state tensor of shape {tuple(t.shape)} is not "
                             f"inside its {page}-byte block page")
    return Buffer(base, count * page, page, page)

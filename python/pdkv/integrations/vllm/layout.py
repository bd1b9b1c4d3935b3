"""vLLM's per-layer KV cache tensors -> ``pdkv.KVArgs``.

vLLM hands ``register_kv_caches`` one tensor per attention layer, allocated by the
attention backend. The layouts understood here (block = vLLM's page):

- ``(2, num_blocks, block_size, heads, head_dim)``, K then V (FlashAttention and most
  backends). Its strides say the layout inside a block: token-major is pdkv's "NHD";
  vLLM's HND cache layout (``VLLM_KV_CACHE_LAYOUT=HND``) allocates
  ``(2, num_blocks, heads, block_size, head_dim)`` and permutes it to the same logical
  shape, which is pdkv's "HND".
- ``(2, num_blocks, heads, block_size, head_dim)`` as the *logical* shape: vLLM's CPU
  backend (CPU_ATTN, ``get_kv_cache_shape``) allocates it so, unpermuted; a K or V half
  is then pdkv's "HND". Which of dims 2 and 3 holds the tokens is read from the
  configured block size and this rank's KV head count; when both are equal (e.g. 16
  heads, block 16) the platform decides (``heads_first`` hint: vLLM on CPU).
- ``(num_blocks, block_size, latent_dim)``: MLA, one latent buffer per layer.

Every tensor must be in host memory (``device.type == "cpu"``) or on one CUDA device
(``"cuda"``), all of a worker's in the same place; the KVArgs say which (memory_kind,
gpu_id), and pdkv's registration checks it (``pdkv.integrations.memory``). A meta or other
device's tensor is refused with a ValueError.

Each K and V half becomes one pdkv buffer whose page i starts at ``ptr + i * page_bytes``,
so a block must be contiguous and blocks evenly spaced. Layouts interleaving K and V
inside a block (FlashInfer's ``(num_blocks, 2, ...)``) are refused with a ValueError: a
head slice for heterogeneous TP cannot be cut from them.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import pdkv
from pdkv.integrations.memory import caches_memory


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


def _buffer(t, what: str) -> tuple[int, int, int]:
    """(ptr, total bytes, bytes per block) of a tensor whose dim 0 is the block index."""
    block_elems = 1
    for size in t.shape[1:]:
        block_elems *= size
    if t.stride(0) != block_elems:
        raise ValueError(f"{what}: blocks must be contiguous and evenly spaced "
                         f"(stride {t.stride(0)} elements, block of {block_elems})")
    item = block_elems * t.element_size()
    return t.data_ptr(), t.shape[0] * item, item


def _inner_layout(t, what: str) -> str:
    """NHD or HND of one K or V half ``(num_blocks, block_size, heads, head_dim)``."""
    s_tok, s_head, s_dim = t.stride(1), t.stride(2), t.stride(3)
    bs, heads, dim = t.shape[1], t.shape[2], t.shape[3]
    if s_dim == 1 and s_head == dim and s_tok == heads * dim:
        return "NHD"
    if s_dim == 1 and s_tok == dim and s_head == bs * dim:
        return "HND"
    raise ValueError(f"{what}: a block is neither NHD nor HND (strides {tuple(t.stride())})")


def _halves(t, name: str, topo: RankTopology):
    """K and V of a 5-D cache as (num_blocks, block_size, heads, head_dim) views."""
    k, v = t[0], t[1]
    if topo.block_size is None:
        return k, v
    bs, heads = topo.block_size, topo.local_kv_heads
    x, y = t.shape[2], t.shape[3]
    tokens_first, heads_first = (x, y) == (bs, heads), (x, y) == (heads, bs)
    if tokens_first and heads_first:
        tokens_first = not topo.heads_first
    elif not tokens_first and not heads_first:
        raise ValueError(f"{name}: dims 2 and 3 of {tuple(t.shape)} are not block_size {bs} "
                         f"and {heads} local KV heads (in either order)")
    if tokens_first:
        return k, v
    return k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)


def kv_args_from_caches(kv_caches: Mapping[str, object], topo: RankTopology) -> \
        tuple[pdkv.KVArgs, list[str]]:
    """KVArgs of one worker's caches and the layer names in buffer order.

    Layers sharing one tensor (vLLM's cross-layer KV sharing) are registered once."""
    if not kv_caches:
        raise ValueError("register_kv_caches got no KV cache tensors")
    kind, gpu = caches_memory(kv_caches.items())
    seen: set[int] = set()
    names, halves, latents = [], [], []
    layout = None
    geometry = None
    for name, t in kv_caches.items():
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        names.append(name)
        if t.dim() == 3:
            latents.append(_buffer(t, name))
            g = ("mla", t.shape[1], t.shape[2], t.element_size())
        elif t.dim() == 5 and t.shape[0] == 2:
            k, v = _halves(t, name, topo)
            inner = _inner_layout(k, name)
            if _inner_layout(v, name) != inner or (layout and inner != layout):
                raise ValueError(f"{name}: every layer must use one block layout")
            layout = inner
            halves.append((_buffer(k, name + " K"), _buffer(v, name + " V")))
            g = ("mha", k.shape[1], k.shape[2], k.shape[3], t.element_size())
        elif t.dim() == 5 and t.shape[1] == 2:
            raise ValueError(f"{name}: K and V interleaved inside a block (num_blocks, 2, "
                             "...) is not supported; use a backend with (2, num_blocks, ...) "
                             "caches, e.g. FLASH_ATTN")
        else:
            raise ValueError(f"{name}: unsupported KV cache shape {tuple(t.shape)}")
        if geometry and g != geometry:
            raise ValueError(f"{name}: layers differ in shape or dtype ({g} vs {geometry})")
        geometry = g
    if latents and halves:
        raise ValueError("a mix of MLA and K/V layers is not supported")
    if latents:
        _, block_size, latent, es = geometry
        return pdkv.KVArgs(
            engine_rank=topo.tp_rank, tp_size=topo.tp_size, page_size=block_size,
            kv_data_ptrs=[b[0] for b in latents], kv_data_lens=[b[1] for b in latents],
            kv_item_lens=[b[2] for b in latents],
            layer_buffers=[[i] for i in range(len(latents))],
            kv_head_num=1, total_kv_head_num=1, head_dim=latent, dtype_bytes=es,
            page_layout="NHD", is_mla=True, memory_kind=kind, gpu_id=gpu), names
    _, block_size, heads, head_dim, es = geometry
    if heads * topo.tp_size < topo.total_kv_heads:
        raise ValueError(f"{heads} local KV heads x TP {topo.tp_size} do not cover the "
                         f"model's {topo.total_kv_heads}")
    bufs = [k for k, _ in halves] + [v for _, v in halves]
    n = len(halves)
    return pdkv.KVArgs(
        engine_rank=topo.tp_rank, tp_size=topo.tp_size, page_size=block_size,
        kv_data_ptrs=[b[0] for b in bufs], kv_data_lens=[b[1] for b in bufs],
        kv_item_lens=[b[2] for b in bufs], layer_buffers=[[i, n + i] for i in range(n)],
        kv_head_num=heads, total_kv_head_num=topo.total_kv_heads, head_dim=head_dim,
        dtype_bytes=es, page_layout=layout, memory_kind=kind, gpu_id=gpu), names

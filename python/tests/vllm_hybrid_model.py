"""Hybrid vLLM instances in miniature, as vLLM's hybrid KV cache manager lays them out
(written from vllm/v1/kv_cache_interface.py and the NIXL connector's group handling at
the commits in standins/upstream_signatures.json; no engine code copied):

* one block pool for every KV cache group: block ids never collide across groups, block
  0 is the null block put where a sliding-window group freed a block;
* one raw allocation per "slot" of the groups, shared by one layer of each group
  (KVCacheTensor.shared_by), each layer viewing it in its own shape: attention in
  block-major pages ((2, blocks, ...) logically, K and V of a block side by side) or
  FlashInfer's (blocks, 2, ...), Mamba as conv and temporal state tensors at offsets
  inside the same page; MLA latents and a DeepSeek-V3.2-style indexer cache in groups of
  their own.

A family names the groups: "swa" (full + sliding window), "mamba" / "mamba_ds" / "gdn"
(full + Mamba2 or Gated DeltaNet state, in either conv layout, split by TP rank),
"flashinfer" (one full group, FlashInfer's layout), "mla_indexer" (MLA + indexer keys).
Values name (layer, K/V, token, model head, element, request), and a Mamba state the
number of tokens it has seen, so a byte of the wrong layer, token, head, request or
state position is caught on the decode.
"""
from __future__ import annotations

import dataclasses

from engine_replay import pattern

NUM_BLOCKS, HEAD_DIM, LATENT, INDEX_DIM, WINDOW = 48, 8, 16, 12, 8
POISON = 99  # a block freed by the sliding window, as the next request writes it
CONV_ROWS = 3  # conv_kernel - 1


@dataclasses.dataclass(frozen=True)
class MambaModel:
    """A Mamba layer's state over the whole model (TP 1): the conv state's channels are
    sub-projections of these global widths, in this order; the temporal state has this
    global shape, its first dimension (heads) the one TP splits."""

    mamba_type: str  # MambaSpec.mamba_type
    proj: tuple  # global channel widths of the conv sub-projections
    temporal: tuple  # global temporal state shape
    dim_first: bool  # conv state (dim, rows) per block ("DS") rather than (rows, dim)


# Mamba2 (x of 4 heads * head_dim 2, B and C of n_groups 2 * d_state 4; temporal
# (heads, head_dim, d_state)), in vLLM's default SD conv layout and in DS; Gated DeltaNet
# (Q and K of 2 heads * k_dim 2, V of 4 heads * v_dim 4; temporal (v_heads, v_dim, k_dim)).
MAMBA_FAMILIES = {
    "mamba": MambaModel("mamba2", (8, 8, 8), (4, 2, 4), False),
    "mamba_ds": MambaModel("mamba2", (8, 8, 8), (4, 2, 4), True),
    "gdn": MambaModel("gdn_attention", (4, 4, 16), (4, 4, 2), True),
}


def mamba_env(family: str) -> dict:
    """The environment a rank of this family runs with (vLLM reads the conv layout from
    VLLM_SSM_CONV_STATE_LAYOUT)."""
    m = MAMBA_FAMILIES.get(family)
    return {"VLLM_SSM_CONV_STATE_LAYOUT": "DS" if m.dim_first else "SD"} if m else {}


def _local_shapes(m: MambaModel, tp: int):
    conv_dim = sum(m.proj) // tp
    conv = (conv_dim, CONV_ROWS) if m.dim_first else (CONV_ROWS, conv_dim)
    return conv, (m.temporal[0] // tp,) + tuple(m.temporal[1:])


def _cdiv(a, b):
    return -(-a // b)


def family_groups(family: str):
    """[(kind, layer names, extra)] in vLLM's group order."""
    if family == "swa":
        return [("full", ["model.layers.0.attn", "model.layers.2.attn"], {}),
                ("sliding", ["model.layers.1.attn", "model.layers.3.attn"], {})]
    if family in MAMBA_FAMILIES:
        return [("full", ["model.layers.0.attn", "model.layers.3.attn"], {}),
                ("mamba", ["model.layers.1.mixer", "model.layers.2.mixer"], {})]
    if family == "flashinfer":
        return [("full", ["model.layers.0.attn", "model.layers.1.attn"], {})]
    if family == "mla_indexer":
        return [("mla", ["model.layers.0.attn", "model.layers.1.attn"], {}),
                ("indexer", ["model.layers.0.indexer", "model.layers.1.indexer"], {})]
    raise ValueError(family)


def kv_cache_config(torch, family: str, heads: int, block_size: int, tp: int = 1):
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                            KVCacheGroupSpec, KVCacheTensor,
                                            MambaSpec, MLAAttentionSpec, SlidingWindowSpec)
    page = 2 * block_size * heads * HEAD_DIM * 2
    groups = []
    for kind, names, _ in family_groups(family):
        if kind == "full":
            spec = FullAttentionSpec(block_size=block_size, num_kv_heads=heads,
                                     head_size=HEAD_DIM, dtype=torch.float16)
        elif kind == "sliding":
            spec = SlidingWindowSpec(block_size=block_size, num_kv_heads=heads,
                                     head_size=HEAD_DIM, dtype=torch.float16,
                                     sliding_window=WINDOW)
        elif kind == "mamba":
            m = MAMBA_FAMILIES[family]
            spec = MambaSpec(block_size=block_size, shapes=_local_shapes(m, tp),
                             dtypes=(torch.float16, torch.float32), page_size_padded=page,
                             mamba_type=m.mamba_type)
        elif kind == "mla":
            spec = MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=LATENT,
                                    dtype=torch.bfloat16)
        else:
            spec = MLAAttentionSpec(block_size=block_size, num_kv_heads=1,
                                    head_size=INDEX_DIM, dtype=torch.bfloat16)
        groups.append(KVCacheGroupSpec(list(names), spec))
    slots = len(groups[0].layer_names)
    tensors = [KVCacheTensor(NUM_BLOCKS * page, [g.layer_names[i] for g in groups])
               for i in range(slots)]
    return KVCacheConfig(NUM_BLOCKS, tensors, groups)


def make_caches(torch, family: str, heads: int, block_size: int, tp: int = 1) -> dict:
    """{layer name: tensor, or [conv, temporal] for a Mamba layer}, views of shared raw
    allocations as vLLM's model runner makes them."""
    half = block_size * heads * HEAD_DIM  # elements of a K (or V) half of one block
    groups = family_groups(family)
    caches = {}
    if family == "mla_indexer":
        for _, names, _ in groups[:1]:
            for n in names:
                caches[n] = torch.zeros(NUM_BLOCKS, block_size, LATENT, dtype=torch.bfloat16)
        for n in groups[1][1]:
            caches[n] = torch.zeros(NUM_BLOCKS, block_size, INDEX_DIM, dtype=torch.bfloat16)
        return caches
    page_bytes = 2 * half * 2
    for slot in range(len(groups[0][1])):
        raw = torch.zeros(NUM_BLOCKS * page_bytes, dtype=torch.uint8)
        for kind, names, _ in groups:
            name = names[slot]
            if kind == "mamba":  # conv state, then the temporal state right after it
                conv_shape, temporal_shape = _local_shapes(MAMBA_FAMILIES[family], tp)
                conv = torch.as_strided(raw.view(torch.float16), (NUM_BLOCKS, *conv_shape),
                                        (page_bytes // 2, conv_shape[1], 1), 0)
                a, b, c = temporal_shape
                ssm = torch.as_strided(raw.view(torch.float32), (NUM_BLOCKS, a, b, c),
                                       (page_bytes // 4, b * c, c, 1),
                                       conv_shape[0] * conv_shape[1] * 2 // 4)
                caches[name] = [conv, ssm]
            elif family == "flashinfer":
                caches[name] = raw.view(torch.float16).view(NUM_BLOCKS, 2, block_size,
                                                            heads, HEAD_DIM)
            else:  # block-major: (2, blocks, ...) logically, K|V of a block side by side
                caches[name] = torch.as_strided(
                    raw.view(torch.float16), (2, NUM_BLOCKS, block_size, heads, HEAD_DIM),
                    (half, 2 * half, heads * HEAD_DIM, HEAD_DIM, 1))
    return caches


def _kv(cache, family):
    """(K, V) as (blocks, tokens, heads, dim) views."""
    return (cache[:, 0], cache[:, 1]) if family == "flashinfer" else (cache[0], cache[1])


def _mamba_state(torch, family: str, layer: int, tokens: int, seed: int, rank: int,
                 tp: int):
    """(conv, temporal) that rank `rank` of TP `tp` holds of a layer's state after
    `tokens` tokens, cut from the whole model's state by the sharding rule of vLLM's
    Mamba layers: each conv sub-projection's channels and the temporal state's first
    dimension split into `tp` contiguous parts, rank r taking part r (conv rows whole)."""
    m = MAMBA_FAMILIES[family]
    channels = torch.arange(sum(m.proj), dtype=torch.int64).view(-1, 1)
    rows = torch.arange(CONV_ROWS, dtype=torch.int64).view(1, -1)
    conv = (layer * 11 + seed * 7 + tokens * 3 + channels * 5 + rows * 17 + 1) % 251
    numel = 1
    for size in m.temporal:
        numel *= size
    temporal = ((layer * 13 + seed * 5 + tokens * 7 + torch.arange(numel) * 3 + 2) % 251) \
        .view(*m.temporal)
    mine, start = [], 0
    for width in m.proj:
        part = width // tp
        mine.append(conv[start + rank * part:start + (rank + 1) * part])
        start += width
    conv_local = torch.cat(mine)  # (local channels, rows)
    if not m.dim_first:
        conv_local = conv_local.t().contiguous()
    heads = m.temporal[0] // tp
    return (conv_local.to(torch.float16),
            temporal[rank * heads:(rank + 1) * heads].contiguous().to(torch.float32))


def _layer_id(name: str) -> int:
    return int(name.split(".")[2]) + (50 if "indexer" in name else 0)


def write(torch, caches, family, per_group, block_size, tokens: int, first_head, n_heads,
          seed, rank: int = 0, tp: int = 1) -> None:
    """The forward of a whole prompt of `tokens` tokens into every group's blocks."""
    for g, (kind, names, _) in enumerate(family_groups(family)):
        blocks = per_group[g]
        for name in names:
            layer = _layer_id(name)
            if kind == "mamba":
                conv, ssm = _mamba_state(torch, family, layer, tokens, seed, rank, tp)
                caches[name][0][blocks[-1]] = conv
                caches[name][1][blocks[-1]] = ssm
                continue
            for t in range(tokens):
                b, o = blocks[t // block_size], t % block_size
                if kind in ("mla", "indexer"):
                    width = LATENT if kind == "mla" else INDEX_DIM
                    caches[name][b, o] = pattern(torch, layer, 0, range(t, t + 1), 0, 1, width,
                                                 seed, torch.bfloat16)[0, 0]
                    continue
                for kv, half in enumerate(_kv(caches[name], family)):
                    half[b, o] = pattern(torch, layer, kv, range(t, t + 1), first_head,
                                         n_heads, HEAD_DIM, seed, torch.float16)[0]


def free_out_of_window(caches, family, per_group, block_size, tokens: int):
    """What vLLM's sliding-window manager does before request_finished_all_groups: the
    blocks before the window go back to the pool (rewritten by others: poisoned) and
    its null block takes their place. Returns the new per-group lists."""
    out = [list(b) for b in per_group]
    for g, (kind, names, _) in enumerate(family_groups(family)):
        if kind != "sliding":
            continue
        keep_from = max(0, tokens - WINDOW) // block_size
        for p in range(keep_from):
            for name in names:
                for half in _kv(caches[name], family):
                    half[out[g][p]] = POISON
            out[g][p] = 0
    return out


def check(torch, caches, family, per_group, block_size, tokens: int, first_head, n_heads,
          seed, rank: int = 0, tp: int = 1) -> dict:
    """{layer name: bytes right} for a decode that loaded `tokens` tokens into these
    blocks: full groups every token, sliding groups the tokens of the pages the window
    keeps, Mamba the state after `tokens` tokens."""
    ok = {}
    for g, (kind, names, _) in enumerate(family_groups(family)):
        blocks = per_group[g]
        pages = _cdiv(tokens, block_size)
        first_page = max(0, pages - (_cdiv(WINDOW, block_size) + 1)) if kind == "sliding" \
            else 0
        for name in names:
            layer = _layer_id(name)
            if kind == "mamba":
                conv, ssm = _mamba_state(torch, family, layer, tokens, seed, rank, tp)
                ok[name] = bool(torch.equal(caches[name][0][blocks[-1]], conv) and
                                torch.equal(caches[name][1][blocks[-1]], ssm))
                continue
            good = True
            for t in range(first_page * block_size, tokens):
                b, o = blocks[t // block_size], t % block_size
                if kind in ("mla", "indexer"):
                    width = LATENT if kind == "mla" else INDEX_DIM
                    want = pattern(torch, layer, 0, range(t, t + 1), 0, 1, width, seed,
                                   torch.bfloat16)[0, 0]
                    good &= bool(torch.equal(caches[name][b, o], want))
                    continue
                for kv, half in enumerate(_kv(caches[name], family)):
                    want = pattern(torch, layer, kv, range(t, t + 1), first_head, n_heads,
                                   HEAD_DIM, seed, torch.float16)[0]
                    good &= bool(torch.equal(half[b, o], want))
            ok[name] = good
    return ok


def allocate(alloc, family, block_size, tokens: int) -> list[list[int]]:
    """Blocks per group for `tokens` tokens from the one pool (Mamba: one state block)."""
    out = []
    for kind, _, _ in family_groups(family):
        out.append(alloc(1 if kind == "mamba" else _cdiv(tokens, block_size)))
    return out

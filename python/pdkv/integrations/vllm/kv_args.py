"""One vLLM worker's KV caches -> ``pdkv.KVArgs``, every KV cache group included.

Buffers (layout.py) are registered once each: a tensor shared by several layers is one
set of buffers. Layers that share a tensor *and* a group (vLLM's cross-layer KV sharing:
the same blocks) are one pdkv layer; layers of different groups that share a tensor
(vLLM's hybrid allocator lays one layer of each group over the same memory, the groups'
block ids being distinct) are separate pdkv layers over the same buffers, each taking
its own group's indices (groups.py: the primary group's pages are the room's chunked
pages, every other group's are its state group's list). Mamba layers become state
buffers of their group, one slot per block page: the page's pieces that TP shards one by
one (mamba_state.py), each striding by the page.

Every attention layer must share one geometry (block size, heads, head size, dtype,
layout): pdkv slices heads by one rule per rank.
"""
from __future__ import annotations

from typing import Mapping, Optional

import pdkv
from pdkv.integrations.memory import caches_memory
from pdkv.integrations.vllm.groups import GroupKind, GroupLayout
from pdkv.integrations.vllm.layout import Buffer, RankTopology, attention_layer
from pdkv.integrations.vllm.mamba_state import state_pieces


def flat_caches(kv_caches: Mapping[str, object]):
    """(name, tensor) of every tensor, a state layer's list flattened."""
    for name, value in kv_caches.items():
        if isinstance(value, (list, tuple)):
            for i, t in enumerate(value):
                yield f"{name}[{i}]", t
        else:
            yield name, value


class _Buffers:
    """Registered buffers, one per distinct (ptr, length, item, stride)."""

    def __init__(self):
        self.items: list[Buffer] = []
        self._index: dict[Buffer, int] = {}

    def add(self, b: Buffer) -> int:
        if b not in self._index:
            self._index[b] = len(self.items)
            self.items.append(b)
        return self._index[b]


def kv_args_from_caches(kv_caches: Mapping[str, object], topo: RankTopology,
                        groups: Optional[GroupLayout] = None) -> tuple[pdkv.KVArgs, list[str]]:
    """KVArgs of one worker's caches and the attention layer names in pdkv layer order."""
    if not kv_caches:
        raise ValueError("register_kv_caches got no KV cache tensors")
    kind, gpu = caches_memory(flat_caches(kv_caches))
    of_layer = groups.group_of_layer() if groups is not None and groups.hybrid else {}
    # K buffers first, then V (the order pdkv's vLLM adapter has always registered)
    halves = (_Buffers(), _Buffers())
    layer_buffers: list[list[int]] = []
    layer_groups: list[int] = []
    names: list[str] = []
    seen_layers: set[tuple] = set()
    states: list[Buffer] = []
    state_groups: list[int] = []
    geometry = layout = None
    first = None
    for name, value in kv_caches.items():
        group = of_layer.get(name)
        if of_layer and group is None:
            raise ValueError(f"{name}: a KV cache layer in no KV cache group")
        state_group = -1 if group is None else group.state_group
        if isinstance(value, (list, tuple)):
            if group is not None and group.kind != GroupKind.MAMBA:
                raise ValueError(f"{name}: state tensors in a {group.kind.value} group")
            if group is None:
                raise ValueError(f"{name}: a state (Mamba) layer needs vLLM's hybrid KV "
                                 "cache groups (kv_cache_config) to say where it belongs")
            pieces = state_pieces(value, name, group.state_split)
            states.extend(pieces)
            state_groups.extend([state_group] * len(pieces))
            continue
        if group is not None and group.kind == GroupKind.MAMBA:
            raise ValueError(f"{name}: one tensor for a layer of a Mamba group")
        layer = attention_layer(value, name, topo)
        if state_group >= 0 and layer.geometry[0] == "mla" and geometry is not None and \
                layer.geometry != geometry:
            # A latent-style cache of another width in its own group (DeepSeek-V3.2's
            # sparse-attention indexer keys and scales): its pages move whole, as state
            # slots of the group, copied to every decode rank like MLA latents.
            states.append(layer.buffers[0])
            state_groups.append(state_group)
            continue
        if geometry is not None and (layer.geometry, layer.layout) != (geometry, layout):
            raise ValueError(f"{name}: layers differ in shape, dtype or block layout "
                             f"({layer.geometry} {layer.layout} vs {first}: {geometry} "
                             f"{layout})")
        geometry, layout, first = layer.geometry, layer.layout, first or name
        key = (tuple(layer.buffers), state_group)
        if key in seen_layers:
            continue  # cross-layer KV sharing: the same blocks of the same memory
        seen_layers.add(key)
        layer_buffers.append([halves[i].add(b) for i, b in enumerate(layer.buffers)])
        layer_groups.append(state_group)
        names.append(name)
    if not layer_buffers:
        raise ValueError("no attention layer among the KV caches: pdkv moves a request's "
                         "pages through at least one attention group")
    n_k = len(halves[0].items)
    layer_buffers = [[ix[0]] + [n_k + i for i in ix[1:]] for ix in layer_buffers]
    buffers = halves[0].items + halves[1].items
    hybrid = any(g >= 0 for g in layer_groups) or bool(states)
    common = dict(
        engine_rank=topo.tp_rank, tp_size=topo.tp_size, page_size=geometry[1],
        kv_data_ptrs=[b.ptr for b in buffers], kv_data_lens=[b.length for b in buffers],
        kv_item_lens=[b.item for b in buffers], layer_buffers=layer_buffers,
        memory_kind=kind, gpu_id=gpu)
    if any(b.stride != b.item for b in buffers):
        common["kv_page_strides"] = [b.stride for b in buffers]
    if hybrid:
        common["kv_layer_groups"] = layer_groups
    if states:
        common.update(state_data_ptrs=[b.ptr for b in states],
                      state_data_lens=[b.length for b in states],
                      state_item_lens=[b.item for b in states],
                      state_buffer_groups=state_groups)
        if any(b.stride != b.item for b in states):
            common["state_page_strides"] = [b.stride for b in states]
    if geometry[0] == "mla":
        _, _, latent, es = geometry
        return pdkv.KVArgs(kv_head_num=1, total_kv_head_num=1, head_dim=latent,
                           dtype_bytes=es, page_layout="NHD", is_mla=True, **common), names
    _, _, heads, head_dim, es = geometry
    if heads * topo.tp_size < topo.total_kv_heads:
        raise ValueError(f"{heads} local KV heads x TP {topo.tp_size} do not cover the "
                         f"model's {topo.total_kv_heads}")
    return pdkv.KVArgs(kv_head_num=heads, total_kv_head_num=topo.total_kv_heads,
                       head_dim=head_dim, dtype_bytes=es, page_layout=layout,
                       **common), names

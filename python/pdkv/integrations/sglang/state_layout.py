"""sglang's hybrid-model state (``KVArgs.state_*``) -> pdkv's state groups.

Newer sglang describes a rank's extra state as components, one per entry of
``state_types`` (``StateType``: "mamba", "swa", "dsa", ...), each with its own lists in
``state_data_ptrs`` / ``state_data_lens`` / ``state_item_lens``; ``send`` and
``send_metadata`` then take ``state_indices`` as one list (or None) per component, given on
the last chunk. Per component, prefill and decode lists are paired elementwise, as
sglang's Mooncake backend pairs them.

pdkv carries each component as one state group (``pdkv.KVArgs.state_buffer_groups`` /
``kv_layer_groups``; ``state_indices`` as one list per group):

- MAMBA: the conv / temporal state buffers, one slot per request (one index), copied whole.
  Across TP sizes pdkv splits each slot contiguously when the per-rank slot sizes add up
  (``item_p * P == item_d * D``), what Mooncake's slice transfer does with
  ``state_dim_per_tensor``. A conv tensor made of several independently sharded blocks
  (``state_conv_shard_groups`` with more than one block) is not one contiguous shard, so
  its TP mismatch is refused by the decode (``check_tp_with_prefill``).
- SWA: the sliding-window layers' K and V pools, laid out like the full-attention pool
  (every layer's K buffer, then every layer's V buffer; one latent buffer per layer for
  MLA). pdkv registers them as extra KV layers of the group (``kv_layer_groups``), so
  their pages are head-sliced across TP sizes like the full layers; the pages moved are the
  window pages sglang's prefill lists, paired with the decode's. The two window lists
  may differ in length: both start at the window's first page, but sglang's prefill counts
  its fill ids, which can hold the token it sampled and so reach one page further than the
  decode's prompt. As sglang's Mooncake backend cuts the prefill's list to the decode's
  length, pdkv pairs the leading min(len) pages (``window_state_groups``).
- DSA: the NSA/DSA indexer cache (keys with their scales), one buffer per layer, indexed by
  page: whole page slots of the group, replicated to every decode rank like MLA's latent.

Refused, with the reason (ValueError): SWA_RING and C128_STATE (DeepSeek-V4's compressed
pools, refused as a whole), MINIMAX_INDEX_K (sparse-index layers; Mooncake moves them at
equal TP only, and pdkv has not validated their slot layout), and SWA pages of another
size than the full-attention pages (pdkv's KV layers share one page size).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

_CARRIED = ("mamba", "swa", "dsa")
_REFUSED = {
    "swa_ring": "DeepSeek-V4's unified SWA ring (its compressed pools are not carried)",
    "c128_state": "DeepSeek-V4's C128 compressor state (its compressed pools are not carried)",
    "minimax_index_k": "MiniMax sparse-index layers (sglang's own Mooncake backend moves "
                       "them at equal TP only; pdkv has not validated their slot layout)",
}


def _type_name(state_type) -> str:
    return str(getattr(state_type, "value", state_type)).lower()


@dataclasses.dataclass
class StateLayout:
    """What a rank's state components add to its pdkv.KVArgs, and how their indices map."""
    kv_data_ptrs: list = dataclasses.field(default_factory=list)  # extra KV buffers (SWA)
    kv_data_lens: list = dataclasses.field(default_factory=list)
    kv_item_lens: list = dataclasses.field(default_factory=list)
    layer_buffers: list = dataclasses.field(default_factory=list)  # indices into the extras
    layer_groups: list = dataclasses.field(default_factory=list)  # one per extra layer
    state_data_ptrs: list = dataclasses.field(default_factory=list)
    state_data_lens: list = dataclasses.field(default_factory=list)
    state_item_lens: list = dataclasses.field(default_factory=list)
    state_buffer_groups: list = dataclasses.field(default_factory=list)
    group_of_component: list = dataclasses.field(default_factory=list)  # None = no state
    window_groups: list = dataclasses.field(default_factory=list)  # the SWA components' groups
    conv_shard_blocks: int = 1  # most independently sharded blocks of a Mamba conv tensor

    @property
    def groups(self) -> int:
        return sum(g is not None for g in self.group_of_component)

    @property
    def needs_groups(self) -> bool:
        """More than one group, or KV layers in one: what needs pdkv's group fields. One
        group of state buffers is the core's plain state (one flat index list, every
        buffer in group 0), so a Mamba-only or DSA model needs no more."""
        return self.groups > 1 or bool(self.layer_groups)

    def group_indices(self, state_indices) -> Optional[list]:
        """sglang's per-component ``state_indices`` -> pdkv's per-group lists, or one flat
        list for one group without KV layers (None when the rank has no state). A
        component sglang leaves at None moves nothing."""
        if not self.groups:
            if state_indices is not None and any(i is not None and len(i)
                                                 for i in state_indices):
                raise ValueError("state_indices given, but this rank registered no state")
            return None
        if state_indices is None or all(i is None for i in state_indices):
            return None  # a chunk before the last, or a request without state
        if len(state_indices) != len(self.group_of_component):
            raise ValueError(f"state_indices has {len(state_indices)} entries; this rank's "
                             f"KVArgs list {len(self.group_of_component)} state types")
        out: list = [[] for _ in range(self.groups)]
        for component, group in enumerate(self.group_of_component):
            indices = state_indices[component]
            if group is not None and indices is not None:
                out[group] = [int(i) for i in indices]
        return out if self.needs_groups else out[0]


def _component(args, field: str, i: int) -> list:
    values = getattr(args, field, None) or []
    entry = values[i] if i < len(values) else []
    return list(entry) if isinstance(entry, (list, tuple)) else [entry]


def state_layout(args, is_mla: bool, page_size: int, kv_item_len: int) -> StateLayout:
    """The state components of sglang's ``args``; ValueError for the refused ones.
    ``kv_item_len`` is the full-attention pool's bytes per page of one buffer."""
    types = list(getattr(args, "state_types", None) or [])
    out = StateLayout()
    ptr_lists = getattr(args, "state_data_ptrs", None) or []
    if not types:
        # Older sglang: a flat list of state pointers with no types to say what they are.
        if any(not isinstance(p, (list, tuple)) or p for p in ptr_lists):
            raise ValueError("KVArgs.state_data_ptrs lists buffers but no state_types: pdkv "
                             "cannot tell Mamba slots from SWA or DSA pages (sglang versions "
                             "without state_types are not supported for hybrid models)")
        return out
    for i, state_type in enumerate(types):
        name = _type_name(state_type)
        ptrs, lens = _component(args, "state_data_ptrs", i), _component(args, "state_data_lens", i)
        items = _component(args, "state_item_lens", i)
        if name in _REFUSED:
            raise ValueError(f"pdkv's sglang adapter does not carry {_REFUSED[name]}")
        if name not in _CARRIED:
            raise ValueError(f"pdkv's sglang adapter does not know the state type {name!r}")
        if not len(ptrs) == len(lens) == len(items):
            raise ValueError(f"state component {i} ({name}): state_data_ptrs, state_data_lens "
                             "and state_item_lens differ in length")
        if not ptrs:
            out.group_of_component.append(None)
            continue
        group = out.groups
        out.group_of_component.append(group)
        if name == "swa":
            out.window_groups.append(group)
            _add_swa_layers(out, args, group, ptrs, lens, items, is_mla, page_size,
                            kv_item_len)
            continue
        out.state_data_ptrs += ptrs
        out.state_data_lens += lens
        out.state_item_lens += items
        out.state_buffer_groups += [group] * len(ptrs)
        if name == "mamba":
            for blocks in _component(args, "state_conv_shard_groups", i):
                if isinstance(blocks, (list, tuple)):
                    out.conv_shard_blocks = max(out.conv_shard_blocks, len(blocks))
    return out


def _add_swa_layers(out: StateLayout, args, group: int, ptrs, lens, items, is_mla: bool,
                    page_size: int, kv_item_len: int) -> None:
    swa_page = int(getattr(args, "swa_page_size", None) or page_size)
    if swa_page != page_size or any(int(n) != kv_item_len for n in items):
        raise ValueError(f"SWA pages of {swa_page} tokens / {sorted(set(items))} bytes differ "
                         f"from the full-attention pages ({page_size} tokens, {kv_item_len} "
                         "bytes): pdkv's KV layers share one page size")
    first = len(out.kv_data_ptrs)
    out.kv_data_ptrs += ptrs
    out.kv_data_lens += lens
    out.kv_item_lens += items
    if is_mla:
        layers = [[first + b] for b in range(len(ptrs))]
    else:
        if len(ptrs) % 2:
            raise ValueError("an SWA pool lists K then V buffers: an even count is needed")
        half = len(ptrs) // 2
        layers = [[first + b, first + half + b] for b in range(half)]
    out.layer_buffers += layers
    out.layer_groups += [group] * len(layers)


def check_tp_with_prefill(layout: StateLayout, own_attn_tp: int, prefill_attn_tp: int,
                          prefill_addr: str) -> None:
    """What the decode refuses before it admits a prefill of another attention TP size."""
    if own_attn_tp != prefill_attn_tp and layout.conv_shard_blocks > 1:
        raise RuntimeError(
            f"prefill {prefill_addr} has attention TP {prefill_attn_tp}, this decode "
            f"{own_attn_tp}: the Mamba conv state is {layout.conv_shard_blocks} "
            "independently sharded blocks, which pdkv splits as one contiguous slot; "
            "run both sides at the same attention TP size")

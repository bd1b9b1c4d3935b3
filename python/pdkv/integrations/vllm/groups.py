"""vLLM's KV cache groups, as pdkv moves them (hybrid models).

With vLLM's hybrid KV cache manager a request holds one block list per KV cache group
(``KVCacheConfig.kv_cache_groups``, each with one ``kv_cache_spec`` for all its layers):
full attention, sliding window, chunked local attention, Mamba / linear-attention state.
A pdkv room carries them so:

- the *primary* group (the first full-attention group, MLA included) is the room's
  chunked pages (``kv_indices``), streamed as vLLM computes them;
- every other group g becomes one pdkv *state group*: an index list given with the
  room's last chunk, paired position by position between prefill and decode. Its
  attention layers take those indices as pages (head-sliced between TP sizes like the
  primary pages); its Mamba layers take them as state slots (split between TP sizes
  piece by piece, mamba_state.py).

Which positions move, per group, over the request's prompt pages [0, P):
- full attention (a second full group): every position;
- sliding window / chunked local attention: the last ``window // block_size + 1``
  positions (vLLM frees blocks before that and puts its null block, id 0, in their
  place; the +1 covers a window that does not start on a block boundary);
- Mamba: the running state, i.e. the last block once the speculative scratch blocks
  are dropped (``mamba_cache_mode`` "all" keeps a state per block position instead:
  then every position).
A position either side does not hold (vLLM's null block, or a page the decode already
holds in its local prefix) is -1 on that side, which pdkv skips.

Mamba state is the state *after* a token: the decode's scheduler recomputes the last
prompt token, so the prefill must hand over the state after N-1 tokens, not N. A model
with a Mamba group therefore has its prefill prompt shortened by one token
(``truncate_prompt``) and its decode loads N-1 tokens (``remote_token_count``).

Pure data and arithmetic; no vLLM import at module level (the spec classes are matched
by name, so stand-ins and every vLLM version that has them work alike).
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Optional, Sequence

from pdkv.integrations.vllm.mamba_state import split_kind

NULL_BLOCK = 0  # vLLM's null block: a placeholder for a freed position


class GroupKind(enum.Enum):
    FULL = "full"
    SLIDING = "sliding"  # sliding window or chunked local attention: a window of blocks
    MAMBA = "mamba"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class GroupInfo:
    """One vLLM KV cache group as pdkv moves it."""

    index: int  # vLLM's group index (position in block-id tuples)
    kind: GroupKind
    layer_names: tuple[str, ...]
    block_size: int
    state_group: int  # -1: the room's chunked pages; else the pdkv state group
    window_blocks: int = 0  # SLIDING: positions kept at the end
    spec_blocks: int = 0  # MAMBA: trailing speculative scratch blocks
    positional: bool = False  # MAMBA: a state per block position ("all" mode)
    is_mla: bool = False
    # MAMBA: "mamba1", "mamba2" or "gdn" when its state splits between TP sizes
    # (mamba_state.py), None when it moves between equal TP sizes only
    state_split: Optional[str] = None


def _spec_kind(spec) -> tuple[GroupKind, int, bool]:
    """(kind, window in tokens, is MLA) of one vLLM KVCacheSpec, by class name (its MRO,
    so subclasses such as MLAAttentionSpec count as their base)."""
    names = {c.__name__ for c in type(spec).__mro__}
    if "MambaSpec" in names:
        return GroupKind.MAMBA, 0, False
    if "SlidingWindowSpec" in names:
        return GroupKind.SLIDING, int(spec.sliding_window), False
    if "ChunkedLocalAttentionSpec" in names:
        return GroupKind.SLIDING, int(spec.attention_chunk_size), False
    if "FullAttentionSpec" in names:
        return GroupKind.FULL, 0, "MLAAttentionSpec" in names
    raise ValueError(f"pdkv's vLLM connector does not move KV cache groups of type "
                     f"{type(spec).__name__}")


@dataclasses.dataclass(frozen=True)
class GroupLayout:
    """Every KV cache group of an instance, in vLLM's order."""

    groups: tuple[GroupInfo, ...]
    primary: int  # index of the group whose blocks are the room's chunked pages

    @property
    def hybrid(self) -> bool:
        return len(self.groups) > 1

    @property
    def has_mamba(self) -> bool:
        return any(g.kind == GroupKind.MAMBA for g in self.groups)

    @property
    def mamba_splits_by_tp(self) -> bool:
        """Every Mamba group's state splits between TP sizes (vacuously true without)."""
        return all(g.state_split for g in self.groups if g.kind == GroupKind.MAMBA)

    @property
    def state_groups(self) -> list[GroupInfo]:
        """The non-primary groups, in pdkv state-group order."""
        return sorted((g for g in self.groups if g.state_group >= 0),
                      key=lambda g: g.state_group)

    def group_of_layer(self) -> dict[str, GroupInfo]:
        return {name: g for g in self.groups for name in g.layer_names}

    @classmethod
    def single(cls, block_size: int) -> "GroupLayout":
        """One full-attention group (no kv_cache_config, or HMA off)."""
        return cls((GroupInfo(0, GroupKind.FULL, (), block_size, -1),), 0)

    @classmethod
    def from_kv_cache_config(cls, kv_cache_config, block_size: int,
                             mamba_cache_mode: Optional[str] = None) -> "GroupLayout":
        groups_in = list(getattr(kv_cache_config, "kv_cache_groups", None) or [])
        if not groups_in:
            return cls.single(block_size)
        specs = [_spec_kind(g.kv_cache_spec) for g in groups_in]
        primary = next((i for i, (kind, _, _) in enumerate(specs) if kind == GroupKind.FULL),
                       None)
        if primary is None:
            raise ValueError("pdkv's vLLM connector needs a full-attention KV cache group "
                             "(the request's pages); this model has only "
                             + ", ".join(k.value for k, _, _ in specs) + " groups")
        out, next_state = [], 0
        for i, (g, (kind, window, mla)) in enumerate(zip(groups_in, specs)):
            spec = g.kv_cache_spec
            bs = int(spec.block_size)
            state_group = -1
            if i != primary:
                state_group, next_state = next_state, next_state + 1
            mode = getattr(spec, "mamba_cache_mode", None) or mamba_cache_mode or "none"
            out.append(GroupInfo(
                index=i, kind=kind, layer_names=tuple(g.layer_names), block_size=bs,
                state_group=state_group,
                window_blocks=_cdiv(window, bs) + 1 if kind == GroupKind.SLIDING else 0,
                spec_blocks=int(getattr(spec, "num_speculative_blocks", 0) or 0)
                if kind == GroupKind.MAMBA else 0,
                positional=kind == GroupKind.MAMBA and mode == "all", is_mla=mla,
                state_split=split_kind(getattr(spec, "mamba_type", None))
                if kind == GroupKind.MAMBA else None))
        return cls(tuple(out), primary)

    # --- block lists -------------------------------------------------------------------
    def split(self, block_ids) -> tuple[list[int], tuple[list[int], ...]]:
        """(primary group's blocks, every group's blocks) of a block-id value as vLLM
        hands it over: a tuple of per-group lists, or (one group) a flat list."""
        if block_ids and isinstance(block_ids[0], (list, tuple)):
            per_group = tuple(list(g) for g in block_ids)
        elif not self.hybrid:
            per_group = (list(block_ids or []),)
        else:
            raise ValueError("a hybrid model's blocks must come per KV cache group")
        if len(per_group) != len(self.groups):
            raise ValueError(f"{len(per_group)} KV cache groups of blocks for "
                             f"{len(self.groups)} groups")
        return per_group[self.primary], per_group

    def state_lists(self, per_group: Sequence[Sequence[int]], num_tokens: int,
                    skip_tokens: int = 0) -> list[list[int]]:
        """The index list of each pdkv state group for a request whose prompt KV covers
        ``num_tokens`` tokens: per group, the positions that move (see the module
        doc), each the block this side holds there or -1 (a null block, a position it
        lacks, or one inside the first ``skip_tokens`` tokens: the decode's local prefix,
        which it already holds). Both sides compute the same positions from the same
        ``num_tokens``, so the lists pair up."""
        lists = []
        for g in self.state_groups:
            blocks = list(per_group[g.index])
            pages = _cdiv(num_tokens, g.block_size)
            skip = skip_tokens // g.block_size
            if g.kind == GroupKind.MAMBA:
                if g.spec_blocks:
                    blocks = blocks[:max(1, len(blocks) - g.spec_blocks)]
                if g.positional:
                    positions = range(pages)
                else:  # one running state: vLLM keeps it in the last kept block
                    positions = [len(blocks) - 1] if blocks else []
                    skip = 0  # the state covers the whole prompt: always needed
            elif g.kind == GroupKind.SLIDING:
                positions = range(max(0, pages - g.window_blocks), pages)
            else:
                positions = range(pages)
            entry = []
            for p in positions:
                block = blocks[p] if 0 <= p < len(blocks) else -1
                entry.append(-1 if p < skip or block == NULL_BLOCK else block)
            lists.append(entry)
        return lists

    def remote_token_count(self, num_prompt_tokens: int) -> int:
        """Prompt tokens whose KV the prefill computes and the decode loads: N-1 with a
        Mamba group (the decode recomputes the last token from the state after N-1)."""
        if self.has_mamba and num_prompt_tokens > 1:
            return num_prompt_tokens - 1
        return num_prompt_tokens


def truncate_prompt(request) -> bool:
    """Drop the prefill request's last prompt token (Mamba models, see the module doc).
    True when it was shortened now; a request already shortened (a preempted one coming
    back) or of one token is left alone. The prefill then samples one token, which the
    decode does not use: it computes the last prompt token itself."""
    params = request.kv_transfer_params
    if params is None or params.get("_pdkv_truncated") or request.num_prompt_tokens <= 1:
        return False
    if getattr(request, "prompt_token_ids", None) is not None:
        request.prompt_token_ids.pop()
    elif getattr(request, "prompt_embeds", None) is not None:
        request.prompt_embeds = request.prompt_embeds[:-1]
    else:
        return False
    all_ids = getattr(request, "_all_token_ids", None)
    if all_ids is not None and all_ids is not request.prompt_token_ids:
        all_ids.pop()
    request.num_prompt_tokens -= 1
    if hasattr(request, "max_tokens"):
        request.max_tokens = 1
    params["_pdkv_truncated"] = True
    return True

"""pdkv.plan: transfer planning (docs/API.md, "pdkv.plan"). Pure functions, numpy in/out.

Index arguments accept numpy int32/int64 (any integer dtype) arrays or lists of ints;
bad input raises ValueError with a message.
"""

from typing import Any, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

IntArray = Union[npt.NDArray[np.integer], Sequence[int]]
BoolArray = Union[npt.NDArray[np.bool_], Sequence[bool]]
# keys: buffer_kind ("kv"/"target_k"/"target_v"/"draft_k"/"draft_v" or "state"/"mamba_state"),
# buffer_index, src_page_stride_bytes, dst_page_stride_bytes, src_byte_offset,
# dst_byte_offset, bytes_per_page, page_count (None or int); src_rank/dst_rank ignored.
Fragment = Mapping[str, Any]

def coalesce(src_pages: IntArray, dst_pages: IntArray) -> npt.NDArray[np.int64]:
    """(m, 3) rows (src_first, dst_first, count): maximal runs stepping +1 on both sides."""

def resolve_indices(
    src_pages: IntArray,
    dst_pages: IntArray,
    slice_start: Optional[int],
    slice_stop: Optional[int],
    src_l15: Optional[Tuple[BoolArray, IntArray]] = None,
    dst_l15: Optional[Tuple[BoolArray, IntArray, IntArray]] = None,
) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(src_pages, dst_pages) of one chunk: truncation, then the L1.5 mode rules.

    src_l15 = (page_transfer_mask, page_local_indices) of the chunk;
    dst_l15 = (page_transfer_mask, page_indices_mapping, page_local_indices), request-wide.
    The slice follows Python slice rules."""

def kv_blocks(
    src_ptrs: IntArray,
    dst_ptrs: IntArray,
    item_lens: IntArray,
    layer_buffers: Sequence[Sequence[int]],
    src_pages: IntArray,
    dst_pages: IntArray,
    begin_layer: int,
    end_layer: int,
    fragments: Optional[Sequence[Fragment]] = None,
    *,
    src_lens: Optional[IntArray] = None,
    dst_lens: Optional[IntArray] = None,
) -> npt.NDArray[np.uint64]:
    """(k, 3) rows (src_addr, dst_addr, length) for KV layers [begin_layer, end_layer).

    Blocks continuing the previous one on both sides are merged. With src_lens/dst_lens
    (bytes of each buffer) every block must lie inside its buffers."""

def state_blocks(
    src_ptrs: IntArray,
    dst_ptrs: IntArray,
    item_lens: IntArray,
    src_slots: Optional[IntArray],
    dst_slots: Optional[IntArray],
    state_layer_ids: Optional[IntArray] = None,
    begin_layer: Optional[int] = None,
    end_layer: Optional[int] = None,
    fragments: Optional[Sequence[Fragment]] = None,
    *,
    src_lens: Optional[IntArray] = None,
    dst_lens: Optional[IntArray] = None,
) -> npt.NDArray[np.uint64]:
    """(k, 3) state-slot blocks: one source slot broadcasts, negative slots skipped,
    layer range filters by state_layer_ids, "state" fragments apply."""

def layer_groups(layer_num: int, interval: int, begin_cache_step: int) -> npt.NDArray[np.int64]:
    """(g, 3) rows (begin_layer, end_layer, wait_for_cache_step); interval < 1 counts as 1."""

def plan_fragments(prefill: Mapping[str, Any], decode: Mapping[str, Any], decode_rank: int) -> dict:
    """Heterogeneous-TP plan for one decode rank.

    Layout keys (dict or attribute object): tp_size, total_kv_head_num, head_dim,
    dtype_bytes, page_size=1, page_layout="NHD"|"HND", is_mla=False, and buffer_kinds
    (list of "target_k"/"target_v"/"draft_k"/"draft_v") or layer_buffers
    (+ target_layer_num); optional kv_item_lens (checked), state_item_lens,
    draft_total_kv_head_num, draft_head_dim.

    Returns {"identity": bool, "required_prefill_response_num": int,
    "idle_prefill_ranks": [int], "targets": [{"prefill_rank", "dummy", "send_state",
    "required_dst_info_num", "fragments": [fragment dicts usable by kv_blocks and
    state_blocks]}]}. A dummy target owns no shard: pre-allocate there with no pages so it
    learns the room needs nothing from it."""

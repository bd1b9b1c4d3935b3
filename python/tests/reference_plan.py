"""A straightforward Python transcription of the reference planning algorithms.

Written from the behaviour of the reference prefill manager's page resolution, block
lists, state slots and layerwise schedule (resolve_transfer_indices,
_layer_transfer_blocks, send_mamba_cache, send_kvcache_layerwise), for the property tests
and the P4 benchmark. Errors are whatever numpy / Python raise; callers treat any
exception as "the reference rejects this input".
"""

from collections import defaultdict

import numpy as np


def _get(fragment, key):
    return fragment[key] if isinstance(fragment, dict) else getattr(fragment, key)


def _is_state(fragment):
    return _get(fragment, "buffer_kind") in ("state", "mamba_state")


def group_concurrent_contiguous(src, dst):
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.size == 0:
        return [], []
    brk = np.where((np.diff(src) != 1) | (np.diff(dst) != 1))[0] + 1
    return [g.tolist() for g in np.split(src, brk)], [g.tolist() for g in np.split(dst, brk)]


def coalesce(src, dst):
    sb, db = group_concurrent_contiguous(src, dst)
    return [(s[0], d[0], len(s)) for s, d in zip(sb, db)]


def resolve_indices(src_pages, dst_pages, slice_start, slice_stop, src_l15=None, dst_l15=None):
    src_indices = np.asarray(src_pages, dtype=np.int64)
    sl = slice(slice_start, slice_stop)
    dst_indices = np.asarray(dst_pages, dtype=np.int64)[sl]
    valid_len = min(len(src_indices), len(dst_indices))
    if valid_len == 0:
        empty = np.array([], dtype=np.int64)
        return empty, empty
    src_indices = src_indices[:valid_len]
    dst_indices = dst_indices[:valid_len]
    if src_l15 is None and dst_l15 is None:
        return src_indices, dst_indices
    if src_l15 is not None and dst_l15 is None:
        mask, local = src_l15
        if mask is None or local is None:
            raise RuntimeError("missing metadata")
        return np.asarray(local, dtype=np.int64), dst_indices[np.asarray(mask, dtype=bool)]
    dmask, dmap, dlocal = dst_l15
    if dmask is None:
        raise RuntimeError("missing mask")
    dmask = np.asarray(dmask, dtype=bool)
    dmap = np.asarray(dmap, dtype=np.int64)
    dlocal = np.asarray(dlocal, dtype=np.int64)
    if src_l15 is None:
        m = dmask[sl]
        mapping = dmap[sl][m]
        return src_indices[m], dlocal[mapping]
    smask, slocal = src_l15
    if smask is None or slocal is None:
        raise RuntimeError("missing metadata")
    smask = np.asarray(smask, dtype=bool)
    slocal = np.asarray(slocal, dtype=np.int64)
    src_mask = smask[:valid_len]
    dst_mask = dmask[sl][:valid_len]
    common = src_mask & dst_mask
    dst_mapping = dmap[sl][:valid_len][common]
    dst_local = dlocal[dst_mapping]
    src_mapping = (np.cumsum(smask) - 1)[:valid_len][common]
    return slocal[src_mapping], dst_local


def _fragment_blocks(src_ptr, dst_ptr, fragment, src_blocks, dst_blocks, out):
    for prefill_index, decode_index in zip(src_blocks, dst_blocks):
        page_count = min(len(prefill_index), len(decode_index))
        if _get(fragment, "page_count") is not None:
            page_count = min(page_count, _get(fragment, "page_count"))
        for page_offset in range(page_count):
            src_addr = (src_ptr + int(prefill_index[page_offset]) * _get(fragment, "src_page_stride_bytes")
                        + _get(fragment, "src_byte_offset"))
            dst_addr = (dst_ptr + int(decode_index[page_offset]) * _get(fragment, "dst_page_stride_bytes")
                        + _get(fragment, "dst_byte_offset"))
            out.append((src_addr, dst_addr, _get(fragment, "bytes_per_page")))


def layer_transfer_blocks(src_ptrs, dst_ptrs, item_lens, offsets, src_blocks, dst_blocks,
                          begin_layer, end_layer, fragments=()):
    blocks = []
    by_buffer = defaultdict(list)
    for f in fragments or ():
        if not _is_state(f):
            by_buffer[_get(f, "buffer_index")].append(f)
    has_fragment_plan = bool(fragments)
    for layer_id in range(begin_layer, end_layer):
        for b in offsets[layer_id]:
            src_ptr, dst_ptr, item_len = src_ptrs[b], dst_ptrs[b], item_lens[b]
            if has_fragment_plan:
                for f in by_buffer.get(b, ()):
                    _fragment_blocks(src_ptr, dst_ptr, f, src_blocks, dst_blocks, blocks)
                continue
            for pi, di in zip(src_blocks, dst_blocks):
                blocks.append((src_ptr + int(pi[0]) * item_len, dst_ptr + int(di[0]) * item_len,
                               item_len * len(pi)))
    return blocks


def kv_blocks(src_ptrs, dst_ptrs, item_lens, layer_buffers, src_pages, dst_pages, begin_layer,
              end_layer, fragments=None):
    sb, db = group_concurrent_contiguous(src_pages, dst_pages)
    return layer_transfer_blocks(src_ptrs, dst_ptrs, item_lens, layer_buffers, sb, db,
                                 begin_layer, end_layer, fragments or ())


class Rejected(Exception):
    """The reference returned -1 (an error) for this input."""


def state_blocks(src_ptrs, dst_ptrs, item_lens, src_slots, dst_slots, state_layer_ids=None,
                 begin_layer=None, end_layer=None, fragments=None, layer_num=None):
    if not src_ptrs or not dst_ptrs or src_slots is None or dst_slots is None:
        return []
    if len(src_ptrs) != len(dst_ptrs):
        raise Rejected("count")
    src = np.asarray(src_slots, dtype=np.int64)
    dst = np.asarray(dst_slots, dtype=np.int64)
    if src.shape != dst.shape:
        if src.size == 1 and dst.size > 1:
            src = np.full(dst.shape, int(src[0]), dtype=np.int64)
        else:
            raise Rejected("slots")
    items = list(enumerate(zip(src_ptrs, dst_ptrs, item_lens)))
    if begin_layer is not None or end_layer is not None:
        ids = list(state_layer_ids or [])
        begin = 0 if begin_layer is None else begin_layer
        if layer_num is None:
            layer_num = (max(ids) + 1) if ids else 0
        end = layer_num if end_layer is None else end_layer
        if len(ids) != len(items):
            raise Rejected("ids")
        items = [it for it, lid in zip(items, ids) if begin <= lid < end]
        if not items:
            return []
    valid = (src >= 0) & (dst >= 0)
    if not valid.any():
        return []
    sb, db = group_concurrent_contiguous(src[valid], dst[valid])
    blocks = []
    by_buffer = defaultdict(list)
    for f in fragments or ():
        if _is_state(f):
            by_buffer[_get(f, "buffer_index")].append(f)
    has_plan = bool(by_buffer)
    for s, (sp, dp, item_len) in items:
        if has_plan:
            for f in by_buffer.get(s, ()):
                _fragment_blocks(sp, dp, f, sb, db, blocks)
            continue
        for pi, di in zip(sb, db):
            blocks.append((sp + int(pi[0]) * item_len, dp + int(di[0]) * item_len, item_len * len(pi)))
    return blocks


def layer_groups(layer_num, interval, begin_cache_step):
    interval = max(int(interval), 1)
    out = []
    for begin in range(0, layer_num, interval):
        end = min(begin + interval, layer_num)
        out.append((begin, end, begin_cache_step + end - 1))
    return out


def merge_blocks(blocks):
    """Merges each block into the previous one when it continues it on both sides."""
    out = []
    for s, d, n in (tuple(int(x) for x in b) for b in blocks):
        if out and out[-1][0] + out[-1][2] == s and out[-1][1] + out[-1][2] == d:
            out[-1][2] += n
        else:
            out.append([s, d, n])
    return [tuple(b) for b in out]

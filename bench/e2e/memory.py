"""KV memory of one bench rank: pdkv.testing's RankMemory in a workload preset's geometry
(every buffer alike), and, for the soak, a page allocator over it (rooms arrive and finish
continuously, as in a serving engine)."""
from __future__ import annotations

import numpy as np

from pdkv.testing import RankMemory, kv_args_from_buffers, shuffled_pages


def page_bytes(preset, page_size: int, tp: int, rank: int) -> int:
    """Bytes one page occupies on rank `rank` of `tp`, over every buffer."""
    _, n_heads = preset.heads_of(rank, tp)
    return page_size * n_heads * preset.head_dim * preset.dtype_bytes * preset.buffers()


class Memory(RankMemory):
    """KV buffers of one rank: capacity pages each, page = (page_size, heads, head bytes).
    prefault fills every byte with 1 (soak_rank.POISON) at start, see RankMemory."""

    def __init__(self, preset, page_size: int, tp: int, rank: int, capacity: int,
                 prefault: bool = False):
        first_head, n_heads = preset.heads_of(rank, tp)
        head_bytes = preset.head_dim * preset.dtype_bytes
        super().__init__([(first_head, n_heads, head_bytes)] * preset.buffers(), capacity,
                         page_size, fill_value=1 if prefault else None)
        self.preset, self.first_head, self.n_heads = preset, first_head, n_heads
        self.item = self.item_lens[0]
        self.offsets = self.page_offsets(0)  # every buffer has the same geometry

    def kv_args(self, rank: int, tp: int):
        p = self.preset
        return kv_args_from_buffers(
            self.bufs, engine_rank=rank, tp_size=tp, dp_size=1, page_size=self.page_size,
            layer_buffers=p.layer_buffers(), kv_head_num=self.n_heads,
            total_kv_head_num=p.heads, head_dim=p.head_dim, dtype_bytes=p.dtype_bytes,
            page_layout="NHD", is_mla=p.mla)

    def room_bytes(self, n_pages: int) -> int:
        return n_pages * self.item * len(self.bufs)


class PageAllocator:
    """Free list over a rank's pool, as an engine's page allocator: a stack of page
    indices, shuffled at start so a room's pages are scattered, as on a decode whose free
    list is fragmented by serving. alloc(n) takes n pages or None when fewer are free; free()
    gives them back. Single-threaded (a rank's loop is the only user)."""

    def __init__(self, capacity: int, seed: str):
        self._stack = shuffled_pages(capacity, seed).astype(np.int64)
        self._top = capacity
        self.capacity = capacity
        self.peak_used = 0

    @property
    def used(self) -> int:
        return self.capacity - self._top

    def alloc(self, n: int):
        if n > self._top:
            return None
        self._top -= n
        self.peak_used = max(self.peak_used, self.used)
        return self._stack[self._top:self._top + n].copy()

    def free(self, pages: np.ndarray) -> None:
        n = len(pages)
        assert self._top + n <= self.capacity, "page freed twice"
        self._stack[self._top:self._top + n] = pages
        self._top += n

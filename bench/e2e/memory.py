"""KV memory of one rank process: the registered buffers and, for the soak, a page
allocator over them (rooms arrive and finish continuously, as in a serving engine)."""
from __future__ import annotations

import zlib

import numpy as np

import pattern


def page_bytes(preset, page_size: int, tp: int, rank: int) -> int:
    """Bytes one page occupies on rank `rank` of `tp`, over every buffer."""
    _, n_heads = preset.heads_of(rank, tp)
    return page_size * n_heads * preset.head_dim * preset.dtype_bytes * preset.buffers()


class Memory:
    """KV buffers of one rank: capacity pages each, page = (page_size, heads, head bytes)."""

    def __init__(self, preset, page_size: int, tp: int, rank: int, capacity: int,
                 prefault: bool = False):
        self.preset, self.page_size, self.capacity = preset, page_size, capacity
        self.first_head, self.n_heads = preset.heads_of(rank, tp)
        head_bytes = preset.head_dim * preset.dtype_bytes
        self.item = page_size * self.n_heads * head_bytes
        self.bufs = [np.zeros((capacity, page_size, self.n_heads, head_bytes), np.uint8)
                     for _ in range(preset.buffers())]
        if prefault:
            # np.zeros maps untouched zero pages; touching them now keeps the page faults of
            # a long run out of its RSS growth, which should show leaks, not first use.
            for b in self.bufs:
                b.fill(1)
        self.offsets = pattern.page_offsets(page_size, self.first_head, self.n_heads, head_bytes)

    def kv_args(self, pdkv, rank: int, tp: int):
        p = self.preset
        return pdkv.KVArgs(
            engine_rank=rank, tp_size=tp, dp_size=1, page_size=self.page_size,
            kv_data_ptrs=[b.ctypes.data for b in self.bufs],
            kv_data_lens=[b.nbytes for b in self.bufs],
            kv_item_lens=[self.item] * len(self.bufs), layer_buffers=p.layer_buffers(),
            kv_head_num=self.n_heads, total_kv_head_num=p.heads, head_dim=p.head_dim,
            dtype_bytes=p.dtype_bytes, page_layout="NHD", is_mla=p.mla)

    def room_bytes(self, n_pages: int) -> int:
        return n_pages * self.item * len(self.bufs)


def shuffled_pages(capacity: int, seed: str) -> np.ndarray:
    """A rank's pages in shuffled order (a fragmented free list)."""
    return np.random.default_rng(zlib.crc32(seed.encode())).permutation(capacity)


class PageAllocator:
    """Free list over a rank's pool, as an engine's page allocator: a stack of page
    indices, shuffled at start so a room's pages are scattered (TARGETS.md: the decode's
    free list is fragmented). alloc(n) takes n pages or None when fewer are free; free()
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

"""A rank's KV memory for tests and benchmarks: numpy buffers shaped as an engine's page
pool, filled and checked with the shared byte pattern (pattern.py).

Each KV buffer is one uint8 array (capacity, page_size, n_heads, head_bytes): the first
axis is the page index the KV API takes, so `buf[pages]` is exactly the bytes a room's
page list names, and one page is `buf[0].nbytes` (the buffer's kv_item_len). Buffers may
differ in geometry (a speculative draft model's layers have their own heads and head size),
hence one (first_head, n_heads, head_bytes) per buffer.

Not thread-safe: a rank's loop is its only user."""
from __future__ import annotations

import zlib
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from . import pattern


def heads_of(rank: int, tp: int, total_heads: int, mla: bool = False) -> tuple[int, int]:
    """(first model head, head count) that rank `rank` of `tp` holds: pdkv's contiguous
    split (docs/API.md). With fewer heads than ranks, each rank holds one head, shared by
    tp / heads ranks; MLA's one latent "head" is whole on every rank."""
    if mla:
        return 0, 1
    if total_heads >= tp:
        n = total_heads // tp
        return rank * n, n
    return rank * total_heads // tp, 1


def shuffled_pages(capacity: int, seed: Union[int, str]) -> np.ndarray:
    """Every page of a pool in a fixed shuffled order (a fragmented free list, as
    a serving decode's pages are). A str seed goes through crc32, so ranks name
    their order ("decode/3") and every process derives the same one."""
    if isinstance(seed, str):
        seed = zlib.crc32(seed.encode())
    return np.random.default_rng(seed).permutation(capacity)


class RankMemory:
    """KV buffers of one rank, `capacity` pages each.

    geometry: one (first_head, n_heads, head_bytes) per buffer, heads being model heads.
    fill_value: if given, every byte is written with it now. np.zeros maps untouched zero
    pages; touching them at start keeps a long run's page faults out of its RSS growth
    (which should show leaks, not first use), and a value != 0 marks pages no room wrote."""

    def __init__(self, geometry: Sequence[tuple[int, int, int]], capacity: int,
                 page_size: int, fill_value: Optional[int] = None):
        self.geometry = [tuple(int(v) for v in g) for g in geometry]
        self.capacity, self.page_size = capacity, page_size
        self.bufs = [np.zeros((capacity, page_size, n, hb), np.uint8)
                     for _, n, hb in self.geometry]
        if fill_value is not None:
            for b in self.bufs:
                b.fill(fill_value)
        self._offsets: dict = {}

    @property
    def item_lens(self) -> list:
        """Bytes of one page of each buffer (KVArgs.kv_item_lens)."""
        return [self.page_size * n * hb for _, n, hb in self.geometry]

    def page_offsets(self, b: int) -> np.ndarray:
        """pattern.page_offsets of buffer b's geometry (for pattern.fill / check)."""
        if b not in self._offsets:
            first, n, hb = self.geometry[b]
            self._offsets[b] = pattern.page_offsets(self.page_size, first, n, hb)
        return self._offsets[b]

    def expected(self, b: int, room: int, n_pages: int) -> np.ndarray:
        """Request pages 0..n_pages-1 of `room` in buffer b, as they must read."""
        first, n, hb = self.geometry[b]
        return pattern.expected_pages(b, room, n_pages, self.page_size, first, n, hb)

    def _buffers(self, buffers: Optional[Iterable[int]]):
        return range(len(self.bufs)) if buffers is None else buffers

    def fill(self, room: int, pages: np.ndarray, buffers: Optional[Iterable[int]] = None) -> None:
        """Writes request pages 0..len(pages)-1 of `room` into local pages `pages` (of
        every buffer, or of `buffers`: e.g. one layer's K and V)."""
        for b in self._buffers(buffers):
            self.bufs[b][pages] = self.expected(b, room, len(pages))

    def holds(self, room: int, pages: np.ndarray, first: int = 0,
              buffers: Optional[Iterable[int]] = None) -> bool:
        """Whether local pages `pages` hold request pages 0..len(pages)-1 of `room`, from
        request page `first` on (a decode prefix it already had is not compared)."""
        return all(np.array_equal(self.bufs[b][pages[first:]],
                                  self.expected(b, room, len(pages))[first:])
                   for b in self._buffers(buffers))

    def mismatch(self, room: int, pages: np.ndarray) -> Optional[str]:
        """Where the first wrong byte is, as text (None if every page holds `room`)."""
        for b in range(len(self.bufs)):
            at = pattern.first_mismatch(self.bufs[b][pages], self.expected(b, room, len(pages)))
            if at is not None:
                return (f"buffer {b}, request page {at[0]} (local page {int(pages[at[0]])}), "
                        f"token {at[1]}, head {self.geometry[b][0] + at[2]}, byte {at[3]}")
        return None

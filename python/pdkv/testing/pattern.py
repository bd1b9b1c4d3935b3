"""The deterministic byte pattern every pdkv test, benchmark and chaos rank fills KV pages
with and checks them against.

A byte's value names (buffer, room, request page, token, model head, byte):

    (buffer*131 + page*31 + room*59 + token*17 + head*7 + byte*3 + 1) mod 256

so a page copied to the wrong place, of the wrong room, head or buffer, or shifted by a
byte, is caught. `head` is the model's head index (not the rank's), so a decode of another
TP size checks its head slice against the same numbers the prefill wrote.

The value is one term per axis, so it splits into a per-page base byte (buffer, room, page)
plus a per-page offset table (token, head, byte), and uint8 arithmetic wraps mod 256 for
free. `expected_pages` adds the two in uint8 (~10x faster than int64 arithmetic);
`fill` / `check` go further for benchmark volumes: there are only 256 distinct pages per
geometry, tabulated once, then whole pages are copied and compared 8 bytes at a time."""
from __future__ import annotations

from typing import Optional

import numpy as np

_TABLES: dict = {}
_SCRATCH: dict = {}
_CHUNK_BYTES = 4 << 20  # pages compared per step: bounded scratch memory


def page_offsets(page_size: int, first_head: int, n_heads: int, head_bytes: int) -> np.ndarray:
    """(page_size, n_heads, head_bytes) uint8: the token/head/byte terms of one page."""
    t = np.arange(page_size).reshape(-1, 1, 1)
    h = np.arange(first_head, first_head + n_heads).reshape(1, -1, 1)
    x = np.arange(head_bytes).reshape(1, 1, -1)
    return ((t * 17 + h * 7 + x * 3 + 1) % 256).astype(np.uint8)


def page_bases(buffer: int, rooms, req_pages) -> np.ndarray:
    """One base byte per page: rooms[i] / req_pages[i] name page i's room and its index
    in that room's request (0 = the request's first page)."""
    rooms, req_pages = np.asarray(rooms, np.int64), np.asarray(req_pages, np.int64)
    return ((buffer * 131 + req_pages * 31 + rooms * 59) % 256).astype(np.uint8)


def expected_pages(buffer: int, room: int, n_pages: int, page_size: int, first_head: int,
                   n_heads: int, head_bytes: int) -> np.ndarray:
    """(n_pages, page_size, n_heads, head_bytes) uint8: request pages 0..n_pages-1 of
    `room` in `buffer`, for a rank holding heads first_head..first_head+n_heads-1."""
    bases = page_bases(buffer, np.full(n_pages, room), np.arange(n_pages))
    return bases.reshape(-1, 1, 1, 1) + page_offsets(page_size, first_head, n_heads, head_bytes)


def first_mismatch(got: np.ndarray, want: np.ndarray) -> Optional[tuple]:
    """Index of the first byte where `got` differs from `want`, None if equal: for a
    failure message that says where, not only that."""
    if got.shape != want.shape:
        raise ValueError(f"shapes differ: {got.shape} vs {want.shape}")
    diff = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    return None if diff.size == 0 else tuple(int(i) for i in np.unravel_index(diff[0], got.shape))


# --- tabulated fill / check, for benchmark volumes --------------------------------------

def _table(offsets: np.ndarray) -> np.ndarray:
    """table[c] = the expected page with base byte c (256 pages, e.g. 8 MiB for 32 KiB)."""
    key = (offsets.shape, offsets.tobytes())
    t = _TABLES.get(key)
    if t is None:
        t = (np.arange(256, dtype=np.uint8).reshape(-1, 1, 1, 1) + offsets).astype(np.uint8)
        _TABLES[key] = t
    return t


def _chunk_pages(shape) -> int:
    return max(1, _CHUNK_BYTES // int(np.prod(shape)))


def _scratch(shape, which: int) -> np.ndarray:
    """A reused buffer of one chunk of pages: a fresh multi-MiB temporary per call costs
    more in page faults (the kernel zeroes every 4 KiB page) than the copy itself."""
    key = (shape, which)
    if key not in _SCRATCH:
        _SCRATCH[key] = np.empty((_chunk_pages(shape),) + shape, np.uint8)
    return _SCRATCH[key]


def _chunks(shape, n: int):
    per = _chunk_pages(shape)
    return ((i, min(i + per, n)) for i in range(0, n, per))


def _words(a: np.ndarray) -> np.ndarray:
    flat = a.reshape(-1)
    return flat.view(np.uint64) if flat.size % 8 == 0 else flat


def fill(buf: np.ndarray, buffer: int, pages, rooms, req_pages, offsets: np.ndarray,
         delta: int = 0) -> None:
    """buf[pages[i]] = the pattern of (rooms[i], req_pages[i]) (+ delta, mod 256: delta 1
    poisons pages with bytes that are wrong everywhere). `offsets` is page_offsets() of
    the rank's geometry; buf is (pages, page_size, n_heads, head_bytes) uint8."""
    table, shape = _table(offsets), offsets.shape
    bases = page_bases(buffer, rooms, req_pages) + np.uint8(delta)  # wraps mod 256
    pages = np.asarray(pages)
    for i, j in _chunks(shape, len(pages)):
        buf[pages[i:j]] = np.take(table, bases[i:j], axis=0, out=_scratch(shape, 0)[:j - i])


def check(buf: np.ndarray, buffer: int, pages, rooms, req_pages, offsets: np.ndarray) -> bool:
    """Whether every byte of buf[pages[i]] is the pattern of (rooms[i], req_pages[i])."""
    table, shape = _table(offsets), offsets.shape
    bases = page_bases(buffer, rooms, req_pages)
    pages = np.asarray(pages)
    for i, j in _chunks(shape, len(pages)):
        got = np.take(buf, pages[i:j], axis=0, out=_scratch(shape, 0)[:j - i])
        want = np.take(table, bases[i:j], axis=0, out=_scratch(shape, 1)[:j - i])
        if not np.array_equal(_words(got), _words(want)):
            return False
    return True

"""Pattern fill / check of KV pages, vectorised over every page of a round.

A byte's value names (buffer, room, request page, token, model head, byte), so a page in
the wrong place, of the wrong room or head is caught. uint8 arithmetic wraps mod 256."""
from __future__ import annotations

import numpy as np


def page_offsets(page_size: int, first_head: int, n_heads: int, head_bytes: int) -> np.ndarray:
    t = np.arange(page_size).reshape(-1, 1, 1)
    h = np.arange(first_head, first_head + n_heads).reshape(1, -1, 1)
    x = np.arange(head_bytes).reshape(1, 1, -1)
    return ((t * 17 + h * 7 + x * 3 + 1) % 256).astype(np.uint8)


def page_bases(buffer: int, rooms: np.ndarray, req_pages: np.ndarray) -> np.ndarray:
    """One base byte per page: rooms[i] / req_pages[i] name the page's request and index."""
    base = (buffer * 131 + req_pages.astype(np.int64) * 31 + rooms.astype(np.int64) * 59) % 256
    return base.astype(np.uint8).reshape(-1, 1, 1, 1)


def fill(buf: np.ndarray, buffer: int, pages, rooms, req_pages, offsets, delta: int = 0):
    buf[pages] = page_bases(buffer, rooms, req_pages) + offsets + np.uint8(delta)


def check(buf: np.ndarray, buffer: int, pages, rooms, req_pages, offsets) -> bool:
    return bool(np.array_equal(buf[pages], page_bases(buffer, rooms, req_pages) + offsets))

"""A tiny decoder-only transformer in numpy whose KV cache lives in paged buffers.

It exists so that `pdkv demo` moves a *real* KV cache: the prefill computes K and V of a
prompt into pages (the buffers it registers with pdkv), the decode generates from pages
it received, and the tokens must equal those of the same model run colocated.

Layout of the cache, per layer, one K and one V buffer of shape
[num_pages, page_size, kv_heads_held, head_dim] float32 ("NHD", token-major pages).
A tensor-parallel rank r of T holds KV heads [r*H/T, (r+1)*H/T).
Weights come from a fixed seed; nothing is downloaded.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab: int = 256
    layers: int = 4
    d_model: int = 64
    q_heads: int = 8
    kv_heads: int = 4
    head_dim: int = 8
    ffn: int = 128
    max_positions: int = 1024
    seed: int = 1234

    @property
    def bytes_per_token_per_buffer(self) -> int:
        return self.kv_heads * self.head_dim * 4


class Weights:
    def __init__(self, cfg: ModelConfig):
        rng = np.random.default_rng(cfg.seed)

        def mat(rows, cols):
            return (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32)

        self.embed = rng.standard_normal((cfg.vocab, cfg.d_model)).astype(np.float32)
        self.pos = (0.1 * rng.standard_normal((cfg.max_positions, cfg.d_model))).astype(np.float32)
        self.layers = []
        for _ in range(cfg.layers):
            self.layers.append({
                "wq": mat(cfg.d_model, cfg.q_heads * cfg.head_dim),
                "wk": mat(cfg.d_model, cfg.kv_heads * cfg.head_dim),
                "wv": mat(cfg.d_model, cfg.kv_heads * cfg.head_dim),
                "wo": mat(cfg.q_heads * cfg.head_dim, cfg.d_model),
                "w1": mat(cfg.d_model, cfg.ffn),
                "w2": mat(cfg.ffn, cfg.d_model),
            })
        self.unembed = mat(cfg.d_model, cfg.vocab)


class PagedKVCache:
    """The KV pages of one TP rank: 2 * layers numpy buffers (K of every layer, then V).

    `buffers` is the list pdkv registers (pointer = buf.ctypes.data, item = one page).
    """

    def __init__(self, cfg: ModelConfig, num_pages: int, page_size: int, tp_rank: int = 0,
                 tp_size: int = 1):
        if cfg.kv_heads % tp_size:
            raise ValueError("kv_heads must divide by tp_size in the demo")
        self.cfg, self.page_size = cfg, page_size
        held = cfg.kv_heads // tp_size
        self.head_begin, self.head_end = tp_rank * held, (tp_rank + 1) * held
        shape = (num_pages, page_size, held, cfg.head_dim)
        self.k = [np.zeros(shape, np.float32) for _ in range(cfg.layers)]
        self.v = [np.zeros(shape, np.float32) for _ in range(cfg.layers)]

    @property
    def buffers(self) -> list[np.ndarray]:
        return self.k + self.v

    @property
    def layer_buffers(self) -> list[list[int]]:
        n = self.cfg.layers
        return [[i, n + i] for i in range(n)]

    def write(self, layer: int, pages: np.ndarray, positions: np.ndarray, k: np.ndarray,
              v: np.ndarray) -> None:
        """Stores K/V ([tokens, kv_heads, dim], all heads) of the tokens at `positions`."""
        page = pages[positions // self.page_size]
        slot = positions % self.page_size
        self.k[layer][page, slot] = k[:, self.head_begin:self.head_end]
        self.v[layer][page, slot] = v[:, self.head_begin:self.head_end]

    def read(self, layer: int, pages: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        """K/V of the first `length` tokens: [length, heads_held, dim]."""
        positions = np.arange(length)
        page = pages[positions // self.page_size]
        slot = positions % self.page_size
        return self.k[layer][page, slot], self.v[layer][page, slot]


def rms_norm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def attend(cfg: ModelConfig, lw: dict, x: np.ndarray, positions: np.ndarray,
           caches: list[PagedKVCache], pages: list[np.ndarray], layer: int,
           on_layer_done=None) -> np.ndarray:
    """One attention block (residual included) of the tokens at `positions` (contiguous).

    Their K/V go into cache layer `layer` of every rank (each keeps its heads); attention
    reads positions [0, end) back from the caches, concatenating the heads of all ranks in
    order, so the pages are what the model really attends over. `on_layer_done(layer)` is
    called once the KV is written (the layerwise-streaming hook)."""
    n, end = len(positions), int(positions[-1]) + 1
    h = rms_norm(x)
    q = (h @ lw["wq"]).reshape(n, cfg.q_heads, cfg.head_dim)
    k_new = (h @ lw["wk"]).reshape(n, cfg.kv_heads, cfg.head_dim)
    v_new = (h @ lw["wv"]).reshape(n, cfg.kv_heads, cfg.head_dim)
    for cache, p in zip(caches, pages):
        cache.write(layer, p, positions, k_new, v_new)
    if on_layer_done is not None:
        on_layer_done(layer)
    parts = [cache.read(layer, p, end) for cache, p in zip(caches, pages)]
    group = cfg.q_heads // cfg.kv_heads
    k_rep = np.repeat(np.concatenate([kp for kp, _ in parts], axis=1), group, axis=1)
    v_rep = np.repeat(np.concatenate([vp for _, vp in parts], axis=1), group, axis=1)
    scores = np.einsum("nhd,thd->hnt", q, k_rep) / np.sqrt(cfg.head_dim)
    causal = np.arange(end)[None, :] > positions[:, None]
    scores = np.where(causal[None], -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    attn = np.einsum("hnt,thd->nhd", probs, v_rep).reshape(n, -1)
    return x + attn @ lw["wo"]


def feed_forward(lw: dict, x: np.ndarray) -> np.ndarray:
    """The MLP block, residual included."""
    return x + np.tanh(rms_norm(x) @ lw["w1"]) @ lw["w2"]


def unembed(w, x: np.ndarray) -> np.ndarray:
    """Logits of the last token."""
    return (rms_norm(x[-1:]) @ w.unembed)[0]


class TinyModel:
    def __init__(self, cfg: ModelConfig | None = None):
        self.cfg = cfg or ModelConfig()
        self.w = Weights(self.cfg)

    def forward(self, tokens: np.ndarray, start: int, caches: list[PagedKVCache],
                pages: list[np.ndarray], on_layer_done=None) -> np.ndarray:
        """Runs tokens at positions [start, start+len) and returns the last token's logits.

        K/V of these tokens are written into every rank's cache (each keeps its heads);
        attention reads positions [0, start+len) back from the caches, concatenating the
        heads of all ranks in order. `on_layer_done(layer)` is called after each layer's
        KV is written (the layerwise-streaming hook).
        """
        cfg = self.cfg
        n = len(tokens)
        positions = np.arange(start, start + n)
        x = self.w.embed[tokens] + self.w.pos[positions]
        for layer, lw in enumerate(self.w.layers):
            x = attend(cfg, lw, x, positions, caches, pages, layer, on_layer_done)
            x = feed_forward(lw, x)
        return unembed(self.w, x)

    def prefill(self, prompt: np.ndarray, caches, pages, chunk: int | None = None,
                on_layer_done=None) -> int:
        """Fills the caches with the prompt's KV (in chunks if given); returns the first
        sampled token (greedy)."""
        chunk = chunk or len(prompt)
        logits = None
        for start in range(0, len(prompt), chunk):
            logits = self.forward(prompt[start:start + chunk], start, caches, pages,
                                  on_layer_done)
        return int(np.argmax(logits))

    def decode(self, first_token: int, prompt_len: int, steps: int, caches, pages) -> list[int]:
        """Greedy generation continuing from a cache that holds `prompt_len` tokens."""
        out = [first_token]
        for i in range(steps - 1):
            logits = self.forward(np.array([out[-1]]), prompt_len + i, caches, pages)
            out.append(int(np.argmax(logits)))
        return out


def colocated_generate(model: TinyModel, prompt: np.ndarray, steps: int, page_size: int,
                       chunk: int | None = None) -> list[int]:
    """The reference run: prefill and decode in one process on one cache."""
    pages_needed = (len(prompt) + steps + page_size - 1) // page_size
    cache = PagedKVCache(model.cfg, pages_needed, page_size)
    pages = np.arange(pages_needed)
    first = model.prefill(prompt, [cache], [pages], chunk)
    return model.decode(first, len(prompt), steps, [cache], [pages])

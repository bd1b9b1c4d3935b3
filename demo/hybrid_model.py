"""A tiny hybrid model in numpy: attention layers with a paged KV cache interleaved with
recurrent layers whose per-request state is a fixed-size array (Qwen3-Next / Jamba style).

It exists so that `pdkv demo --model hybrid` moves both halves of a hybrid model's cache:
the attention layers' KV pages as pdkv KV buffers and the recurrent layers' state as a
pdkv state buffer (one slot per request), and the decode's tokens must equal those of the
same model run colocated.

A recurrent layer is a gated linear recurrence in the style of Mamba / gated delta nets:
  u, z   = norm(x) @ w_in, norm(x) @ w_gate          (d_inner each)
  c_t    = silu(depthwise causal conv of u over the last conv_kernel tokens)
  q, k, v, a from c_t (a in (0, 1) per head, k unit length)
  S_t    = a_t * S_{t-1} + k_t v_t^T                   (per head, [key, value])
  y_t    = q_t S_t, out = (y * silu(z)) @ w_out
Its per-request state is the conv window (the last conv_kernel - 1 values of u) and S,
both updated token by token in place: unlike a KV page, applying a token twice changes
the state, which is why the decode must start from the state after exactly the tokens the
prefill consumed (demo/disagg_hybrid.py). Weights come from a fixed seed; nothing is
downloaded. Decode TP 1 only: state slots move whole between equal TP sizes.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tiny_model import ModelConfig, PagedKVCache, rms_norm, attend, feed_forward, unembed

ATTENTION, RECURRENT = "attention", "recurrent"


@dataclasses.dataclass(frozen=True)
class HybridConfig:
    vocab: int = 256
    d_model: int = 64
    q_heads: int = 8
    kv_heads: int = 4
    head_dim: int = 8
    ffn: int = 128
    max_positions: int = 1024
    # Real hybrids run several recurrent layers per attention layer (Qwen3-Next 3:1,
    # Jamba 7:1); 2 of each keeps the demo small while both kinds repeat.
    layer_kinds: tuple = (RECURRENT, ATTENTION, RECURRENT, ATTENTION)
    rec_heads: int = 4
    rec_key: int = 8
    rec_value: int = 16
    conv_kernel: int = 4
    seed: int = 4321

    @property
    def d_inner(self) -> int:
        return self.rec_heads * self.rec_value

    def layer_ids(self, kind: str) -> list[int]:
        return [i for i, k in enumerate(self.layer_kinds) if k == kind]

    def kv_config(self) -> ModelConfig:
        """The attention layers' cache shape, as the dense model's PagedKVCache takes it."""
        return ModelConfig(vocab=self.vocab, layers=len(self.layer_ids(ATTENTION)),
                           d_model=self.d_model, q_heads=self.q_heads,
                           kv_heads=self.kv_heads, head_dim=self.head_dim, ffn=self.ffn,
                           max_positions=self.max_positions, seed=self.seed)


class HybridWeights:
    def __init__(self, cfg: HybridConfig):
        rng = np.random.default_rng(cfg.seed)

        def mat(rows, cols):
            return (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32)

        d, inner, h = cfg.d_model, cfg.d_inner, cfg.rec_heads
        self.embed = rng.standard_normal((cfg.vocab, d)).astype(np.float32)
        self.pos = (0.1 * rng.standard_normal((cfg.max_positions, d))).astype(np.float32)
        self.layers = []
        for kind in cfg.layer_kinds:
            lw = {"w1": mat(d, cfg.ffn), "w2": mat(cfg.ffn, d)}
            if kind == ATTENTION:
                lw.update(wq=mat(d, cfg.q_heads * cfg.head_dim),
                          wk=mat(d, cfg.kv_heads * cfg.head_dim),
                          wv=mat(d, cfg.kv_heads * cfg.head_dim),
                          wo=mat(cfg.q_heads * cfg.head_dim, d))
            else:
                lw.update(w_in=mat(d, inner), w_gate=mat(d, inner),
                          conv=(rng.standard_normal((cfg.conv_kernel, inner)) / 2).astype(
                              np.float32),
                          wq=mat(inner, h * cfg.rec_key), wk=mat(inner, h * cfg.rec_key),
                          wv=mat(inner, h * cfg.rec_value), w_decay=mat(inner, h),
                          w_out=mat(inner, d))
            self.layers.append(lw)
        self.unembed = mat(d, cfg.vocab)


class StatePool:
    """The recurrent state of `slots` requests: per recurrent layer a conv buffer
    [slots, conv_kernel - 1, d_inner] and a recurrence buffer [slots, heads, key, value],
    float32. `buffers` is the list pdkv registers as state buffers (item = one slot) and
    `layer_ids` the model layer of each; `request(slot)` views one request's state."""

    def __init__(self, cfg: HybridConfig, slots: int):
        self.cfg = cfg
        self.buffers, self.layer_ids = [], []
        for layer in cfg.layer_ids(RECURRENT):
            self.buffers.append(np.zeros((slots, cfg.conv_kernel - 1, cfg.d_inner), np.float32))
            self.buffers.append(np.zeros((slots, cfg.rec_heads, cfg.rec_key, cfg.rec_value),
                                         np.float32))
            self.layer_ids += [layer, layer]

    def request(self, slot: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """{model layer: (conv window, recurrence)}, views into the registered buffers, so
        the model updates the very bytes pdkv sends."""
        return {self.layer_ids[i]: (self.buffers[i][slot], self.buffers[i + 1][slot])
                for i in range(0, len(self.buffers), 2)}

    def slot_bytes(self) -> int:
        return sum(b[0].nbytes for b in self.buffers)


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def recur(cfg: HybridConfig, lw: dict, x: np.ndarray, conv_state: np.ndarray,
          rec_state: np.ndarray) -> np.ndarray:
    """One recurrent block (residual included) over the tokens of x, in order, updating
    the request's conv window and recurrence in place."""
    n, h = len(x), rms_norm(x)
    u, z = h @ lw["w_in"], h @ lw["w_gate"]
    window = np.concatenate([conv_state, u])  # [conv_kernel - 1 + n, d_inner]
    k_len = cfg.conv_kernel
    c = _silu(sum(window[i:i + n] * lw["conv"][i] for i in range(k_len)))
    conv_state[...] = window[n:]
    q = (c @ lw["wq"]).reshape(n, cfg.rec_heads, cfg.rec_key)
    k = (c @ lw["wk"]).reshape(n, cfg.rec_heads, cfg.rec_key)
    k /= np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    v = (c @ lw["wv"]).reshape(n, cfg.rec_heads, cfg.rec_value)
    decay = 1.0 / (1.0 + np.exp(-(c @ lw["w_decay"])))  # [n, heads], in (0, 1)
    y = np.empty((n, cfg.rec_heads, cfg.rec_value), np.float32)
    for t in range(n):  # token by token: the state after t is what the next token sees
        rec_state *= decay[t][:, None, None]
        rec_state += k[t][:, :, None] * v[t][:, None, :]
        y[t] = np.einsum("hk,hkv->hv", q[t], rec_state)
    return x + (y.reshape(n, -1) * _silu(z)) @ lw["w_out"]


class HybridModel:
    def __init__(self, cfg: HybridConfig | None = None):
        self.cfg = cfg or HybridConfig()
        self.w = HybridWeights(self.cfg)
        self.kv_config = self.cfg.kv_config()
        # Model layer -> its layer in the KV cache (attention layers only).
        self.cache_layer = {l: i for i, l in enumerate(self.cfg.layer_ids(ATTENTION))}

    def forward(self, tokens: np.ndarray, start: int, cache: PagedKVCache, pages: np.ndarray,
                state: dict) -> np.ndarray:
        """Runs tokens at positions [start, start+len) and returns the last token's logits;
        their KV goes into the pages, and `state` (StatePool.request) advances past them."""
        cfg, n = self.cfg, len(tokens)
        positions = np.arange(start, start + n)
        x = self.w.embed[tokens] + self.w.pos[positions]
        for layer, (kind, lw) in enumerate(zip(cfg.layer_kinds, self.w.layers)):
            if kind == ATTENTION:
                x = attend(self.kv_config, lw, x, positions, [cache], [pages],
                           self.cache_layer[layer])
            else:
                x = recur(cfg, lw, x, *state[layer])
            x = feed_forward(lw, x)
        return unembed(self.w, x)

    def prefill(self, prompt: np.ndarray, cache, pages, state, chunk: int | None = None) -> int:
        """Consumes the whole prompt (in chunks if given); returns the first token."""
        chunk = chunk or len(prompt)
        logits = None
        for start in range(0, len(prompt), chunk):
            logits = self.forward(prompt[start:start + chunk], start, cache, pages, state)
        return int(np.argmax(logits))

    def decode(self, first_token: int, prompt_len: int, steps: int, cache, pages,
               state) -> list[int]:
        """Greedy generation from a cache holding `prompt_len` tokens and the state after
        them; the first token is fed, not recomputed."""
        out = [first_token]
        for i in range(steps - 1):
            logits = self.forward(np.array([out[-1]]), prompt_len + i, cache, pages, state)
            out.append(int(np.argmax(logits)))
        return out


def hybrid_colocated_generate(model: HybridModel, prompt: np.ndarray, steps: int,
                              page_size: int, chunk: int | None = None) -> list[int]:
    """The reference run: prefill and decode in one process, one cache, one state slot."""
    pages_needed = -(-(len(prompt) + steps) // page_size)
    cache = PagedKVCache(model.kv_config, pages_needed, page_size)
    pages = np.arange(pages_needed)
    state = StatePool(model.cfg, 1).request(0)
    first = model.prefill(prompt, cache, pages, state, chunk)
    return model.decode(first, len(prompt), steps, cache, pages, state)

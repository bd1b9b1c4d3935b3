"""Hybrid and sparse workload presets of the scale case (P12): the geometry of
`pdkv bench engine --model qwen3-next|gpt-oss|deepseek-v32` (bench/engine/
engine_hybrid_workload.cc), as the buffers, state slots and index lists a rank registers
through pdkv's KVArgs ("State groups" in docs/API.md) and a room hands to send() and
send_metadata().

Each preset is a list of groups, each moved as a deployment moves it:
- CHUNKED: KV layers on the room's chunked pages (`kv_indices`), every page of the prompt;
  head-sliced across TP sizes (MLA latents: whole on every rank);
- WINDOW: sliding-window KV layers (`kv_layer_groups` = the group), only the pages that hold
  the prompt's last `window_tokens` tokens, head-sliced like chunked pages;
- SLOTS: state buffers (linear-attention / Mamba state), one slot per request shared by every
  buffer of the group, split contiguously across TP sizes (sglang's Mamba state);
- PAGE_SLOTS: state buffers indexed by the room's pages (the sparse-attention indexer's keys
  with their scales), whole pages, replicated on every rank.

Scaling to the scale case's request (16 tokens by default, where the engine bench moves
4096): per-token sizes are the model's, and what the model holds per request regardless of
its length is scaled by tokens / 4096, so each group keeps the share of the room's bytes it
has in the engine bench at 4 k tokens: qwen3-next's 2 MiB state slot becomes 8 KiB at 16
tokens, gpt-oss's 128-token window becomes max(1, 128 x tokens / 4096) tokens (the last page
at the default 32 tokens: gpt-oss's default doubles the request so the window group leaves a
page out, as a window does). With --tokens 4096 the geometry is the engine bench's.

The plain arm (the baseline) is llama-style KV of the engine bench's plain group: 8 KV heads
x 128 x bf16 per buffer (2048 bytes per token), K and V per layer, on the same pages per
room, with as many layers as bring its room closest to the hybrid room's bytes."""
from __future__ import annotations

import dataclasses
import enum

ENGINE_TOKENS = 4096  # the engine bench's prompt, at which the presets are the model's


class Kind(enum.Enum):
    CHUNKED = "chunked"
    WINDOW = "window"
    SLOTS = "slots"
    PAGE_SLOTS = "page_slots"


@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    kind: Kind
    buffers: int  # KV buffers (2 per layer, 1 per MLA layer) or state buffers
    heads: int  # split across TP (1 and sliced=False: whole on every rank)
    head_bytes: int  # per token (page groups) or per slot head (SLOTS)
    sliced: bool = True
    window_tokens: int = 0  # WINDOW at 4096 tokens
    mla: bool = False

    @property
    def is_kv(self) -> bool:
        return self.kind in (Kind.CHUNKED, Kind.WINDOW)

    def scaled(self, tokens: int) -> "Group":
        """The group for a request of `tokens` tokens (see the module comment)."""
        if self.kind == Kind.SLOTS:
            return dataclasses.replace(self, head_bytes=max(1, self.head_bytes * tokens //
                                                            ENGINE_TOKENS))
        if self.kind == Kind.WINDOW:
            return dataclasses.replace(self, window_tokens=max(
                1, self.window_tokens * tokens // ENGINE_TOKENS))
        return self

    def heads_of(self, rank: int, tp: int) -> tuple[int, int]:
        """(first head, heads) rank `rank` of `tp` holds: pdkv's contiguous split."""
        if not self.sliced:
            return 0, self.heads
        n = self.heads // tp
        return rank * n, n

    def pages_moved(self, tokens: int, page: int) -> int:
        """Pages (or slots) of this group one room moves."""
        pages = tokens // page
        if self.kind == Kind.SLOTS:
            return 1
        if self.kind == Kind.WINDOW and tokens > self.window_tokens:
            return pages - (tokens - self.window_tokens) // page
        return pages

    def room_bytes(self, tokens: int, page: int) -> int:
        """Bytes of one room in this group on one rank holding every head."""
        per_item = self.heads * self.head_bytes * (1 if self.kind == Kind.SLOTS else page)
        return self.pages_moved(tokens, page) * per_item * self.buffers


@dataclasses.dataclass(frozen=True)
class HybridPreset:
    name: str
    groups: tuple

    def scaled(self, tokens: int) -> "HybridPreset":
        return HybridPreset(self.name, tuple(g.scaled(tokens) for g in self.groups))

    def decode_room_bytes(self, tokens: int, page: int, decode_tp: int) -> int:
        """Bytes one room writes on all decode ranks together (what the figures count):
        a sliced group once, a whole one (MLA latent, indexer) once per decode rank."""
        return sum(g.room_bytes(tokens, page) * (1 if g.sliced else decode_tp)
                   for g in self.groups)


HYBRID = {
    # 48 layers: 12 full-attention layers (K and V of 8 KV heads x 128 x bf16) and 36
    # linear-attention layers with one 2 MiB state slot each per request (8 "heads" of
    # 256 KiB here, so it splits across TP sizes like sglang's Mamba state).
    "qwen3-next": HybridPreset("qwen3-next", (
        Group("attention", Kind.CHUNKED, 24, 8, 256),
        Group("state", Kind.SLOTS, 36, 8, 256 << 10))),
    # 36 layers alternating full and 128-token sliding-window attention, K and V of 8 KV
    # heads x 64 x bf16 each.
    "gpt-oss": HybridPreset("gpt-oss", (
        Group("full", Kind.CHUNKED, 36, 8, 128),
        Group("window", Kind.WINDOW, 36, 8, 128, window_tokens=128))),
    # 61 layers of MLA latents (576 x bf16, never sliced by TP) and the sparse-attention
    # indexer's keys (128 x fp8 + one 4-byte scale per token), indexed by page.
    "deepseek-v32": HybridPreset("deepseek-v32", (
        Group("latent", Kind.CHUNKED, 61, 1, 1152, sliced=False, mla=True),
        Group("indexer", Kind.PAGE_SLOTS, 61, 1, 132, sliced=False))),
}
# Default prompt per preset (the scale case's 16 tokens unless the window needs more).
DEFAULT_TOKENS = {"qwen3-next": 16, "gpt-oss": 32, "deepseek-v32": 16}
# The latency, layerwise and soak cases keep qwen3-next's attention layers only (presets.py).
PLAIN_CASES = ("qwen3-next",)
PLAIN_HEADS, PLAIN_HEAD_BYTES = 8, 256  # 8 KV heads x 128 x bf16: 2048 bytes per token


def is_hybrid(a) -> bool:
    """The scale case with a hybrid preset: the P12 run (hybrid_main.py)."""
    return a.case == "scale" and a.model in HYBRID


def apply_defaults(a) -> None:
    """Before main.parse fills the scale case's defaults: a hybrid preset's own prompt."""
    if a.case == "scale" and a.model in HYBRID and a.tokens is None:
        a.tokens = DEFAULT_TOKENS[a.model]


def plain_preset(hybrid: HybridPreset, tokens: int, page: int, decode_tp: int,
                 own_heads: bool = False) -> HybridPreset:
    """The plain arm's model: one chunked group of llama-style layers (K and V), as many as
    bring its room (same pages) closest to the hybrid room's bytes. `own_heads`: layers of
    the preset's first KV group instead (its heads, head size and slicing), so the arms
    differ only in the groups beyond plain KV, not in the size of the pieces."""
    kv = dataclasses.replace(hybrid.groups[0], name="kv") if own_heads else \
        Group("kv", Kind.CHUNKED, 2, PLAIN_HEADS, PLAIN_HEAD_BYTES)
    per_layer = 1 if kv.mla else 2
    layer = dataclasses.replace(kv, buffers=per_layer)
    layer_bytes = layer.room_bytes(tokens, page) * (1 if kv.sliced else decode_tp)
    layers = max(1, round(hybrid.decode_room_bytes(tokens, page, decode_tp) / layer_bytes))
    return HybridPreset(f"plain-{hybrid.name}",
                        (dataclasses.replace(layer, buffers=per_layer * layers),))


def check(a):
    """Why main.parse must refuse `a` for a hybrid preset, or None."""
    if a.model not in HYBRID:
        return None
    if a.case != "scale" and a.model not in PLAIN_CASES:
        return f"--model {a.model} runs in the scale case only (P12)"
    if not is_hybrid(a):
        return None
    if a.auth_ab or a.plot or a.kill_rank or len(a.concurrency) != 1:
        return ("--model " + a.model + " (P12) is one concurrency without --auth-ab, --plot "
                "or --kill-rank")
    groups = HYBRID[a.model].groups
    for tp in (a.prefill_tp, a.decode_tp):
        if any(g.sliced and g.heads % tp for g in groups):
            return f"TP {tp} does not divide the preset's heads"
    return None

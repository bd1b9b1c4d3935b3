"""Workload presets (BENCHMARKS.md, "Targets") as KV layouts a rank can allocate and register."""
from __future__ import annotations

import dataclasses

from pdkv.testing import heads_of


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    layers: int  # KV layers (buffers = 2 x layers, or layers for MLA)
    heads: int  # KV heads of the model (1 for MLA)
    head_dim: int
    dtype_bytes: int = 2
    mla: bool = False

    def buffers(self) -> int:
        return self.layers if self.mla else 2 * self.layers

    def layer_buffers(self) -> list:
        if self.mla:
            return [[l] for l in range(self.layers)]
        return [[l, self.layers + l] for l in range(self.layers)]

    def heads_of(self, rank: int, tp: int) -> tuple[int, int]:
        """(first head, head count) rank `rank` of `tp` holds (contiguous split, docs/API.md)."""
        return heads_of(rank, tp, self.heads, self.mla)

    def bytes_per_token(self) -> int:
        """Bytes per token of the whole model (all buffers, all heads)."""
        return self.buffers() * self.heads * self.head_dim * self.dtype_bytes


# qwen3-next: only its 12 attention layers (24 KV buffers) are moved here; the 2 MiB
# linear-attention state slots are left out. The scale case moves the whole hybrid model
# instead (hybrid_presets.py, P12).
PRESETS = {
    "llama3-8b": Preset("llama3-8b", 32, 8, 128),
    "deepseek-v3": Preset("deepseek-v3", 61, 1, 576, mla=True),
    "qwen3-next": Preset("qwen3-next", 12, 8, 128),
    "tiny": Preset("tiny", 4, 2, 64),
}

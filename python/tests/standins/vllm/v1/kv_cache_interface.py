"""Stand-in for vllm.v1.kv_cache_interface: the KV cache specs and the KVCacheConfig a
connector is built with (fields as upstream at the commit in upstream_signatures.json).
A KVCacheGroupSpec is a set of layers sharing one block table; a KVCacheTensor is one
allocation shared by the layers it names (with the hybrid manager, one layer of each
group: their block ids never collide, as all groups draw from one block pool). Data
only: page sizes as upstream computes them, nothing else."""
from __future__ import annotations

import dataclasses
from math import prod
from typing import Any, Optional


def _dtype_size(dtype) -> int:
    return dtype.itemsize if hasattr(dtype, "itemsize") else int(dtype)


@dataclasses.dataclass(frozen=True)
class KVCacheSpec:
    block_size: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    num_kv_heads: int
    head_size: int
    dtype: Any
    page_size_padded: Optional[int] = None

    @property
    def page_size_bytes(self) -> int:
        real = 2 * self.block_size * self.num_kv_heads * self.head_size * \
            _dtype_size(self.dtype)
        return self.page_size_padded or real


@dataclasses.dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    head_size_v: Optional[int] = None
    sliding_window: Optional[int] = None
    attention_chunk_size: Optional[int] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    cache_dtype_str: Optional[str] = None

    @property
    def page_size_bytes(self) -> int:
        return self.block_size * self.num_kv_heads * self.head_size * _dtype_size(self.dtype)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    attention_chunk_size: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    sliding_window: int


@dataclasses.dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    shapes: tuple
    dtypes: tuple
    page_size_padded: Optional[int] = None
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0

    @property
    def page_size_bytes(self) -> int:
        real = sum(prod(s) * _dtype_size(d) for s, d in zip(self.shapes, self.dtypes))
        return self.page_size_padded or real


@dataclasses.dataclass
class KVCacheTensor:
    size: int
    shared_by: list[str]


@dataclasses.dataclass
class KVCacheGroupSpec:
    layer_names: list[str]
    kv_cache_spec: KVCacheSpec


@dataclasses.dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list[KVCacheTensor]
    kv_cache_groups: list[KVCacheGroupSpec]

    @property
    def has_mamba_layers(self) -> bool:
        return any(isinstance(g.kv_cache_spec, MambaSpec) for g in self.kv_cache_groups)

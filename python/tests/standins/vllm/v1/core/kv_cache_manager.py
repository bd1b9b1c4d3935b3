"""Stand-in for vllm.v1.core.kv_cache_manager.KVCacheBlocks (block ids per group)."""


class KVCacheBlocks:
    def __init__(self, block_ids: tuple[list[int], ...]):
        self._block_ids = tuple(list(g) for g in block_ids)

    def get_block_ids(self, allow_none: bool = False):
        if allow_none and all(len(g) == 0 for g in self._block_ids):
            return None
        return self._block_ids

    def get_unhashed_block_ids(self) -> list[int]:
        return list(self._block_ids[0])

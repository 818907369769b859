"""SIMULATION of the compilation cache counters of torch_tpu._internal.device._device_ops_backend (0.2.0:
`_get_cache_hits`, `_get_cache_misses`, `_get_cache_requests`, `_get_cache_stats`, callable without a chip).

As in [dev] compilation_cache.cc (GetStaticCacheEntry, `num_cache_hits++`): a hit is a tier-1 (in-process
memory) hit only, and a miss is a request that was not one, whether tier 2, tier 3 or a compile served it.
`_get_cache_stats()` is the PerfStats (`num_cache_reqs`, `num_cache_hits`, `per_entry_stats[i]
.compilation_duration`, zero for an executable loaded from tier 2 or 3)."""

from __future__ import annotations

from typing import Any


def _cache() -> Any:
    import torch_tpu

    return torch_tpu._CACHE


def _get_cache_requests() -> int:
    return int(_cache().requests)


def _get_cache_hits() -> int:
    return int(_cache().tier1_hits)


def _get_cache_misses() -> int:
    return _get_cache_requests() - _get_cache_hits()


def _get_cache_stats() -> Any:
    import torch_tpu

    c = _cache()
    return torch_tpu._PerfStats(c.requests, c.tier1_hits, list(c.entries.values()))

"""SIMULATION of the compilation cache counters of torch_tpu._internal.device._device_ops_backend (0.2.0:
`_get_cache_hits`, `_get_cache_misses`, `_get_cache_requests`, callable without a chip): a hit is an
executable loaded from the cache, a miss one compiled."""

from __future__ import annotations


def _stats() -> dict[str, int]:
    import torch_tpu

    return torch_tpu._CACHE.stats()


def _get_cache_hits() -> int:
    return _stats()["loaded"]


def _get_cache_misses() -> int:
    return _stats()["compiled"]


def _get_cache_requests() -> int:
    return _get_cache_hits() + _get_cache_misses()

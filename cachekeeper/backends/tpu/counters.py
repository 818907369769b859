"""TorchTPU's compile counters as a build or check process reads them (build side: imports torch_tpu).

`_get_cache_hits()` counts tier-1 (in-process memory) hits only and `_get_cache_misses()` is requests minus
hits ([dev] compilation_cache.cc, GetStaticCacheEntry): every first use in a fresh process is a "miss", also
when tier 2 or the hydrated tier 3 served it. `_get_cache_stats()` (0.2.0: `_device_ops_backend`) returns a
PerfStats whose `per_entry_stats[i].compilation_duration` is zero for an executable loaded from tier 2 or 3
and positive only when this process compiled it. So:

  compiled   entries with compilation_duration > 0     (this process ran the compiler)
  loaded     entries with compilation_duration == 0    (read from tier 2 or tier 3)
  requests   num_cache_reqs
"""

from __future__ import annotations

import importlib
from typing import Any

OPS = "torch_tpu._internal.device._device_ops_backend"


def _stats() -> Any:
    return importlib.import_module(OPS)._get_cache_stats()


def _seconds(duration: Any) -> float:
    """A timedelta (pybind's chrono conversion) or a plain number of microseconds."""
    total = getattr(duration, "total_seconds", None)
    return float(total()) if callable(total) else float(duration or 0)


def durations() -> list[float]:
    return [_seconds(e.compilation_duration) for e in _stats().per_entry_stats]


def compiled() -> int:
    return sum(1 for d in durations() if d > 0)


def loaded() -> int:
    return sum(1 for d in durations() if d <= 0)


def requests() -> int:
    return int(_stats().num_cache_reqs)
